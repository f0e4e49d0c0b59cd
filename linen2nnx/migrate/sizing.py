"""Sizing: the input feature size of every layer, from static dataflow, the trace, or a new argument.

Part of the *analyse* step: :class:`Sizer` fills in the sites of a plan. The order of evidence is the
contract of the ``migrate`` docs: static dataflow, then the trace, then a required constructor
argument with a ``manual`` finding -- never a guessed number.
"""

from __future__ import annotations

import dataclasses
import re

import libcst as cst

from linen2nnx.migrate.axis_order import einsum_layer
from linen2nnx.migrate.call_inputs import passed_input
from linen2nnx.migrate.callee_ranks import output_at_rank, with_ranks
from linen2nnx.migrate.callee_terms import choice_seen, in_caller_terms
from linen2nnx.migrate.class_fields import default_for_caller, note_default_imports, unspelled_reason
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    bracketed,
    code,
    defaults_to_none,
    names_in,
    parse_expression,
    replace_name,
    substitute_self_fields,
)
from linen2nnx.migrate.dataflow import Feat, FeatureFlow, LayerInfo
from linen2nnx.migrate.dataflow_types import DISAGREEING
from linen2nnx.migrate.element_loops import elements_expr, later_size, per_iteration
from linen2nnx.migrate.extra_inputs import invariant_input, kv_size
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.handed_modules import HANDED, handed_kind, handed_size
from linen2nnx.migrate.input_sizes import child_size_label, flat_input, input_arg_name, tuple_valued
from linen2nnx.migrate.loop_chains import chain_label
from linen2nnx.migrate.loop_tests import first_built_test
from linen2nnx.migrate.method_flow import MethodFlow
from linen2nnx.migrate.rules import MOD_004, SHAPE_002, SHAPE_003
from linen2nnx.migrate.sequence_layers import through_list, unfollowed_elements
from linen2nnx.migrate.setup_order import ready_at
from linen2nnx.migrate.sites import (
    ClassPlan,
    Site,
    built_arg_text,
    replace_shape_last,
)
from linen2nnx.migrate.trace_sizing import TraceEvidence
from linen2nnx.migrate.tuple_flow import COMPOUND, mapped


class Sizer(TraceEvidence):
    """Resolves ``in_features`` (and other input-derived sizes) for the sites of a plan; what the
    trace says comes from :class:`~linen2nnx.migrate.trace_sizing.TraceEvidence`."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.applied: dict[int, tuple[Site, dict[int, Feat], str]] = {}  # id(site) -> (site, inputs, method)

    def run_flow(self, plan: ClassPlan, fn: cst.FunctionDef, resolve: bool) -> None:
        """Run the feature-size dataflow over ``fn`` (see :class:`MethodFlow`); with ``resolve``, size
        the sites it applies, else only record what the method returns."""
        params = [p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)]
        if params and params[0] == "self":
            params = params[1:]
        if not params:
            return
        self.state.flow_method = fn.name.value
        method = MethodFlow(self, plan, fn, params, resolve)
        method.run()
        vars(method).clear()  # its flow holds its methods: a cycle only the collector would free

    @classmethod
    def nested_sites(cls, site: Site) -> list[Site]:
        return [deep for inner in site.nested for deep in (inner, *cls.nested_sites(inner))]

    def resolve_shape_arg(
        self,
        plan: ClassPlan,
        site: Site,
        arg_name: str,
        refs: list[str],
        flow: FeatureFlow,
        params: list[str],
    ) -> None:
        """``nn.Dense(x.shape[-1])``: replace each ``v.shape[-1]`` with v's size as the dataflow knows it."""
        replacements = {}
        for name in refs:
            feat = flow.env.get(name, Feat.unknown(name))
            if feat.kind not in ("expr", "input"):
                why = f"uses {name}.shape[-1], whose size the dataflow cannot tell"
                self._keep_shape_arg(site, arg_name, why, "compute it from constructor arguments / config")
                return
            replacements[name] = self._resolve_in(plan, site, feat, params, site.ctor)
        site.arg_sources[arg_name] = replace_shape_last(site.args[arg_name].value, replacements)
        site.shape_sizes[arg_name] = replacements

    def refuse_shape_arg(self, site: Site, arg_name: str, refs: list[str]) -> None:
        """A shape argument a later pass of a loop reads with another size than the first: no one size
        builds every element in ``__init__``."""
        why = f"uses {', '.join(f'{n}.shape[-1]' for n in refs)}, whose size changes from one pass of the loop to the next"
        self._keep_shape_arg(
            site, arg_name, why, "compute each pass's size from constructor arguments / config"
        )

    def _keep_shape_arg(self, site: Site, arg_name: str, why: str, hint: str) -> None:
        """A shape argument no static size replaces: it stays as written, with a finding that blocks it."""
        self.ctx.report(MOD_004, site.args[arg_name], f"argument {arg_name}= {why}", hint)
        site.arg_sources[arg_name] = code(site.args[arg_name].value)
        site.shape_sizes[arg_name] = {}  # kept as the rewrite wrote it

    def layer_info(self, site: Site) -> LayerInfo:
        """What the flow needs of one application of ``site``. A factory field bound to several classes
        (or a config-chosen local, class_choices.py) gives what they agree on; a submodule of a loop nest
        whose output size reads the loops' names gives the built element's own attribute
        (``self.block[-1].out_features``), read right after appending it -- or unknown without one."""
        classes = site.factory.classes if isinstance(site.factory, FieldFactory) else site.choice_plans
        if len(classes) < 2 and site.nest is None:
            return self._single_layer_info(site)
        plans = [c if isinstance(c, ClassPlan) else self.state.linen_classes.get(c) for c in classes]
        infos = (
            [
                self._single_layer_info(site if p is site.user else dataclasses.replace(site, user=p))
                for p in plans
                if p is not None
            ]
            if len(classes) > 1
            else [self._single_layer_info(site)]
        )
        if len(infos) < max(len(classes), 1):
            return LayerInfo(site.flow_key, None, out_unknown=True)
        listed = site.nest is not None or site.container == "list"  # the element built last
        ref = f"self.{site.attr}[-1]" if listed else f"self.{site.attr}"
        loop_names = site.nest.names if site.nest is not None else set()

        def out(first: Feat) -> Feat:
            feats = [info.output(first, f"output of {site.attr}") for info in infos]
            same = all(f == feats[0] for f in feats)
            if same and not (
                feats[0].kind == "expr" and names_in(parse_expression(feats[0].expr)) & loop_names
            ):
                return feats[0]
            if all(f == first for f in feats):
                return first
            attr = self._out_attribute(site, plans if classes else [site.user])
            return Feat("expr", expr=f"{ref}.{attr}") if attr else Feat.unknown(f"output of {site.attr}")

        return LayerInfo(site.flow_key, None, out_fn=out, input_index=infos[0].input_index)

    def _out_attribute(self, site: Site, users: list[ClassPlan | None]) -> str | None:
        """The attribute holding the built module's output size: the NNX layer's own (``out_features``),
        or ``out_features`` set at the end of the ``__init__`` of each class of this file it may be."""
        if site.rule is not None:
            return site.rule.out_attr
        outs: dict[str, str] = {}
        for user in users:
            if user is None or user.name not in self.state.converted or user.out is None:
                return None
            if user.out.kind == "expr":
                outs[user.name] = user.out.expr
            elif user.out.kind == "input" and user.new_args.get("in_features") == "input:0":
                outs[user.name] = "in_features"
            else:
                return None
            if "out_features" in user.field_names and outs[user.name] != "self.out_features":
                return None
        for name, expr in outs.items():
            self.state.out_features[name] = expr
        return "out_features"

    def _single_layer_info(self, site: Site) -> LayerInfo:
        """What one application of ``site`` gives, for a single class (see :meth:`layer_info`)."""
        if site.lifted is not None and site.lifted.of("scan") is not None:
            # a scan's carry keeps its shape from layer to layer; the stacked outputs are not followed
            return LayerInfo(
                site.flow_key,
                None,
                out_fn=lambda first: Feat("tuple", elements=(first, Feat.unknown("scan outputs"))),
            )
        if site.lifted is not None and site.lifted.of("vmap") is not None:
            return LayerInfo(site.flow_key, None, out_unknown=True)
        if site.kind == "layer" and site.rule is not None and site.rule.out_from is not None:
            return self._nested_out(site)
        if site.kind == "layer":
            return self._layer_out(site)
        return self._module_out(site)

    def _layer_out(self, site: Site) -> LayerInfo:
        """A built-in layer's output size: its ``out_arg`` (the last axis of a tuple of features; a
        cell's ``y`` beside its carry)."""
        assert site.rule is not None
        out = site.args.get(site.rule.out_arg) if site.rule.out_arg else None
        if out is None:  # the input's size (an attention without out_features: inputs_q's)
            return LayerInfo(site.flow_key, None, keeps_rank=site.rule.keeps_shape or site.rule.keeps_rank)
        if site.rule.out_arg in site.shape_refs:
            resolved = site.arg_sources.get(site.rule.out_arg)
            return LayerInfo(
                site.flow_key, resolved, out_unknown=resolved is None, keeps_rank=site.rule.keeps_rank
            )
        value = out.value
        if site.rule.out_arg in site.arg_sources:  # a size resolved for it (a cell's traced carry width)
            value = parse_expression(site.arg_sources[site.rule.out_arg])
        if isinstance(value, (cst.Tuple, cst.List)):  # features=(heads, head_dim): last axis is head_dim
            if not value.elements:
                return LayerInfo(site.flow_key, None, out_unknown=True)
            value = value.elements[-1].value
        if site.rule.carry_init:  # a cell: (carry, y), y of `features` (the carry is not followed)
            y = Feat("expr", expr=code(value))
            return LayerInfo(
                site.flow_key,
                code(value),
                out_fn=lambda first: Feat("tuple", elements=(Feat.unknown("a cell's carry"), y)),
            )
        return LayerInfo(site.flow_key, code(value), keeps_rank=site.rule.keeps_rank)

    def _module_out(self, site: Site) -> LayerInfo:
        """A class of the run's output size: its own ``out`` in the caller's terms."""
        user = site.user
        assert user is not None
        if user.out is None:
            return LayerInfo(site.flow_key, None, out_unknown=True)
        fields = {name: built_arg_text(site, name, arg) for name, arg in site.args.items()}
        for f in () if any(a.star for a in site.ctor.args) else user.fields:  # Block(**kw): any field
            default = default_for_caller(self.ctx, site.ctor.func, user, f) if f.name not in fields else None
            if default is not None:  # read as this file reads it (`Block.WIDTH`)
                fields[f.name] = default
        unbound = unspelled_reason(user, fields)

        def seen_by_caller(feat: Feat, first: Feat) -> Feat:
            """The submodule's result in the caller's terms: its input is the caller's value, its config
            expressions use the caller's constructor arguments."""
            if feat.kind == "input":  # the caller's value, with a rank the submodule may have changed
                if feat.input_name != user.first_input:
                    return Feat.unknown("submodule argument")
                return first.rankless()
            if feat.kind == "expr":
                own_args = names_in(parse_expression(feat.expr)) & set(user.new_args)
                if own_args:  # the submodule's own new argument: the caller's input size, or unknown
                    if feat.expr in own_args and user.new_args[feat.expr] == "input:0":
                        return first.rankless()
                    return Feat.unknown("submodule argument")
                expr = substitute_self_fields(feat.expr, fields)
                if expr is not None:  # `nout` of the submodule's own `nout = self.nmid * 4`: spelled out
                    expr = in_caller_terms(
                        self.state.tree,
                        user,
                        expr,
                        fields,
                        first.expr if first.kind == "expr" else None,
                        feat.expr,
                    )
                note_default_imports(self.state, expr)  # `pkg.layers.HIDDEN`: `import pkg.layers`
                return Feat("expr", expr=expr) if expr is not None else Feat.unknown(unbound)
            if feat.kind == "choice":  # whether a loop of the block ran (callee_terms.py)
                return choice_seen(feat, fields, lambda e: seen_by_caller(e, first))
            if feat.kind in COMPOUND:  # a tuple or output object: each element in the caller's terms
                return mapped(feat, lambda e: seen_by_caller(e, first))
            if feat.kind == "unknown" and feat.candidate is not None:
                seen = seen_by_caller(feat.candidate, first)
                return Feat(
                    "unknown",
                    reason=f"output of {site.attr}",
                    candidate=seen if seen.kind in ("expr", "input") else seen.candidate,
                )
            return Feat.unknown(f"output of {site.attr}")

        out = user.out

        def applied(first: Feat) -> Feat:
            seen = seen_by_caller(out, first)  # its rank: what the callee gives an input of first's
            return with_ranks(seen, output_at_rank(self, user, first.rank)) if first.rank else seen

        return LayerInfo(site.flow_key, None, out_fn=applied)

    def _nested_out(self, site: Site) -> LayerInfo:
        rule = site.rule
        assert rule is not None
        if rule.out_from == "einsum":
            return LayerInfo(site.flow_key, None, out_fn=einsum_layer(site.args))
        if rule.out_from == "last":
            count, unfollowed = unfollowed_elements(self.ctx, site)
            infos = {n.element: self.layer_info(n) for n in site.nested if n.element >= 0}
            return through_list(site, count, unfollowed, infos)
        inner = next((n for n in site.nested if n.nested_arg == rule.out_from), None)
        if inner is None:
            return LayerInfo(site.flow_key, None, out_unknown=True)
        info = self.layer_info(inner)
        if inner.kind == "module" and info.out_fn is not None:  # a cell of the run: (carry, y) -> y
            cell_out = info.out_fn

            def y_of(first: Feat) -> Feat:
                out = cell_out(first)
                return (
                    out.elements[1]
                    if out.kind == "tuple" and len(out.elements) == 2
                    else Feat.unknown(f"output of {inner.attr}")
                )

            return LayerInfo(site.flow_key, None, out_fn=y_of)
        return LayerInfo(site.flow_key, info.out_expr, out_unknown=info.out_unknown or info.out_expr is None)

    def _propagate_nested(self, site: Site, in_expr: str) -> None:
        """Give the layers built inside ``site`` their input sizes: RNN cells see the RNN's input;
        Sequential elements see the previous element's output."""
        current, (_, unfollowed) = in_expr, unfollowed_elements(self.ctx, site)
        for inner in sorted(site.nested, key=lambda n: n.element):
            if any(i < inner.element for i in unfollowed):
                break  # after a plain callable that may change the last axis (elementwise.py)
            if inner.rule is not None and inner.rule.in_arg is not None and inner.in_expr is None:
                inner.in_expr = current
            if inner.kind == "module" and inner.user is not None:  # a class of the run: its input-sized args
                fed = f"input:{site.rule.nested_input.get(inner.nested_arg, 0)}" if site.rule else "input:0"
                for arg, how in inner.user.new_args.items():
                    if how == fed and arg not in inner.user_in:
                        inner.user_in[arg] = current
            self._propagate_nested(inner, current)
            if inner.element >= 0:
                info = self.layer_info(inner)
                out = info.output(Feat("expr", expr=current)) if info.out_fn is not None else None
                if info.out_unknown or (out is not None and out.kind != "expr"):
                    break  # a class of the run whose output size the flow cannot tell: no later size
                current = out.expr if out is not None else info.out_expr or current

    def _needs_input(self, site: Site) -> bool:
        if (
            site.parent is not None and site.kind == "module" and site.user is not None
        ):  # nested class of the run
            return any(how.startswith("input:") for how in site.user.new_args.values())
        return (site.rule is not None and site.rule.in_arg is not None) or any(
            self._needs_input(n) for n in site.nested
        )

    def resolve_site_inputs(
        self,
        plan: ClassPlan,
        site: Site,
        feats: dict[int, Feat],
        params: list[str],
        node: cst.CSTNode,
        args: tuple[Feat, ...] = (),
        kv: list[Feat | None] | None = None,
    ) -> None:
        if site.kind == "layer":
            assert site.rule is not None
            if self._needs_input(site):
                expr = self._loop_expr(plan, site, feats, params, node)
                if site.rule.in_arg is not None:
                    site.in_expr = expr
                self._propagate_nested(site, expr)
                if any(f is not None for f in kv or ()):
                    site.in_kv_expr = kv_size(self, plan, site, kv or [], params, node)
            for inner in self.nested_sites(site):  # e.g. a cell of the run's traced hidden size
                for arg, how in inner.user.new_args.items() if inner.user is not None else ():
                    if how.startswith("traced:") and arg not in inner.user_in:
                        inner.user_in[arg] = self._traced_arg(plan, inner, arg, how, node)
        elif site.kind == "module":
            assert site.user is not None
            if site.user.bridged or site.user.kept_linen:
                return  # its wrapper accepts the sizes and ignores them: its Linen copy infers its own
            for arg, how in site.user.new_args.items():
                index = int(how.split(":")[1]) if how.startswith("input:") else -1
                if index == 0:  # the size of the first input, which is what the flow follows
                    site.user_in[arg] = self._loop_expr(plan, site, feats, params, node)
                elif how == "input_shape:0":
                    first = feats.get(0)
                    static = first.expr if first is not None and first.kind == "expr" else None
                    # a rank for ones only where the module is applied once, where it is built, unlifted
                    once = isinstance(node, cst.Call) and node.func is site.ctor and site.loop is None
                    rank = first.rank if first is not None and once and site.lifted is None else 0
                    site.user_in[arg] = self._input_shape(plan, site, arg, node, static, rank)
                elif (
                    0 < index
                    and (given := passed_input(node, args, index, arg)) is not None
                    and (site.loop is None or invariant_input(self, plan, site, given, params, node))
                ):
                    # another input (a cell's `x` beside its carry; under nn.scan, a per-step slice whose
                    # last axis is the scanned input's; in a loop, a value every iteration passes alike)
                    site.user_in[arg] = self._resolve_in(plan, site, given, params, node)
                elif leaf := self._forwarded_leaf(plan, how, feats, args, node, params):
                    site.user_in[arg] = leaf  # Inner()(batch): the caller's own batch['image']
                elif how.startswith("traced:"):
                    site.user_in[arg] = self._traced_arg(plan, site, arg, how, node)
                elif how.startswith(HANDED) and (handed := handed_size(self, plan, site, arg, how, node)):
                    site.user_in[arg] = handed  # the output size of a submodule it hands in
                elif traced := self.traced_child_size(plan, site, arg, how, node):
                    site.user_in[arg] = traced  # what the trace saw in each instance of this class
                elif arg not in site.user.optional_inputs or passed_input(node, args, index, arg) is not None:
                    what = child_size_label(arg, site.user.name, how)  # (an optional input left out: none)
                    site.user_in[arg] = self._required_arg(plan, site, what, node, arg, tuple_valued(how))

    def _loop_expr(
        self, plan: ClassPlan, site: Site, feats: dict[int, Feat], params: list[str], node: cst.CSTNode
    ) -> str:
        later = feats.get(1)
        if (
            site.elements is not None
            and later is not None
            and later != feats[0]
            and feats.get(2, later) == later
        ):
            return elements_expr(self, plan, site, feats[0], later, params, node)
        first = self._resolve_in(plan, site, feats[0], params, node)
        if later is not None and feats.get(2, later) != later:  # the third iteration sees another size
            return self._required_arg(
                plan,
                site,
                f"input feature size of {plan.name}.{site.attr} (it changes with every iteration)",
                node,
            )
        if site.nest is not None and later is not None and later != feats[0]:
            rest = later_size(self, plan, site, later, params, node, (first, f"len(self.{site.attr})"))
            if rest == f"{first}[len(self.{site.attr})]":
                return rest  # the first size is that argument too: one per element, the first included
            test = first_built_test(site, self.ctx.parent_of)  # `i == 0` under `if i % 2 == 1:`
            if test is None or names_in(parse_expression(rest)) & site.nest.names:  # another iteration's size
                why = "it reads the loops' names" if test else "it is built on some iterations only"
                what = f"input feature size of {plan.name}.{site.attr} after the first element ({why})"
                return self._required_arg(plan, site, what, node)
            return first if rest == first else f"{first} if {test} else {rest}"
        if site.loop is None or later is None or later == feats[0]:
            return first
        rest = later_size(self, plan, site, later, params, node, (first, site.loop.position))
        if rest == f"{first}[{site.loop.position}]":
            return rest  # the first size is that argument too: one per iteration, the first included
        if not rest.endswith(f"[{site.loop.position} - 1]"):
            rest = replace_name(rest, site.loop.var, site.loop.previous())  # the previous element fed it
        return first if rest == first else f"{first} if {site.loop.position} == 0 else {rest}"

    def static_size(self, plan: ClassPlan, feat: Feat, params: list[str], node: cst.CSTNode) -> str | None:
        """A size known without a trace: a config expression, or a ``__call__`` input's last axis (which
        becomes a constructor argument). None otherwise."""
        if feat.kind == "expr":
            return feat.expr
        if feat.kind == "choice":  # after a loop: its last layer's size if it ran, else the earlier one
            ran, skipped = (self.static_size(plan, f, params, node) for f in feat.elements)
            if ran is None or skipped is None:
                return None
            return (
                ran
                if ran == skipped
                else f"({bracketed(ran)} if {bracketed(feat.expr)} else {bracketed(skipped)})"
            )
        if feat.kind == "leaf" and self.state.flow_method == "__call__" and feat.input_name in params:
            return self._leaf_argument(plan, params.index(feat.input_name), feat.input_name, feat.expr, node)
        if feat.kind != "input" or self.state.flow_method != "__call__":
            return None  # only __call__'s inputs are the module's inputs; a helper's argument may be anything
        arg = input_arg_name(plan, feat.input_name, params)
        if arg not in plan.new_args:
            plan.new_args[arg] = f"input:{params.index(feat.input_name)}"
            if defaults_to_none(self.ctx.enclosing_function(node), feat.input_name):
                plan.optional_inputs.add(arg)  # `c=None`: a config that never passes it needs no size
            self.ctx.report(
                SHAPE_002,
                node,
                f"{plan.name} gains constructor argument {arg}: the last-axis size of `{feat.input_name}`",
                f"pass {arg}=x.shape[-1] where {plan.name} is built",
            )
        return arg

    def _resolve_in(
        self,
        plan: ClassPlan,
        site: Site,
        feat: Feat,
        params: list[str],
        node: cst.CSTNode,
        each: str | None = None,
    ) -> str:
        """The input size of ``site`` in ``__init__``'s terms; ``each``: see :meth:`_required_arg`."""
        size = self._size_in(plan, site, feat, params, node, each)
        ready = ready_at(plan.setup, site.ctor if not site.hoisted else None, size)
        if ready is not None:
            return ready
        why = f"{plan.name}.{site.attr} (it reads an attribute setup() binds after building the layer)"
        return self._required_arg(plan, site, f"input feature size of {why}", node, each=each)

    def _size_in(
        self, plan: ClassPlan, site: Site, feat: Feat, params: list[str], node: cst.CSTNode, each: str | None
    ) -> str:
        static = self.static_size(plan, feat, params, node)
        if static is not None:
            return static
        if feat.kind == "unknown" and feat.reason.startswith(DISAGREEING):
            return self._required_arg(
                plan, site, f"input feature size of {plan.name}.{site.attr} ({feat.reason})", node, each=each
            )
        if feat.kind == "input":
            feat = Feat.unknown(f"argument `{feat.input_name}` of {plan.name}.{self.state.flow_method}")
        flat = flat_input(self.ctx, plan, feat, params, node)
        if flat is not None:
            return flat
        confirmed = self._confirmed_candidate(plan, site, feat, params, node)
        if confirmed is not None:
            return confirmed
        traced = self._from_trace(plan, site, feat, node, later=each is not None)
        if traced is not None:
            return traced
        why = {"flatten": "a flatten", "sliced": "an indexed value"}.get(
            feat.kind, feat.reason or "an unknown value"
        )
        what = f"input feature size of {plan.name}.{site.attr} (from {why})"
        return self._required_arg(plan, site, what, node, how=handed_kind(feat) or "unresolved", each=each)

    def _required_arg(
        self,
        plan: ClassPlan,
        site: Site,
        what: str,
        node: cst.CSTNode,
        child_arg: str = "in_features",
        shape: bool = False,
        how: str = "unresolved",
        each: str | None = None,
    ) -> str:
        """A new constructor argument for a size nothing explains, named after the submodule and, for a
        class of the run with several unknown sizes, after the child's own argument (one argument each:
        a block's input width and its inner layer's are different sizes); ``shape``: a whole input
        shape the child takes (its ``x_shape``), a tuple; ``how``: the kind of a plain required size
        (``handed:F``: a handed module's output, which a builder may know); ``each``: for the elements of
        a list after the first, ``""`` (one size for all) or a loop's position (one per iteration)."""
        arg = f"{chain_label(site)}_{child_arg}".replace("[", "_").replace("]", "").replace("/", "_")
        if not arg.isidentifier():  # a size named after an expression: any other character
            arg = re.sub(r"\W+", "_", arg)
        while arg in plan.field_names:
            arg += "_"
        if each:  # what a loop's previous iteration left: no one size for all
            return per_iteration(self.ctx, plan, site, arg, node, each)
        if site.elements is not None and not site.elements_index:  # a setup() loop with no index
            self.ctx.report(
                MOD_004,
                site.ctor,
                f"{what} is unknown statically, for each element, and the loop that fills {site.attr} "
                "has no index to pick each one's size by",
                "loop over `enumerate(...)` / `range(n)`, or run `linen2nnx migrate --trace SPEC`",
            )
            return arg
        if site.elements is not None:  # each element of a setup() comprehension: one size per element
            node = site.ctor  # located where the tuple of sizes is read, whichever use asked
            plan.new_args[arg] = "unresolved_each"
            self.note_traced_value(plan, site, arg, child_arg, shape)
            self.ctx.report(
                SHAPE_003,
                node,
                f"{what} is unknown statically, for each element; required constructor argument {arg} "
                "(a tuple, one size per element) added",
                self.size_hint(plan, arg, "sizes"),
            )
            return f"{arg}[{site.elements_index}]"
        conditions = site.conditions
        if site.exclusive_with is not None or any(s.exclusive_with is site for s in plan.hoisted_order):
            if site.exclusive_with is not None and arg in plan.new_args:
                return arg  # one attribute, built by one branch or the other: the first one's finding
            conditions = site.conditions[:-1]  # ... built whichever way the branch's own test goes
        if conditions:  # built only under a config test: a config that does not build it needs no size
            plan.new_args[arg] = "unresolved_if"
            when = " and ".join(f"({c})" if " " in c else c for c in conditions)
            message = f"{what} is unknown statically; constructor argument {arg} (default None) added, required when {when}"
        else:
            plan.new_args[arg] = "unresolved_shape" if shape else how
            message = f"{what} is unknown statically; required constructor argument {arg} added"
            self.note_traced_value(plan, site, arg, child_arg, shape)
        self.ctx.report(SHAPE_003, node, message, self.size_hint(plan, arg))
        return arg

    def resolve_unused(self, plan: ClassPlan) -> None:
        for site in plan.sites.values():
            if site.parent is not None:
                continue
            if (
                site.kind == "layer"
                and self._needs_input(site)
                and site.in_expr is None
                and not self._resolved(site)
            ):
                expr = self._resolve_in(
                    plan, site, Feat.unknown("a layer the dataflow never saw applied"), ["x"], site.ctor
                )
                if site.rule.in_arg is not None:  # type: ignore[union-attr]
                    site.in_expr = expr
                self._propagate_nested(site, expr)
            elif (
                site.kind == "module"
                and site.user
                and site.user.new_args
                and not site.user_in
                and not (site.user.bridged or site.user.kept_linen)  # a wrapper that ignores sizes
            ):
                for arg, how in site.user.new_args.items():
                    traced = self.unapplied_child_size(plan, site, arg, how)
                    what = child_size_label(arg, site.user.name, how)
                    site.user_in[arg] = traced or self._required_arg(
                        plan, site, what, site.ctor, arg, shape=tuple_valued(how)
                    )

    def _resolved(self, site: Site) -> bool:
        return all(self._resolved(n) for n in site.nested) and (
            site.rule is None or site.rule.in_arg is None or site.in_expr is not None
        )
