"""The module codemod: Linen ``nn.Module`` classes -> ``nnx.Module`` classes.

One pass per file. For each Linen module class, :meth:`MigrateModules.visit_ClassDef` plans the
rewrite on the original tree (fields, ``setup`` submodules, ``@nn.compact`` submodules, parameters,
the feature-size dataflow); the ``leave_*`` methods then apply the plan bottom-up:

- dataclass fields become ``__init__`` parameters (kept in order, with defaults and annotations);
- ``setup()`` statements move into ``__init__``; ``@nn.compact`` submodules (built-in layers and
  the file's own Linen classes) are hoisted there under attributes named after the Linen
  auto-names (``Dense_0`` -> ``dense_0``); ones built in a ``for ... in range(n)`` loop become an
  ``nnx.List``; locals that only restate config (``cfg = self.config``) are replayed in ``__init__``;
- built-in layers become their NNX counterparts with ``in_features`` and ``rngs=rngs``;
- ``self.param`` / ``self.variable`` become ``nnx.Param`` / typed Variables created in ``__init__``;
- mode arguments that use call-time values (``deterministic=not train``) move to the call;
- ``nn.relu`` and friends are re-pointed to the identical ``nnx`` functions.

Anything left that still needs Linen is a ``manual`` finding with an inline TODO marker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst
from libcst.codemod import Codemod, CodemodContext

from linen2nnx.layers import LayerRule, layer_rule
from linen2nnx.migrate.bridge import (
    BRIDGE_ATTR,
    bridge_wrapper,
    can_bridge,
    linen_class_name,
    linen_name,
    mutable_collections,
)
from linen2nnx.migrate.cells import CARRY_METHOD, nnx_initialize_carry
from linen2nnx.migrate.cst_meta import FastVisitor, start_positions, syntax_parent_map
from linen2nnx.migrate.cst_utils import (
    absolute_qualname,
    code,
    is_docstring,
    kwarg,
    names_in,
    parse_expression,
    parse_statement,
    root_name,
    self_attr,
    strip_commas,
    without_dead_locals,
)
from linen2nnx.migrate.dataflow import FeatureFlow
from linen2nnx.migrate.emit import EmitMixin
from linen2nnx.migrate.factory_fields import FieldBindings, FieldFactory
from linen2nnx.migrate.file_state import FileState
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.imports import drop_unused_linen_imports, ensure_nnx_import, ensure_plain_import
from linen2nnx.migrate.lazy_vars import creation
from linen2nnx.migrate.lifted import (
    LINEN_MARKERS,
    SCAN_DECORATORS,
    TRANSFORMS,
    Lift,
    LiftChain,
    LiftError,
    in_axes_list,
    lifted_call,
    method_scan_call,
    validate,
)
from linen2nnx.migrate.linen_api import (
    BOX_TYPES,
    KEPT_LINEN_FUNCTIONS,
    PARTITION_API_IN_NNX,
    PARTITION_SPEC_FUNCTIONS,
    RENAMED_IN_NNX,
    UNBOX_FUNCTIONS,
    equivalent_in_nnx,
    same_in_nnx,
)
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.planning import PlanningMixin
from linen2nnx.migrate.rules import (
    API_001,
    API_002,
    API_003,
    API_004,
    API_005,
    API_006,
    LAYER_001,
    LAYER_002,
    MOD_001,
    MOD_002,
    MOD_003,
    MOD_006,
    MOD_007,
    PART_001,
    PART_002,
    PART_003,
    PART_004,
    VAR_001,
    VAR_002,
    VAR_003,
    VAR_004,
    XFORM_001,
    XFORM_002,
)
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.sites import (
    COLLECTION_TYPES,
    LINEN_BASES,
    LINEN_COMPACT,
    LINEN_MODULE,
    LINEN_SELF_API,
    MARKER,
    MERGE_PARAM,
    ClassPlan,
    ClassSummary,
    Site,
    with_new_markers,
)
from linen2nnx.migrate.sizing import SizingMixin
from linen2nnx.migrate.trace import Trace
from linen2nnx.namemap import ClassEntry, NameMap


class MigrateModules(PlanningMixin, SizingMixin, EmitMixin, Codemod, cst.CSTTransformer):
    DESCRIPTION = "Rewrite Flax Linen modules as idiomatic Flax NNX modules."

    def __init__(self, context: CodemodContext, *, path: str, module_name: str, trace: Trace | None = None,
                 rule_enabled: Callable[[str], bool] = lambda rule_id: True, unsafe_fixes: bool = False,
                 external: Mapping[str, ClassSummary] | None = None):
        super().__init__(context)
        self.state = FileState.of(path=path, module_name=module_name, trace=trace, rule_enabled=rule_enabled,
                                  unsafe_fixes=unsafe_fixes, external=external)

    @property
    def findings(self) -> list[Finding]:
        return self.state.findings

    @property
    def summaries(self) -> dict[str, ClassSummary]:
        return self.state.summaries

    @property
    def name_map(self) -> NameMap:
        return self.state.name_map

    # ---- helpers -----------------------------------------------------------------------------
    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """What ``node`` of the original tree may name (``nn.Dense`` -> ``{"flax.linen.Dense"}``); see
        :mod:`~linen2nnx.migrate.names`. Empty for a node the codemod built."""
        if self.state.resolver is None:
            self.state.resolver = NameResolver(self.state.tree)
        return set(self.state.resolver.qualnames(node))

    def parent_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The parent of ``node`` in the original tree; None for its root or a node the codemod built."""
        if self.state.parents is None:
            self.state.parents = syntax_parent_map(self.state.tree)
        return self.state.parents.get(node)

    def report(self, rule: Rule, node: cst.CSTNode, message: str, hint: str = "") -> None:
        """Record a finding; a ``manual`` one also marks its statement with an inline TODO.

        A rule switched off with ``--ignore`` / ``select`` neither reports nor marks.
        """
        rule_id = rule.id
        if not self.state.rule_enabled(rule_id):
            return
        if (node, rule_id, message) in self.state.reported:  # the same node met again (a partial's argument, per use)
            return
        self.state.reported.add((node, rule_id, message))
        severity = rule.severity
        self.state.unplaced.append((len(self.state.findings), node))  # its line and column: see _place_findings
        self.state.findings.append(Finding(rule_id, severity, self.state.path, 0, 0, message, hint))
        if rule.blocks_rewrite:
            if self.state.planning:
                self.state.pending_blocking.append(rule_id)
            elif self.state.class_stack and self.state.class_stack[-1] is not None:
                self.state.class_stack[-1].blocking.append(rule_id)
        if severity is Severity.MANUAL:
            marker = f"{MARKER} {rule_id} {message}"
            hoisted = self._hoisted_ctor_of(node)
            if hoisted is not None:  # the code moves into __init__: so does its marker
                self.state.init_markers.setdefault(hoisted, []).append(marker)
                return
            stmt = self._statement_of(node)
            if stmt is not None:
                self.state.markers.setdefault(stmt, []).append(marker)

    def _hoisted_ctor_of(self, node: cst.CSTNode) -> cst.Call | None:
        plan = self._current() if self.state.class_stack else None
        cur: cst.CSTNode | None = node
        while plan is not None and cur is not None and not isinstance(cur, (cst.SimpleStatementLine,
                                                                              cst.BaseCompoundStatement)):
            site = plan.sites.get(cur) if isinstance(cur, cst.Call) else None
            if site is not None and site.hoisted:
                return cur
            cur = self.parent_of(cur)
        return None

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent_of(cur)
        return cur

    def layer_rule_of(self, node: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer a constructor reference names (``nn.Dense``, ``linen.linear.Dense``, ...)."""
        chain = self.lift_chain(node)
        if chain is not None:
            node = chain.base
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        for q in self.qualnames(node):
            if q.startswith("flax.linen."):
                rule = layer_rule(q) or layer_rule("flax.linen." + q.rsplit(".", 1)[-1])
                if rule is not None:
                    return rule
        return None

    def user_class_of(self, node: cst.BaseExpression) -> ClassPlan | None:
        """A Linen module class that ``node`` names: one of this file (already planned), or one another
        file of the run defines (through its import)."""
        chain = self.lift_chain(node)
        if chain is not None:
            node = chain.base
        if isinstance(node, cst.Name) and node.value in self.state.linen_classes:
            return self.state.linen_classes[node.value]
        if not isinstance(node, (cst.Name, cst.Attribute)) or not self.state.external:
            return None
        for q in self.qualnames(node):
            summary = self.state.external.get(self._absolute(q))
            if summary is not None:
                return summary.as_plan()
        return None

    def field_factory(self, plan: ClassPlan, field: str) -> FieldFactory | None:
        """``plan``'s field ``field`` as a module factory whose callers' bindings agree (factory_fields.py)."""
        if field not in plan.field_names or field in plan.factories:
            return None
        return self.field_bindings.factory(plan.name, field)

    @property
    def field_bindings(self) -> FieldBindings:
        if self.state.bindings is None:
            self.state.bindings = FieldBindings(self.state.tree, self.is_linen_module, self.qualnames,
                                                 self.layer_rule_of)
        return self.state.bindings

    def _absolute(self, qualname: str) -> str:
        return absolute_qualname(qualname, self.state.module_name)

    # ---- lifted transforms (nn.scan / nn.remat / nn.vmap of a class) ----------------------------
    def transform_kind(self, func: cst.BaseExpression) -> str | None:
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return None  # `nn.scan(...)(...)` applies a transform, it is not one
        for q in self.qualnames(func):
            if q.startswith("flax.linen.") and q.rsplit(".", 1)[-1] in TRANSFORMS:
                return TRANSFORMS[q.rsplit(".", 1)[-1]]
        return None

    def is_broadcast(self, node: cst.BaseExpression) -> bool:
        return any(q.startswith("flax.linen.") and q.endswith(".broadcast") for q in self.qualnames(node))

    def lift_chain(self, node: cst.BaseExpression) -> LiftChain | None:
        """``nn.scan(nn.remat(Block), ...)`` or an alias of one -> the chain; None for anything else."""
        lifts: list[Lift] = []
        seen: set[str] = set()
        while True:
            if isinstance(node, cst.Name) and node.value in self.state.lift_aliases and node.value not in seen:
                seen.add(node.value)
                node = self.state.lift_aliases[node.value]
                continue
            if isinstance(node, cst.Call) and node.args and node.args[0].keyword is None and not node.args[0].star:
                kind = self.transform_kind(node.func)
                if kind is not None and all(a.keyword is not None for a in node.args[1:]):
                    lifts.append(Lift(kind, {a.keyword.value: a.value for a in node.args[1:]}, node))  # type: ignore[union-attr]
                    node = node.args[0].value
                    continue
            break
        return LiftChain(lifts, node) if lifts else None

    def collect_lift_aliases(self, body: Any) -> None:
        """Top-level ``Name = nn.remat(Class, ...)`` statements of a block (a method or the module)."""
        for stmt in body:
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                    and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
                continue
            target, value = stmt.body[0].targets[0].target, stmt.body[0].value
            if isinstance(target, cst.Name) and isinstance(value, cst.Call) and self.transform_kind(value.func):
                self.state.lift_aliases[target.value] = value
                self.state.alias_stmts[target.value] = stmt

    def check_lifted(self, node: cst.Call) -> LiftChain | bool | None:
        """The chain of a lifted constructor call ``node``: validated (False + a finding when not
        converted) and its Linen transform names marked as consumed."""
        chain = self.lift_chain(node.func)
        if chain is None:
            return None
        aliases = [n for n in names_in(node.func) if n in self.state.lift_aliases]
        try:
            validate(chain, self.is_broadcast)
        except LiftError as err:
            for alias in aliases:
                self.state.alias_use[alias] = False
            self.report(XFORM_002, node, str(err), "rewrite with nnx.vmap / nnx.scan / nnx.remat by hand "
                        "(reference §4)")
            for lift in chain.lifts:
                self.state.handled.add(lift.node.func)
            return False
        for alias in aliases:
            self.state.alias_use.setdefault(alias, True)
        for lift in chain.lifts:
            self._mark_transform_names(lift.node)
        self.state.handled.add(chain.base)  # nn.Dense in nn.vmap(nn.Dense, ...): built as nnx.Linear
        return chain

    @staticmethod
    def self_call(node: cst.Call) -> str | None:
        """``self.param(...)`` -> ``"param"``."""
        return self_attr(node.func)

    def visit_Module(self, node: cst.Module) -> None:
        """Module-level helpers (``def reparameterize(mean, ...): return mean + ...``): what size they return."""
        self.collect_lift_aliases(node.body)
        self.state.module_classes = {s.name.value for s in node.body if isinstance(s, cst.ClassDef)}
        self.state.module_functions = {s.name.value: s for s in node.body if isinstance(s, cst.FunctionDef)}
        self.state.unbox_helpers = {name for name, fn in self.state.module_functions.items() if self._is_unbox_helper(fn)}
        self.state.bindings = None  # built on first use (see field_factory)
        self.state.module_lines = {code(s).strip() for s in node.body if isinstance(s, cst.SimpleStatementLine)
                              and isinstance(s.body[0], cst.Assign) and isinstance(s.body[0].targets[0].target, cst.Attribute)
                              and s.body[0].targets[0].target.attr.value == "linen_class"}
        for stmt in node.body:
            # a decorator may change what the function returns; jax.jit and a bare jax.vmap (axis 0 in and
            # out) keep the last axis of a result whose last axis is an argument's
            if isinstance(stmt, cst.FunctionDef) and all(self.qualnames(d.decorator) & {"jax.jit", "jax.vmap"}
                                                         for d in stmt.decorators):
                params = [p.name.value for p in stmt.params.params]
                flow = FeatureFlow(params, lambda call: None, self.qualnames)
                flow.run(stmt.body.body)
                if flow.returns and all(r == flow.returns[0] for r in flow.returns):
                    if "self" not in flow.returns[0].expr:
                        self.state.function_out[stmt.name.value] = (params, flow.returns[0])

    # ---- imports are never rewritten in place ------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    # ---- planning ----------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not self.is_linen_module(node):
            if any(self.qualnames(d.decorator) & LINEN_COMPACT for m in node.body.body
                   if isinstance(m, cst.FunctionDef) for d in m.decorators):
                bases = ", ".join(code(b.value) for b in node.bases) or "object"
                self.report(MOD_006, node, f"{node.name.value} uses @nn.compact but its base ({bases}) is "
                            "not a Linen class of this run", "migrate the file that defines the base in the same run")
            self.state.class_stack.append(None)
            return
        self.state.planning, self.state.pending_blocking = True, []
        plan = self.plan_class(node)
        self.state.planning = False
        plan.blocking = self.state.pending_blocking
        plan.key = self._class_key(plan.name)
        self.state.plans[node] = plan
        self.state.linen_classes[plan.name] = plan
        self.state.summaries[plan.key] = plan.summary()
        self.state.class_stack.append(plan)


    # ---- feature-size dataflow ---------------------------------------------------------------


    # ---- rewriting ---------------------------------------------------------------------------
    def _current(self) -> ClassPlan | None:
        return self.state.class_stack[-1] if self.state.class_stack else None


    def _unboxed(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``unbox_helper(state)`` / ``nn.unbox(tree)`` -> ``state``: nothing to unbox in NNX."""
        func = original.func
        helper = isinstance(func, cst.Name) and func.value in self.state.unbox_helpers
        linen_unbox = any(q.removeprefix("flax.linen.") in UNBOX_FUNCTIONS for q in self.qualnames(func)
                          if q.startswith("flax.linen."))
        if not (helper or linen_unbox) or len(updated.args) != 1 or updated.args[0].keyword or updated.args[0].star:
            return None
        self.state.handled.add(func)
        self.report(PART_004, original, f"{code(func)}(x) -> x: NNX values carry no metadata boxes")
        return updated.args[0].value

    def visit_Call(self, node: cst.Call) -> None:
        if any(q.removeprefix("flax.linen.") in UNBOX_FUNCTIONS for q in self.qualnames(node.func)
               if q.startswith("flax.linen.")):
            self.state.handled.add(node.func)  # nn.unbox(x): the call is rewritten to x
        if self._function_lift_kind(node) is not None:  # its nn.broadcast & co. are consumed by the rewrite
            self._mark_transform_names(node)

    def _function_lift_kind(self, node: cst.Call) -> str | None:
        """``nn.remat(fn, ...)`` / ``nn.scan(fn, ...)`` of a plain function (the MaxText pipeline style)
        rather than of a module class."""
        kind = self.transform_kind(node.func)
        if kind is None or not node.args or node.args[0].keyword is not None or node.args[0].star:
            return None
        target = node.args[0].value
        if self.layer_rule_of(target) or self.user_class_of(target):
            return None
        return kind

    def _mark_transform_names(self, node: cst.CSTNode) -> None:
        command = self

        class Mark(FastVisitor):
            def visit_Attribute(self, attr: cst.Attribute) -> None:
                if any(q.startswith("flax.linen.") and q.rsplit(".", 1)[-1] in LINEN_MARKERS
                       for q in command.qualnames(attr)):
                    command.state.handled.add(attr)

        Mark().walk(node)

    def _function_transform(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """A lifted transform of a function that takes a module: NNX transforms take modules as
        arguments too, so ``nn.remat`` is a rename and ``nn.scan`` becomes ``nnx.scan`` with the module's
        axis (``None``: params broadcast) in front of the carry."""
        kind = self._function_lift_kind(original)
        if kind is None:
            return None
        fn = code(updated.args[0].value)
        kwargs = {a.keyword.value: a for a in updated.args[1:] if a.keyword is not None}
        orig_kwargs = {a.keyword.value: a.value for a in original.args[1:] if a.keyword is not None}

        def manual(why: str) -> cst.BaseExpression:
            self.report(XFORM_002, original, f"nn.{kind}({fn}, ...): {why}",
                        "rewrite with the nnx transform by hand (reference §4)")
            return updated

        if len(kwargs) != len(updated.args) - 1:
            return manual("positional transform arguments are not converted")
        self.state.uses_nnx = True
        if kind == "remat":
            extra = set(kwargs) - {"policy", "prevent_cse", "static_argnums", "concrete"}
            if extra:
                return manual(f"{', '.join(sorted(extra))}= not converted")
            args = [a for name, a in kwargs.items() if name != "concrete"]
            self.report(XFORM_001, original, f"nn.remat({fn}) -> nnx.remat({fn}) (it takes the module as an "
                        "argument, as the Linen function does)" + ("; concrete= dropped (no NNX equivalent)"
                                                                  if "concrete" in kwargs else ""))
            return updated.with_changes(func=parse_expression("nnx.remat"),
                                        args=strip_commas([updated.args[0], *args]))
        if kind != "scan":
            return manual("only nn.remat and nn.scan of functions are converted")
        extra = set(kwargs) - {"variable_axes", "variable_broadcast", "split_rngs", "in_axes", "out_axes", "length",
                               "reverse", "unroll"}
        if extra:
            return manual(f"{', '.join(sorted(extra))}= not converted")
        broadcast = orig_kwargs.get("variable_broadcast")
        broadcasts_params = broadcast is not None and ("params" in code(broadcast) or code(broadcast) == "True")
        axes = orig_kwargs.get("variable_axes")
        if not broadcasts_params:
            return manual("the scanned function creates per-step (stacked) params; build the stack with nnx.vmap "
                          "and scan over it (as for nn.scan of a class)")
        if axes is not None and code(axes) not in ("{}", "None"):
            return manual("variable_axes besides broadcast params are not converted for functions")
        func_def = self.state.module_functions.get(fn)
        if func_def is None:
            return manual("the function is not defined in this file, so its inputs cannot be counted")
        n_xs = len(func_def.params.params) - 2
        per_x = in_axes_list(orig_kwargs.get("in_axes"), self.is_broadcast)
        if per_x is None or n_xs < 0:
            return manual("in_axes is not a literal")
        per_x = per_x if isinstance(per_x, list) else [per_x] * n_xs
        if len(per_x) != n_xs:
            return manual(f"in_axes has {len(per_x)} entries for {n_xs} scanned inputs")
        out_axes = code(orig_kwargs["out_axes"]) if "out_axes" in orig_kwargs else "0"
        rest = "".join(f", {k}={code(kwargs[k].value)}" for k in ("length", "reverse", "unroll") if k in kwargs)
        self.report(XFORM_001, original, f"nn.scan({fn}) -> nnx.scan({fn}) with the module broadcast (None) "
                    "before the carry")
        return parse_expression(f"nnx.scan({fn}, in_axes=({', '.join(['None', 'nnx.Carry', *per_x])}), "
                                    f"out_axes=(nnx.Carry, {out_axes}){rest})")

    def _is_unbox_helper(self, fn: cst.FunctionDef) -> bool:
        """A one-argument function whose body unboxes Linen partition metadata (MaxText's
        ``remove_logically_partition``, lm1b's ``unbox_logicallypartioned_trainstate``); the boxes'
        names (marked handled here) need no other finding."""
        params = fn.params.params
        if len(params) != 1 or fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or fn.params.kwonly_params:
            return False
        boxes: list[cst.Attribute] = []
        unboxes = False
        command = self

        class V(FastVisitor):
            def visit_Attribute(self, node: cst.Attribute) -> None:
                nonlocal unboxes
                short = {q.removeprefix("flax.linen.") for q in command.qualnames(node) if q.startswith("flax.linen.")}
                if short & BOX_TYPES:
                    boxes.append(node)
                if node.attr.value == "unbox" or short & UNBOX_FUNCTIONS:
                    unboxes = True

        V().walk(fn)
        if boxes and unboxes:
            self.state.handled.update(boxes)
            self.report(PART_004, fn, f"{fn.name.value}() only unboxes Linen partition metadata: removable "
                        "(NNX values are never boxed); its calls become their argument")
            return True
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        merged = self._merge_param(original, updated)
        if merged is not None:
            return merged
        unboxed = self._unboxed(original, updated)
        if unboxed is not None:
            return unboxed
        lifted_fn = self._function_transform(original, updated)
        if lifted_fn is not None:
            return lifted_fn
        plan = self._current()
        if plan is None:
            return updated
        result = self._leave_call(plan, original, updated)
        api = self.state.pending_api.pop(original, None)
        if api is not None and original not in self.state.handled and original not in plan.sites:
            self.report(API_002, api, f"self.{api.attr.value} is Linen Module API with no automatic "
                        "conversion yet", "see reference: variables and collections")
        return result

    def _leave_call(self, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if original in self.state.factory_ctors:
            self.state.factory_updated[original] = updated
        local = self.state.partial_calls.get(original)
        if local is not None:  # the constructor each use stands for, as rewritten
            self.state.factory_updated[local.ctor] = cst.Call(func=updated.args[0].value, args=list(updated.args[1:]))
            return updated
        lazy = plan.lazy_vars.get(original)
        if lazy is not None:
            args = list(updated.args)
            self.state.stmt_prefix.setdefault(lazy.statement, []).append(creation(lazy, args[2].value, args[3:]))
            self.state.uses_nnx = True
            self.report(VAR_004, original, f"self.variable({lazy.collection!r}, {lazy.name!r}) -> "
                        f"nnx.{lazy.var_type} self.{lazy.attr}, created on the first call as Linen does")
            return parse_expression(f"self.{lazy.attr}")
        cell = plan.carry_inits.get(original)
        if cell is not None:  # the detached Linen cell's carry is the built cell's
            rng, shape = (code(a.value) for a in updated.args)
            self.state.uses_nnx = True
            self.report(LAYER_001, original, f"nn.{cell.rule.linen}(..., parent=None).initialize_carry(rng, "  # type: ignore[union-attr]
                        f"shape) -> self.{cell.attr}.initialize_carry(shape, rngs=...)")
            return parse_expression(f"self.{cell.attr}.initialize_carry({shape}, rngs=nnx.Rngs(carry={rng}))")
        site = plan.sites.get(original)
        if site is not None and site.factory is not None:  # built in __init__ once the helper is rewritten
            self.state.factory_calls[original] = updated
            self.state.moved[original] = [kwarg(a, site.args[a].value) for a in site.moved_args if a in site.args]
            return self._call_site(site)
        if site is not None:
            self.state.handled.add(original.func)
            if site.kind == "layer":
                self.report(LAYER_001, original, f"nn.{site.rule.linen} -> nnx.{site.rule.nnx} ({site.attr})")  # type: ignore[union-attr]
            elif site.kind in ("param", "variable"):
                self.report(VAR_001, original, f"self.{site.kind}({site.linen_name!r}) -> "
                            f"nnx.{site.var_type} self.{site.attr} created in __init__")
            built = self._build(site, updated)
            if not site.hoisted:
                return built
            self.state.built[original] = built
            if site.rule is not None:
                upd_bound, _ = self._bind_args(site.rule.linen_arg_order(), updated)
                self.state.moved[original] = [upd_bound[a] for a in site.moved_args if a in upd_bound]
            return self._call_site(site)
        sow = self._rewrite_self_api(plan, original, updated)
        if sow is not None:
            return sow
        applied = None
        if isinstance(original.func, cst.Call) and original.func in plan.sites:
            applied = plan.sites[original.func]  # nn.Layer(...)(x) in @nn.compact
        elif isinstance(original.func, cst.Name) and original.func.value in plan.local_sites:
            applied = plan.local_sites[original.func.value]  # layer = nn.Layer(...); layer(x)
        elif self_attr(original.func) is not None and not self._in_setup(original):
            applied = next((s for s in plan.sites.values() if s.attr == self_attr(original.func) and not s.hoisted
                            and s.rule is not None), None)  # self.layer(x) of a setup() layer
        if applied is None:
            return updated
        call = updated if applied.rule is None else self._rewrite_layer_call(applied, original, updated)
        if applied.rule is None and applied.view_kwargs:  # mode flags of the layers it builds with a handed partial
            self.state.uses_nnx = True
            view = [cst.Arg(call.func), *(kwarg(k, parse_expression(v)) for k, v in applied.view_kwargs.items())]
            call = call.with_changes(func=cst.Call(parse_expression("nnx.view"), strip_commas(view)))
        if applied.lifted is not None:
            try:
                source = lifted_call(applied.lifted, code(call.func), list(call.args), self.is_broadcast,
                                     state_when=applied.state_when)
            except LiftError as err:
                self.report(XFORM_002, original, str(err), "rewrite the call with nnx.scan / nnx.remat by hand")
                return call
            self.state.uses_nnx = True
            kinds = " + ".join(f"nn.{lift.kind}" for lift in applied.lifted.lifts)
            self.report(XFORM_001, original, f"{kinds} of {code(applied.lifted.base)} -> NNX transforms at the "
                        f"call of self.{applied.attr}")
            return parse_expression(source)
        return call

    def _merge_param(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``nn.merge_param('x', self.x, x)`` -> ``x if x is not None else self.x`` (NNX layers' own idiom:
        the call-time value wins; Linen's error for giving both, or neither, is not kept)."""
        if not any(q.removeprefix("flax.linen.") in MERGE_PARAM for q in self.qualnames(original.func)):
            return None
        args = updated.args
        if len(args) != 3 or any(a.keyword is not None or a.star for a in args):
            self.report(API_002, original, "merge_param with unusual arguments", "rewrite by hand")
            return None
        self.report(API_004, original, "merge_param -> `call_value if call_value is not None else attribute`")
        attribute, call_value = args[1].value, args[2].value
        test = cst.Comparison(call_value, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
        return cst.IfExp(test=test, body=call_value, orelse=attribute)

    def _rewrite_self_api(self, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``self.sow`` / ``self.make_rng`` / ``self.is_initializing`` -> their NNX spelling."""
        api = self.self_call(original)
        if api is None or api in plan.field_names:
            return None
        if api == "sow" and original.args and isinstance(original.args[0].value, cst.SimpleString):
            collection = original.args[0].value.evaluated_value
            var_type = COLLECTION_TYPES.get(collection)
            self.state.handled.add(original)
            if var_type is None:
                self.report(API_002, original, f"self.sow into the custom collection {collection!r}",
                            "define a registered nnx.Variable subclass and sow into it")
                return updated
            self.report(VAR_002, original, f"self.sow({collection!r}, ...) -> self.sow(nnx.{var_type}, ...)")
            self.state.uses_nnx = True
            first = updated.args[0].with_changes(value=parse_expression(f"nnx.{var_type}"))
            return updated.with_changes(args=[first, *updated.args[1:]])
        if api == "make_rng" and len(original.args) == 1 and isinstance(original.args[0].value, cst.SimpleString):
            stream = original.args[0].value.evaluated_value
            self.state.handled.add(original)
            plan.uses_rngs = True
            self.report(VAR_003, original, f"self.make_rng({stream!r}) -> a draw from the module's nnx.Rngs")
            ref = f"self.rngs.{stream}()" if stream.isidentifier() else f"self.rngs[{stream!r}]()"
            return parse_expression(ref)
        if api in ("has_variable", "get_variable") and len(original.args) == 2 and all(
                isinstance(a.value, cst.SimpleString) and a.keyword is None for a in original.args):
            collection, name = (a.value.evaluated_value for a in original.args)  # type: ignore[union-attr]
            attr = self._variable_attr(plan, collection, name)
            if attr is None:
                return None
            self.state.handled.add(original)
            self.report(VAR_004, original, f"self.{api}({collection!r}, {name!r}) -> self.{attr}")
            return parse_expression(f"hasattr(self, {attr!r})" if api == "has_variable" else f"self.{attr}[...]")
        if api == "is_initializing" and not original.args:
            self.state.handled.add(original)
            if not self.state.unsafe_fixes:
                self.report(API_002, original, "self.is_initializing() has no NNX meaning (__init__ is the "
                            "initialisation)", "move the init-only branch into __init__, or pass --unsafe-fixes")
                return updated
            self.report(API_003, original, "self.is_initializing() -> False (NNX calls never initialise)",
                        "init-only work now happens in __init__")
            return cst.Name("False")
        return None

    @staticmethod
    def _variable_attr(plan: ClassPlan, collection: str, name: str) -> str | None:
        """The NNX attribute of a Linen variable of this class (created in __init__ or lazily)."""
        for var in plan.lazy_vars.values():
            if (var.collection, var.name) == (collection, name):
                return var.attr
        for site in plan.sites.values():
            if site.kind in ("param", "variable") and (site.collection, site.linen_name) == (collection, name):
                return site.attr
        return None

    def _rewrite_layer_call(self, site: Site, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Apply the call-time differences of a layer: moved mode args, renamed / unsupported keywords."""
        rule = site.rule
        assert rule is not None
        args = list(updated.args)
        for o in original.args:
            if o.keyword is not None and o.keyword.value in rule.unsupported_call_args:
                self.report(LAYER_002, o, f"{o.keyword.value}= of nn.{rule.linen}.__call__ has no "
                            f"nnx.{rule.nnx} equivalent", "NNX layers draw randomness from their own rngs")
        args = [a.with_changes(keyword=cst.Name(rule.call_renames[a.keyword.value]))
                if a.keyword is not None and a.keyword.value in rule.call_renames else a for a in args]
        if rule.call_keywords:
            positional = [a for a in args if a.keyword is None and not a.star]
            args = positional[:1] + [kwarg(rule.call_keywords[i], a.value) for i, a in enumerate(positional) if i
                                     ] + [a for a in args if a.keyword is not None or a.star]
        moved = self.state.moved.get(site.ctor, [])
        args += [kwarg(a.keyword.value, a.value) if a.keyword else a for a in moved]
        flag = site.args.get(rule.init_call_cache) if rule.init_call_cache else None
        if flag is not None and code(flag.value) != "False":
            args.append(self._init_call_cache(site, original, updated, code(self._built_arg(site, flag))))
        func = updated.func
        if site.view_kwargs:
            self.state.uses_nnx = True
            view = [cst.Arg(func), *(kwarg(k, parse_expression(v)) for k, v in site.view_kwargs.items())]
            func = cst.Call(parse_expression("nnx.view"), strip_commas(view))
        return updated.with_changes(func=func, args=strip_commas(args))

    def _built_arg(self, site: Site, arg: cst.Arg) -> cst.BaseExpression:
        """A constructor argument as rewritten (``nn.x`` -> ``nnx.x``), for reuse at the call site."""
        built = self.state.built.get(site.ctor)
        if built is not None and site.rule is not None:
            bound, _ = self._bind_args(site.rule.linen_arg_order(), built)
            name = next((n for n, a in site.args.items() if a is arg), None)
            if name is not None and name in bound:
                return bound[name].value
        return arg.value

    def _init_call_cache(self, site: Site, original: cst.Call, updated: cst.Call, flag: str) -> cst.Arg:
        """Linen's init-call cache protocol at an NNX call site (see ``LayerRule.init_call_cache``):

            fresh = decode and self.attn.cached_key is None  # Linen creates the cache on the init call
            if fresh:
                self.attn.init_cache(x.shape, dtype=...)     # the key's shape and dtype, as Linen's
            y = self.attn(x, ..., decode=decode and not fresh)
        """
        assert site.rule is not None
        fresh = f"{site.attr}_fresh_cache"
        keyed = {a.keyword.value: a.value for a in updated.args if a.keyword is not None}
        positional = [a.value for a in updated.args if a.keyword is None and not a.star]
        kv = keyed.get("inputs_kv", keyed.get("inputs_k", positional[1] if len(positional) > 1 else None))
        shape_of = code(kv if kv is not None else positional[0] if positional else keyed["inputs_q"])
        flag, shape_of = (src if src.replace(".", "").replace("_", "").isalnum() else f"({src})"
                          for src in (flag, shape_of))  # parentheses only where needed
        dtype = site.args.get("dtype")
        if dtype is not None:
            dtype_src = code(self._built_arg(site, dtype))
        else:  # Linen's key is promote_dtype(input, param): its param_dtype defaults to float32
            param = site.args.get("param_dtype")
            self.state.needs_jax_import = True
            dtype_src = (f"jax.numpy.promote_types({shape_of}.dtype, "
                         f"{code(self._built_arg(site, param)) if param is not None else 'jax.numpy.float32'})")
        statement = self._enclosing_statement(original)
        prefix = cst.parse_module(
            f"{fresh} = {flag} and self.{site.attr}.cached_key is None  # Linen creates the cache on the init "
            "call, which does not decode\n"
            f"if {fresh}:\n"
            f"    self.{site.attr}.init_cache({shape_of}.shape, dtype={dtype_src})\n").body
        self.state.stmt_prefix.setdefault(statement, []).extend(prefix)
        self.report(LAYER_001, original, f"nn.{site.rule.linen}(decode={flag}): the first decode call creates "
                    f"the cache with self.{site.attr}.init_cache and does not decode, as Linen's init call")
        return kwarg("decode", parse_expression(f"{flag} and not {fresh}"))

    def _enclosing_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, cst.SimpleStatementLine):
            cur = self.parent_of(cur)
        assert cur is not None
        return cur

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        names = self.qualnames(original)
        linen = {q for q in names if q.startswith("flax.linen.")}
        parent = self.parent_of(original)
        outermost = not (isinstance(parent, cst.Attribute) and parent.value is original)
        rooted = root_name(original) is not None  # `nn.Dense(1)(x).squeeze` is a method of a result, not API
        holder = self._current()
        if original in self.state.binding_values and not (holder is not None and holder.blocking):
            # `conv: ModuleDef = nn.Conv` bound to a converted factory field (a class kept as Linen keeps it)
            rule = self.state.binding_values[original]
            return self._repoint(original, rule.linen, rule.nnx, LAYER_001,
                                 " (a layer class a module-factory field builds)")
        if linen and rooted and original not in self.state.handled and outermost:
            short = next(iter(linen)).removeprefix("flax.linen.")
            if (same_in_nnx(short) or equivalent_in_nnx(short)) and rooted:
                return self._repoint(original, short, short, API_001, "")
            is_callee = isinstance(parent, cst.Call) and parent.func is original
            if short in RENAMED_IN_NNX and rooted:
                return self._repoint(original, short, RENAMED_IN_NNX[short], PART_001,
                                     " (sharding names become Variable metadata)")
            if short in PARTITION_API_IN_NNX and rooted:
                return self._repoint(original, short, PARTITION_API_IN_NNX[short], PART_002,
                                     " (rules are the same context; specs come from nnx.State metadata)")
            if short in PARTITION_SPEC_FUNCTIONS:
                self.state.handled.add(original)
                if self._under_axis_rules(original):  # here NNX's would map the names through the rules
                    self.report(PART_003, original, f"nn.{short} inside axis rules: Linen's returns logical "
                                "names, nnx.get_partition_spec applies the active rules",
                                "call nnx.get_partition_spec(state) under nnx.logical_axis_rules(()) for logical "
                                "names, or nnx.get_named_sharding(state, mesh) under the rules for shardings")
                    return updated
                return self._repoint(original, short, "get_partition_spec", PART_002,
                                     " (the same logical names when no axis rules are active; training code reads "
                                     "them with the rules cleared)")
            if short in MERGE_PARAM and is_callee:
                pass  # rewritten with its call in leave_Call
            elif short in KEPT_LINEN_FUNCTIONS:
                self.state.handled.add(original)
                self.report(API_005, original, f"nn.{short} kept: a pure function NNX code can call as is")
            elif short in TRANSFORMS:
                self.state.handled.add(original)
                self.report(XFORM_002, original, f"nn.{short} of something other than a Linen module class of "
                            "this run is not converted", "rewrite with nnx.vmap / nnx.scan / nnx.remat by hand "
                            "(reference §4)")
            elif not (names & (LINEN_MODULE | LINEN_COMPACT)):
                self.state.handled.add(original)
                self.report(API_002, original, f"flax.linen.{short} has no automatic conversion yet",
                            "rewrite by hand with the NNX API (see docs/rules.md)")
        plan = self._current()
        attr = self_attr(original)
        if plan is not None and attr is not None:
            is_call = isinstance(parent, cst.Call) and parent.func is original
            if attr in LINEN_SELF_API and attr not in plan.field_names and is_call:
                self.state.pending_api[parent] = original  # reported in leave_Call unless a rule converts the call
            # Linen setup() variables read as arrays (params) or through ``.value``; NNX reads both as v[...]
            kind = plan.setup_vars.get(attr)
            dotted_value = isinstance(parent, cst.Attribute) and parent.value is original and parent.attr.value == "value"
            if kind == "param" and not dotted_value and not self._is_store(original, parent):
                return parse_expression(f"self.{attr}[...]")
        if (plan is not None and original.attr.value == "value" and isinstance(original.value, cst.Name)
                and original.value.value in self._lazy_locals(plan)):
            return cst.Subscript(updated.value, [cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        if plan is not None and original.attr.value == "value" and plan.setup_vars.get(self_attr(original.value) or ""):
            if not self._in_setup(original):
                return cst.Subscript(updated.value, [cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        return updated

    @staticmethod
    def _lazy_locals(plan: ClassPlan) -> set[str]:
        """Locals bound to lazily created variables (``cached_key = self.variable(...)``)."""
        out = set()
        for var in plan.lazy_vars.values():
            small = var.statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                out.add(small.targets[0].target.value)
        return out

    def _repoint(self, original: cst.Attribute, short: str, target: str, rule: Rule, why: str) -> cst.BaseExpression:
        """``nn.<short>`` (whatever the import spelling) -> ``nnx.<target>``, reported under ``rule``."""
        self.state.uses_nnx = True
        self.state.handled.add(original)
        self.report(rule, original, f"nn.{short} -> nnx.{target}{why}")
        return parse_expression(f"nnx.{target}")

    def _under_axis_rules(self, node: cst.CSTNode) -> bool:
        """Lexically inside ``with ...axis_rules(...)`` / ``logical_axis_rules(...)``."""
        cur = self.parent_of(node)
        while cur is not None:
            if isinstance(cur, cst.With) and any("axis_rules" in code(item.item) for item in cur.items):
                return True
            cur = self.parent_of(cur)
        return False

    def _in_setup(self, node: cst.CSTNode) -> bool:
        fn = self._enclosing_function(node)
        return fn is not None and fn.name.value == "setup"

    def _is_store(self, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
        return isinstance(parent, cst.AssignTarget) or self._in_setup(node)

    def _enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, cst.FunctionDef):
            cur = self.parent_of(cur)
        return cur

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        loop = self.state.indexed_loops.get(original)
        if loop is None:
            return updated
        target = parse_expression(loop.target_src)
        return updated.with_changes(target=target, iter=parse_expression(loop.iter_src))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        plan = self._current()
        if plan is None:
            return updated
        if original is plan.compact:  # lines __init__ replays that the method no longer reads go
            updated = without_dead_locals(updated, {*plan.needed_locals, *(
                name for nest in plan.nests.values() for name in nest.local_stmts)})
        keep = [u for o, u in zip(original.decorators, updated.decorators)
                if not (self.qualnames(o.decorator) & LINEN_COMPACT)]
        if len(keep) != len(updated.decorators):
            self.report(MOD_003, original, f"@nn.compact {original.name.value}: submodules hoisted into __init__")
        scan = plan.scanned_methods.get(original.name.value)
        if scan is None or self._enclosing_class_plan(original) is not plan:
            return updated.with_changes(decorators=keep)
        keep = [u for o, u in zip(original.decorators, updated.decorators)
                if not (self.qualnames(o.decorator) & LINEN_COMPACT) and not self._is_scan_decorator(o.decorator)]
        self.state.step_methods[original.name.value] = updated.with_changes(
            name=cst.Name(scan.step), decorators=keep, leading_lines=[cst.EmptyLine(indent=False)])
        when = plan.state_when if plan.state_when in (None, "True") or original.name.value == "__call__" else "True"
        self.state.uses_nnx = True
        self.report(XFORM_001, original, f"nn.scan on {plan.name}.{original.name.value} -> nnx.scan of "
                    f"{scan.step} with the module broadcast")
        call = parse_statement(f"return {method_scan_call(scan, original, when)}\n")
        return updated.with_changes(decorators=keep, body=cst.IndentedBlock(body=[call]))

    def _is_scan_decorator(self, node: cst.BaseExpression) -> bool:
        return (isinstance(node, cst.Call) and bool(node.args) and node.args[0].keyword is None
                and bool(self.qualnames(node.args[0].value) & SCAN_DECORATORS))

    def _enclosing_class_plan(self, node: cst.CSTNode) -> ClassPlan | None:
        """The plan of the class ``node`` is a method of (not of a function nested in one)."""
        parent = self.parent_of(node)
        block = self.parent_of(parent) if parent is not None else None
        return self.state.plans.get(block) if isinstance(block, cst.ClassDef) else None

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        plan = self.state.class_stack.pop()
        if plan is None:
            return updated
        self.state.uses_nnx = True
        if plan.name.endswith("Linen") and plan.name.removesuffix("Linen") in self.state.module_classes:
            if f"{plan.name.removesuffix('Linen')}.linen_class = {plan.name}" in self.state.module_lines:
                return original  # the Linen copy an earlier run kept for a class kept as Linen
            return self._keep_linen(plan, original, original.name.value)  # bridged by an earlier run
        others = (set(self.state.linen_classes) | self.state.module_classes) - {plan.name}
        if plan.blocking and can_bridge(plan, any(self.user_class_of(b.value) for b in original.bases)) and not (
                names_in(original.body) & others):
            batch_norm = any(site.rule is not None and site.rule.linen == "BatchNorm" for site in plan.sites.values()
                             ) or "BatchNorm" in code(original)  # also through partial(nn.BatchNorm, ...)
            # the wrapper's defaults as a second run would write them (nn.relu -> nnx.relu), with their markers
            field_markers = self._rewritten_field_defaults(plan, original, updated)
            wrapper = bridge_wrapper(plan, mutable_collections(original, batch_norm), field_markers)
            wrapper = wrapper.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2)
            return cst.FlattenSentinel([*self._linen_copies(plan), self._keep_linen(plan, original, linen_name(plan.name)),
                                        linen_class_name(plan.name), wrapper])
        bases = []
        for o, u in zip(original.bases, updated.bases):
            linen_base = sorted(self.qualnames(o.value) & LINEN_MODULE)
            if linen_base:
                bases.append(u.with_changes(value=parse_expression(LINEN_BASES[linen_base[0]])))
            else:
                bases.append(u)
        body: list[cst.BaseStatement] = []
        setup_body: list[cst.BaseStatement] = []
        field_markers = self._rewritten_field_defaults(plan, original, updated)
        init_index = None
        for orig_stmt, stmt in zip(original.body.body, updated.body.body):
            if self._is_field_line(plan, stmt):
                init_index = len(body) if init_index is None else init_index
                continue
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value in plan.factories and not any(
                    f"self.{stmt.name.value}" in code(other) for other in updated.body.body
                    if other is not stmt and isinstance(other, cst.FunctionDef)):
                self.report(MOD_003, orig_stmt, f"{plan.name}.{stmt.name.value}(): each call became a "
                            "submodule built in __init__; the helper is removed")
                continue
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "setup":
                setup_body = list(stmt.body.body)
                init_index = len(body) if init_index is None else init_index
                continue
            if plan.is_cell and isinstance(stmt, cst.FunctionDef) and stmt.name.value == CARRY_METHOD:
                reordered = nnx_initialize_carry(stmt)
                if reordered is None:
                    self.report(API_002, orig_stmt, f"{plan.name}.{CARRY_METHOD}(rng, shape) uses its key: "
                                f"nnx.RNN calls {CARRY_METHOD}(input_shape, rngs)",
                                "take `rngs` (an nnx.Rngs or None) and draw the key from it")
                else:
                    self.report(API_006, orig_stmt, f"{plan.name}.{CARRY_METHOD}(rng, input_shape) -> "
                                f"{CARRY_METHOD}(input_shape, rngs=None), as nnx.RNN calls it")
                    stmt = reordered
            body.append(stmt)
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value in plan.scanned_methods:
                body.append(self.state.step_methods.pop(stmt.name.value))  # the scanned body, right after its scan
        if init_index is None:
            init_index = 1 if body and is_docstring(body[0]) else 0
        if plan.setup is not None:
            self.report(MOD_002, plan.setup, f"{plan.name}.setup() moved into __init__")
        init = self._build_init(plan, setup_body)
        init = init.with_changes(leading_lines=[*([cst.EmptyLine(indent=False)] if init_index > 0 else []),
                                                *field_markers])
        body.insert(init_index, init)
        following = body[init_index + 1] if init_index + 1 < len(body) else None
        if isinstance(following, (cst.FunctionDef, cst.ClassDef)) and not following.leading_lines:
            body[init_index + 1] = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.report(MOD_001, original, f"{plan.name} -> nnx.Module")
        self.state.converted[plan.name] = original
        self._record_name_map(plan)
        return updated.with_changes(bases=bases, body=updated.body.with_changes(body=body))


    def _linen_copies(self, plan: ClassPlan) -> list[cst.BaseStatement]:
        """Linen copies of the NNX classes a class kept as Linen builds through its factory fields
        (``block_cls=ResNetBlock``): the kept class runs Linen code only, so it gets ``ResNetBlockLinen``
        (named ``ResNetBlock`` for Linen's auto-names) through ``ResNetBlock.linen_class``."""
        out: list[cst.BaseStatement] = []
        others = set(self.state.linen_classes) | self.state.module_classes
        for f in plan.fields:
            for base in self.field_bindings.bases(plan.name, f.name):
                original = self.state.converted.get(base.name) if base.kind == "user" else None
                if original is None or base.name in self.state.copied or names_in(original.body) & (others - {base.name}):
                    continue
                self.state.copied.add(base.name)
                note = cst.EmptyLine(comment=cst.Comment(f"# The Linen original of {base.name}, for {plan.name}Linen, "
                                                         "which is kept as Linen"))
                out.append(original.with_changes(name=cst.Name(linen_name(base.name)),
                                                 leading_lines=[cst.EmptyLine(indent=False)] * 2 + [note]))
                out.append(linen_class_name(base.name))
                out.append(parse_statement(f"{base.name}.linen_class = {linen_name(base.name)}\n"))
        return out

    @staticmethod
    def _is_field_line(plan: ClassPlan, stmt: cst.BaseStatement) -> bool:
        field_names = set(plan.field_names)
        return isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name) and s.target.value in field_names
            for s in stmt.body)

    def _rewritten_field_defaults(self, plan: ClassPlan, original: cst.ClassDef,
                                  updated: cst.ClassDef) -> list[cst.EmptyLine]:
        """Point ``plan.fields`` at the defaults as rewritten (``nn.relu`` -> ``nnx.relu``) and return
        the fields' TODO markers: both move into ``__init__`` (or the bridge wrapper's)."""
        by_name = {f.name: f for f in plan.fields}
        markers: list[cst.EmptyLine] = []
        for orig_stmt, stmt in zip(original.body.body, updated.body.body):
            if self._is_field_line(plan, stmt):
                for orig_small, small in zip(orig_stmt.body, stmt.body):  # type: ignore[attr-defined]
                    by_name[small.target.value].default = self._field(orig_small, small).default
                markers += [line for line in stmt.leading_lines
                            if line.comment is not None and line.comment.value.startswith(MARKER)]
        return markers

    def _keep_linen(self, plan: ClassPlan, original: cst.ClassDef, name: str) -> cst.ClassDef:
        """The Linen original, renamed, for the nnx.bridge fallback (see bridge.py)."""
        rules = ", ".join(sorted(set(plan.blocking))) or "see the markers"
        wrapper = plan.name.removesuffix("Linen") if name == plan.name else plan.name
        self.report(MOD_007, original, f"{wrapper} kept as Linen ({name}) behind nnx.bridge.ToNNX: {rules} "
                    "block its rewrite", "fix the findings, then migrate again")
        entry = ClassEntry(name=self._class_key(wrapper), module=self.state.module_name, file=self.state.path,
                           new_args=dict(plan.new_args), bridge=BRIDGE_ATTR)
        self.state.name_map.classes[entry.name] = entry
        marker = f"{MARKER} {MOD_007.id} {wrapper} kept as Linen behind nnx.bridge.ToNNX ({rules})"
        lines = [line for line in original.leading_lines
                 if not (line.comment is not None and line.comment.value.startswith(f"{MARKER} {MOD_007.id}"))]
        placed = self.state.placed_markers

        class Mark(cst.CSTTransformer):  # the findings' markers, on the Linen statements they concern
            def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
                notes = placed.get(original_node)
                if notes and isinstance(updated_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                    return with_new_markers(updated_node, notes)
                return updated_node

        kept = original.visit(Mark())
        return kept.with_changes(name=cst.Name(name), leading_lines=[*lines, cst.EmptyLine(comment=cst.Comment(marker))])

    # ---- visitor dispatch fast paths -----------------------------------------------------------
    # no visit_<Type>_<field> / leave_<Type>_<field> handlers exist: skip libcst's per-field getattr
    def on_visit_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in _LEXICAL_TYPES:  # never rewritten: keep the node (and its children) as parsed
            return False
        return super().on_visit(node)

    # ---- markers and replayed statements -------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        if type(original_node) in _LEXICAL_TYPES:
            return updated_node
        updated = super().on_leave(original_node, updated_node)
        if not _IS_STATEMENT[type(original_node)]:
            return updated  # what follows only concerns statements (the keys of the dicts it reads)
        if original_node in self.state.dropped_statements:  # `dense = partial(nn.Dense, ...)`: built in __init__
            return cst.RemoveFromParent()
        plan = self._current()
        if plan is not None and original_node in plan.pure_locals.values():
            self.state.pure_updated[original_node] = updated
        if isinstance(original_node, cst.SimpleStatementLine):
            alias = next((n for n, st in self.state.alias_stmts.items() if st is original_node), None)
            if alias is not None and self.state.alias_use.get(alias):
                return cst.RemoveFromParent()
        prefix = self.state.stmt_prefix.pop(original_node, None)
        if prefix and isinstance(updated, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return cst.FlattenSentinel([*prefix, self._with_markers(original_node, updated)])
        return self._with_markers(original_node, updated)

    def _with_markers(self, original_node: cst.CSTNode, updated: Any) -> Any:
        notes = self.state.markers.pop(original_node, None)
        if notes:
            self.state.placed_markers[original_node] = notes  # kept for a class that falls back to the bridge
        if notes and isinstance(updated, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            updated = with_new_markers(updated, notes)
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if self.state.out_features:
            updated = updated.with_changes(body=[self._with_out_features(s) for s in updated.body])
        if self.state.uses_nnx:
            updated = drop_unused_linen_imports(ensure_nnx_import(updated))
        if self.state.needs_jax_import and "jax" not in {a.evaluated_alias or a.evaluated_name for s in updated.body
                                                   if isinstance(s, cst.SimpleStatementLine) for i in s.body
                                                   if isinstance(i, cst.Import) for a in i.names}:
            updated = updated.with_changes(body=[parse_statement("import jax\n"), *updated.body])
        if self.state.needs_math_import:
            updated = ensure_plain_import(updated, "math")
        return updated

    def _with_out_features(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """A converted class whose output size a caller reads (a loop nest, a factory field bound to
        several classes) ends its ``__init__`` with ``self.out_features = ...``, as NNX layers have."""
        if not isinstance(stmt, cst.ClassDef) or stmt.name.value not in self.state.out_features:
            return stmt
        expr = self.state.out_features[stmt.name.value]
        body = list(stmt.body.body)
        for i, member in enumerate(body):
            if isinstance(member, cst.FunctionDef) and member.name.value == "__init__":
                if expr == "self.out_features":
                    return stmt
                line = parse_statement(f"self.out_features = {expr}  # the output size, read by the modules that build it\n")
                body[i] = member.with_changes(body=member.body.with_changes(body=[*member.body.body, line]))
                return stmt.with_changes(body=stmt.body.with_changes(body=body))
        return stmt

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """One pass over a freshly parsed tree (no defensive copy, no extra import passes, no libcst
        metadata: names, parents and positions come from the cheaper helpers above)."""
        self.state.tree, self.state.resolver, self.state.parents = tree, None, None
        migrated = tree.visit(self)
        self._place_findings()
        return migrated

    def _place_findings(self) -> None:
        """Give the findings the (line, column) of their nodes in the original source, all in one code
        generation pass; a node the codemod built has none (0, 0)."""
        positions = start_positions(self.state.tree, {node for _, node in self.state.unplaced})
        for index, node in self.state.unplaced:
            if node in positions:
                line, column = positions[node]
                self.state.findings[index] = dataclasses.replace(self.state.findings[index], line=line, col=column + 1)
        self.state.unplaced = []




def _lexical_types() -> frozenset[type]:
    """Whitespace, comments, punctuation and operators: node types the codemod has no handler for and
    that hold no statement or expression, so visiting them can change nothing."""
    bases = (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp)
    ops = {t for t in vars(cst).values() if isinstance(t, type) and issubclass(t, bases) and t not in bases}
    return frozenset({cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.Newline, cst.TrailingWhitespace,
                      cst.EmptyLine, cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual,
                      cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
                      cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.ImportStar, cst.Asynchronous, cst.ParamSlash,
                      cst.ParamStar, *ops})


_LEXICAL_TYPES = _lexical_types()


class _IsStatement(dict):
    """type -> whether it is a statement (``SimpleStatementLine`` / ``BaseCompoundStatement``): a dict
    lookup instead of an ABC ``isinstance`` for each of the ~2,000 nodes of a file."""

    def __missing__(self, kind: type) -> bool:
        self[kind] = found = issubclass(kind, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        return found


_IS_STATEMENT = _IsStatement()
