"""The *resolve* part of the module pass: what a node of the original tree names, where it sits,
and the findings sink.

:class:`FileContext` answers questions about the original tree (qualified names, parents, the Linen
layer or class a reference names, lifted-transform chains) and records findings with their TODO
markers. The planner, sizer, emitter and rewriters all receive the same instance; it owns no
rewriting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import libcst as cst

from linen2nnx.layers import LayerRule, layer_rule
from linen2nnx.migrate.annotation_names import module_names
from linen2nnx.migrate.box_tests import is_unbox_helper
from linen2nnx.migrate.bridge import builds_bridge_wrapper, is_bridge_wrapper
from linen2nnx.migrate.crossfile_bindings import report_crossfile_bindings
from linen2nnx.migrate.cst_meta import (
    NAME_OR_ATTRIBUTE,
    FastVisitor,
    code_of,
    start_positions,
    syntax_parent_map,
)
from linen2nnx.migrate.cst_utils import (
    absolute_qualname,
    code,
    names_in,
    needs_parens,
    self_attr,
    single_assign,
)
from linen2nnx.migrate.dataflow import Feat, FeatureFlow
from linen2nnx.migrate.factory_fields import FieldBindings, FieldFactory
from linen2nnx.migrate.field_specifiers import is_field_specifier
from linen2nnx.migrate.file_state import FileState
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.function_aliases import reads_linen
from linen2nnx.migrate.function_factories import FunctionFactory, find_function_factory
from linen2nnx.migrate.layer_subclasses import layer_subclass
from linen2nnx.migrate.lift_streams import report_unsplit_streams
from linen2nnx.migrate.lifted import (
    LIFTED_CLASS_PREFIX,
    LINEN_MARKERS,
    TRANSFORMS,
    Lift,
    LiftChain,
    LiftError,
    validate,
)
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.positions import source_positions
from linen2nnx.migrate.record_facts import folders_of, imported_records
from linen2nnx.migrate.rules import (
    SHAPE_002,
    VAR_009,
    XFORM_002,
)
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.sites import (
    LINEN_MODULE,
    MARKER,
    ClassPlan,
    Field,
)
from linen2nnx.migrate.tuple_flow import agreed_return, record_classes

FIELD_FUNCTIONS = frozenset({"dataclasses.field", "flax.struct.field"})  # dataclasses.field, under a name


# manual findings true only of the NNX rewrite (a kept class initialises as Linen does): rules.VAR_009
NNX_ONLY_RULES = frozenset({VAR_009.id})


class FileContext:
    """Names, parents, lift chains and findings of one file, over its :class:`FileState`."""

    def __init__(self, state: FileState) -> None:
        self.state = state

    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """What ``node`` of the original tree may name (``nn.Dense`` -> ``{"flax.linen.Dense"}``); see
        :mod:`~linen2nnx.migrate.names`. Empty for a node the codemod built."""
        if self.state.resolver is None:
            self.state.resolver = NameResolver(self.state.tree, self.state.stars)
        found = set(self.state.resolver.qualnames(node))
        alias = self.state.transform_aliases.get(node.value) if type(node) is cst.Name else None
        if alias is not None and node is not alias[0] and found == {node.value}:
            return set(alias[1])  # a read of a module-level alias of a Linen transform: the transform
        return found

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
        if (
            node,
            rule_id,
            message,
        ) in self.state.reported:  # the same node met again (a partial's argument, per use)
            return
        self.state.reported.add((node, rule_id, message))
        severity = rule.severity
        self.state.unplaced.append(
            (len(self.state.findings), node)
        )  # its line and column: see _place_findings
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
            stmt = self.statement_of(node)
            if stmt is not None:
                self.state.markers.setdefault(stmt, []).append(marker)

    def _hoisted_ctor_of(self, node: cst.CSTNode) -> cst.Call | None:
        plan = self.current_plan() if self.state.class_stack else None
        cur: cst.CSTNode | None = node
        while (
            plan is not None
            and cur is not None
            and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        ):
            site = plan.sites.get(cur) if isinstance(cur, cst.Call) else None
            if site is not None and site.hoisted:
                return cur
            cur = self.parent_of(cur)
        return None

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent_of(cur)
        return cur

    def layer_rule_of(self, node: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer a constructor reference names (``nn.Dense``, ``linen.linear.Dense``, ...)."""
        if type(node) is cst.Name and node.value in self.state.layer_subclasses:
            return self.state.layer_subclasses[node.value].rule  # `StdConv`: an nn.Conv built as StdConv
        imported = self.imported_layer_subclass(node)
        if imported is not None:  # `bit_resnet.StdConv` of another file: built as written, the NNX way
            return dataclasses.replace(imported, callee=code(node))
        built = self.state.factory_layers.get(node)
        if built is not None:  # the constructor a call of a layer factory function stands for
            return built
        node = self.state.alias_classes.get(node, node)  # `block_class` holding a class in setup()
        chain = self.lift_chain(node)
        if chain is not None:
            node = chain.base
        return self._named_layer_rule(node)

    def _named_layer_rule(self, node: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer a name or attribute chain resolves to (``nn.Dense``, ``linen.linear.Dense``)."""
        if type(node) not in NAME_OR_ATTRIBUTE:
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
        node = self.state.alias_classes.get(node, node)  # `block_class` holding a class in setup()
        chain = self.lift_chain(node)
        if chain is not None:
            node = chain.base
        if isinstance(node, cst.Name) and node.value in self.state.linen_classes:
            return self.state.linen_classes[node.value]
        summary = self._from_other_file(node, self.state.external)
        return summary.as_plan() if summary is not None else None

    def _imported_class(self, node: cst.BaseExpression) -> str | None:
        """The name of the Linen module class another file of the run defines that ``node`` imports."""
        summary = self._from_other_file(node, self.state.external)
        return summary.name if summary is not None else None

    def imported_layer_subclass(self, node: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer of the converted layer subclass of another file of the run ``node`` names
        (``StdConv`` after ``from pkg.convs import StdConv``), or None."""
        fact = self._from_other_file(node, self.state.external_layer_subclasses)
        return fact.rule if fact is not None else None

    def _from_other_file(self, node: cst.BaseExpression, facts: Mapping[str, Any]) -> Any:
        """What ``facts`` (keyed by absolute dotted name) say of the name ``node`` imports, or None."""
        if type(node) not in NAME_OR_ATTRIBUTE or not facts:
            return None
        return next((f for q in self.qualnames(node) if (f := facts.get(self.absolute(q))) is not None), None)

    def _find_function_factories(self) -> None:
        """The module-level layer factory functions (function_factories.py), before any class is planned:
        calls of them plan as submodules, and the layers their ``return``s build are rewritten there."""
        for name, fn in self.state.module_functions.items():
            found = find_function_factory(fn, self.class_key(name), self.layer_rule_of)
            if found is None:
                continue
            factory, ctors = found
            self.state.function_factories[name] = factory
            for ctor in ctors:
                self.state.factory_returns[ctor] = factory
                self.state.handled.add(ctor.func)  # rewritten with its call: not Linen API left behind

    def function_factory_of(self, node: cst.BaseExpression) -> FunctionFactory | None:
        """The layer factory function ``node`` names: one of this file, or of another file of the run."""
        if isinstance(node, cst.Name) and node.value in self.state.function_factories:
            return self.state.function_factories[node.value]
        return self._from_other_file(node, self.state.external_factories)

    def field_factory(self, plan: ClassPlan, field: str) -> FieldFactory | None:
        """``plan``'s field ``field`` as a module factory whose callers' bindings agree (factory_fields.py)."""
        if field not in plan.field_names or field in plan.factories:
            return None
        return self.field_bindings.factory(plan.name, field)

    @property
    def field_bindings(self) -> FieldBindings:
        if self.state.bindings is None:
            self.state.bindings = FieldBindings(
                self.state.tree,
                self.is_linen_module,
                self.qualnames,
                self.layer_rule_of,
                self._imported_class,
            )
        return self.state.bindings

    def absolute(self, qualname: str) -> str:
        """``qualname`` with a relative import's leading dots resolved against this file's module."""
        return absolute_qualname(qualname, self.state.module_name)

    def transform_kind(self, func: cst.BaseExpression) -> str | None:
        if type(func) not in NAME_OR_ATTRIBUTE:
            return None  # `nn.scan(...)(...)` applies a transform, it is not one
        for q in self.qualnames(func):
            if q.startswith("flax.linen.") and q.rsplit(".", 1)[-1] in TRANSFORMS:
                return TRANSFORMS[q.rsplit(".", 1)[-1]]
        return None

    def is_broadcast(self, node: cst.BaseExpression) -> bool:
        return any(q.startswith("flax.linen.") and q.endswith(".broadcast") for q in self.qualnames(node))

    def linen_class_name(self, func: cst.BaseExpression, name: str) -> str:
        """The name of the class Linen builds through ``func``, whose auto-names count by it: ``name``,
        or for a lifted class the transforms' prefixes, outermost first (``nn.scan(nn.remat(Block))``:
        ``ScanCheckpointBlock``)."""
        chain = self.lift_chain(func)
        if chain is None:
            plan = self.state.linen_classes.get(name)
            return (plan.linen_prefix if plan is not None else "") + name
        return "".join(LIFTED_CLASS_PREFIX[lift.kind] for lift in chain.lifts) + name

    def decorator_prefix(self, cls: cst.ClassDef) -> str:
        """The prefixes Linen's lifted transforms give a class they decorate (``@nn.remat`` or
        ``@functools.partial(nn.remat, ...)``: ``CheckpointBlock``), outermost (topmost) first."""
        prefix = ""
        for decorator in cls.decorators:
            applied = decorator.decorator
            if (
                type(applied) is cst.Call
                and self.qualnames(applied.func) & {"functools.partial"}
                and applied.args
            ):
                applied = applied.args[0].value
            kind = self.transform_kind(applied)
            prefix += LIFTED_CLASS_PREFIX.get(kind, "") if kind else ""
        return prefix

    def lift_chain(self, node: cst.BaseExpression) -> LiftChain | None:
        """``nn.scan(nn.remat(Block), ...)`` or an alias of one -> the chain; None for anything else."""
        lifts: list[Lift] = []
        seen: set[str] = set()
        while True:
            if type(node) is cst.Name and node.value in self.state.lift_aliases and node.value not in seen:
                seen.add(node.value)
                node = self.state.lift_aliases[node.value]
                continue
            if (
                type(node) is cst.Call
                and node.args
                and node.args[0].keyword is None
                and not node.args[0].star
            ):
                kind = self.transform_kind(node.func)
                if kind is not None and all(a.keyword is not None for a in node.args[1:]):
                    lifts.append(Lift(kind, {a.keyword.value: a.value for a in node.args[1:]}, node))  # type: ignore[union-attr]
                    node = node.args[0].value
                    continue
            break
        return LiftChain(lifts, node) if lifts else None

    def _collect_transform_aliases(self, body: Any) -> None:
        """Module-level aliases of a Linen transform itself (``remat = nn_partitioning.remat``): a read
        of the alias names the transform, so ``remat(Block, static_argnums=...)`` converts as
        ``nn.remat(Block, ...)`` does."""
        for stmt in body:
            assign = single_assign(stmt)
            if assign is None or not isinstance(assign[1], (cst.Name, cst.Attribute)):
                continue
            if self.transform_kind(assign[1]) is not None:
                target = stmt.body[0].targets[0].target  # type: ignore[attr-defined]
                self.state.transform_aliases[assign[0]] = (target, self.qualnames(assign[1]), assign[1])

    def collect_lift_aliases(self, body: Any) -> None:
        """Top-level ``Name = nn.remat(Class, ...)`` statements of a block (a method or the module)."""
        for stmt in body:
            assign = single_assign(stmt)
            if assign is None:
                continue
            name, value = assign
            if isinstance(value, cst.Call) and self.transform_kind(value.func):
                self.state.lift_aliases[name] = value
                self.state.alias_stmts[name] = stmt

    def check_lifted(self, node: cst.Call, at: cst.CSTNode | None = None) -> LiftChain | bool | None:
        """The chain of a lifted constructor call ``node``: validated (False + a finding when not
        converted) and its Linen transform names marked as consumed. A constructor the codemod built
        (a helper method's ``return nn.scan(...)(...)``, parsed anew) has no place in the source: its
        finding goes to ``at``, the call that uses it."""
        chain = self.lift_chain(node.func)
        if chain is None:
            return None
        aliases = [n for n in names_in(node.func) if n in self.state.lift_aliases]
        try:
            validate(chain, self.is_broadcast, self.enclosing_function(node))
        except LiftError as err:
            for alias in aliases:
                self.state.alias_use[alias] = False
            self.report(
                XFORM_002,
                node if at is None or self.parent_of(node) is not None else at,
                str(err),
                "rewrite with nnx.vmap / nnx.scan / nnx.remat by hand "
                "(see docs/nnx_facts.md, Lifted transforms)",
            )
            for lift in chain.lifts:
                self.state.handled.add(lift.node.func)
            return False
        for alias in aliases:
            self.state.alias_use.setdefault(alias, True)
        report_unsplit_streams(self, chain, node if at is None or self.parent_of(node) is not None else at)
        for lift in chain.lifts:
            self.mark_transform_names(lift.node)
        self.state.handled.add(chain.base)  # nn.Dense in nn.vmap(nn.Dense, ...): built as nnx.Linear
        return chain

    @staticmethod
    def self_call(node: cst.Call) -> str | None:
        """``self.param(...)`` -> ``"param"``."""
        return self_attr(node.func)

    def current_plan(self) -> ClassPlan | None:
        return self.state.class_stack[-1] if self.state.class_stack else None

    def mark_transform_names(self, node: cst.CSTNode) -> None:
        command = self

        class Mark(FastVisitor):
            def visit_Attribute(self, attr: cst.Attribute) -> None:
                if any(
                    q.startswith("flax.linen.") and q.rsplit(".", 1)[-1] in LINEN_MARKERS
                    for q in command.qualnames(attr)
                ):
                    command.state.handled.add(attr)

        Mark().walk(node)

    def enclosing(self, node: cst.CSTNode, kind: type) -> Any:
        """The nearest node of ``kind`` at or above ``node`` in the original tree; None when none is."""
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, kind):
            cur = self.parent_of(cur)
        return cur

    def enclosing_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        statement = self.enclosing(node, cst.SimpleStatementLine)
        assert statement is not None
        return statement

    def in_setup(self, node: cst.CSTNode) -> bool:
        fn = self.enclosing_function(node)
        return fn is not None and fn.name.value == "setup"

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        return self.enclosing(node, cst.FunctionDef)

    def in_marked_class(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in a class an earlier run wrote (with linen2nnx markers, or the NNX wrapper of a
        class kept as Linen)? It reported its Linen leftovers where they stopped the rewrite (a wrapper
        hands its class Linen layers as written); reporting them again is not idempotent."""
        cls = self.enclosing(node, cst.ClassDef)
        if cls is not None and cls not in self.state.marked_classes:
            self.state.marked_classes[cls] = (
                MARKER in code_of(cls)
                or is_bridge_wrapper(cls)
                or builds_bridge_wrapper(cls, self.state.tree)
            )
        return cls is not None and self.state.marked_classes[cls]

    def enclosing_class_plan(self, node: cst.CSTNode) -> ClassPlan | None:
        """The plan of the class ``node`` is a method of (not of a function nested in one)."""
        parent = self.parent_of(node)
        block = self.parent_of(parent) if parent is not None else None
        return self.state.plans.get(block) if isinstance(block, cst.ClassDef) else None

    def place_findings(self) -> None:
        """Give the findings the (line, column) of their nodes in the original source (from the code of
        the statements holding them, see :mod:`~linen2nnx.migrate.positions`, or of the whole tree when
        the source is unknown); a node the codemod built has none (0, 0). Rewrites reported inside a
        class that ended up kept as Linen are dropped first: its Linen copy is the author's code."""
        self._drop_rewrites_of_kept_classes()
        nodes = {node for _, node in self.state.unplaced}
        state = self.state
        if state.source is None or not nodes:
            positions = start_positions(state.tree, nodes)
        else:
            if state.parents is None:
                state.parents = syntax_parent_map(state.tree)
            positions = source_positions(state.tree, state.source, nodes, state.parents)
        for index, node in self.state.unplaced:
            if node in positions:
                line, column = positions[node]
                self.state.findings[index] = dataclasses.replace(
                    self.state.findings[index], line=line, col=column + 1
                )
        self.state.unplaced = []

    def _drop_rewrites_of_kept_classes(self) -> None:
        """``converted`` / ``unsafe`` findings on nodes inside a class kept as Linen (a hoisted layer, a
        re-pointed function) describe rewrites of a body that was thrown away for the original; only its
        field lines (their defaults move into the bridge wrapper's ``__init__``) and the input sizes the
        wrapper accepts (``SHAPE_002``) were rewritten. Findings of :data:`NNX_ONLY_RULES` describe how the
        NNX class would differ from Linen: behind the bridge it does not."""
        state = self.state
        if not state.kept_linen:
            return
        drop = set()
        for index, node in state.unplaced:
            finding = state.findings[index]
            if (
                finding.severity in (Severity.CONVERTED, Severity.UNSAFE) and finding.rule != SHAPE_002.id
            ) or finding.rule in NNX_ONLY_RULES:
                if self._inside_kept_body(node):
                    drop.add(index)
        if not drop:
            return
        renumber, kept = {}, []
        for index, finding in enumerate(state.findings):
            if index not in drop:
                renumber[index] = len(kept)
                kept.append(finding)
        state.findings = kept
        state.unplaced = [(renumber[i], node) for i, node in state.unplaced if i not in drop]

    def _inside_kept_body(self, node: cst.CSTNode) -> bool:
        """``node`` lies in the body of a class of :attr:`FileState.kept_linen`, not on a field line (an
        annotated assignment of the class body itself: the path up is ``AnnAssign``, its line, the body)."""
        path, parent = [node], self.parent_of(node)
        while parent is not None:
            if isinstance(parent, cst.ClassDef):
                if parent not in self.state.kept_linen or path[-1] is not parent.body:
                    return False
                return not (len(path) >= 3 and isinstance(path[-3], cst.AnnAssign))
            path.append(parent)
            parent = self.parent_of(parent)
        return False

    def is_linen_module(self, node: cst.ClassDef) -> bool:
        return any(
            self.qualnames(base.value) & LINEN_MODULE or self.user_class_of(base.value) is not None
            for base in node.bases
        )

    def dataclass_field(self, small: cst.AnnAssign, rewritten: cst.AnnAssign | None = None) -> Field:
        """A dataclass field; its default's text is taken from ``rewritten`` when given."""
        default, init, specifier = None, True, False
        if small.value is not None:
            value = small.value
            if isinstance(value, cst.Call) and self.qualnames(value.func) & FIELD_FUNCTIONS:
                done = rewritten.value if rewritten is not None else None
                source = done if isinstance(done, cst.Call) else value
                kw = {a.keyword.value: a.value for a in source.args if a.keyword is not None}
                if "default" in kw:
                    default = code(kw["default"])
                elif "default_factory" in kw:
                    factory = kw["default_factory"]
                    # ``lambda: key()`` must be called as ``(lambda: key())()``, not ``lambda: key()()``
                    default = f"({code(factory)})()" if needs_parens(factory) else f"{code(factory)}()"
                init = not (isinstance(kw.get("init"), cst.Name) and kw["init"].value == "False")
            else:
                default = code(
                    rewritten.value if rewritten is not None and rewritten.value is not None else value
                )
                specifier = is_field_specifier(value)
        annotation = rewritten.annotation if rewritten is not None else small.annotation
        return Field(small.target.value, code(annotation.annotation), default, init, specifier=specifier)

    def class_key(self, name: str) -> str:
        return f"{self.state.module_name}.{name}" if self.state.module_name else name

    def _find_layer_subclasses(self, node: cst.Module) -> None:
        """Module-level subclasses of a built-in layer that only override ``param`` (see
        :mod:`~linen2nnx.migrate.layer_subclasses`); their base is consumed by the rewrite."""
        self.state.layer_subclasses = {}
        for stmt in node.body:
            if isinstance(stmt, cst.ClassDef) and len(stmt.bases) == 1:
                base = stmt.bases[0].value
                found = layer_subclass(stmt, self._builtin_layer_rule(base), lambda n: reads_linen(self, n))
                if found is not None:
                    self.state.layer_subclasses[stmt.name.value] = found
                    self.state.handled.add(base)

    def _builtin_layer_rule(self, base: cst.BaseExpression) -> LayerRule | None:
        """The built-in layer ``base`` names itself (``nn.Conv``), None for anything else: a subclass of
        a subclass (``class DoubleScaled(ScaledDense)``) applies its parents' overrides too, which the
        NNX class of :mod:`~linen2nnx.migrate.layer_subclasses` would drop."""
        if isinstance(base, cst.Name) and base.value in self.state.module_classes:
            return None
        return self._named_layer_rule(base)

    def resolve_module(self, node: cst.Module) -> None:
        """The module-level facts (lift aliases, classes, functions, unboxing helpers), before any class is
        planned; the sizes module-level helpers return are found when asked (:meth:`function_out`)."""
        self._collect_transform_aliases(node.body)
        self.collect_lift_aliases(node.body)
        self.state.module_classes = {s.name.value for s in node.body if isinstance(s, cst.ClassDef)}
        self.state.module_functions = {s.name.value: s for s in node.body if isinstance(s, cst.FunctionDef)}
        self.state.module_names = module_names(node.body)
        self.state.record_classes = {  # its own and those it imports from other files of the run
            **imported_records(node.body, self.state.module_name, self.state.external_records),
            **record_classes(node.body, self.qualnames, self.state.module_name, folders_of(self.state.path)),
        }
        self.state.unbox_helpers = {
            name for name, fn in self.state.module_functions.items() if is_unbox_helper(self, fn)
        }
        self.state.bindings = None  # built on first use (see field_factory)
        self._find_function_factories()
        self._find_layer_subclasses(node)
        report_crossfile_bindings(self, node)
        self.state.module_lines = {
            code(s).strip()
            for s in node.body
            if isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], cst.Assign)
            and isinstance(s.body[0].targets[0].target, cst.Attribute)
            and s.body[0].targets[0].target.attr.value == "linen_class"
        }

    def function_out(self, name: str) -> tuple[list[str], Feat] | None:
        """The size the module-level function ``name`` returns, in its parameters' terms (``def
        reparameterize(mean, ...): return mean + ...``), when its returns agree; found the first time
        a method's dataflow calls the function (most helpers are never asked about), then remembered."""
        known = self.state.function_out
        if name in known:
            return known[name]
        known[name] = None
        for stmt in self.state.tree.body:  # the last definition that gives a size wins
            # a decorator may change what the function returns; jax.jit and a bare jax.vmap (axis 0 in and
            # out) keep the last axis of a result whose last axis is an argument's
            if (
                isinstance(stmt, cst.FunctionDef)
                and stmt.name.value == name
                and all(self.qualnames(d.decorator) & {"jax.jit", "jax.vmap"} for d in stmt.decorators)
            ):
                params = [p.name.value for p in stmt.params.params]
                flow = FeatureFlow(
                    params, lambda call: None, self.qualnames, records=self.state.record_classes
                )
                flow.run(stmt.body.body)
                out = agreed_return(flow.returns)
                if out is not None and "self" not in out.expr:
                    known[name] = (params, out)
        return known[name]
