"""Rewriting attributes (``leave_Attribute``): ``nn.<name>`` re-pointed to ``nnx.<name>`` (or reported),
and Linen variable reads (``self.kernel``, ``v.value``) as NNX ``[...]`` reads.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.layers import LAYER_RULES, LayerRule
from linen2nnx.migrate.api_findings import no_counterpart_finding, unbox_if_boxed
from linen2nnx.migrate.axes_params import kept_alias
from linen2nnx.migrate.box_tests import strips_box_only
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    code,
    parse_expression,
    root_name,
    self_attr,
)
from linen2nnx.migrate.foreign_locals import local_value
from linen2nnx.migrate.helper_calls import unreplayed_message
from linen2nnx.migrate.jit_methods import jit_decorator, unsupported_setting
from linen2nnx.migrate.lifted import (
    TRANSFORMS,
)
from linen2nnx.migrate.linen_api import (
    BOX_TYPES,
    KEPT_AS,
    KEPT_LINEN_FUNCTIONS,
    PARTITION_API_IN_NNX,
    PARTITION_SPEC_FUNCTIONS,
    RENAMED_IN_NNX,
    equivalent_in_nnx,
    initializer_in_nnx,
    nnx_top_level_name,
    same_in_nnx,
    top_level_name,
)
from linen2nnx.migrate.rules import (
    API_001,
    API_002,
    API_005,
    LAYER_001,
    PART_001,
    PART_002,
    PART_003,
    VAR_003,
    XFORM_001,
    XFORM_002,
    XFORM_003,
)
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.sites import (
    LINEN_COMPACT,
    LINEN_MODULE,
    LINEN_SELF_API,
    MERGE_PARAM,
    ClassPlan,
    Site,
)
from linen2nnx.migrate.variable_handles import compact_variable_locals
from linen2nnx.migrate.variable_reads import displayed_variables

AXES_API_NAMES = frozenset({"partitioning.param_with_axes", "partitioning.variable_with_axes"})


SETUP_PARAMS = frozenset(name for rule in LAYER_RULES for name in rule.setup_params)
RENAMED_ARGS = frozenset(name for rule in LAYER_RULES for name in rule.rename_args)
"""Constructor arguments some NNX layer renames (``features``): the only attributes of a built layer
the rewrite renames."""


class AttributeRewriter:
    """Rewrites one attribute of a Linen class or of module-level code."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.state = ctx.state

    def leave_attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        """``nn.<name>`` re-pointed or reported; a Linen variable read as an NNX one; else as it is."""
        names = self.ctx.qualnames(original)
        linen = {q for q in names if q.startswith("flax.linen.")}
        parent = self.ctx.parent_of(original)
        outermost = not (type(parent) is cst.Attribute and parent.value is original)
        rooted = root_name(original) is not None  # `nn.Dense(1)(x).squeeze` is a method of a result, not API
        holder = self.ctx.current_plan()
        bound = self.state.binding_values.get(original)
        if bound is not None and bound[1].blocking:  # handed as written to a class kept as Linen
            return updated
        if bound is not None and not (holder is not None and holder.blocking):
            # `conv: ModuleDef = nn.Conv` bound to a converted factory field (a class kept as Linen keeps it)
            rule = bound[0]
            return self._repoint(
                original, rule.linen, rule.nnx, LAYER_001, " (a layer class a module-factory field builds)"
            )
        if linen and rooted and original not in self.state.handled and outermost:
            layer = self._annotated_layer(original, holder)
            if layer is not None:  # `embed_tokens: nn.Embed`: the NNX layer a caller hands in
                return self._repoint(original, layer.linen, layer.nnx, LAYER_001, " (an annotation)")
            repointed = self._linen_name(
                original, updated, names, next(iter(linen)).removeprefix("flax.linen."), parent, rooted
            )
            if repointed is not None:
                return repointed
        return (
            self._make_rng_value(original, parent, holder)
            or self._layer_attribute(original, updated, holder)
            or displayed_variables(self.ctx, original, parent)
            or self._variable_read(original, updated, parent)
        )

    def _make_rng_value(
        self, original: cst.Attribute, parent: cst.CSTNode | None, holder: ClassPlan | None
    ) -> cst.BaseExpression | None:
        """``self.make_rng`` handed on as a call's argument (``stochastic_depth(x, rate, self.make_rng)``,
        which calls it with a stream name) in a method that runs at call time: a function drawing from
        the module's ``nnx.Rngs`` by that name, with Linen's default stream. Not one ``setup()`` stores:
        built in ``__init__``, the function would hold the module of another trace under ``nnx.jit``."""
        if (
            holder is None
            or holder.blocking
            or self_attr(original) != "make_rng"
            or "make_rng" in holder.field_names
            or type(parent) is not cst.Arg
        ):
            return None
        method = self.ctx.enclosing_function(original)
        if method is None or method.name.value in ("setup", "__init__", "__post_init__"):
            return None
        holder.uses_rngs = True
        self.ctx.report(
            VAR_003,
            original,
            "self.make_rng handed on as a value -> a function drawing from the module's nnx.Rngs by name",
        )
        return parse_expression('lambda name="params": self.rngs[name]()')

    def _layer_attribute(
        self, original: cst.Attribute, updated: cst.Attribute, holder: ClassPlan | None
    ) -> cst.BaseExpression | None:
        """``self.proj.features`` / ``d.features`` of a built-in layer the class builds: the NNX layer
        keeps a renamed constructor argument under its new name (``out_features``); a parameter the Linen
        layer binds in ``setup()`` (``word.embedding``, an array) is a Variable there, read with ``[...]``
        where it is returned (the Variable object would leave the model; also from a layer the class is
        handed, ``self.shared.embedding``). Stored or handed on, it stays the Variable: a copy of its value
        taken in ``__init__`` would untie the weight."""
        value, attr = original.value, original.attr.value
        if attr not in RENAMED_ARGS | SETUP_PARAMS or holder is None or holder.blocking:
            return None
        if attr in SETUP_PARAMS and _returned(self.ctx, original) and _handed_module(holder, value):
            return _whole_value(updated)
        site = self._built_site(original, value, holder)
        rule = site.rule if site is not None and site.kind == "layer" else None
        if rule is not None and attr in rule.setup_params and _returned(self.ctx, original):
            return _whole_value(updated)
        if rule is None or attr not in rule.rename_args:
            return None
        return updated.with_changes(attr=cst.Name(rule.rename_args[attr]))

    def _built_site(
        self, original: cst.Attribute, value: cst.BaseExpression, holder: ClassPlan
    ) -> Site | None:
        """The layer ``value`` reads: ``self.proj``, a local bound to it (``m = self.proj``), a local the
        method builds, or a layer built in another's arguments (``self.rnn.cell``, the RNN's cell)."""
        if isinstance(value, cst.Attribute) and self_attr(value) is None:
            outer = self._built_site(original, value.value, holder)
            arg = value.attr.value
            return (
                next((s for s in outer.nested if s.nested_arg == arg and s.element < 0), None)
                if outer
                else None
            )
        if isinstance(value, cst.Name) and value.value not in holder.local_sites:
            bound = local_value(self.ctx, original, value.value)  # `m = self.proj`, then `m.features`
            value = bound if bound is not None and self_attr(bound) is not None else value
        if self_attr(value) is not None:
            return next(
                (s for s in holder.sites.values() if s.attr == self_attr(value) and s.container is None),
                None,
            )
        return holder.local_sites.get(value.value) if isinstance(value, cst.Name) else None

    def _annotated_layer(self, original: cst.Attribute, holder: ClassPlan | None) -> LayerRule | None:
        """The built-in layer an annotation in a class the run converts names (a field ``embed:
        nn.Embed`` a caller fills with its own layer): the NNX class is what the caller hands in."""
        if holder is None or holder.blocking or holder.kept_linen:
            return None
        cur = self.ctx.parent_of(original)
        while cur is not None and not isinstance(cur, (cst.Annotation, cst.BaseStatement)):
            cur = self.ctx.parent_of(cur)
        if not isinstance(cur, cst.Annotation):
            return None
        rule = self.ctx.layer_rule_of(original)
        return rule if rule is not None and not rule.manual_reason else None

    def _linen_name(
        self,
        original: cst.Attribute,
        updated: cst.Attribute,
        names: set[str],
        short: str,
        parent: cst.CSTNode | None,
        rooted: bool,
    ) -> cst.BaseExpression | None:
        """``nn.<short>``: re-pointed to ``nnx`` (the same or a renamed function), kept, or reported;
        None when the name stays as it is."""
        top = top_level_name(short)  # nn.activation.relu is nn.relu: converted as it
        if top is not None:
            return self._linen_name(original, updated, names, top, parent, rooted)
        if (same_in_nnx(short) or equivalent_in_nnx(short)) and rooted:
            return self._repoint(original, short, short, API_001, "")
        if rooted and (nnx_top := nnx_top_level_name(short)) is not None:  # nn.pooling.min_pool: nnx.min_pool
            return self._repoint(original, short, nnx_top, API_001, "")
        if rooted and (initializer := initializer_in_nnx(short)) is not None:  # nn.zeros: nnx.initializers'
            return self._repoint(original, short, initializer, API_001, "")
        is_callee = isinstance(parent, cst.Call) and parent.func is original
        if short in RENAMED_IN_NNX and rooted:
            return self._repoint(
                original, short, RENAMED_IN_NNX[short], PART_001, " (sharding names become Variable metadata)"
            )
        if short in PARTITION_API_IN_NNX and rooted:
            return self._repoint(
                original,
                short,
                PARTITION_API_IN_NNX[short],
                PART_002,
                " (rules are the same context; specs come from nnx.State metadata)",
            )
        if short in PARTITION_SPEC_FUNCTIONS:
            return self._partition_spec(original, updated, short)
        alias = next(
            (name for name, (_, _, value) in self.state.transform_aliases.items() if value is original), None
        )
        if (
            alias is not None
        ):  # `remat = nn_partitioning.remat`: the alias's reads were converted as the transform
            target = TRANSFORMS[short.rsplit(".", 1)[-1]]
            return self._repoint(
                original,
                short,
                target,
                XFORM_001,
                f" (the alias {alias}: its uses on module classes convert where they are)",
            )
        if short.rsplit(".", 1)[-1] == "jit" and (decorator := self._method_jit(original)) is not None:
            return self._jit_decorator(original, short, decorator)
        if is_callee and short in TRANSFORMS and self._of_nnx_class(parent):  # type: ignore[arg-type]
            self.state.handled.add(original)  # an earlier run's leftover: the verifier reports it
            return None
        self._keep_or_report(original, names, short, is_callee)
        return None

    def _method_jit(self, original: cst.Attribute) -> cst.Decorator | None:
        """The decorator ``original`` (``nn.jit``) is, on a method of the class the run converts now."""
        decorator = jit_decorator(original, self.ctx.parent_of, self.ctx.qualnames)
        holder = self.ctx.current_plan()
        if decorator is None or holder is None:
            return None
        method = self.ctx.parent_of(decorator)
        return decorator if self.ctx.enclosing_class_plan(method) is holder else None  # type: ignore[arg-type]

    def _jit_decorator(
        self, original: cst.Attribute, short: str, decorator: cst.Decorator
    ) -> cst.BaseExpression | None:
        """``nn.jit`` decorating a method: ``nnx.jit`` (its settings fixed in ``leave_FunctionDef``), or
        a manual finding naming the setting NNX has no spelling for (see :mod:`.jit_methods`)."""
        problem = unsupported_setting(decorator)
        if problem is None:
            self.state.nnx_jit_decorators.add(decorator)
            return self._repoint(original, short, "jit", XFORM_003, " (a method decorator)")
        self.state.handled.add(original)
        self.ctx.report(
            API_002,
            original,
            f"nn.{short} on a method: {problem}",
            "decorate the NNX method with nnx.jit (filters select state with nnx.split / nnx.merge)",
        )
        return None

    def _of_nnx_class(self, call: cst.Call) -> bool:
        """``nn.remat(Block, ...)`` with ``Block`` a class of this file that is NNX already (the output
        of an earlier run): no Linen conversion applies, and a second run must not word it anew."""
        first = call.args[0].value if call.args else None
        if not isinstance(first, cst.Name) or first.value not in self.state.module_classes:
            return False
        cls = next(
            (s for s in self.state.tree.body if isinstance(s, cst.ClassDef) and s.name.value == first.value),
            None,
        )
        return cls is not None and any(
            q.startswith("flax.nnx.") for b in cls.bases for q in self.ctx.qualnames(b.value)
        )

    def _partition_spec(
        self, original: cst.Attribute, updated: cst.Attribute, short: str
    ) -> cst.BaseExpression:
        """``nn.get_partition_spec``: NNX's applies the active axis rules, Linen's does not."""
        self.state.handled.add(original)
        if self._under_axis_rules(original):  # here NNX's would map the names through the rules
            self.ctx.report(
                PART_003,
                original,
                f"nn.{short} inside axis rules: Linen's returns logical "
                "names, nnx.get_partition_spec applies the active rules",
                "call nnx.get_partition_spec(state) under nnx.logical_axis_rules(()) for logical "
                "names, or nnx.get_named_sharding(state, mesh) under the rules for shardings",
            )
            return updated
        return self._repoint(
            original,
            short,
            "get_partition_spec",
            PART_002,
            " (the same logical names when no axis rules are active; training code reads "
            "them with the rules cleared)",
        )

    def _keep_or_report(self, original: cst.Attribute, names: set[str], short: str, is_callee: bool) -> None:
        """A Linen name that stays: a pure function NNX code can call, or a finding."""
        if short in MERGE_PARAM and is_callee:
            pass  # rewritten with its call in leave_Call
        elif short in KEPT_LINEN_FUNCTIONS:
            self.state.handled.add(original)
            what = KEPT_AS.get(short, "a pure function NNX code can call as is")
            self.ctx.report(API_005, original, f"nn.{short} kept: {what}")
        elif short in TRANSFORMS:
            self.state.handled.add(original)
            self.ctx.report(
                XFORM_002,
                original,
                f"nn.{short} of something other than a Linen module class of this run is not converted",
                "rewrite with nnx.vmap / nnx.scan / nnx.remat by hand "
                "(see docs/nnx_facts.md, Lifted transforms)",
            )
        elif short.rsplit(".", 1)[-1] == "broadcast":
            self._report_broadcast(original)
        elif short in BOX_TYPES:
            self._report_box(original, short, is_callee)
        elif not (names & (LINEN_MODULE | LINEN_COMPACT)):
            self.state.handled.add(original)
            helper = self._helper_method(original) if is_callee and self.ctx.layer_rule_of(original) else None
            if helper is not None:  # the layer converts; where it is built is what stops it
                self.ctx.report(
                    API_002,
                    original,
                    unreplayed_message(f"nn.{short}", helper),
                    "call it as a statement (`x = self.block(x, ...)`) whose arguments fix its layers' number "
                    "and names, or build the layers in setup",
                )
                return
            if short in AXES_API_NAMES and kept_alias(original, self.state.tree):
                return  # its calls are reported where they are made
            if self.ctx.current_plan() is None and self.ctx.in_marked_class(original):
                return  # an earlier run's output: what stops the layer is marked where it is used
            self.ctx.report(API_002, original, *self._unconverted(original, short))

    def _unconverted(self, original: cst.Attribute, short: str) -> tuple[str, str]:
        """Why a Linen name stays, and the hint: a layer NNX has is left where it cannot be built in
        ``__init__`` (or outside a class the run migrates); anything else has no conversion."""
        known = no_counterpart_finding(short)
        if known is not None:
            return known
        if not self.ctx.layer_rule_of(original):
            return (
                f"flax.linen.{short} has no automatic conversion yet",
                "rewrite by hand with the NNX API (see docs/rules.md)",
            )
        if self.ctx.current_plan() is None:
            return (
                f"flax.linen.{short} is built outside a Linen class this run migrates, and stays Linen",
                "build it in a Linen class the run migrates, or write the NNX layer by hand",
            )
        return (
            f"flax.linen.{short} is built where the codemod cannot hoist it into __init__ (an expression, "
            "comprehension or loop it does not follow), and stays Linen",
            "build it as its own statement in setup / @nn.compact, or rewrite it by hand",
        )

    def _helper_method(self, node: cst.CSTNode) -> str | None:
        """``_block`` when ``node`` is in a method of a Linen class other than setup and the compact ones."""
        plan = self.ctx.current_plan()
        cur = self.ctx.parent_of(node)
        while cur is not None and not isinstance(cur, cst.FunctionDef):
            cur = self.ctx.parent_of(cur)
        if (
            plan is None
            or cur is None
            or cur.name.value == "setup"
            or not isinstance(self.ctx.parent_of(cur), cst.IndentedBlock)
        ):
            return None
        if any(self.ctx.qualnames(d.decorator) & LINEN_COMPACT for d in cur.decorators):
            return None
        return f"{plan.name}.{cur.name.value}"

    def _report_box(self, original: cst.Attribute, short: str, is_callee: bool) -> None:
        """A Linen metadata box (``nn.LogicallyPartitioned``): NNX has none to test for or to build,
        its Variables carry the names, so the finding says what the code means in NNX terms."""
        self.state.handled.add(original)
        if not is_callee and unbox_if_boxed(original, self.ctx.parent_of):
            self.ctx.report(
                API_005,
                original,
                f"nn.{short} kept in `if isinstance(v, nn.{short}): v = v.unbox()`: it unboxes a Linen box and "
                "leaves any other value as it is, so it is exact on NNX values (never boxed) too",
            )
            return
        if not is_callee and strips_box_only(self.ctx, original):
            self.ctx.report(
                API_005,
                original,
                f"nn.{short} kept in a test that only takes values out of the box (`v.value if isinstance(v, "
                f"nn.{short}) else v`, or the is_leaf of a tree map of that): exact on NNX values (never boxed) "
                "too",
            )
            return
        if is_callee:
            what = f"nn.{short}(value, names) builds a Linen metadata box"
            hint = (
                "in NNX the names go on the Variable: nnx.Param(value, out_sharding=names), built under a "
                "mesh or nnx.use_eager_sharding(False)"
            )
        else:
            what = f"nn.{short} is a Linen metadata box, which NNX values never are (a test for it is False on NNX state)"
            hint = (
                "read the names from the Variable's out_sharding metadata, or nnx.get_partition_spec(state) "
                "(see docs/nnx_facts.md#sharding-and-logical-partitioning)"
            )
        self.ctx.report(API_002, original, what, hint)

    def _report_broadcast(self, original: cst.Attribute) -> None:
        """``nn.broadcast`` outside an ``nn.scan`` this run converts (a converted one reads it as ``None``
        in ``in_axes``): MaxText builds its in_axes tuples apart and hands them to a helper that calls
        ``nn.scan``, often with the marker several times in one tuple. One finding per statement, saying
        where the marker goes, is what a person needs to find the transform to convert."""
        self.state.handled.add(original)
        statement, where = self._broadcast_place(original)
        if statement in self.state.broadcast_reported:
            return
        self.state.broadcast_reported.add(statement)
        self.ctx.report(
            API_002,
            original,
            f"nn.broadcast {where}: the in_axes marker of a Linen lifted transform this run does not "
            "convert (NNX's in_axes spells it None, and the carry nnx.Carry)",
            "convert the nn.scan / nn.vmap that receives it by hand, with None for each broadcast input "
            "(see docs/nnx_facts.md#lifted-transforms); reported once per statement",
        )

    def _broadcast_place(self, node: cst.CSTNode) -> tuple[cst.CSTNode, str]:
        """The statement holding ``node`` and where in it the marker goes: the argument of a call it is
        passed in, else the name it is assigned to."""
        where = None
        cur = node
        parent = self.ctx.parent_of(cur)
        while parent is not None and not isinstance(
            parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.Module)
        ):
            if (
                where is None
                and isinstance(parent, cst.Arg)
                and isinstance(self.ctx.parent_of(parent), cst.Call)
            ):
                callee = code(self.ctx.parent_of(parent).func)
                kw = parent.keyword
                where = f"passed in {kw.value}= to {callee}(...)" if kw else f"passed to {callee}(...)"
            cur, parent = parent, self.ctx.parent_of(parent)
        statement = parent if parent is not None else cur
        if where is None and isinstance(statement, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = (
                [t.target for t in statement.targets]
                if isinstance(statement, cst.Assign)
                else [statement.target]
            )
            where = f"in the value of {', '.join(code(t) for t in targets)}"
        return statement, where or "in this statement"

    def _variable_read(
        self, original: cst.Attribute, updated: cst.Attribute, parent: cst.CSTNode | None
    ) -> cst.BaseExpression:
        """``self.kernel`` / ``v.value`` of a Linen variable -> ``self.kernel[...]`` / ``v[...]``; a
        ``self.<Linen API>(...)`` call is noted for leave_Call."""
        plan = self.ctx.current_plan()
        attr = self_attr(original)
        if plan is not None and attr is not None:
            is_call = isinstance(parent, cst.Call) and parent.func is original
            if attr in LINEN_SELF_API and attr not in plan.field_names and is_call:
                self.state.pending_api[parent] = (
                    original  # reported in leave_Call unless a rule converts the call
                )
            # Linen setup() variables read as arrays (params) or through ``.value``; NNX reads both as v[...]
            kind = plan.setup_vars.get(attr)
            dotted_value = (
                isinstance(parent, cst.Attribute)
                and parent.value is original
                and parent.attr.value == "value"
            )
            if (
                kind == "param"
                and not dotted_value
                and not self._is_store(original, parent)
                and not _identity_test(original, parent)  # `self.bias is not None`: the Param, or None
            ):
                return parse_expression(f"self.{attr}[...]")
        if (
            plan is not None
            and original.attr.value == "value"
            and isinstance(original.value, cst.Name)
            and (
                original.value.value in self._lazy_locals(plan)
                or original.value.value
                in compact_variable_locals(plan, self.ctx.enclosing_function(original))
            )
        ):
            return _whole_value(updated.value)
        if (
            plan is not None
            and original.attr.value == "value"
            and plan.setup_vars.get(self_attr(original.value) or "")
        ):
            if not self.ctx.in_setup(original):
                return _whole_value(updated.value)
        return updated

    @staticmethod
    def _lazy_locals(plan: ClassPlan) -> set[str]:
        """Locals bound to lazily created variables (``cached_key = self.variable(...)``)."""
        out = set()
        for var in plan.lazy_vars.values():
            small = var.statement.body[0]
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
            ):
                out.add(small.targets[0].target.value)
        return out

    def _repoint(
        self, original: cst.Attribute, short: str, target: str, rule: Rule, why: str
    ) -> cst.BaseExpression:
        """``nn.<short>`` (whatever the import spelling) -> ``nnx.<target>``, reported under ``rule``."""
        self.state.uses_nnx = True
        self.state.handled.add(original)
        self.ctx.report(rule, original, f"nn.{short} -> nnx.{target}{why}")
        return parse_expression(f"nnx.{target}")

    def _under_axis_rules(self, node: cst.CSTNode) -> bool:
        """Lexically inside ``with ...axis_rules(...)`` / ``logical_axis_rules(...)``."""
        cur = self.ctx.parent_of(node)
        while cur is not None:
            if isinstance(cur, cst.With) and any("axis_rules" in code(item.item) for item in cur.items):
                return True
            cur = self.ctx.parent_of(cur)
        return False

    def _is_store(self, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
        return isinstance(parent, cst.AssignTarget) or self.ctx.in_setup(node)


def _identity_test(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """``node`` compared with ``is`` / ``is not`` (``self.bias is not None``): the attribute itself is
    tested, which may be None where no parameter was created, so it is not read as an array."""
    identity = (cst.Is, cst.IsNot)
    if isinstance(parent, cst.Comparison) and parent.left is node:
        return isinstance(parent.comparisons[0].operator, identity)
    return isinstance(parent, cst.ComparisonTarget) and isinstance(parent.operator, identity)


def _whole_value(variable: cst.BaseExpression) -> cst.Subscript:
    """``variable[...]``: the array an NNX Variable holds."""
    return cst.Subscript(variable, [cst.SubscriptElement(cst.Index(cst.Ellipsis()))])


def _returned(ctx: FileContext, node: cst.CSTNode) -> bool:
    """``node`` is what a ``return`` gives, or an element of the tuple, list or dict it gives."""
    parent = ctx.parent_of(node)
    while isinstance(parent, (cst.Element, cst.DictElement, cst.Tuple, cst.List, cst.Dict)):
        parent = ctx.parent_of(parent)
    return isinstance(parent, cst.Return)


def _handed_module(plan: ClassPlan, value: cst.BaseExpression) -> bool:
    """``self.F`` where ``F`` is a field annotated as a module the class is handed (``shared: nn.Module``,
    ``embed: nn.Embed``)."""
    field = next((f for f in plan.fields if f.name == self_attr(value)), None)
    return field is not None and any(hint in (field.annotation or "") for hint in ("Module", "Embed"))
