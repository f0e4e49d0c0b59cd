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
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import libcst as cst
from libcst.codemod import Codemod, CodemodContext
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, QualifiedNameProvider

from linen2nnx.layers import LayerRule, layer_rule, nnx_ctor_params
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    code,
    is_docstring,
    kwarg,
    names_in,
    root_name,
    self_attr,
    snake_case,
    strip_commas,
    substitute_self_fields,
)
from linen2nnx.migrate.dataflow import Feat, FeatureFlow, LayerInfo, transfer
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.imports import drop_unused_linen_imports, ensure_nnx_import
from linen2nnx.migrate.linen_api import KEPT_LINEN_FUNCTIONS, RENAMED_IN_NNX, equivalent_in_nnx, same_in_nnx
from linen2nnx.migrate.rules import RULES
from linen2nnx.migrate.trace import Trace
from linen2nnx.namemap import Child, ClassEntry, NameMap

LINEN_MODULE = frozenset({"flax.linen.Module", "flax.linen.module.Module"})
LINEN_COMPACT = frozenset({"flax.linen.compact", "flax.linen.module.compact"})
MARKER = "# TODO(linen2nnx):"
# Linen-only Module API: a call on ``self`` to any of these has no NNX meaning yet.
LINEN_SELF_API = frozenset({
    "param", "variable", "sow", "make_rng", "is_initializing", "is_mutable_collection", "has_variable",
    "put_variable", "get_variable", "has_rng", "scope", "variables", "bind", "unbind", "apply", "init",
    "init_with_output", "perturb", "lazy_init", "path",
})
# Linen collection -> NNX Variable type (the registry of nnx.variablelib, verified in the reference).
MERGE_PARAM = frozenset({"merge_param", "module.merge_param"})
COLLECTION_TYPES = {"params": "Param", "batch_stats": "BatchStat", "cache": "Cache", "intermediates": "Intermediate"}


@dataclasses.dataclass
class Field:
    name: str
    annotation: str
    default: str | None


@dataclasses.dataclass
class LoopInfo:
    var: str  # loop variable
    range_src: str  # the iterable, e.g. ``range(self.num_layers)``


@dataclasses.dataclass
class Site:
    """One submodule or variable construction that moves into (or stays in) ``__init__``."""

    kind: str  # layer | module | param | variable
    attr: str  # NNX attribute (``layers[0]`` for setup list items)
    linen_name: str  # Linen child / variable name (a container prefix for loop-built lists)
    ctor: cst.Call  # original construction call
    hoisted: bool  # True for @nn.compact (the call site becomes ``self.attr``)
    rule: LayerRule | None = None
    user: ClassPlan | None = None
    args: dict[str, cst.Arg] = dataclasses.field(default_factory=dict)  # Linen argument name -> original Arg
    in_expr: str | None = None
    user_in: dict[str, str] = dataclasses.field(default_factory=dict)  # new ctor arg of the user class -> expr
    moved_args: tuple[str, ...] = ()  # Linen args moved to call time
    container: str | None = None
    loop: LoopInfo | None = None
    collection: str = "params"
    var_type: str = "Param"
    parent: Site | None = None  # the layer whose constructor argument this one is (RNN(cell), Sequential)
    nested: list[Site] = dataclasses.field(default_factory=list)
    nested_arg: str = ""  # the parent's Linen argument holding this one ("cell", or "layers" + index)
    element: int = -1  # index in the parent's list argument (Sequential)
    shape_refs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # arg -> locals used as `v.shape[-1]`
    arg_sources: dict[str, str] = dataclasses.field(default_factory=dict)  # arg -> source resolved by the dataflow
    view_kwargs: dict[str, str] = dataclasses.field(default_factory=dict)  # mode kwargs applied with nnx.view
    conditions: list[str] = dataclasses.field(default_factory=list)  # config tests of enclosing `if`s


@dataclasses.dataclass
class ClassPlan:
    name: str
    fields: list[Field]
    sites: dict[cst.Call, Site] = dataclasses.field(default_factory=dict)
    new_args: dict[str, str] = dataclasses.field(default_factory=dict)  # kw-only arg -> how obtained
    setup: cst.FunctionDef | None = None
    hoisted_order: list[Site] = dataclasses.field(default_factory=list)
    containers: dict[str, list[Site]] = dataclasses.field(default_factory=dict)
    pure_locals: dict[str, cst.SimpleStatementLine] = dataclasses.field(default_factory=dict)
    shape_locals: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # local -> vars read as v.shape[-1]
    shape_local_sizes: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # local -> {v: size}
    needed_locals: list[str] = dataclasses.field(default_factory=list)
    setup_vars: dict[str, str] = dataclasses.field(default_factory=dict)  # setup attr -> param | variable
    out: Feat | None = None  # feature size of ``__call__``'s result
    first_input: str = "x"
    local_sites: dict[str, Site] = dataclasses.field(default_factory=dict)  # compact local bound to a submodule
    uses_rngs: bool = False  # make_rng is used: the module keeps ``self.rngs``
    method_out: dict[str, tuple[list[str], Feat]] = dataclasses.field(default_factory=dict)  # method -> (params, result)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


class MigrateModules(Codemod, cst.CSTTransformer):
    DESCRIPTION = "Rewrite Flax Linen modules as idiomatic Flax NNX modules."
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)

    def __init__(self, context: CodemodContext, *, path: str, module_name: str, trace: Trace | None = None,
                 rule_enabled: Callable[[str], bool] = lambda rule_id: True, unsafe_fixes: bool = False):
        super().__init__(context)
        self.path = path
        self.module_name = module_name
        self.trace = trace
        self.rule_enabled = rule_enabled
        self.unsafe_fixes = unsafe_fixes
        self.findings: list[Finding] = []
        self.name_map = NameMap()
        self.plans: dict[cst.ClassDef, ClassPlan] = {}
        self.linen_classes: dict[str, ClassPlan] = {}
        self._class_stack: list[ClassPlan | None] = []
        self._markers: dict[cst.CSTNode, list[str]] = {}
        self._handled: set[cst.CSTNode] = set()
        self._moved: dict[cst.Call, list[cst.Arg]] = {}
        self._built: dict[cst.Call, cst.BaseExpression] = {}
        self._pure_updated: dict[cst.CSTNode, cst.BaseStatement] = {}
        self._pending_api: dict[cst.CSTNode, cst.Attribute] = {}
        self._init_markers: dict[cst.Call, list[str]] = {}
        self._flow_method: str | None = None
        self._methods: dict[str, list[cst.FunctionDef]] = {}
        self.function_out: dict[str, tuple[list[str], Feat]] = {}  # module-level helper -> (params, result)
        self.uses_nnx = False

    # ---- helpers -----------------------------------------------------------------------------
    def qualnames(self, node: cst.CSTNode) -> set[str]:
        try:
            return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}
        except KeyError:
            return set()

    def report(self, rule_id: str, node: cst.CSTNode, message: str, hint: str = "") -> None:
        """Record a finding; a ``manual`` one also marks its statement with an inline TODO.

        A rule switched off with ``--ignore`` / ``select`` neither reports nor marks.
        """
        if not self.rule_enabled(rule_id):
            return
        pos = self.get_metadata(PositionProvider, node, None)
        line, col = (pos.start.line, pos.start.column + 1) if pos else (0, 0)
        severity = RULES[rule_id].severity
        self.findings.append(Finding(rule_id, severity, self.path, line, col, message, hint))
        if severity is Severity.MANUAL:
            marker = f"{MARKER} {rule_id} {message}"
            hoisted = self._hoisted_ctor_of(node)
            if hoisted is not None:  # the code moves into __init__: so does its marker
                self._init_markers.setdefault(hoisted, []).append(marker)
                return
            stmt = self._statement_of(node)
            if stmt is not None:
                self._markers.setdefault(stmt, []).append(marker)

    def _hoisted_ctor_of(self, node: cst.CSTNode) -> cst.Call | None:
        plan = self._current() if self._class_stack else None
        cur: cst.CSTNode | None = node
        while plan is not None and cur is not None and not isinstance(cur, (cst.SimpleStatementLine,
                                                                              cst.BaseCompoundStatement)):
            site = plan.sites.get(cur) if isinstance(cur, cst.Call) else None
            if site is not None and site.hoisted:
                return cur
            cur = self.get_metadata(ParentNodeProvider, cur, None)
        return None

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.get_metadata(ParentNodeProvider, cur, None)
        return cur

    def layer_rule_of(self, node: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer a constructor reference names (``nn.Dense``, ``linen.linear.Dense``, ...)."""
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        for q in self.qualnames(node):
            if q.startswith("flax.linen."):
                rule = layer_rule(q) or layer_rule("flax.linen." + q.rsplit(".", 1)[-1])
                if rule is not None:
                    return rule
        return None

    def user_class_of(self, node: cst.BaseExpression) -> ClassPlan | None:
        """A Linen module class of this file (already planned) that ``node`` names."""
        if isinstance(node, cst.Name):
            return self.linen_classes.get(node.value)
        return None

    @staticmethod
    def self_call(node: cst.Call) -> str | None:
        """``self.param(...)`` -> ``"param"``."""
        return self_attr(node.func)

    def visit_Module(self, node: cst.Module) -> None:
        """Module-level helpers (``def reparameterize(mean, ...): return mean + ...``): what size they return."""
        for stmt in node.body:
            if isinstance(stmt, cst.FunctionDef):
                params = [p.name.value for p in stmt.params.params]
                flow = FeatureFlow(params, lambda call: None, self.qualnames)
                flow.run(stmt.body.body)
                if flow.returns and all(r == flow.returns[0] for r in flow.returns):
                    if "self" not in flow.returns[0].expr:
                        self.function_out[stmt.name.value] = (params, flow.returns[0])

    # ---- imports are never rewritten in place ------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    # ---- planning ----------------------------------------------------------------------------
    def is_linen_module(self, node: cst.ClassDef) -> bool:
        for base in node.bases:
            if self.qualnames(base.value) & LINEN_MODULE:
                return True
            if isinstance(base.value, cst.Name) and base.value.value in self.linen_classes:
                return True
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not self.is_linen_module(node):
            self._class_stack.append(None)
            return
        plan = self.plan_class(node)
        self.plans[node] = plan
        self.linen_classes[plan.name] = plan
        self._class_stack.append(plan)

    def plan_class(self, node: cst.ClassDef) -> ClassPlan:
        fields: list[Field] = []
        for base in node.bases:  # same-file Linen base classes contribute their fields first
            if isinstance(base.value, cst.Name) and base.value.value in self.linen_classes:
                fields.extend(self.linen_classes[base.value.value].fields)
        for stmt in node.body.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        if "ClassVar" in code(small.annotation.annotation):
                            continue
                        fields = [f for f in fields if f.name != small.target.value]
                        fields.append(self._field(small))
        plan = ClassPlan(name=node.name.value, fields=fields)
        if "rngs" in plan.field_names:
            self.report("L2N-MOD-004", node, f"{plan.name} has a field named `rngs`, which NNX constructors reserve "
                        "for the nnx.Rngs", "rename the field before migrating")
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        self._methods[plan.name] = methods
        counters: dict[str, int | None] = {}
        for fn in methods:
            if fn.name.value == "setup":
                plan.setup = fn
                self._plan_setup(plan, fn)
            elif any(self.qualnames(d.decorator) & LINEN_COMPACT for d in fn.decorators):
                self._plan_compact(plan, fn, counters)
        # 1. helper methods' results (so __call__ can follow values through self.method(x)); 2. __call__ sizes
        # its layers (its inputs may become constructor arguments); 3. other methods fill in what is left.
        others = [fn for fn in methods if fn.name.value not in ("setup", "__call__")]
        calls = [fn for fn in methods if fn.name.value == "__call__"]
        for fn in others:
            self._run_flow(plan, fn, resolve=False)
        for fn in [*calls, *others]:
            self._run_flow(plan, fn, resolve=True)
        self._resolve_unused(plan)
        self._collect_needed_locals(plan)
        return plan

    def _field(self, small: cst.AnnAssign, rewritten: cst.AnnAssign | None = None) -> Field:
        """A dataclass field; its default's text is taken from ``rewritten`` when given."""
        default = None
        if small.value is not None:
            value = small.value
            if isinstance(value, cst.Call) and self.qualnames(value.func) & {"dataclasses.field"}:
                source = rewritten.value if rewritten is not None and isinstance(rewritten.value, cst.Call) else value
                kw = {a.keyword.value: a.value for a in source.args if a.keyword is not None}
                if "default" in kw:
                    default = code(kw["default"])
                elif "default_factory" in kw:
                    default = f"{code(kw['default_factory'])}()"
            else:
                default = code(rewritten.value if rewritten is not None and rewritten.value is not None else value)
        return Field(small.target.value, code(small.annotation.annotation), default)

    def _bind_args(self, order: tuple[str, ...] | list[str], call: cst.Call) -> tuple[dict[str, cst.Arg], cst.Arg | None]:
        bound: dict[str, cst.Arg] = {}
        name_arg = None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for i, arg in enumerate(positional):
            if i < len(order):
                bound[order[i]] = arg
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value == "name":
                    name_arg = arg
                else:
                    bound[arg.keyword.value] = arg
        return bound, name_arg

    def _arg_order(self, site_rule: LayerRule | None, user: ClassPlan | None) -> tuple[str, ...]:
        if site_rule is not None:
            return site_rule.linen_arg_order()
        assert user is not None
        return tuple(user.field_names)

    def _plan_setup(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        self._plan_setup_block(plan, fn.body.body)

    def _plan_setup_block(self, plan: ClassPlan, body: Any) -> None:
        """setup() statements, including those under ``if`` (conditional submodules keep their condition)."""
        for stmt in body:
            if isinstance(stmt, cst.If):
                self._plan_setup_block(plan, stmt.body.body)
                orelse = stmt.orelse
                while orelse is not None:
                    self._plan_setup_block(plan, orelse.body.body)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
                continue
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                    continue
                attr = self_attr(small.targets[0].target)
                if attr is None:
                    continue
                value = small.value
                if isinstance(value, cst.Call) and (self.layer_rule_of(value.func) or self.user_class_of(value.func)):
                    self._add_site(plan, value, attr=attr, linen_name=attr, hoisted=False)
                elif isinstance(value, cst.Call) and self.self_call(value) in ("param", "variable"):
                    site = self._add_variable_site(plan, value, hoisted=False, local_names=set(), attr=attr)
                    if site is not None:
                        plan.setup_vars[attr] = site.kind
                elif isinstance(value, (cst.List, cst.Tuple)) and value.elements and all(
                    isinstance(e.value, cst.Call) and (self.layer_rule_of(e.value.func) or self.user_class_of(e.value.func))
                    for e in value.elements
                ):
                    sites = []
                    for i, e in enumerate(value.elements):
                        site = self._add_site(plan, e.value, attr=f"{attr}[{i}]", linen_name=f"{attr}_{i}",
                                              hoisted=False)
                        site.container = "list"
                        sites.append(site)
                    plan.containers[attr] = sites

    def _pure_locals(self, plan: ClassPlan, fn: cst.FunctionDef) -> dict[str, cst.SimpleStatementLine]:
        """Top-level ``name = expr`` bound once, whose value uses only config (``self.*``), globals
        and earlier such names: they can be replayed in ``__init__``."""
        counts = assigned_names(fn)
        params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}
        pure: dict[str, cst.SimpleStatementLine] = {}
        for stmt in fn.body.body:
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                    and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
                continue
            target = stmt.body[0].targets[0].target
            value = stmt.body[0].value
            if not isinstance(target, cst.Name) or counts.get(target.value) != 1 or target.value in params:
                continue
            used = names_in(value) - NOT_LOCAL
            call_time = {n for n in used if n in counts and n not in pure}
            refs = _shape_last_refs(value, call_time) if call_time else None
            if call_time and refs is None:
                continue
            if self._has_side_effects(value):
                continue
            pure[target.value] = stmt
            if refs:  # `d = x.shape[-1] if ... else ...`: replayed with x's size once the dataflow knows it
                plan.shape_locals[target.value] = refs
        return pure

    def _has_side_effects(self, value: cst.BaseExpression) -> bool:
        command = self
        found = False

        class V(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                nonlocal found
                if (command.self_call(node) or command.layer_rule_of(node.func) or command.user_class_of(node.func)
                        or isinstance(node.func, cst.Call)):
                    found = True

        value.visit(V())
        return found

    def _plan_compact(self, plan: ClassPlan, fn: cst.FunctionDef, counters: dict[str, int | None]) -> None:
        counts = assigned_names(fn)
        plan.pure_locals = self._pure_locals(plan, fn)
        local_names = set(counts) - set(plan.pure_locals)
        command = self

        class Collect(cst.CSTVisitor):
            def __init__(self) -> None:
                self.blocked = 0  # inside a construct we cannot hoist out of
                self.loops: list[LoopInfo] = []

            def _block(self, node: cst.CSTNode) -> bool:
                self.blocked += 1
                return True

            def _unblock(self, node: cst.CSTNode) -> None:
                self.blocked -= 1

            visit_While = visit_ListComp = visit_GeneratorExp = visit_Lambda = visit_DictComp = _block
            leave_While = leave_ListComp = leave_GeneratorExp = leave_Lambda = leave_DictComp = _unblock

            def visit_For(self, node: cst.For) -> bool:
                loop = _range_loop(node, local_names)
                if loop is None or self.loops or self.blocked:
                    self.blocked += 1
                    self.loops.append(LoopInfo("", ""))
                else:
                    self.loops.append(loop)
                return True

            def leave_For(self, node: cst.For) -> None:
                if not self.loops.pop().var:
                    self.blocked -= 1

            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is fn

            def visit_Call(self, node: cst.Call) -> None:
                rule = command.layer_rule_of(node.func)
                user = None if rule is not None else command.user_class_of(node.func)
                variable = command.self_call(node) in ("param", "variable")
                if rule is None and user is None and not variable:
                    return
                what = f"nn.{rule.linen}" if rule else (user.name if user else f"self.{command.self_call(node)}")
                if self.blocked:
                    command.report("L2N-MOD-004", node, f"{what} created inside a while loop, comprehension, lambda "
                                   "or nested loop in @nn.compact is not hoisted yet",
                                   "create it in __init__ (an nnx.List for several) and index it at the call")
                    return
                loop = self.loops[-1] if self.loops else None
                conditions = command._conditions_of(node, fn, local_names)
                if conditions is None:
                    command._handled.add(node)  # this finding says it all
                    command.report("L2N-MOD-004", node, f"{what} is created under a condition on a call-time value",
                                   "create it in __init__ and decide at call time whether to use it")
                    return
                before = len(plan.hoisted_order)
                if variable:
                    if loop is not None:
                        command.report("L2N-MOD-004", node, f"{what} inside a loop is not hoisted yet",
                                       "create the variables in __init__")
                        return
                    command._add_variable_site(plan, node, hoisted=True, local_names=local_names)
                else:
                    nesting = command._nesting(plan, node) if rule is not None else None
                    if nesting is not None:
                        command._plan_nested(plan, node, rule, nesting, counters)
                        return
                    command._plan_compact_child(plan, node, rule, user, loop, counters, local_names)
                for site in plan.hoisted_order[before:]:
                    site.conditions = conditions

        fn.visit(Collect())
        for stmt in fn.body.body:  # `dense = nn.Dense(4)` then `dense(x)`, `embed.attend(y)`
            if (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                    and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
                target, value = stmt.body[0].targets[0].target, stmt.body[0].value
                if isinstance(target, cst.Name) and counts.get(target.value) == 1 and value in plan.sites:
                    plan.local_sites[target.value] = plan.sites[value]

    def _conditions_of(self, node: cst.CSTNode, fn: cst.FunctionDef, local_names: set[str]) -> list[str] | None:
        """Config tests of the ``if``s around ``node`` (``not (t)`` on else branches); None when a test
        uses a call-time value, so the construction cannot be decided in __init__."""
        conditions: list[str] = []
        prev, cur = node, self.get_metadata(ParentNodeProvider, node, None)
        while cur is not None and cur is not fn:
            if isinstance(cur, cst.If):
                if (names_in(cur.test) - NOT_LOCAL) & local_names:
                    return None
                test = code(cur.test)
                if prev is cur.body:
                    conditions.insert(0, test)
                elif prev is cur.orelse:
                    conditions.insert(0, f"not ({test})")
            prev, cur = cur, self.get_metadata(ParentNodeProvider, cur, None)
        return conditions

    def _nesting(self, plan: ClassPlan, node: cst.Call) -> tuple[Site, str, int] | None:
        """(outer layer site, its argument, list index) when ``node`` is built as a layer argument."""
        parent = self.get_metadata(ParentNodeProvider, node, None)
        index = -1
        if isinstance(parent, cst.Element):
            container = self.get_metadata(ParentNodeProvider, parent, None)
            if not isinstance(container, (cst.List, cst.Tuple)):
                return None
            index = [e.value for e in container.elements].index(node)
            parent = self.get_metadata(ParentNodeProvider, container, None)
        if not isinstance(parent, cst.Arg):
            return None
        call = self.get_metadata(ParentNodeProvider, parent, None)
        outer = plan.sites.get(call) if isinstance(call, cst.Call) else None
        if outer is None or outer.rule is None:
            return None
        arg_name = next((name for name, arg in outer.args.items() if arg is parent), None)
        if arg_name is None:
            return None
        if index < 0 and arg_name in outer.rule.nested:
            return outer, arg_name, -1
        if index >= 0 and arg_name == outer.rule.varargs_list:
            return outer, arg_name, index
        return None

    def _plan_nested(self, plan: ClassPlan, node: cst.Call, rule: LayerRule, nesting: tuple[Site, str, int],
                     counters: dict[str, int | None]) -> None:
        """A layer built as another layer's argument: built in place, named in the parent's scope by Linen."""
        outer, arg_name, index = nesting
        subpath = f"{rule and outer.rule.varargs_list}/{index}" if index >= 0 else outer.rule.nested[arg_name]  # type: ignore[union-attr]
        _, name_arg = self._bind_args(rule.linen_arg_order(), node)
        if name_arg is not None and isinstance(name_arg.value, cst.SimpleString):
            linen_name = name_arg.value.evaluated_value  # explicit names consume no counter
        else:
            n = counters.get(rule.linen, 0) or 0
            counters[rule.linen] = n + 1
            linen_name = f"{rule.linen}_{n}"
        site = self._add_site(plan, node, attr=f"{outer.attr}/{subpath}", linen_name=linen_name, hoisted=False)
        site.parent, site.nested_arg, site.element = outer, arg_name, index
        outer.nested.append(site)
        root = self._root_site(site)
        local_names = set(assigned_names(self._enclosing_function(node))) - set(plan.pure_locals)
        moved = []
        for name, arg in site.args.items():
            uses = (names_in(arg.value) - NOT_LOCAL) & local_names
            if not uses or name in rule.nested or name == rule.varargs_list:
                continue
            value = code(arg.value)
            if name in rule.call_args and root.hoisted and root.view_kwargs.get(name, value) == value:
                root.view_kwargs[name] = value  # the call becomes nnx.view(layer, deterministic=...)(x)
                moved.append(name)
            else:
                self.report("L2N-MOD-004", arg, f"argument {name}= of nn.{rule.linen} (inside nn.{outer.rule.linen}) "  # type: ignore[union-attr]
                            f"uses the call-time value {', '.join(sorted(uses))}", "build this layer by hand")
        site.moved_args = tuple(moved)
        if moved:
            self.report("L2N-LAYER-003", node, f"{', '.join(moved)} of nn.{rule.linen} applied at the call of "
                        f"self.{root.attr} through nnx.view")

    def _plan_compact_child(self, plan: ClassPlan, node: cst.Call, rule: LayerRule | None, user: ClassPlan | None,
                            loop: LoopInfo | None, counters: dict[str, int | None], local_names: set[str]) -> None:
        what = f"nn.{rule.linen}" if rule else user.name  # type: ignore[union-attr]
        class_name = rule.linen if rule else user.name  # type: ignore[union-attr]
        bound, name_arg = self._bind_args(self._arg_order(rule, user), node)
        container = None
        if name_arg is not None:
            name_value = name_arg.value
            if isinstance(name_value, cst.SimpleString) and loop is None:
                linen_name = name_value.evaluated_value
                attr = linen_name if linen_name.isidentifier() else snake_case(linen_name)
            elif loop is not None and (prefix := _loop_name_prefix(name_value, loop.var)) is not None:
                linen_name, attr, container = prefix, snake_case(prefix), "list"
            else:
                self.report("L2N-MOD-004", name_arg, f"{what}(name=...) is not a literal the codemod can follow",
                            "use a string literal, or f'prefix_{i}' inside `for i in range(n)`")
                return
        else:
            n = counters.get(class_name, 0)
            if n is None:
                self.report("L2N-MOD-004", node, f"auto-named {what} after a loop that built {class_name}s: its "
                            "Linen name depends on the loop length", "give it an explicit name=")
                return
            if loop is not None:
                if n:
                    self.report("L2N-MOD-004", node, f"auto-named {what} built in a loop after other {class_name}s",
                                "give the loop's modules name=f'prefix_{i}'")
                    return
                counters[class_name] = None
                linen_name, attr, container = class_name, snake_case(class_name), "list"
            else:
                counters[class_name] = n + 1
                linen_name = f"{class_name}_{n}"
                attr = snake_case(linen_name)
        if any(s.attr == attr and s.hoisted for s in plan.sites.values()) or attr in plan.field_names:
            attr = f"{attr}_"
        site = self._add_site(plan, node, attr=attr, linen_name=linen_name, hoisted=True)
        site.container, site.loop = container, loop
        loop_names = {loop.var} if loop else set()
        moved = []
        for arg_name, arg in bound.items():
            if rule is not None and (arg_name in rule.nested or arg_name == rule.varargs_list):
                continue  # layers built in this argument are checked on their own
            uses = (names_in(arg.value) - NOT_LOCAL) & (local_names - loop_names)
            if uses:
                shape_locals = _shape_last_refs(arg.value, uses)
                if rule is not None and arg_name in rule.call_args:
                    moved.append(arg_name)
                elif shape_locals is not None:
                    site.shape_refs[arg_name] = shape_locals  # `x.shape[-1]`: the dataflow knows x's size
                else:
                    self.report("L2N-MOD-004", arg, f"argument {arg_name}= of {what} uses the call-time value "
                                f"{', '.join(sorted(uses))} and cannot move to __init__",
                                "compute it from constructor arguments / config")
        site.moved_args = tuple(moved)
        if moved:
            self.report("L2N-LAYER-003", node, f"{', '.join(moved)} of {what} moved to the call of self.{attr}")
        plan.hoisted_order.append(site)

    def _add_site(self, plan: ClassPlan, call: cst.Call, *, attr: str, linen_name: str, hoisted: bool) -> Site:
        rule = self.layer_rule_of(call.func)
        user = None if rule else self.user_class_of(call.func)
        bound, _ = self._bind_args(self._arg_order(rule, user), call)
        site = Site(kind="layer" if rule else "module", attr=attr, linen_name=linen_name, ctor=call,
                    hoisted=hoisted, rule=rule, user=user, args=bound)
        plan.sites[call] = site
        self._handled.add(call.func)
        if rule is not None and rule.manual_reason:
            self.report("L2N-LAYER-002", call, f"nn.{rule.linen}: {rule.manual_reason}",
                        "see docs/rules.md and the reference's layer table")
        if rule is not None and rule.linen == "Einsum" and einsum_bias_shape(bound) is None:
            self.report("L2N-LAYER-002", call, "nn.Einsum bias shape cannot be derived statically (needs literal "
                        "shape and einsum_str without '...')", "give nnx.Einsum its bias_shape by hand")
        if rule is not None:
            for arg_name, arg in bound.items():
                nnx_name = rule.nnx_arg(arg_name)
                if arg_name == rule.varargs_list:
                    continue
                if arg_name in rule.unsupported_args or nnx_name not in nnx_ctor_params(rule.nnx):
                    self.report("L2N-LAYER-002", arg, f"nn.{rule.linen}({arg_name}=...) has no nnx.{rule.nnx} "
                                "equivalent", f"see the nnx.{rule.nnx} signature; drop or re-express it")
                elif arg_name in rule.only_values and code(arg.value) not in rule.only_values[arg_name]:
                    self.report("L2N-LAYER-002", arg, f"nn.{rule.linen}({arg_name}={code(arg.value)}) is not "
                                f"converted yet (only {arg_name}={' / '.join(rule.only_values[arg_name])})",
                                f"rewrite this nnx.{rule.nnx} by hand")
        return site

    def _add_variable_site(self, plan: ClassPlan, call: cst.Call, *, hoisted: bool, local_names: set[str],
                           attr: str | None = None) -> Site | None:
        """``self.param(name, init, *args)`` / ``self.variable(col, name, init, *args)``."""
        kind = self.self_call(call)
        self._handled.add(call)  # reported here either way: no generic "Linen API" finding on top
        args = [a for a in call.args if a.keyword is None]
        need = 2 if kind == "param" else 3
        literal = [a.value for a in args[: need - 1]]
        if (len(args) < need or any(a.star for a in call.args)
                or not all(isinstance(v, cst.SimpleString) for v in literal)):
            self.report("L2N-API-002", call, f"self.{kind}(...) with non-literal names or keyword-only arguments",
                        "create the nnx.Variable in __init__ by hand")
            return None
        collection = "params" if kind == "param" else literal[0].evaluated_value  # type: ignore[union-attr]
        name = literal[-1].evaluated_value  # type: ignore[union-attr]
        var_type = COLLECTION_TYPES.get(collection)
        if var_type is None:
            self.report("L2N-API-002", call, f"self.variable in the custom collection {collection!r}",
                        "define `class <Name>(nnx.Variable)` registered with nnx.register_variable_name")
            return None
        if any(a.keyword is not None for a in call.args):
            self.report("L2N-API-002", call, f"self.{kind}(...) keyword arguments are not converted yet",
                        "create the nnx.Variable in __init__ by hand")
            return None
        shape_refs: dict[str, list[str]] = {}
        for i, a in enumerate(args):
            uses = (names_in(a.value) - NOT_LOCAL) & local_names
            refs = _shape_last_refs(a.value, uses) if uses else None
            if uses and refs is None:
                self.report("L2N-MOD-004", call, f"self.{kind}({name!r}, ...) uses the call-time value "
                            f"{', '.join(sorted(uses))} and cannot move to __init__",
                            "derive its shape from constructor arguments, or use --trace")
                return None
            if refs:
                shape_refs[str(i)] = refs  # (x.shape[-1], features): the dataflow knows x's size
        if collection == "cache" and hoisted:
            self.report("L2N-API-002", call, "a Linen decode cache created at call time", "use NNX's init_cache pattern")
            return None
        attr = attr or (name if name.isidentifier() else snake_case(name))
        if attr in plan.field_names:
            attr = f"{attr}_"
        site = Site(kind="param" if kind == "param" else "variable", attr=attr, linen_name=name, ctor=call,
                    hoisted=hoisted, collection=collection, var_type=var_type, shape_refs=shape_refs)
        site.args = {str(i): a for i, a in enumerate(args)}
        plan.sites[call] = site
        if hoisted:
            plan.hoisted_order.append(site)
        return site

    def _collect_needed_locals(self, plan: ClassPlan) -> None:
        """Pure locals the hoisted constructors refer to (transitively), in source order."""
        needed: set[str] = set()
        todo = [n for s in plan.hoisted_order for n in names_in(s.ctor) if n in plan.pure_locals]
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            todo.extend(n for n in names_in(plan.pure_locals[name]) if n in plan.pure_locals)
        plan.needed_locals = [n for n in plan.pure_locals if n in needed]

    # ---- feature-size dataflow ---------------------------------------------------------------
    def _run_flow(self, plan: ClassPlan, fn: cst.FunctionDef, resolve: bool) -> None:
        params = [p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)]
        if params and params[0] == "self":
            params = params[1:]
        if not params:
            return
        self._flow_method = fn.name.value
        setup_attrs = {s.attr: s for s in plan.sites.values() if not s.hoisted and s.container is None
                       and s.kind in ("layer", "module")}

        def layer_of(call: cst.Call) -> LayerInfo | None:
            func = call.func
            variable = plan.sites.get(call)
            if variable is not None and variable.kind in ("param", "variable"):
                for arg_name, refs in variable.shape_refs.items():
                    if resolve and arg_name not in variable.arg_sources:
                        self._resolve_shape_arg(plan, variable, arg_name, refs, flow, params)
                return None
            site = None
            if isinstance(func, cst.Call) and func in plan.sites:
                site = plan.sites[func]
            elif self_attr(func) in setup_attrs:
                site = setup_attrs[self_attr(func)]
            elif isinstance(func, cst.Name) and func.value in plan.local_sites:
                site = plan.local_sites[func.value]
            if site is None or site.kind not in ("layer", "module"):
                return None
            for arg_name, refs in site.shape_refs.items():
                if resolve and arg_name not in site.arg_sources:
                    self._resolve_shape_arg(plan, site, arg_name, refs, flow, params)
            return self._layer_info(site)

        methods = {m.name.value: m for m in self._methods.get(plan.name, [])}
        depth = [0]

        def method_of(call: cst.Call, args: list[Feat]) -> Feat | None:
            name = self_attr(call.func)
            callee = methods.get(name or "")
            if callee is not None and depth[0] < 3 and name not in ("__call__", "setup"):
                # inline the helper with the caller's values, so layers it applies are sized in context
                callee_params = [p.name.value for p in callee.params.params][1:]
                sub = FeatureFlow(callee_params, layer_of, self.qualnames, method_of)
                sub.env.update(zip(callee_params, args))
                sub.iteration = flow.iteration
                depth[0] += 1
                sub.run(callee.body.body)
                depth[0] -= 1
                flow.uses.extend(sub.uses)
                returns = sub.returns
                return returns[0] if returns and all(r == returns[0] for r in returns) else Feat.unknown(name or "")
            known = plan.method_out.get(name or "")
            if known is None and isinstance(call.func, cst.Name):
                known = self.function_out.get(call.func.value)
            return None if known is None else transfer(known[1], known[0], args)

        def on_assign(assign: cst.Assign) -> None:
            target = assign.targets[0].target if len(assign.targets) == 1 else None
            name = target.value if isinstance(target, cst.Name) else None
            if (resolve and name in plan.shape_locals and name not in plan.shape_local_sizes
                    and plan.pure_locals.get(name) is not None and assign in plan.pure_locals[name].body):
                sizes = {}
                for var in plan.shape_locals[name]:
                    size = self._static_size(plan, flow.env.get(var, Feat.unknown(var)), params, assign)
                    if size is None:
                        return
                    sizes[var] = size
                plan.shape_local_sizes[name] = sizes

        flow = FeatureFlow(params, layer_of, self.qualnames, method_of, on_assign)
        flow.run(fn.body.body)
        out = flow.returns[0] if flow.returns and all(r == flow.returns[0] for r in flow.returns) else None
        if out is not None:
            plan.method_out[fn.name.value] = (params, out)
        if fn.name.value == "__call__":
            plan.first_input = params[0]
            plan.out = out
        if not resolve:
            return
        by_site: dict[str, dict[int, Feat]] = {}
        nodes: dict[str, cst.CSTNode] = {}
        for use in flow.uses:
            by_site.setdefault(use.key, {}).setdefault(use.iteration, use.feat)
            nodes.setdefault(use.key, use.node)
        sites_by_attr = {s.attr: s for s in plan.sites.values()}
        for key, feats in by_site.items():
            site = sites_by_attr[key]
            if site.in_expr is not None or site.user_in:
                continue
            self._resolve_site_inputs(plan, site, feats, params, nodes[key])

    def _resolve_shape_arg(self, plan: ClassPlan, site: Site, arg_name: str, refs: list[str], flow: FeatureFlow,
                           params: list[str]) -> None:
        """``nn.Dense(x.shape[-1])``: replace each ``v.shape[-1]`` with v's size as the dataflow knows it."""
        replacements = {}
        for name in refs:
            feat = flow.env.get(name, Feat.unknown(name))
            if feat.kind not in ("expr", "input"):
                self.report("L2N-MOD-004", site.args[arg_name], f"argument {arg_name}= uses {name}.shape[-1], whose "
                            "size the dataflow cannot tell", "compute it from constructor arguments / config")
                site.arg_sources[arg_name] = code(site.args[arg_name].value)
                return
            replacements[name] = self._resolve_in(plan, site, feat, params, site.ctor)
        site.arg_sources[arg_name] = _replace_shape_last(site.args[arg_name].value, replacements)

    def _layer_info(self, site: Site) -> LayerInfo:
        if site.kind == "layer" and site.rule is not None and site.rule.out_from is not None:
            return self._nested_out(site)
        if site.kind == "layer":
            assert site.rule is not None
            out = site.args.get(site.rule.out_arg) if site.rule.out_arg else None
            if out is None:
                return LayerInfo(site.attr, None)
            if site.rule.out_arg in site.shape_refs:
                resolved = site.arg_sources.get(site.rule.out_arg)
                return LayerInfo(site.attr, resolved, out_unknown=resolved is None)
            value = out.value
            if isinstance(value, (cst.Tuple, cst.List)):  # features=(heads, head_dim): last axis is head_dim
                if not value.elements:
                    return LayerInfo(site.attr, None, out_unknown=True)
                value = value.elements[-1].value
            return LayerInfo(site.attr, code(value))
        user = site.user
        assert user is not None
        if user.out is None:
            return LayerInfo(site.attr, None, out_unknown=True)
        fields = {name: code(arg.value) for name, arg in site.args.items()}
        for f in user.fields:
            if f.name not in fields and f.default is not None:
                fields[f.name] = f.default

        def seen_by_caller(feat: Feat, first: Feat) -> Feat:
            """The submodule's result in the caller's terms: its input is the caller's value, its config
            expressions use the caller's constructor arguments."""
            if feat.kind == "input":
                return first if feat.input_name == user.first_input else Feat.unknown("submodule argument")
            if feat.kind == "expr":
                expr = substitute_self_fields(feat.expr, fields)
                return Feat("expr", expr=expr) if expr is not None else Feat.unknown("submodule config")
            if feat.kind == "tuple":
                return Feat("tuple", elements=tuple(seen_by_caller(e, first) for e in feat.elements))
            return Feat.unknown(f"output of {site.attr}")

        out = user.out
        return LayerInfo(site.attr, None, out_fn=lambda first: seen_by_caller(out, first))

    def _nested_out(self, site: Site) -> LayerInfo:
        rule = site.rule
        assert rule is not None
        if rule.out_from == "last":
            elements = sorted((n for n in site.nested if n.element >= 0), key=lambda n: n.element)
            if not elements:
                return LayerInfo(site.attr, None, out_unknown=True)
            info = self._layer_info(elements[-1])
            return LayerInfo(site.attr, info.out_expr, out_unknown=info.out_unknown or info.out_expr is None)
        inner = next((n for n in site.nested if n.nested_arg == rule.out_from), None)
        if inner is None:
            return LayerInfo(site.attr, None, out_unknown=True)
        info = self._layer_info(inner)
        return LayerInfo(site.attr, info.out_expr, out_unknown=info.out_unknown or info.out_expr is None)

    def _propagate_nested(self, site: Site, in_expr: str) -> None:
        """Give the layers built inside ``site`` their input sizes: RNN cells see the RNN's input;
        Sequential elements see the previous element's output."""
        current = in_expr
        for inner in sorted(site.nested, key=lambda n: n.element):
            if inner.rule is not None and inner.rule.in_arg is not None and inner.in_expr is None:
                inner.in_expr = current
            self._propagate_nested(inner, current)
            if inner.element >= 0:
                info = self._layer_info(inner)
                if info.out_unknown:
                    break
                current = info.out_expr or current

    def _needs_input(self, site: Site) -> bool:
        return (site.rule is not None and site.rule.in_arg is not None) or any(self._needs_input(n) for n in site.nested)

    def _resolve_site_inputs(self, plan: ClassPlan, site: Site, feats: dict[int, Feat], params: list[str],
                             node: cst.CSTNode) -> None:
        if site.kind == "layer":
            assert site.rule is not None
            if self._needs_input(site):
                expr = self._loop_expr(plan, site, feats, params, node)
                if site.rule.in_arg is not None:
                    site.in_expr = expr
                self._propagate_nested(site, expr)
        elif site.kind == "module":
            assert site.user is not None
            for arg, how in site.user.new_args.items():
                if how == "input:0":  # the size of the first input, which is what the flow follows
                    site.user_in[arg] = self._loop_expr(plan, site, feats, params, node)
                else:
                    site.user_in[arg] = self._required_arg(plan, site, f"{arg} of {site.user.name}", node)

    def _loop_expr(self, plan: ClassPlan, site: Site, feats: dict[int, Feat], params: list[str],
                   node: cst.CSTNode) -> str:
        first = self._resolve_in(plan, site, feats[0], params, node)
        later = feats.get(1)
        if site.loop is None or later is None or later == feats[0]:
            return first
        rest = self._resolve_in(plan, site, later, params, node)
        return first if rest == first else f"{first} if {site.loop.var} == 0 else {rest}"

    def _static_size(self, plan: ClassPlan, feat: Feat, params: list[str], node: cst.CSTNode) -> str | None:
        """A size known without a trace: a config expression, or a ``__call__`` input's last axis (which
        becomes a constructor argument). None otherwise."""
        if feat.kind == "expr":
            return feat.expr
        if feat.kind != "input" or self._flow_method != "__call__":
            return None  # only __call__'s inputs are the module's inputs; a helper's argument may be anything
        arg = "in_features" if feat.input_name == params[0] else f"{feat.input_name}_features"
        while arg in plan.field_names:  # a config field may already be called in_features
            arg += "_"
        if arg not in plan.new_args:
            plan.new_args[arg] = f"input:{params.index(feat.input_name)}"
            self.report("L2N-SHAPE-002", node, f"{plan.name} gains constructor argument {arg}: the last-axis "
                        f"size of `{feat.input_name}`", f"pass {arg}=x.shape[-1] where {plan.name} is built")
        return arg

    def _resolve_in(self, plan: ClassPlan, site: Site, feat: Feat, params: list[str], node: cst.CSTNode) -> str:
        static = self._static_size(plan, feat, params, node)
        if static is not None:
            return static
        if feat.kind == "input":
            feat = Feat.unknown(f"argument `{feat.input_name}` of {plan.name}.{self._flow_method}")
        traced = self._from_trace(plan, site, feat, node)
        if traced is not None:
            return traced
        why = {"flatten": "a flatten", "sliced": "an indexed value"}.get(feat.kind, feat.reason or "an unknown value")
        return self._required_arg(plan, site, f"input feature size of {plan.name}.{site.attr} (from {why})", node)

    def _required_arg(self, plan: ClassPlan, site: Site, what: str, node: cst.CSTNode) -> str:
        arg = f"{site.attr}_in_features".replace("[", "_").replace("]", "").replace("/", "_")
        while arg in plan.field_names:
            arg += "_"
        plan.new_args[arg] = "unresolved"
        self.report("L2N-SHAPE-003", node, f"{what} is unknown statically; required constructor argument {arg} added",
                    "run `linen2nnx migrate --trace SPEC` or pass the size explicitly")
        return arg

    def _from_trace(self, plan: ClassPlan, site: Site, feat: Feat, node: cst.CSTNode) -> str | None:
        if self.trace is None or site.loop is not None:
            return None
        shapes = self.trace.shapes_for(plan.name, site.linen_name)
        sizes = sorted({s[-1] for s in shapes if s})
        if not sizes:
            return None
        configs = self.trace.instances.get(plan.name, [])
        if feat.kind in ("flatten", "sliced") and feat.base is not None and feat.base.kind == "expr" and configs:
            base = feat.base.expr
            factors = set()
            for shape, cfg in zip(shapes, configs):
                try:
                    base_value = eval(base, {}, {"self": SimpleNamespace(**cfg)})  # config expression
                except Exception:
                    factors = set()
                    break
                if not isinstance(base_value, int) or base_value <= 0 or shape[-1] % base_value:
                    factors = set()
                    break
                factors.add(shape[-1] // base_value)
            if factors == {1}:
                self.report("L2N-SHAPE-001", node, f"input feature size of {plan.name}.{site.attr} = {base} "
                            f"(traced: {sizes[0]})")
                return base
            if len(factors) == 1 and feat.kind == "flatten":
                factor = factors.pop()
                self.report("L2N-SHAPE-001", node, f"input feature size of {plan.name}.{site.attr} = {factor} * "
                            f"{base} (traced: {sizes[0]})",
                            "the factor holds for the traced input resolution only")
                return f"{factor} * {base}"
        if len(sizes) == 1 and self.unsafe_fixes:
            self.report("L2N-SHAPE-004", node, f"input feature size of {plan.name}.{site.attr} is the traced literal "
                        f"{sizes[0]}", "replace it with an expression of the config if it can vary")
            return str(sizes[0])
        return None

    def _resolve_unused(self, plan: ClassPlan) -> None:
        for site in plan.sites.values():
            if site.parent is not None:
                continue
            if site.kind == "layer" and self._needs_input(site) and site.in_expr is None and not self._resolved(site):
                expr = self._resolve_in(plan, site, Feat.unknown("a layer the dataflow never saw applied"),
                                        ["x"], site.ctor)
                if site.rule.in_arg is not None:  # type: ignore[union-attr]
                    site.in_expr = expr
                self._propagate_nested(site, expr)
            elif site.kind == "module" and site.user and site.user.new_args and not site.user_in:
                for arg in site.user.new_args:
                    site.user_in[arg] = self._required_arg(plan, site, f"{arg} of {site.user.name}", site.ctor)

    def _resolved(self, site: Site) -> bool:
        return all(self._resolved(n) for n in site.nested) and (
            site.rule is None or site.rule.in_arg is None or site.in_expr is not None)

    # ---- rewriting ---------------------------------------------------------------------------
    def _current(self) -> ClassPlan | None:
        return self._class_stack[-1] if self._class_stack else None

    def _nnx_ctor(self, site: Site, updated: cst.Call) -> cst.Call:
        rule = site.rule
        assert rule is not None
        upd_bound, _ = self._bind_args(rule.linen_arg_order(), updated)
        for name, source in site.arg_sources.items():
            upd_bound[name] = upd_bound[name].with_changes(value=cst.parse_expression(source))
        args: list[cst.Arg] = [upd_bound[name].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
                               for name in rule.positional if name in upd_bound]
        if rule.varargs_list and rule.varargs_list in upd_bound:
            value = upd_bound[rule.varargs_list].value
            if isinstance(value, (cst.List, cst.Tuple)):
                args += [cst.Arg(e.value) for e in value.elements]
            else:
                args.append(cst.Arg(value, star="*"))
        if rule.in_arg is not None:
            args.insert(rule.in_index, cst.Arg(cst.parse_expression(site.in_expr or "None")))
        for name, arg in upd_bound.items():
            if name not in rule.positional and name not in site.moved_args and name != rule.varargs_list:
                args.append(kwarg(rule.nnx_arg(name), arg.value))
        if rule.linen == "Einsum":
            bias = einsum_bias_shape(upd_bound)
            use_bias = upd_bound.get("use_bias")
            args = [a for a in args if not (a.keyword is not None and a.keyword.value == "use_bias")]
            if bias is not None and (use_bias is None or code(use_bias.value) != "False"):
                args.insert(2, cst.Arg(cst.parse_expression(bias)))
        given = {rule.nnx_arg(name) for name in upd_bound}
        args += [kwarg(k, cst.parse_expression(v)) for k, v in rule.extra_kwargs.items() if k not in given]
        if "rngs" in nnx_ctor_params(rule.nnx):
            args.append(kwarg("rngs", cst.Name("rngs")))
        self.uses_nnx = True
        return cst.Call(func=cst.parse_expression(f"nnx.{rule.nnx}"), args=strip_commas(args))

    def _user_ctor(self, site: Site, updated: cst.Call) -> cst.Call:
        args = [a for a in updated.args if not (a.keyword is not None and a.keyword.value == "name")]
        args += [kwarg(name, cst.parse_expression(expr)) for name, expr in site.user_in.items()]
        args.append(kwarg("rngs", cst.Name("rngs")))
        return updated.with_changes(args=strip_commas(args))

    def _variable_ctor(self, site: Site, updated: cst.Call) -> cst.Call:
        args = [a for a in updated.args if a.keyword is None]
        args = [a.with_changes(value=cst.parse_expression(site.arg_sources[str(i)])) if str(i) in site.arg_sources
                else a for i, a in enumerate(args)]
        if site.kind == "param":
            init, rest = args[1], args[2:]
            value = cst.Call(init.value, strip_commas([cst.Arg(cst.parse_expression("rngs.params()")), *rest]))
        else:
            init, rest = args[2], args[3:]
            value = cst.Call(init.value, strip_commas(list(rest)))
        self.uses_nnx = True
        return cst.Call(cst.parse_expression(f"nnx.{site.var_type}"), [cst.Arg(value)])

    def _build(self, site: Site, updated: cst.Call) -> cst.BaseExpression:
        if site.kind == "layer":
            built = self._nnx_ctor(site, updated)
        elif site.kind == "module":
            built = self._user_ctor(site, updated)
        else:
            built = self._variable_ctor(site, updated)
        if site.loop is not None:
            comp = cst.parse_expression(f"[None for {site.loop.var} in {site.loop.range_src}]")
            assert isinstance(comp, cst.ListComp)
            built = cst.Call(cst.parse_expression("nnx.List"), [cst.Arg(comp.with_changes(elt=built))])
        return built

    def _call_site(self, site: Site) -> cst.BaseExpression:
        ref = f"self.{site.attr}[{site.loop.var}]" if site.loop is not None else f"self.{site.attr}"
        if site.kind == "param":
            ref += "[...]"
        return cst.parse_expression(ref)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        merged = self._merge_param(original, updated)
        if merged is not None:
            return merged
        plan = self._current()
        if plan is None:
            return updated
        result = self._leave_call(plan, original, updated)
        api = self._pending_api.pop(original, None)
        if api is not None and original not in self._handled and original not in plan.sites:
            self.report("L2N-API-002", api, f"self.{api.attr.value} is Linen Module API with no automatic "
                        "conversion yet", "see reference: variables and collections")
        return result

    def _leave_call(self, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        site = plan.sites.get(original)
        if site is not None:
            self._handled.add(original.func)
            if site.kind == "layer":
                self.report("L2N-LAYER-001", original, f"nn.{site.rule.linen} -> nnx.{site.rule.nnx} ({site.attr})")  # type: ignore[union-attr]
            elif site.kind in ("param", "variable"):
                self.report("L2N-VAR-001", original, f"self.{site.kind}({site.linen_name!r}) -> "
                            f"nnx.{site.var_type} self.{site.attr} created in __init__")
            built = self._build(site, updated)
            if not site.hoisted:
                return built
            self._built[original] = built
            if site.rule is not None:
                upd_bound, _ = self._bind_args(site.rule.linen_arg_order(), updated)
                self._moved[original] = [upd_bound[a] for a in site.moved_args if a in upd_bound]
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
        if applied is None or applied.rule is None:
            return updated
        return self._rewrite_layer_call(applied, original, updated)

    def _merge_param(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``nn.merge_param('x', self.x, x)`` -> ``x if x is not None else self.x`` (NNX layers' own idiom:
        the call-time value wins; Linen's error for giving both, or neither, is not kept)."""
        if not any(q.removeprefix("flax.linen.") in MERGE_PARAM for q in self.qualnames(original.func)):
            return None
        args = updated.args
        if len(args) != 3 or any(a.keyword is not None or a.star for a in args):
            self.report("L2N-API-002", original, "merge_param with unusual arguments", "rewrite by hand")
            return None
        self.report("L2N-API-004", original, "merge_param -> `call_value if call_value is not None else attribute`")
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
            self._handled.add(original)
            if var_type is None:
                self.report("L2N-API-002", original, f"self.sow into the custom collection {collection!r}",
                            "define a registered nnx.Variable subclass and sow into it")
                return updated
            self.report("L2N-VAR-002", original, f"self.sow({collection!r}, ...) -> self.sow(nnx.{var_type}, ...)")
            self.uses_nnx = True
            first = updated.args[0].with_changes(value=cst.parse_expression(f"nnx.{var_type}"))
            return updated.with_changes(args=[first, *updated.args[1:]])
        if api == "make_rng" and len(original.args) == 1 and isinstance(original.args[0].value, cst.SimpleString):
            stream = original.args[0].value.evaluated_value
            self._handled.add(original)
            plan.uses_rngs = True
            self.report("L2N-VAR-003", original, f"self.make_rng({stream!r}) -> a draw from the module's nnx.Rngs")
            ref = f"self.rngs.{stream}()" if stream.isidentifier() else f"self.rngs[{stream!r}]()"
            return cst.parse_expression(ref)
        if api == "is_initializing" and not original.args:
            self._handled.add(original)
            if not self.unsafe_fixes:
                self.report("L2N-API-002", original, "self.is_initializing() has no NNX meaning (__init__ is the "
                            "initialisation)", "move the init-only branch into __init__, or pass --unsafe-fixes")
                return updated
            self.report("L2N-API-003", original, "self.is_initializing() -> False (NNX calls never initialise)",
                        "init-only work now happens in __init__")
            return cst.Name("False")
        return None

    def _rewrite_layer_call(self, site: Site, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Apply the call-time differences of a layer: moved mode args, renamed / unsupported keywords."""
        rule = site.rule
        assert rule is not None
        args = list(updated.args)
        for o in original.args:
            if o.keyword is not None and o.keyword.value in rule.unsupported_call_args:
                self.report("L2N-LAYER-002", o, f"{o.keyword.value}= of nn.{rule.linen}.__call__ has no "
                            f"nnx.{rule.nnx} equivalent", "NNX layers draw randomness from their own rngs")
        args = [a.with_changes(keyword=cst.Name(rule.call_renames[a.keyword.value]))
                if a.keyword is not None and a.keyword.value in rule.call_renames else a for a in args]
        if rule.call_keywords:
            positional = [a for a in args if a.keyword is None and not a.star]
            args = positional[:1] + [kwarg(rule.call_keywords[i], a.value) for i, a in enumerate(positional) if i
                                     ] + [a for a in args if a.keyword is not None or a.star]
        moved = self._moved.get(site.ctor, [])
        args += [kwarg(a.keyword.value, a.value) if a.keyword else a for a in moved]
        func = updated.func
        if site.view_kwargs:
            self.uses_nnx = True
            view = [cst.Arg(func), *(kwarg(k, cst.parse_expression(v)) for k, v in site.view_kwargs.items())]
            func = cst.Call(cst.parse_expression("nnx.view"), strip_commas(view))
        return updated.with_changes(func=func, args=strip_commas(args))

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        names = self.qualnames(original)
        linen = {q for q in names if q.startswith("flax.linen.")}
        parent = self.get_metadata(ParentNodeProvider, original, None)
        outermost = not (isinstance(parent, cst.Attribute) and parent.value is original)
        if linen and original not in self._handled and outermost:
            short = next(iter(linen)).removeprefix("flax.linen.")
            if (same_in_nnx(short) or equivalent_in_nnx(short)) and root_name(original) is not None:
                self.uses_nnx = True
                self._handled.add(original)
                self.report("L2N-API-001", original, f"nn.{short} -> nnx.{short}")
                return cst.parse_expression(f"nnx.{short}")  # whatever the import spelling was
            is_callee = isinstance(parent, cst.Call) and parent.func is original
            if short in RENAMED_IN_NNX and root_name(original) is not None:
                self.uses_nnx = True
                self._handled.add(original)
                self.report("L2N-PART-001", original, f"nn.{short} -> nnx.{RENAMED_IN_NNX[short]} (sharding names "
                            "become Variable metadata)")
                return cst.parse_expression(f"nnx.{RENAMED_IN_NNX[short]}")
            if short in MERGE_PARAM and is_callee:
                pass  # rewritten with its call in leave_Call
            elif short in KEPT_LINEN_FUNCTIONS:
                self._handled.add(original)
                self.report("L2N-API-005", original, f"nn.{short} kept: a pure function NNX code can call as is")
            elif not (names & (LINEN_MODULE | LINEN_COMPACT)):
                self._handled.add(original)
                self.report("L2N-API-002", original, f"flax.linen.{short} has no automatic conversion yet",
                            "rewrite by hand with the NNX API (see docs/rules.md)")
        plan = self._current()
        attr = self_attr(original)
        if plan is not None and attr is not None:
            is_call = isinstance(parent, cst.Call) and parent.func is original
            if attr in LINEN_SELF_API and attr not in plan.field_names and is_call:
                self._pending_api[parent] = original  # reported in leave_Call unless a rule converts the call
            # Linen setup() variables read as arrays (params) or through ``.value``; NNX reads both as v[...]
            kind = plan.setup_vars.get(attr)
            dotted_value = isinstance(parent, cst.Attribute) and parent.value is original and parent.attr.value == "value"
            if kind == "param" and not dotted_value and not self._is_store(original, parent):
                return cst.parse_expression(f"self.{attr}[...]")
        if plan is not None and original.attr.value == "value" and plan.setup_vars.get(self_attr(original.value) or ""):
            if not self._in_setup(original):
                return cst.Subscript(updated.value, [cst.SubscriptElement(cst.Index(cst.Ellipsis()))])
        return updated

    def _in_setup(self, node: cst.CSTNode) -> bool:
        fn = self._enclosing_function(node)
        return fn is not None and fn.name.value == "setup"

    def _is_store(self, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
        return isinstance(parent, cst.AssignTarget) or self._in_setup(node)

    def _enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, cst.FunctionDef):
            cur = self.get_metadata(ParentNodeProvider, cur, None)
        return cur

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if self._current() is None:
            return updated
        keep = [u for o, u in zip(original.decorators, updated.decorators)
                if not (self.qualnames(o.decorator) & LINEN_COMPACT)]
        if len(keep) != len(updated.decorators):
            self.report("L2N-MOD-003", original, f"@nn.compact {original.name.value}: submodules hoisted into __init__")
        return updated.with_changes(decorators=keep)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        plan = self._class_stack.pop()
        if plan is None:
            return updated
        self.uses_nnx = True
        bases = []
        for o, u in zip(original.bases, updated.bases):
            if self.qualnames(o.value) & LINEN_MODULE:
                bases.append(u.with_changes(value=cst.parse_expression("nnx.Module")))
            else:
                bases.append(u)
        field_names = set(plan.field_names)
        by_name = {f.name: f for f in plan.fields}
        body: list[cst.BaseStatement] = []
        setup_body: list[cst.BaseStatement] = []
        field_markers: list[cst.EmptyLine] = []
        init_index = None
        for orig_stmt, stmt in zip(original.body.body, updated.body.body):
            if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name) and s.target.value in field_names
                for s in stmt.body
            ):
                # defaults as rewritten (nn.relu -> nnx.relu), and their TODO markers, move into __init__
                for orig_small, small in zip(orig_stmt.body, stmt.body):  # type: ignore[attr-defined]
                    by_name[small.target.value].default = self._field(orig_small, small).default
                field_markers += [line for line in stmt.leading_lines
                                  if line.comment is not None and line.comment.value.startswith(MARKER)]
                init_index = len(body) if init_index is None else init_index
                continue
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "setup":
                setup_body = list(stmt.body.body)
                init_index = len(body) if init_index is None else init_index
                continue
            body.append(stmt)
        if init_index is None:
            init_index = 1 if body and is_docstring(body[0]) else 0
        if plan.setup is not None:
            self.report("L2N-MOD-002", plan.setup, f"{plan.name}.setup() moved into __init__")
        init = self._build_init(plan, setup_body)
        init = init.with_changes(leading_lines=[*([cst.EmptyLine(indent=False)] if init_index > 0 else []),
                                                *field_markers])
        body.insert(init_index, init)
        following = body[init_index + 1] if init_index + 1 < len(body) else None
        if isinstance(following, (cst.FunctionDef, cst.ClassDef)) and not following.leading_lines:
            body[init_index + 1] = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.report("L2N-MOD-001", original, f"{plan.name} -> nnx.Module")
        self._record_name_map(plan)
        return updated.with_changes(bases=bases, body=updated.body.with_changes(body=body))

    def _build_init(self, plan: ClassPlan, setup_body: list[cst.BaseStatement]) -> cst.FunctionDef:
        params = ["self"]
        for f in plan.fields:
            default = f" = {f.default}" if f.default is not None else ""
            params.append(f"{f.name}: {f.annotation}{default}")
        params.append("*")
        params.extend(f"{a}: int" for a in plan.new_args)
        if "rngs" not in plan.field_names:
            params.append("rngs: nnx.Rngs")
        one_line = f"def __init__({', '.join(params)}):\n    pass\n"
        many_lines = "def __init__(\n" + "".join(f"    {p},\n" for p in params) + "):\n    pass\n"
        header = one_line if len(one_line) <= 96 else many_lines
        fn = cst.parse_statement(header)
        assert isinstance(fn, cst.FunctionDef)
        stmts: list[cst.BaseStatement] = [cst.parse_statement(f"self.{f.name} = {f.name}\n") for f in plan.fields]
        if plan.uses_rngs:
            stmts.append(cst.parse_statement("self.rngs = rngs.fork()\n"))
        for stmt in setup_body:
            stmts.append(self._containerize(plan, stmt))
        for name in plan.needed_locals:
            stmt = self._pure_updated.get(plan.pure_locals[name], plan.pure_locals[name])
            if name in plan.shape_locals:
                sizes = plan.shape_local_sizes.get(name)
                if sizes is None:
                    self.report("L2N-MOD-004", plan.pure_locals[name], f"`{name}` reads an input size the dataflow "
                                "cannot tell", "compute it from constructor arguments / config")
                    continue
                value = stmt.body[0].value  # type: ignore[attr-defined]
                stmt = cst.parse_statement(f"{name} = {_replace_shape_last(value, sizes)}\n")
            stmts.append(stmt)
        for site in plan.hoisted_order:
            built = self._built.get(site.ctor)
            if built is None:
                continue
            markers = [cst.EmptyLine(comment=cst.Comment(m)) for m in dict.fromkeys(self._init_markers.get(site.ctor, []))]
            assign = cst.SimpleStatementLine([cst.Assign(
                targets=[cst.AssignTarget(cst.parse_expression(f"self.{site.attr}"))], value=built)],
                leading_lines=markers)  # on the statement holding the code, as a second run would place them
            if site.conditions:  # created only when Linen would create it; absent -> None
                test = " and ".join(f"({c})" if len(site.conditions) > 1 else c for c in site.conditions)
                block = cst.parse_statement(f"if {test}:\n    pass\nelse:\n    self.{site.attr} = None\n")
                assert isinstance(block, cst.If)
                stmts.append(block.with_changes(body=block.body.with_changes(body=[assign])))
            else:
                stmts.append(assign)
        if not stmts:
            stmts.append(cst.parse_statement("pass\n"))
        return fn.with_changes(body=fn.body.with_changes(body=stmts))

    def _containerize(self, plan: ClassPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """``self.layers = [..layers..]`` in setup -> ``nnx.List([...])`` (a plain list is rejected by NNX)."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)):
            return stmt
        assign = stmt.body[0]
        attr = self_attr(assign.targets[0].target)
        if attr in plan.containers and isinstance(assign.value, (cst.List, cst.Tuple)):
            value = cst.Call(cst.parse_expression("nnx.List"), [cst.Arg(cst.List(assign.value.elements))])
            return stmt.with_changes(body=[assign.with_changes(value=value)])
        return stmt

    def _record_name_map(self, plan: ClassPlan) -> None:
        key = self._class_key(plan.name)
        entry = ClassEntry(name=key, module=self.module_name, file=self.path, new_args=dict(plan.new_args))
        for site in plan.sites.values():
            if site.kind in ("param", "variable"):
                entry.variables.setdefault(site.collection, {})[site.linen_name] = site.attr
                continue
            linen_class = site.rule.linen_qualname if site.rule else self._class_key(site.user.name)  # type: ignore[union-attr]
            if site.parent is not None and not self._root_site(site).hoisted:
                continue  # inside a setup() layer: Linen names it under that layer (rules map it)
            if site.container is None:
                entry.children[site.linen_name] = Child(attr=site.attr, linen_class=linen_class)
            elif site.loop is not None:
                entry.children[site.linen_name] = Child(attr=site.attr, linen_class=linen_class, container="list")
        for attr, sites in plan.containers.items():
            first = sites[0]
            linen_class = first.rule.linen_qualname if first.rule else self._class_key(first.user.name)  # type: ignore[union-attr]
            entry.children[attr] = Child(attr=attr, linen_class=linen_class, container="list")
        self.name_map.classes[key] = entry

    @staticmethod
    def _root_site(site: Site) -> Site:
        while site.parent is not None:
            site = site.parent
        return site

    def _class_key(self, name: str) -> str:
        return f"{self.module_name}.{name}" if self.module_name else name

    # ---- markers and replayed statements -------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        updated = super().on_leave(original_node, updated_node)
        plan = self._current()
        if plan is not None and original_node in plan.pure_locals.values():
            self._pure_updated[original_node] = updated
        notes = self._markers.pop(original_node, None)
        if notes and isinstance(updated, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            existing = {line.comment.value for line in updated.leading_lines if line.comment is not None}
            extra = [cst.EmptyLine(comment=cst.Comment(n)) for n in dict.fromkeys(notes) if n not in existing]
            if extra:
                updated = updated.with_changes(leading_lines=[*updated.leading_lines, *extra])
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if self.uses_nnx:
            updated = drop_unused_linen_imports(ensure_nnx_import(updated))
        return updated

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """One pass over a freshly parsed tree (no defensive copy, no extra import passes)."""
        wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
        with self.resolve(wrapper):
            self.context = dataclasses.replace(self.context, wrapper=wrapper)
            return wrapper.module.visit(self)


def _range_loop(node: cst.For, local_names: set[str]) -> LoopInfo | None:
    """``for i in range(<config expr>)`` -> LoopInfo; anything else -> None."""
    it = node.iter
    if not (isinstance(node.target, cst.Name) and isinstance(it, cst.Call) and isinstance(it.func, cst.Name)
            and it.func.value == "range" and 1 <= len(it.args) <= 2):
        return None
    if (names_in(it) - {"range"} - NOT_LOCAL) & local_names:
        return None
    return LoopInfo(node.target.value, code(it))


def _loop_name_prefix(value: cst.BaseExpression, var: str) -> str | None:
    """``f"block_{i}"`` inside ``for i in ...`` -> ``"block"``."""
    if not isinstance(value, cst.FormattedString) or len(value.parts) != 2:
        return None
    text, expr = value.parts
    if not (isinstance(text, cst.FormattedStringText) and isinstance(expr, cst.FormattedStringExpression)):
        return None
    if not (text.value.endswith("_") and isinstance(expr.expression, cst.Name) and expr.expression.value == var
            and expr.conversion is None and expr.format_spec is None):
        return None
    prefix = text.value[:-1]
    return prefix if prefix.isidentifier() else None


def einsum_bias_shape(bound: dict[str, cst.Arg]) -> str | None:
    """Linen Einsum's inferred bias shape, as source: the kernel dims that survive into the result
    (``flax.linen.Einsum._get_bias_shape``), when ``shape`` and ``einsum_str`` are literals."""
    shape, eq = bound.get("shape"), bound.get("einsum_str")
    if shape is None or eq is None or not isinstance(eq.value, cst.SimpleString):
        return None
    if not isinstance(shape.value, (cst.Tuple, cst.List)):
        return None
    text = eq.value.evaluated_value.replace(" ", "")
    if "..." in text or "->" not in text or text.count(",") != 1:
        return None
    operands, result = text.split("->")
    rhs = operands.split(",")[1]
    dims = [code(e.value) for e in shape.value.elements]
    if len(dims) != len(rhs):
        return None
    kept = [dims[rhs.index(c)] for c in result if c in rhs]
    return f"({', '.join(kept)}{',' if len(kept) == 1 else ''})"


def _is_shape_last(node: cst.CSTNode) -> str | None:
    """``v.shape[-1]`` -> ``"v"``."""
    if (isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
            and isinstance(node.value.value, cst.Name)):
        index = node.slice[0].slice.value
        if (isinstance(index, cst.UnaryOperation) and isinstance(index.operator, cst.Minus)
                and isinstance(index.expression, cst.Integer) and index.expression.value == "1"):
            return node.value.value.value
    return None


def _shape_last_refs(value: cst.BaseExpression, uses: set[str]) -> list[str] | None:
    """The locals of ``uses`` when each appears only as ``v.shape[-1]`` in ``value``; else None."""
    found: list[str] = []
    other = False

    class V(cst.CSTVisitor):
        def visit_Subscript(self, node: cst.Subscript) -> bool:
            name = _is_shape_last(node)
            if name is not None:
                found.append(name)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            nonlocal other
            if node.value in uses:
                other = True

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

    value.visit(V())
    return None if other or not found else sorted(set(found))


def _replace_shape_last(value: cst.BaseExpression, sizes: dict[str, str]) -> str:
    class T(cst.CSTTransformer):
        def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
            name = _is_shape_last(original)
            if name is None or name not in sizes:
                return updated
            return cst.parse_expression(f"({sizes[name]})" if not sizes[name].isidentifier() and
                                        not sizes[name].replace(".", "").isidentifier() else sizes[name])

    return code(value.visit(T()))
