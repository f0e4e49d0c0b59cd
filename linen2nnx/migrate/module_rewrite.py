"""The module codemod: Linen ``nn.Module`` classes -> ``nnx.Module`` classes.

One pass per file. For each Linen module class, :meth:`MigrateModules.visit_ClassDef` plans the
rewrite on the original tree (fields, ``setup`` submodules, ``@nn.compact`` submodules, the
feature-size dataflow); the ``leave_*`` methods then apply the plan bottom-up:

- dataclass fields become ``__init__`` parameters (kept in order, with defaults and annotations);
- ``setup()`` statements move into ``__init__``; ``@nn.compact`` layer constructions are hoisted
  there under attributes named after the Linen auto-names (``Dense_0`` -> ``dense_0``);
- built-in layers become their NNX counterparts with ``in_features`` and ``rngs=rngs``;
- mode arguments that use call-time values (``deterministic=not train``) move to the call;
- ``nn.relu`` and friends are re-pointed to the identical ``nnx`` functions.

Anything left that still needs Linen is a ``manual`` finding with an inline TODO marker.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider

from linen2nnx.layers import LayerRule, layer_rule, nnx_ctor_params
from linen2nnx.migrate.dataflow import Feat, FeatureFlow, LayerInfo
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.linen_api import same_in_nnx
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
NOT_LOCAL = frozenset({"self", "True", "False", "None"})


def snake_case(name: str) -> str:
    """``BatchNorm_0`` -> ``batch_norm_0``; ``Dense_1`` -> ``dense_1``."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


@dataclasses.dataclass
class Field:
    name: str
    annotation: str
    default: str | None


@dataclasses.dataclass
class LayerSite:
    """One built-in layer construction that becomes an NNX layer."""

    attr: str  # NNX attribute
    linen_name: str  # Linen child name (auto-name or explicit)
    rule: LayerRule
    ctor: cst.Call  # original constructor call
    args: dict[str, cst.Arg]  # Linen argument name -> original Arg
    hoisted: bool  # True for @nn.compact (the call site becomes ``self.attr``)
    in_expr: str | None = None
    moved_args: tuple[str, ...] = ()  # Linen args moved to call time
    container: str | None = None


@dataclasses.dataclass
class ClassPlan:
    name: str
    fields: list[Field]
    sites: dict[cst.Call, LayerSite] = dataclasses.field(default_factory=dict)
    new_args: dict[str, str] = dataclasses.field(default_factory=dict)  # kw-only arg -> how obtained
    setup: cst.FunctionDef | None = None
    hoisted_order: list[LayerSite] = dataclasses.field(default_factory=list)
    containers: dict[str, list[LayerSite]] = dataclasses.field(default_factory=dict)


class MigrateModules(VisitorBasedCodemodCommand):
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
        self.uses_nnx = False

    # ---- helpers -----------------------------------------------------------------------------
    def qualnames(self, node: cst.CSTNode) -> set[str]:
        try:
            return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}
        except KeyError:
            return set()

    def code(self, node: cst.CSTNode) -> str:
        return cst.Module([]).code_for_node(node)

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
            stmt = self._statement_of(node)
            if stmt is not None:
                self._markers.setdefault(stmt, []).append(f"{MARKER} {rule_id} {message}")

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
                        if "ClassVar" in self.code(small.annotation.annotation):
                            continue
                        fields = [f for f in fields if f.name != small.target.value]
                        fields.append(self._field(small))
        plan = ClassPlan(name=node.name.value, fields=fields)
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        counters: dict[str, int] = {}
        for fn in methods:
            if fn.name.value == "setup":
                plan.setup = fn
                self._plan_setup(plan, fn)
            elif any(self.qualnames(d.decorator) & LINEN_COMPACT for d in fn.decorators):
                self._plan_compact(plan, fn, counters)
        for fn in methods:
            if fn.name.value != "setup":
                self._run_flow(plan, fn)
        self._resolve_unused(plan)
        return plan

    def _field(self, small: cst.AnnAssign) -> Field:
        default = None
        if small.value is not None:
            value = small.value
            if isinstance(value, cst.Call) and self.qualnames(value.func) & {"dataclasses.field"}:
                kw = {a.keyword.value: a.value for a in value.args if a.keyword is not None}
                if "default" in kw:
                    default = self.code(kw["default"])
                elif "default_factory" in kw:
                    default = f"{self.code(kw['default_factory'])}()"
            else:
                default = self.code(value)
        return Field(small.target.value, self.code(small.annotation.annotation), default)

    def _bind_args(self, rule: LayerRule, call: cst.Call) -> tuple[dict[str, cst.Arg], cst.Arg | None]:
        order = rule.linen_arg_order()
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

    def _plan_setup(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        for stmt in fn.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                    continue
                target = small.targets[0].target
                if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                        and target.value.value == "self"):
                    continue
                attr = target.attr.value
                value = small.value
                if isinstance(value, cst.Call) and (rule := self.layer_rule_of(value.func)):
                    self._add_site(plan, value, rule, attr=attr, linen_name=attr, hoisted=False)
                elif isinstance(value, (cst.List, cst.Tuple)) and value.elements and all(
                    isinstance(e.value, cst.Call) and self.layer_rule_of(e.value.func) for e in value.elements
                ):
                    sites = []
                    for i, e in enumerate(value.elements):
                        call = e.value
                        site = self._add_site(plan, call, self.layer_rule_of(call.func), attr=f"{attr}[{i}]",
                                              linen_name=f"{attr}_{i}", hoisted=False)
                        site.container = "list"
                        sites.append(site)
                    plan.containers[attr] = sites

    def _plan_compact(self, plan: ClassPlan, fn: cst.FunctionDef, counters: dict[str, int]) -> None:
        local_names = _local_names(fn)
        command = self

        class Collect(cst.CSTVisitor):
            def __init__(self) -> None:
                self.loop_depth = 0

            def _enter_loop(self, node: cst.CSTNode) -> bool:
                self.loop_depth += 1
                return True

            def _leave_loop(self, node: cst.CSTNode) -> None:
                self.loop_depth -= 1

            visit_For = visit_While = visit_ListComp = visit_GeneratorExp = visit_Lambda = _enter_loop
            leave_For = leave_While = leave_ListComp = leave_GeneratorExp = leave_Lambda = _leave_loop

            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is fn

            def visit_Call(self, node: cst.Call) -> None:
                rule = command.layer_rule_of(node.func)
                if rule is None:
                    return
                if self.loop_depth:
                    command.report("L2N-MOD-004", node, f"nn.{rule.linen} created in a loop or comprehension "
                                   "inside @nn.compact is not hoisted yet",
                                   "create the layers in __init__ (an nnx.List) and index them in the loop")
                    return
                bound, name_arg = command._bind_args(rule, node)
                if name_arg is not None and isinstance(name_arg.value, cst.SimpleString):
                    linen_name = name_arg.value.evaluated_value
                    attr = linen_name if linen_name.isidentifier() else snake_case(linen_name)
                else:
                    n = counters.get(rule.linen, 0)
                    counters[rule.linen] = n + 1
                    linen_name = f"{rule.linen}_{n}"
                    attr = snake_case(linen_name)
                site = command._add_site(plan, node, rule, attr=attr, linen_name=linen_name, hoisted=True)
                moved = []
                for arg_name, arg in bound.items():
                    if _uses_locals(arg.value, local_names):
                        if arg_name in rule.call_args:
                            moved.append(arg_name)
                        else:
                            command.report("L2N-MOD-004", arg, f"argument {arg_name}= of nn.{rule.linen} uses a "
                                           "call-time value and cannot move to __init__",
                                           "compute it from constructor arguments / config")
                site.moved_args = tuple(moved)
                if moved:
                    command.report("L2N-LAYER-003", node, f"{', '.join(moved)} of nn.{rule.linen} moved to the call "
                                   f"of self.{attr}")
                plan.hoisted_order.append(site)

        fn.visit(Collect())

    def _add_site(self, plan: ClassPlan, call: cst.Call, rule: LayerRule, *, attr: str, linen_name: str,
                  hoisted: bool) -> LayerSite:
        bound, _ = self._bind_args(rule, call)
        site = LayerSite(attr=attr, linen_name=linen_name, rule=rule, ctor=call, args=bound, hoisted=hoisted)
        plan.sites[call] = site
        self._handled.add(call.func)
        for arg_name, arg in bound.items():
            nnx_name = rule.nnx_arg(arg_name)
            if arg_name in rule.unsupported_args or nnx_name not in nnx_ctor_params(rule.nnx):
                self.report("L2N-LAYER-002", arg, f"nn.{rule.linen}({arg_name}=...) has no nnx.{rule.nnx} "
                            "equivalent", f"see the nnx.{rule.nnx} signature; drop or re-express it")
        return site

    # ---- feature-size dataflow ---------------------------------------------------------------
    def _run_flow(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        params = [p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)]
        if params and params[0] == "self":
            params = params[1:]
        if not params:
            return
        setup_attrs = {s.attr: s for s in plan.sites.values() if not s.hoisted and s.container is None}

        def layer_of(call: cst.Call) -> LayerInfo | None:
            func = call.func
            site = None
            if isinstance(func, cst.Call) and func in plan.sites:
                site = plan.sites[func]
            elif (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                  and func.value.value == "self" and func.attr.value in setup_attrs):
                site = setup_attrs[func.attr.value]
            if site is None:
                return None
            out = site.args.get(site.rule.out_arg) if site.rule.out_arg else None
            return LayerInfo(site.attr, self.code(out.value) if out is not None else None)

        flow = FeatureFlow(params, layer_of, self.qualnames)
        flow.run(fn.body.body)
        sites_by_attr = {s.attr: s for s in plan.sites.values()}
        for use in flow.uses:
            site = sites_by_attr[use.key]
            if site.rule.in_arg is None or site.in_expr is not None:
                continue
            site.in_expr = self._resolve_in(plan, site, use.feat, params, use.node)

    def _resolve_in(self, plan: ClassPlan, site: LayerSite, feat: Feat, params: list[str],
                    node: cst.CSTNode) -> str:
        if feat.kind == "expr":
            return feat.expr
        if feat.kind == "input":
            arg = "in_features" if feat.input_name == params[0] else f"{feat.input_name}_features"
            if arg not in plan.new_args:
                plan.new_args[arg] = f"input:{params.index(feat.input_name)}"
                self.report("L2N-SHAPE-002", node, f"{plan.name} gains constructor argument {arg}: the last-axis "
                            f"size of `{feat.input_name}`", f"pass {arg}=x.shape[-1] where {plan.name} is built")
            return arg
        traced = self._from_trace(plan, site, feat, node)
        if traced is not None:
            return traced
        arg = f"{site.attr}_in_features".replace("[", "_").replace("]", "")
        plan.new_args[arg] = "unresolved"
        why = "a flatten" if feat.kind == "flatten" else feat.reason or "an unknown value"
        self.report("L2N-SHAPE-003", node, f"input feature size of {plan.name}.{site.attr} comes from {why}; "
                    f"required constructor argument {arg} added",
                    "run `linen2nnx migrate --trace SPEC` or pass the size explicitly")
        return arg

    def _from_trace(self, plan: ClassPlan, site: LayerSite, feat: Feat, node: cst.CSTNode) -> str | None:
        if self.trace is None:
            return None
        shapes = self.trace.shapes_for(plan.name, site.linen_name)
        sizes = sorted({s[-1] for s in shapes if s})
        if not sizes:
            return None
        configs = self.trace.instances.get(plan.name, [])
        if feat.kind == "flatten" and feat.base is not None and feat.base.kind == "expr" and configs:
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
            if len(factors) == 1:
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
            if site.rule.in_arg is not None and site.in_expr is None:
                site.in_expr = self._resolve_in(plan, site, Feat.unknown("a layer the dataflow never saw applied"),
                                                ["x"], site.ctor)

    # ---- rewriting ---------------------------------------------------------------------------
    def _current(self) -> ClassPlan | None:
        return self._class_stack[-1] if self._class_stack else None

    def _nnx_ctor(self, site: LayerSite, updated: cst.Call) -> cst.Call:
        rule = site.rule
        upd_bound, _ = self._bind_args(rule, updated)
        args: list[cst.Arg] = []
        if rule.in_arg is not None:
            args.append(cst.Arg(cst.parse_expression(site.in_expr or "None")))
        for name in rule.positional:
            if name in upd_bound:
                args.append(upd_bound[name].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT,
                                                         comma=cst.MaybeSentinel.DEFAULT))
        for name, arg in upd_bound.items():
            if name in rule.positional or name in site.moved_args:
                continue
            args.append(cst.Arg(arg.value, keyword=cst.Name(rule.nnx_arg(name)),
                                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        args.append(cst.Arg(cst.Name("rngs"), keyword=cst.Name("rngs"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args]
        self.uses_nnx = True
        return cst.Call(func=cst.parse_expression(f"nnx.{rule.nnx}"), args=args)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        plan = self._current()
        if plan is None:
            return updated
        site = plan.sites.get(original)
        if site is not None:
            self._handled.add(original.func)
            self.report("L2N-LAYER-001", original, f"nn.{site.rule.linen} -> nnx.{site.rule.nnx} ({site.attr})")
            built = self._nnx_ctor(site, updated)
            if not site.hoisted:
                return built
            self._built[original] = built
            upd_bound, _ = self._bind_args(site.rule, updated)
            self._moved[original] = [upd_bound[a] for a in site.moved_args if a in upd_bound]
            return cst.parse_expression(f"self.{site.attr}")
        if isinstance(original.func, cst.Call) and original.func in self._moved:
            moved = self._moved.pop(original.func)
            if moved:
                tail = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in moved]
                args = [*(a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in updated.args), *tail]
                return updated.with_changes(args=args)
        return updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        names = self.qualnames(original)
        linen = {q for q in names if q.startswith("flax.linen.")}
        parent = self.get_metadata(ParentNodeProvider, original, None)
        outermost = not (isinstance(parent, cst.Attribute) and parent.value is original)
        if linen and original not in self._handled and outermost:
            short = next(iter(linen)).removeprefix("flax.linen.")
            if same_in_nnx(short) and _root_name(original) is not None:
                self.uses_nnx = True
                self._handled.add(original)
                return _repoint_root(updated, "nnx")
            if not (names & (LINEN_MODULE | LINEN_COMPACT)):
                self._handled.add(original)
                self.report("L2N-API-002", original, f"flax.linen.{short} has no automatic conversion yet",
                            "rewrite by hand with the NNX API (see docs/rules.md)")
        plan = self._current()
        if (plan is not None and isinstance(original.value, cst.Name) and original.value.value == "self"
                and original.attr.value in LINEN_SELF_API):
            if not (isinstance(parent, cst.Assign) or original.attr.value in {f.name for f in plan.fields}):
                self.report("L2N-API-002", original, f"self.{original.attr.value} is Linen Module API with no "
                            "automatic conversion yet", "see reference: variables and collections")
        return updated

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
        field_names = {f.name for f in plan.fields}
        body: list[cst.BaseStatement] = []
        setup_body: list[cst.BaseStatement] = []
        init_index = None
        for stmt in updated.body.body:
            if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name) and s.target.value in field_names
                for s in stmt.body
            ):
                init_index = len(body) if init_index is None else init_index
                continue
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "setup":
                setup_body = list(stmt.body.body)
                init_index = len(body) if init_index is None else init_index
                continue
            body.append(stmt)
        if init_index is None:
            init_index = 1 if body and _is_docstring(body[0]) else 0
        if plan.setup is not None:
            self.report("L2N-MOD-002", plan.setup, f"{plan.name}.setup() moved into __init__")
        init = self._build_init(plan, setup_body)
        if init_index > 0:
            init = init.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body.insert(init_index, init)
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
        params.append("rngs: nnx.Rngs")
        one_line = f"def __init__({', '.join(params)}):\n    pass\n"
        many_lines = "def __init__(\n" + "".join(f"    {p},\n" for p in params) + "):\n    pass\n"
        header = one_line if len(one_line) <= 96 else many_lines
        fn = cst.parse_statement(header)
        assert isinstance(fn, cst.FunctionDef)
        stmts: list[cst.BaseStatement] = [cst.parse_statement(f"self.{f.name} = {f.name}\n") for f in plan.fields]
        for stmt in setup_body:
            stmts.append(self._containerize(plan, stmt))
        for site in plan.hoisted_order:
            built = self._built.get(site.ctor)
            if built is None:
                continue
            stmts.append(cst.SimpleStatementLine([cst.Assign(
                targets=[cst.AssignTarget(cst.parse_expression(f"self.{site.attr}"))], value=built)]))
        if not stmts:
            stmts.append(cst.parse_statement("pass\n"))
        return fn.with_changes(body=fn.body.with_changes(body=stmts))

    def _containerize(self, plan: ClassPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """``self.layers = [..layers..]`` in setup -> ``nnx.List([...])`` (a plain list is rejected by NNX)."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)):
            return stmt
        assign = stmt.body[0]
        target = assign.targets[0].target
        if (isinstance(target, cst.Attribute) and target.attr.value in plan.containers
                and isinstance(assign.value, (cst.List, cst.Tuple))):
            value = cst.Call(cst.parse_expression("nnx.List"), [cst.Arg(cst.List(assign.value.elements))])
            return stmt.with_changes(body=[assign.with_changes(value=value)])
        return stmt

    def _record_name_map(self, plan: ClassPlan) -> None:
        key = f"{self.module_name}.{plan.name}" if self.module_name else plan.name
        entry = ClassEntry(name=key, module=self.module_name, file=self.path, new_args=dict(plan.new_args))
        for site in plan.sites.values():
            if site.container is None:
                entry.children[site.linen_name] = Child(attr=site.attr, linen_class=site.rule.linen_qualname)
        for attr, sites in plan.containers.items():
            entry.children[attr] = Child(attr=attr, linen_class=sites[0].rule.linen_qualname, container="list")
        self.name_map.classes[key] = entry

    # ---- markers -----------------------------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        updated = super().on_leave(original_node, updated_node)
        notes = self._markers.pop(original_node, None)
        if notes and isinstance(updated, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            existing = {line.comment.value for line in updated.leading_lines if line.comment is not None}
            extra = [cst.EmptyLine(comment=cst.Comment(n)) for n in dict.fromkeys(notes) if n not in existing]
            if extra:
                updated = updated.with_changes(leading_lines=[*updated.leading_lines, *extra])
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if self.uses_nnx:
            AddImportsVisitor.add_needed_import(self.context, "flax", "nnx")
            for alias in _linen_aliases(original):
                RemoveImportsVisitor.remove_unused_import(self.context, *alias)
        return updated


def _linen_aliases(module: cst.Module) -> list[tuple[str, str | None, str | None]]:
    """The ways this file imports flax.linen, as RemoveImportsVisitor arguments."""
    out = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = cst.Module([]).code_for_node(alias.name)
                    if name == "flax.linen":
                        asname = alias.asname.name.value if alias.asname else None
                        out.append(("flax.linen", None, asname))
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names, cst.ImportStar):
                mod = cst.Module([]).code_for_node(small.module)
                for alias in small.names:
                    asname = alias.asname.name.value if alias.asname else None
                    if mod == "flax" and alias.name.value == "linen":
                        out.append(("flax", "linen", asname))
    return out


def _local_names(fn: cst.FunctionDef) -> set[str]:
    names = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}

    class Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            for n in _names_in(node.target):
                names.add(n)

        def visit_For(self, node: cst.For) -> None:
            names.update(_names_in(node.target))

    fn.body.visit(Targets())
    names.discard("self")
    return names


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

    node.visit(V())
    return found


def _uses_locals(node: cst.CSTNode, local_names: set[str]) -> bool:
    return bool((_names_in(node) - NOT_LOCAL) & local_names)


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString))


def _root_name(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _repoint_root(node: cst.Attribute, alias: str) -> cst.Attribute:
    """``nn.initializers.ones`` -> ``nnx.initializers.ones``: swap only the root name."""
    if isinstance(node.value, cst.Name):
        return node.with_changes(value=cst.Name(alias))
    assert isinstance(node.value, cst.Attribute)
    return node.with_changes(value=_repoint_root(node.value, alias))
