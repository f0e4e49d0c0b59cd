"""The feature-size dataflow over one method of a planned class, and what its result means for the plan.

:class:`MethodFlow` holds the callbacks a :class:`~linen2nnx.migrate.dataflow.FeatureFlow` asks while
it walks a method -- what a call applies (``layer_of``), what a ``self.param`` holds (``value_of``),
what a helper method returns (``method_of``), which replayed shape locals get a static size
(``on_assign``), what a loop nest leaves behind (``after_loop``) -- and then records the method's
output on the plan and sizes the sites it applied (through the :class:`~linen2nnx.migrate.sizing.Sizer`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.applications import agreeing_args, helper_arguments, one_size
from linen2nnx.migrate.axis_sizes import AxisSizes
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    code,
    names_in,
    self_attr,
    substitute_self_fields,
)
from linen2nnx.migrate.dataflow import Feat, FeatureFlow, LayerInfo, transfer
from linen2nnx.migrate.dataflow_types import DISAGREEING
from linen2nnx.migrate.element_loops import element_calls
from linen2nnx.migrate.elementwise import is_elementwise, is_local_activation
from linen2nnx.migrate.function_aliases import (
    qualnames_through_alias,
    reaching_binding,
    sole_assigned_value,
    sole_binding,
)
from linen2nnx.migrate.function_outs import imported_function_out
from linen2nnx.migrate.input_dtypes import check_cast_inputs
from linen2nnx.migrate.input_sizes import input_arg_name
from linen2nnx.migrate.leading_setup import leading_setup_sizes, leading_setup_values
from linen2nnx.migrate.local_functions import local_function_out
from linen2nnx.migrate.loop_runs import unrun_choices
from linen2nnx.migrate.nest_runs import after_inner_loop, after_nest
from linen2nnx.migrate.rebound_locals import bound_name
from linen2nnx.migrate.setup_branches import setup_alternatives, setup_branch_info
from linen2nnx.migrate.sites import ClassPlan, Site, is_shape_last
from linen2nnx.migrate.tuple_flow import agreed_return

if TYPE_CHECKING:
    from linen2nnx.migrate.sizing import Sizer


class MethodFlow:
    """One run of the dataflow over ``fn`` of ``plan``; ``resolve`` also sizes the sites it applies."""

    def __init__(
        self, sizer: Sizer, plan: ClassPlan, fn: cst.FunctionDef, params: list[str], resolve: bool
    ) -> None:
        self.sizer = sizer
        self.ctx = sizer.ctx
        self.state = sizer.state
        self.plan = plan
        self.fn = fn
        self.params = params  # the method's parameters, less self
        self.resolve = resolve
        self.setup_attrs = {
            s.attr: s
            for s in plan.sites.values()
            if not s.hoisted and s.container is None and s.kind in ("layer", "module")
        }  # setup() submodules, applied as self.<attr>
        self.setup_branches: dict[str, list[cst.BaseExpression]] | None = None  # what setup() binds each to
        self.element_calls = element_calls(fn, plan.sites.values())  # `for layer in self.layers: layer(h)`
        self.methods = {m.name.value: m for m in self.state.methods.get(plan.name, [])}  # helpers to inline
        self.setup_locals = set(assigned_names(plan.setup)) if plan.setup is not None else set()
        self.probing = False  # a first pass over a step function (see carry_fixpoint): no side effects
        self.depth = 0  # helper methods inlined around the current call (at most 3 deep)
        self.shape_reads: dict[
            tuple[int, str], tuple[str | Feat, ...]
        ] = {}  # what each shape argument read first
        self.flow: FeatureFlow  # the flow over fn, set by run()
        self.size_fields = frozenset(plan.field_names) | leading_setup_sizes(  # (last_axis_ops)
            plan.setup, self.methods.values()
        )
        self.dims = AxisSizes(  # locals holding an input's last axis (`n, l, d = x.shape`)
            functools.partial(reaching_binding, self.ctx), functools.partial(sole_assigned_value, self.ctx)
        )

    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """What ``node`` names, through a name bound once to a library function (function_aliases.py)."""
        return qualnames_through_alias(self.ctx, node)

    def local_def(self, name: cst.Name) -> cst.CSTNode | None:
        """The ``def`` inside a function (this method, or a helper) that is ``name``'s one binding."""
        fn = sole_binding(self.ctx, name)
        parent = self.ctx.parent_of(fn) if type(fn) is cst.FunctionDef else None
        return fn if parent is not None and self.ctx.enclosing_function(parent) is not None else None

    def run(self) -> None:
        plan, fn, params = self.plan, self.fn, self.params
        if self.resolve:  # before the flow: a cell sized from its carry changes what follows it
            for site in list(plan.sites.values()):
                if site.kind == "layer" and site.rule is not None and site.rule.carry_init:
                    self.sizer.check_traced_carry(plan, site, site.ctor)
        self.flow = flow = FeatureFlow(
            params,
            self.layer_of,
            self.qualnames,
            self.method_of,
            self.on_assign,
            self.value_of,
            self.after_loop,
            records=self.state.record_classes,
            size_fields=self.size_fields,
            dims=self.dims,
        )
        flow.unsure_of = fn
        flow.builtin_dict = self._builtin_dict()
        if len(params) >= 2 and (
            (plan.is_cell and fn.name.value == "__call__") or fn.name.value in plan.scanned_methods
        ):
            flow.env[params[0]] = self.carry_fixpoint()
        flow.run(fn.body.body)
        if self.resolve:
            plan.if_envs.update({node: (env, params) for node, env in flow.at_if.items()})
        self._record_out()
        if self.resolve:
            self._size_uses()

    def _record_out(self) -> None:
        """What the method returns (as the plan's ``out`` for ``__call__``)."""
        flow, plan, fn = self.flow, self.plan, self.fn
        out = agreed_return(flow.returns)  # tuples several returns build: what they agree on
        scan = plan.scanned_methods.get(fn.name.value)
        if scan is not None and out is not None:  # scanned: (carry, ys), with ys stacked on out_axes
            parts = out.elements if out.kind == "tuple" and len(out.elements) == 2 else ()
            # stacked on a leading axis the outputs keep their last one; on any other axis they do too
            # unless that axis is past the per-step rank, which only a trace can rule out
            out = (
                Feat(
                    "tuple",
                    elements=(
                        parts[0],
                        parts[1]
                        if scan.out_axes == "0"
                        else Feat(
                            "unknown", reason="outputs stacked on axis " + scan.out_axes, candidate=parts[1]
                        ),
                    ),
                )
                if parts
                else Feat.unknown("scan outputs")
            )
        if out is not None:
            plan.method_out[fn.name.value] = (self.params, out)
        if fn.name.value == "__call__":
            plan.first_input = self.params[0]
            plan.call_inputs = tuple(self.params)
            values = leading_setup_values(plan.setup, plan.field_names, self.methods.values())
            # for callers, which know the fields they pass: `self.hidden_size` is `self.config.hidden_size`
            plan.out = _spelled_out(out, values) if out is not None and values else out

    def _size_uses(self) -> None:
        """Size each site from the inputs the flow saw it applied to (per loop iteration)."""
        plan = self.plan
        # setup() may build one attribute in several `match` cases: each case's module gets the sizes
        sites_by_key: dict[str, list[Site]] = {}
        for s in plan.sites.values():
            sites_by_key.setdefault(s.flow_key, []).append(s)
        applications: dict[str, dict[int, list[tuple[Feat, tuple]]]] = {}  # key -> iteration -> uses
        all_args: dict[str, tuple[Feat, ...]] = {}
        nodes: dict[str, cst.CSTNode] = {}
        kv: dict[str, list[Feat | None]] = {}  # an attention layer's key / value size per use
        check_cast_inputs(self.ctx, self.flow.uses, sites_by_key, self.fn)  # (input_dtypes.py)
        for use in self.flow.uses:
            feat, kv_feat = _attention_input(sites_by_key.get(use.key, []), use.node, use.args, use.feat)
            kv.setdefault(use.key, []).append(kv_feat)
            applications.setdefault(use.key, {}).setdefault(use.iteration, []).append((feat, use.path))
            all_args[use.key] = agreeing_args(all_args.get(use.key), use.args)
            nodes.setdefault(use.key, use.node)
        # every application must see the size the first one does: one module has one input size
        by_site = {k: {i: one_size(seen) for i, seen in per.items()} for k, per in applications.items()}
        for index, use in enumerate(self.flow.uses):  # the order a loop nest's lines build their modules in
            for applied in sites_by_key.get(use.key, ()):
                if applied.nest is not None:
                    applied.nest.applied.setdefault(id(applied), index)
        for key, feats in by_site.items():
            for site in sites_by_key[key]:
                if not self._first_sizing(site, feats):
                    continue
                self.sizer.resolve_site_inputs(
                    plan, site, feats, self.params, nodes[key], all_args.get(key, ()), kv.get(key, [])
                )

    def _first_sizing(self, site: Site, feats: dict[int, Feat]) -> bool:
        """Whether ``site`` is still to be sized from ``feats``: not when it is sized otherwise, or an
        earlier method sized it from the same inputs; when that one saw other sizes of the config
        (never a method's own input, nor an unknown size), the site's sizes are cleared and a conflict makes it be sized
        again (a required argument). A helper method the
        class calls itself was followed, inlined, where it is called: its own parameters say nothing."""
        record = self.sizer.applied.get(id(site))
        if record is None:
            if site.in_expr is not None or site.user_in:
                return False  # sized otherwise (by the module it is nested in, by the user)
            self.sizer.applied[id(site)] = (site, feats, self.fn.name.value)
            return True
        if (
            record[1] == feats
            or record[2] == self.fn.name.value
            or any(map(_not_config, (*feats.values(), *record[1].values())))
            or self.fn.name.value in self.plan_called_methods()
        ):
            # a method's own input (or a value of unknown size) may have any size, but Linen builds
            # the parameters once, in the method `init` runs: another size fails in Linen as in NNX
            return False
        conflict = Feat.unknown(DISAGREEING + " its methods apply it to inputs of different sizes")
        feats.clear()
        feats[0] = conflict
        site.in_expr = None
        site.user_in.clear()
        return True

    def _builtin_dict(self) -> bool:
        """Whether ``dict`` is the builtin here: the file binds no top-level name ``dict`` (and has no
        ``import *`` that might)."""
        names = self.state.module_names
        return names is not None and "dict" not in names

    def plan_called_methods(self) -> set[str]:
        """The methods of the class that another of its methods calls as ``self.<name>(...)``."""
        called = set()
        for method in self.methods.values():
            for call in calls_in(method):
                name = self_attr(call.func)
                if name is not None and name != method.name.value:
                    called.add(name)
        return called

    def carry_fixpoint(self) -> Feat:
        """A step function's carry (a cell's, or a scanned method's) has the same shape on every step:
        what a first pass sees it return is what it receives (``lstm_state, last_prediction = carry``
        -> ``last_prediction`` is as wide as the prediction it returns). Unknown parts stay unknown."""
        params = self.params
        probe = FeatureFlow(
            params,
            self.layer_of,
            self.qualnames,
            self.method_of,
            value_of=self.value_of,
            records=self.state.record_classes,
            size_fields=self.size_fields,
        )
        self.probing = True  # the callbacks record nothing and resolve nothing meanwhile
        try:
            probe.run(self.fn.body.body)
        finally:
            self.probing = False
        outs = probe.returns
        if (
            not outs
            or any(o != outs[0] for o in outs)
            or outs[0].kind != "tuple"
            or len(outs[0].elements) != 2
        ):
            return Feat("input", input_name=params[0])
        carry = outs[0].elements[0]
        return carry if carry.kind in ("tuple", "expr") else Feat("input", input_name=params[0])

    def _flow_over(self, params: list[str]) -> FeatureFlow:
        """A flow with this method's callbacks (no assignment or loop hooks), over ``params``: a helper
        inlined with the caller's values, or a probe run."""
        return FeatureFlow(
            params,
            self.layer_of,
            self.qualnames,
            self.method_of,
            value_of=self.value_of,
            records=self.state.record_classes,
            size_fields=self.size_fields,
            dims=self.dims,
        )

    def output_at_rank(self, rank: int) -> Feat | None:
        """What the method returns for a first input of ``rank`` axes: a probe run (callee_ranks.py)."""
        self.flow = probe = self._flow_over(self.params)
        probe.unsure_of = self.fn
        probe.builtin_dict = self._builtin_dict()
        probe.env[self.params[0]] = Feat("input", input_name=self.params[0], rank=rank)
        self.probing = True
        try:
            probe.run(self.fn.body.body)
        finally:
            self.probing = False
        return agreed_return(probe.returns)

    def _resolve_shapes(self, site: Site) -> None:
        """Resolve the shape arguments of ``site`` that read an input's shape (not while probing). Inside
        a loop the first pass resolves them; a later pass that reads another size (``Dense(x.shape[-1]
        * 2)`` on an ``x`` that widens each pass) means one size cannot build every element."""
        if not self.resolve or self.probing:
            return
        for arg_name, refs in site.shape_refs.items():
            key = (id(site), arg_name)
            seen = tuple(self._size_read(self.flow.env.get(name, Feat.unknown(name))) for name in refs)
            if arg_name not in site.arg_sources:
                self.sizer.resolve_shape_arg(self.plan, site, arg_name, refs, self.flow, self.params)
                self.shape_reads[key] = seen
            elif self.shape_reads.get(key, seen) != seen and site.shape_sizes.get(arg_name):
                self.sizer.refuse_shape_arg(site, arg_name, refs)

    def _size_read(self, feat: Feat) -> str | Feat:
        """What a shape argument reads of ``feat``, compared between passes: a config expression, or
        the argument an input's size becomes (``in_features``, also what a layer that keeps it gives);
        else the value itself."""
        if feat.kind == "expr":
            return feat.expr
        if feat.kind == "input" and self.state.flow_method == "__call__" and feat.input_name in self.params:
            return input_arg_name(self.plan, feat.input_name, self.params)
        return feat.rankless()

    def layer_of(self, call: cst.Call) -> LayerInfo | None:
        """The layer ``call`` applies (a site of the plan, a setup() submodule, a local or branch site)."""
        plan, func = self.plan, call.func
        variable = plan.sites.get(call)
        if variable is not None and variable.kind in ("param", "variable"):
            self._resolve_shapes(variable)
            return None
        site = None
        if isinstance(func, cst.Call) and func in plan.sites:
            site = plan.sites[func]
        elif self_attr(func) in self.setup_attrs:
            site = self.setup_attrs[self_attr(func)]
        elif isinstance(func, cst.Name) and func.value in plan.local_sites:
            site = plan.local_sites[func.value]
        elif call in self.element_calls:
            site = self.element_calls[call]
        branch = plan.branch_sites.get(func.value) if isinstance(func, cst.Name) else None
        if branch is not None:
            site = branch.site
        if site is None or site.kind not in ("layer", "module"):
            return None
        bound = self._setup_values(site.attr) if site is self.setup_attrs.get(site.attr) else []
        if len(bound) > 1:  # `self.proj = nn.Dense(2 * n) if self.wide else nn.Dense(n)`
            return setup_branch_info(self.ctx, site.attr, [(v, self._bound_info(site, v)) for v in bound])
        info = self._applied_info(site)
        if branch is not None and info.out_expr is not None and not info.out_unknown:
            assert site.rule is not None and site.rule.out_attr is not None
            info = dataclasses.replace(
                info, out_expr=f"({info.out_expr} if {branch.test} else {branch.other}.{site.rule.out_attr})"
            )
        return info

    def _setup_values(self, attr: str) -> list[cst.BaseExpression]:
        """Every value setup() binds ``self.<attr>`` to (setup_branches.py), read once for all attributes."""
        if self.setup_branches is None:
            setup = self.plan.setup
            self.setup_branches = setup_alternatives(setup) if setup is not None else {}
        return self.setup_branches.get(attr, [])

    def _bound_info(self, site: Site, value: cst.BaseExpression) -> LayerInfo | None:
        """What applying ``value`` (one binding of ``site``'s attribute in setup()) gives: a submodule's
        output, a function that keeps the last axis, anything else unknown; None for ``None``."""
        built = self.plan.sites.get(value) if isinstance(value, cst.Call) else None
        if built is not None and built.kind in ("layer", "module"):
            return self._applied_info(built)
        if isinstance(value, cst.Name) and value.value == "None":
            return None
        # an elementwise helper keeps the last axis, not always the rank (a helper may pool)
        return LayerInfo(site.flow_key, None, out_unknown=not is_elementwise(self.ctx, value))

    def _applied_info(self, site: Site) -> LayerInfo:
        """What one application of ``site`` gives, its shape arguments resolved first."""
        for built in (site, *self.sizer.nested_sites(site)):  # nn.RNN(Cell(x.shape[-1])): the cell's too
            self._resolve_shapes(built)
        info = dataclasses.replace(self.sizer.layer_info(site), input_names=self._input_names(site))
        if site.rule is not None and site.rule.input_index:
            info = dataclasses.replace(info, input_index=site.rule.input_index)
        return info

    def _input_names(self, site: Site) -> tuple[str, ...]:
        """The names of the inputs ``site``'s module is called with (its ``__call__``'s parameters), so
        that an input passed by keyword is read by its name; () when not known."""
        if site.kind == "layer" and site.rule is not None:
            return linen_inputs(site.rule.linen)
        user = site.user
        methods = self.state.methods.get(user.name, []) if user is not None else []
        call = next((m for m in methods if m.name.value == "__call__"), None)
        if call is None:  # a class of another file: the parameters its summary carries
            return user.call_inputs if user is not None else ()
        names = [p.name.value for p in call.params.params]
        return tuple(names[1:] if names and names[0] == "self" else names)

    def value_of(self, node: cst.BaseExpression, env: dict[str, Feat]) -> Feat | None:
        """A parameter of the class, as its last axis and rank (see dataflow.py)."""
        plan = self.plan
        if isinstance(node, cst.Call):
            site = plan.sites.get(node)
            owner = self.ctx.enclosing_function(node) if site is not None else None
            local = set(assigned_names(owner)) if owner is not None else set()
        else:
            attr = self_attr(node)
            site = next((s for s in plan.sites.values() if s.attr == attr and not s.hoisted), None)
            local = self.setup_locals
        if site is None or site.kind != "param":
            return None
        shape = site.args.get("2")  # self.param(name, init, shape, ...): initializers take the shape first
        written = self.dims.literal(shape.value) if shape is not None else None  # or a local's tuple
        if not isinstance(written, (cst.Tuple, cst.List)) or not written.elements:
            return None
        starred = any(isinstance(e, cst.StarredElement) for e in written.elements)  # (*lead, d)
        rank = 0 if starred else len(written.elements)
        last = written.elements[-1].value
        if written is not shape.value and (names_in(last) - NOT_LOCAL):  # type: ignore[union-attr]
            # `shape = (1, 1, x.shape[-1])` above: x may be rebound since; only the rank is sure
            return Feat("unknown", reason="a size held in a local", rank=rank)
        ref = is_shape_last(last)
        if ref is not None:
            feat = env.get(ref) if site.hoisted else None
            if feat is None or feat.kind not in ("expr", "input"):
                return Feat("unknown", reason="a size held in a local", rank=rank)
        elif site.hoisted and type(last) is cst.Name and self.dims.size(last, env, frozenset()) is not None:
            feat = self.dims.size(last, env, frozenset())  # (1, 1, d) of `n, l, d = x.shape`: x's size
        elif (names_in(last) - NOT_LOCAL) & local:
            # a size held in a local: not an expression of the config; the rank is the shape's length
            return Feat("unknown", reason="a size held in a local", rank=rank)
        else:
            feat = Feat("expr", expr=code(last))
        return dataclasses.replace(feat, rank=rank)

    def method_of(self, call: cst.Call, args: list[Feat]) -> Feat | None:
        """What ``self.helper(...)`` (inlined with the caller's values) or a module-level function returns."""
        plan = self.plan
        name = self_attr(call.func)
        # what keeps the last axis of its input; the rank it may not (a table may hold a pooling helper)
        kept = args[0].rankless() if args else None
        if name in plan.activation_fields and kept is not None and _one_positional(call):
            return kept  # not `self.fn(lo, y)` of a field defaulting to jnp.maximum: that broadcasts
        layer = plan.layer_fields.get(name or "")
        if layer is not None and kept is not None:  # a layer a caller hands in (`embed_tokens: nn.Embed`)
            return Feat("expr", expr=f"self.{name}.{layer.out_attr}") if layer.out_attr else kept
        if kept is not None and isinstance(call.func, cst.Subscript) and is_elementwise(self.ctx, call.func):
            return kept  # ACT2FN["gelu"](x): a lookup of a table of activations
        if kept is not None and type(call.func) is cst.Name and is_local_activation(self.ctx, call.func):
            return kept  # `activation = nn.relu if ... else nn.tanh`, then activation(x)
        local = local_function_out(call, args, self.local_def, self.qualnames)
        if local is not None:  # `def wlc(f): return nn.with_logical_constraint(f, ...)` in the method
            return local
        callee = self.methods.get(name or "")
        if callee is not None and self.depth < 3 and name not in ("__call__", "setup"):
            return self.inlined(callee, call, args)
        known = plan.method_out.get(name or "")
        if known is None and isinstance(call.func, cst.Name):
            known = self.ctx.function_out(call.func.value)
        if known is None:  # `base_networks.preprocess_atari_inputs(x)`: another file's helper
            known = imported_function_out(self.ctx, call.func)
        return None if known is None else transfer(known[1], known[0], args)

    def inlined(self, callee: cst.FunctionDef, call: cst.Call, args: list[Feat]) -> Feat:
        """What helper ``callee`` returns, inlined with the caller's values, so that the layers it
        applies are sized in context."""
        callee_params = [p.name.value for p in callee.params.params][1:]
        sub = self._flow_over(callee_params)
        sub.unsure_of = callee
        sub.env.update(helper_arguments(call, args, callee_params))
        sub.builtin_dict = self.flow.builtin_dict
        sub.iteration = self.flow.iteration
        sub.path = (*self.flow.path, (id(call), 0))  # its own returns end the helper, not the caller
        self.depth += 1
        caller, self.flow = self.flow, sub  # the helper's sites read the helper's values (its `x`)
        try:
            sub.run(callee.body.body)
        finally:
            self.flow = caller
            self.depth -= 1
        if not self.probing:
            self.flow.uses.extend(sub.uses)
        out = agreed_return(sub.returns)
        return out if out is not None else Feat.unknown(callee.name.value)

    def on_assign(self, assign: cst.Assign) -> None:
        """A replayed shape local (``n = x.shape[-1]``) gets the static size of what it reads."""
        plan = self.plan
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        unpacked = isinstance(target, (cst.Tuple, cst.List)) and bool(target.elements)
        if unpacked:  # `n, l, d = x.shape`: d, when what __init__ builds reads it (else no size argument)
            target = target.elements[-1].value  # type: ignore[union-attr]
        name = target.value if isinstance(target, cst.Name) else None
        if unpacked and name not in read_by_sites(plan):
            return
        name = next(  # a binding kept under its own key (`h@0`: rebound_locals.py)
            (
                k
                for k in plan.shape_locals
                if bound_name(k) == name and assign in getattr(plan.pure_locals.get(k), "body", ())
            ),
            name,
        )
        if (
            self.resolve
            and name in plan.shape_locals
            and name not in plan.shape_local_sizes
            and plan.pure_locals.get(name) is not None
            and assign in plan.pure_locals[name].body
        ):
            sizes = {}
            for var in plan.shape_locals[name]:
                size = self.sizer.static_size(
                    plan, self.flow.env.get(var, Feat.unknown(var)), self.params, assign
                )
                if size is None:
                    return
                sizes[var] = size
            plan.shape_local_sizes[name] = sizes

    def after_loop(self, loop: cst.For, before: dict[str, Feat], env: dict[str, Feat]) -> None:
        """After a loop nest, or an inner loop of one, the sizes read from the last element it built
        (nest_runs.py); then any other size the loop changed, where a field of the config decides
        whether it runs (loop_runs.py)."""
        after_nest(self.plan, loop, before, env)
        after_inner_loop(self.plan, loop, before, env, self.ctx.parent_of)
        unrun_choices(loop, before, env, self.plan.field_names, self.plan.setup)


def read_by_sites(plan: ClassPlan) -> set[str]:
    """The pure locals the constructors of ``plan``'s submodules and variables read, directly or through
    other pure locals."""
    todo = [n for site in plan.sites.values() for n in names_in(site.ctor) if n in plan.pure_locals]
    read: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in read:
            read.add(name)
            todo.extend(n for n in names_in(plan.pure_locals[name]) if n in plan.pure_locals)
    return read


@functools.cache
def linen_inputs(linen_name: str) -> tuple[str, ...]:
    """The parameters a built-in Linen layer's ``__call__`` takes by position or keyword (``inputs``; a
    norm's ``x``; a cell's ``carry, inputs``; attention's ``inputs_q, inputs_k, inputs_v``)."""
    import flax.linen as nn

    params = inspect.signature(getattr(nn, linen_name).__call__).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in params if p.kind in kinds and p.name != "self")


def _attention_input(
    sites: list[Site], node: cst.CSTNode, args: tuple[Feat, ...], query: Feat
) -> tuple[Feat, Feat | None]:
    """An attention layer's input size is its query's; NNX's ``MultiHeadAttention`` projects keys and
    values from one other size (``in_kv_features``): (the query's size, the key / value size where it
    is another value, else None). Keys and values of sizes not known to agree are a conflict (NNX has
    one size for both), never the query's size alone."""
    rule = sites[0].rule if sites else None
    if rule is None or rule.nnx != "MultiHeadAttention" or not isinstance(node, cst.Call):
        return query, None
    names = linen_inputs(rule.linen)
    if "inputs_k" not in names or len(node.args) != len(args):
        return query, None
    if any(a.star for a in node.args):
        return Feat.unknown(DISAGREEING + " arguments unpacked into an attention call"), None
    given = {
        a.keyword.value if a.keyword is not None else names[k]: f
        for k, (a, f) in enumerate(zip(node.args, args))
        if k < len(names) or a.keyword is not None
    }
    key = given.get("inputs_kv", given.get("inputs_k", query))
    value = given.get("inputs_kv", given.get("inputs_v", key))
    if key != value:
        return Feat.unknown(DISAGREEING + " its key and value inputs are not known to have one size"), None
    return query, None if key == query else key


def _not_config(feat: Feat | None) -> bool:
    """Whether ``feat`` is (or is built from) a parameter of the method it was seen in, or unknown."""
    if feat is None:
        return False
    return feat.kind in ("input", "unknown") or any(
        map(_not_config, (*feat.elements, feat.base, feat.candidate))
    )


def _spelled_out(feat: Feat, values: dict[str, str]) -> Feat:
    """``feat`` with the sizes it writes through leading setup() attributes spelled out in fields."""
    parts = {
        "elements": tuple(_spelled_out(e, values) for e in feat.elements),
        "base": _spelled_out(feat.base, values) if feat.base is not None else None,
        "candidate": _spelled_out(feat.candidate, values) if feat.candidate is not None else None,
    }
    if feat.kind == "expr":
        parts["expr"] = substitute_self_fields(feat.expr, values, others_kept=True) or feat.expr
    return dataclasses.replace(feat, **parts)


def _one_positional(call: cst.Call) -> bool:
    """``call`` passes one positional argument and no ``*args``: an activation's single array."""
    return sum(1 for a in call.args if a.keyword is None) == 1 and not any(a.star for a in call.args)
