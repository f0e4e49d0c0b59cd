"""The module codemod: Linen ``nn.Module`` classes -> ``nnx.Module`` classes.

What the rewrite does: dataclass fields become ``__init__`` parameters; ``setup()`` statements move
into ``__init__``; ``@nn.compact`` submodules (built-in layers and the run's own Linen classes) are
hoisted there under attributes named after the Linen auto-names (``Dense_0`` -> ``dense_0``), an
``nnx.List`` for ones built in a loop, with the config locals they read replayed; built-in layers
become their NNX counterparts with ``in_features`` and ``rngs=rngs``; ``self.param`` /
``self.variable`` become ``nnx.Param`` / typed Variables; call-time mode arguments
(``deterministic=not train``) move to the call; ``nn.relu`` and friends are re-pointed to ``nnx``.
Anything left that still needs Linen is a ``manual`` finding with an inline TODO marker, and a class
whose findings block its rewrite is kept as Linen behind ``nnx.bridge``.

Passes, in the order one libcst traversal runs them (the order is part of the output contract):

1. *resolve* -- :class:`~linen2nnx.migrate.context.FileContext` (``visit_Module``): lift aliases,
   the file's classes and functions, unboxing helpers, the sizes module-level helpers return; on
   demand, qualified names, parents and module-factory field bindings.
2. *analyse* -- :class:`~linen2nnx.migrate.planning.ClassPlanner` (``visit_ClassDef``, on the
   original class before its children are visited): a :class:`~linen2nnx.migrate.sites.ClassPlan`
   with every site (where each submodule / variable is built:
   :class:`~linen2nnx.migrate.site_planning.SitePlanner`, walking ``@nn.compact`` methods with a
   :class:`~linen2nnx.migrate.compact_collect.CompactCollector`) and its feature sizes
   (:class:`~linen2nnx.migrate.sizing.Sizer`, one :class:`~linen2nnx.migrate.method_flow.MethodFlow`
   per method).
3. *rewrite* -- bottom-up ``leave_*`` callbacks dispatched to
   :class:`~linen2nnx.migrate.rewrite_calls.CallRewriter`,
   :class:`~linen2nnx.migrate.rewrite_attrs.AttributeRewriter` and
   :class:`~linen2nnx.migrate.rewrite_classes.ClassRewriter`, which emit code from the plan with the
   :class:`~linen2nnx.migrate.emit.Emitter`; ``leave_Module`` fixes the imports; findings get their
   positions last.

Data between them: one :class:`~linen2nnx.migrate.file_state.FileState` (inputs, outputs, indices of
the original tree, findings bookkeeping, the plans, and the planning / rewrite results keyed by
original node); the ``ClassPlan`` of each class (``state.plans``, ``state.class_stack``). Analysis
reads the original tree only; rewriting reads plans and the rewritten children.

Cost per file with a Linen class (counted on the Flax examples, recurrentgemma and flaxmodels): one
parse (engine); three full walks -- the :class:`~linen2nnx.migrate.names.NameResolver` scope walk,
the parent map (``syntax_parent_map``), and this ``CSTTransformer`` traversal
(:func:`~linen2nnx.migrate.traverse.transform`: libcst's calls and result, without visiting whitespace
/ punctuation subtrees, names and literals, nor validating copies of unchanged nodes), which skips
the module-level statements in which no name may stand for Linen (``NameResolver.plain_statements``: helpers,
docstrings, plain constants); ``FastVisitor`` sub-walks of classes and methods worth 1.6 to 4.4 more
full walks (``FieldBindings``' one full walk included); no ``MetadataWrapper`` resolve; for the
findings' positions, a code generation of the module-level statements that hold findings only
(:mod:`~linen2nnx.migrate.positions`); one code generation of the output (engine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst
from libcst.codemod import Codemod, CodemodContext

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.class_order import later_classes_first
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import IS_STATEMENT
from linen2nnx.migrate.cst_utils import (
    absolute_qualname,
    names_in,
    parse_expression,
)
from linen2nnx.migrate.custom_vars import add_variable_classes
from linen2nnx.migrate.elementwise import ElementwiseTable, table_facts
from linen2nnx.migrate.emit import Emitter
from linen2nnx.migrate.factory_fields import bound_partial_dtypes
from linen2nnx.migrate.file_state import FileState
from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.function_factories import FunctionFactory, with_factory_params
from linen2nnx.migrate.function_replay import top_level_imports
from linen2nnx.migrate.imports import drop_unused_linen_imports, ensure_nnx_import, ensure_plain_import
from linen2nnx.migrate.layer_subclass_uses import (
    LayerSubclassFact,
    LayerSubclassUse,
    dotted_subclass_names,
    layer_subclass_uses,
    report_layer_subclass_use,
)
from linen2nnx.migrate.linen_api import (
    UNBOX_FUNCTIONS,
    names_as_tuple,
    renamed_keywords,
)
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.planning import ClassPlanner
from linen2nnx.migrate.rewrite_attrs import AttributeRewriter
from linen2nnx.migrate.rewrite_calls import CallRewriter
from linen2nnx.migrate.rewrite_classes import ClassRewriter
from linen2nnx.migrate.site_planning import SitePlanner
from linen2nnx.migrate.sites import (
    ClassPlan,
    ClassSummary,
    with_new_markers,
)
from linen2nnx.migrate.sizing import Sizer
from linen2nnx.migrate.trace import Trace
from linen2nnx.migrate.traverse import transform
from linen2nnx.migrate.variable_reads import variables_read
from linen2nnx.migrate.variable_stores import variable_store
from linen2nnx.migrate.weights_apply import weights_apply
from linen2nnx.namemap import NameMap


class MigrateModules(Codemod, cst.CSTTransformer):
    DESCRIPTION = "Rewrite Flax Linen modules as idiomatic Flax NNX modules."

    def __init__(
        self,
        context: CodemodContext,
        *,
        path: str,
        module_name: str,
        trace: Trace | None = None,
        rule_enabled: Callable[[str], bool] = lambda rule_id: True,
        unsafe_fixes: bool = False,
        external: Mapping[str, ClassSummary] | None = None,
        factories: Mapping[str, Any] | None = None,
    ):
        super().__init__(context)
        self.state = FileState.of(
            path=path,
            module_name=module_name,
            trace=trace,
            rule_enabled=rule_enabled,
            unsafe_fixes=unsafe_fixes,
            external=external,
            factories=factories,
        )
        self.ctx = FileContext(self.state)  # resolve: names, parents, lift chains, findings
        self.sizer = Sizer(self.ctx)  # feature sizes of a plan's sites
        self.site_planner = SitePlanner(self.ctx, self.sizer)  # analyse: the sites of a plan
        self.planner = ClassPlanner(
            self.ctx, self.sizer, self.site_planner
        )  # analyse: one ClassPlan per class
        self.emitter = Emitter(self.ctx)  # NNX constructors and __init__ from a plan
        self.calls = CallRewriter(self.ctx, self.emitter)  # rewrite: calls
        self.attrs = AttributeRewriter(self.ctx)  # rewrite: nn.* names and self.<variable> reads
        self.classes = ClassRewriter(self.ctx, self.emitter)  # rewrite: methods and classes
        self.classes.on_kept_linen = self._report_kept_linen_uses
        self.plain: set[cst.CSTNode] = set()  # module-level statements the traversal does not enter
        # top-level class -> the converted layer subclasses it names (reported if it is not rewritten)
        self.layer_uses: dict[cst.ClassDef, list[LayerSubclassUse]] = {}
        # classes planned before the traversal reaches them, since a class above builds them
        self.early_plans: dict[cst.ClassDef, ClassPlan | None] = {}
        self.class_names: dict[cst.ClassDef, set[str]] = {}  # the names each top-level class reads

    @property
    def findings(self) -> list[Finding]:
        return self.state.findings

    @property
    def summaries(self) -> dict[str, ClassSummary]:
        """The classes' summaries, each marked kept as Linen when its rewrite ended blocked (a blocking
        finding may come after planning summarised it: training code must then build it through the
        bridge, with ``nnx.bridge.lazy_init``)."""
        blocked = {p.key for p in self.state.linen_classes.values() if p.blocking or p.bridged}
        return {
            key: dataclasses.replace(s, kept_linen=True) if key in blocked and not s.kept_linen else s
            for key, s in self.state.summaries.items()
        }

    @property
    def converted_classes(self) -> set[str]:
        """The classes this file's pass rewrote as NNX (the verifier vouches for these)."""
        return set(self.state.converted)

    @property
    def function_factories(self) -> dict[str, FunctionFactory]:
        """This file's layer factory functions, by key: files importing them build through them too."""
        return {f.key: f for f in self.state.function_factories.values()}

    @property
    def name_map(self) -> NameMap:
        return self.state.name_map

    def visit_Module(self, node: cst.Module) -> None:
        self.ctx.resolve_module(node)
        self.plain = self._plain_statements()
        self.layer_uses = {}
        external = self.state.external_layer_subclasses  # `convs.StdConv` of `import pkg.convs as convs`
        dotted = (
            dotted_subclass_names(top_level_imports(node, self.state.module_name), external)
            if external
            else {}
        )
        for use in layer_subclass_uses(node, self._layer_subclass_names(node), dotted):
            if use.owner is None:
                report_layer_subclass_use(self.ctx, use)
            else:
                self.layer_uses.setdefault(use.owner, []).append(use)

    def _report_layer_uses(self, owner: cst.ClassDef) -> None:
        """The converted layer subclasses a class kept as Linen (or not rewritten) names: it builds them
        the Linen way, which the NNX class they became does not take; each use a located finding."""
        for use in self.layer_uses.get(owner, ()):
            report_layer_subclass_use(self.ctx, use)

    def _report_kept_linen_uses(self, owner: cst.ClassDef) -> None:
        """:meth:`_report_layer_uses` for a class about to be kept as Linen, whose statements the rewrite
        has left already: their markers go with the ones the Linen copy is marked with."""
        self._report_layer_uses(owner)
        for use in self.layer_uses.get(owner, ()):
            stmt = self.ctx.statement_of(use.node)
            notes = self.state.markers.pop(stmt, None) if stmt is not None else None
            if notes:
                self.state.placed_markers.setdefault(stmt, []).extend(notes)  # type: ignore[arg-type]

    def _layer_subclass_names(self, node: cst.Module) -> dict[str, LayerRule]:
        """The converted layer subclasses this file names: its own, and those its top-level imports bind
        from other files of the run (``from pkg.convs import StdConv``), each with its built-in layer."""
        names = {name: sub.rule for name, sub in self.state.layer_subclasses.items()}
        imported = self.state.external_layer_subclasses
        if imported:
            for name, qualname in top_level_imports(node, self.state.module_name).items():
                fact = imported.get(qualname)
                if fact is not None and name not in names:
                    names[name] = fact.rule
        return names

    @property
    def layer_subclass_facts(self) -> dict[str, LayerSubclassFact]:
        """This file's converted layer subclasses, by key: files importing them report their uses."""
        return {
            (key := self.ctx.class_key(name)): LayerSubclassFact(key, sub.rule)
            for name, sub in self.state.layer_subclasses.items()
        }

    @property
    def elementwise_facts(self) -> dict[str, ElementwiseTable]:
        """This file's module-level tables of activations: files importing them size their lookups."""
        return table_facts(self.ctx)

    def _plain_statements(self) -> set[cst.CSTNode]:
        """Module-level statements no rewrite can touch (see ``NameResolver.plain_statements``): no
        name in them may stand for Linen -- a flax import, a module of the run, a class, a module-level
        assignment (a lift alias, ...), an unboxing helper or a function that reads one. The traversal
        keeps them as parsed instead of rebuilding them."""
        state = self.state
        if state.resolver is None:
            state.resolver = NameResolver(state.tree, state.stars)
        # the classes other files of the run define, one a line: a module or a class of theirs is found by
        # one substring search, not a loop over thousands of classes for each import
        external = "\n" + "\n".join(state.external) + "\n" if state.external else ""

        def linen_import(qualname: str) -> bool:
            if qualname.startswith("flax"):
                return True
            if not external:
                return False
            absolute = absolute_qualname(qualname, state.module_name)
            return f"\n{absolute}\n" in external or f"\n{absolute}." in external

        return state.resolver.plain_statements(linen_import, state.unbox_helpers)

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if node in self.early_plans:
            plan = self.early_plans.pop(node)
        else:
            if not self.state.class_stack:  # a top-level class: the classes below it that it builds first
                for later in later_classes_first(
                    self.state.tree, node, set(self.early_plans), self.class_names
                ):
                    self.early_plans[later] = self.planner.plan_module_class(later)
            plan = self.planner.plan_module_class(node)
        self.state.class_stack.append(plan)
        if plan is None:  # not a Linen class the run rewrites: a converted layer subclass in it is not built
            self._report_layer_uses(node)

    def visit_Call(self, node: cst.Call) -> None:
        if any(
            q.removeprefix("flax.linen.") in UNBOX_FUNCTIONS
            for q in self.ctx.qualnames(node.func)
            if q.startswith("flax.linen.")
        ):
            self.state.handled.add(node.func)  # nn.unbox(x): the call is rewritten to x
        if (
            self.calls.function_lift_kind(node) is not None
        ):  # its nn.broadcast & co. are consumed by the rewrite
            self.ctx.mark_transform_names(node)

    # ---- rewriting: dispatch to the rewriters ------------------------------------------------
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        renamed = renamed_keywords(self.ctx.qualnames, original, updated)
        if renamed is not None:  # `rules=` of a partitioned initializer: NNX's `sharding_rules=`
            updated = renamed
        named = names_as_tuple(self.ctx.qualnames, original, updated)
        if named is not None:  # sharding names in a list: NNX places by a tuple only
            updated = named
        typed = bound_partial_dtypes(self.ctx.qualnames, self.state.binding_values, original, updated)
        if typed is not None:  # `partial(nn.LayerNorm, dtype=...)` a factory field builds
            updated = typed
        return weights_apply(self.ctx, original, updated) or self.calls.leave_call(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self.attrs.leave_attribute(original, updated)

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
        return variables_read(self.ctx, original) or updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.BaseSmallStatement:
        target = original.targets[0].target
        if type(target) is cst.Attribute and target.attr.value == "value":  # `v.value = x` (cheap test first)
            return variable_store(original, updated)
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        factory = self.state.function_factories.get(original.name.value)
        if factory is not None and self.state.module_functions.get(original.name.value) is original:
            return with_factory_params(updated, factory.rule)  # a layer factory function
        return self.classes.leave_method(original, updated)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> Any:
        return self.classes.leave_class(original, updated)

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        loop = self.state.indexed_loops.get(original)
        if loop is None:
            return updated
        target = parse_expression(loop.target_src)
        return updated.with_changes(target=target, iter=parse_expression(loop.iter_src))

    # no visit_<Type>_<field> / leave_<Type>_<field> handlers exist: skip libcst's per-field getattr
    def on_visit_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind in _KEPT_TYPES:  # never rewritten: keep the node (and its children) as parsed
            return False
        if IS_STATEMENT[kind] and node in self.plain:  # nothing Linen in it: kept as parsed too
            return False
        handler = _VISITORS[kind]
        return handler is None or handler(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        kind = type(original_node)
        if kind in _KEPT_TYPES:
            return updated_node
        handler = _LEAVERS[kind]
        updated = updated_node if handler is None else handler(self, original_node, updated_node)
        if not IS_STATEMENT[kind]:
            return updated  # what follows only concerns statements (the keys of the dicts it reads)
        if (
            original_node in self.state.dropped_statements
        ):  # `dense = partial(nn.Dense, ...)`: built in __init__
            return cst.RemoveFromParent()
        plan = self.ctx.current_plan()
        if plan is not None and original_node in plan.pure_locals.values():
            self.state.pure_updated[original_node] = updated
        if isinstance(original_node, cst.SimpleStatementLine):
            alias = next((n for n, st in self.state.alias_stmts.items() if st is original_node), None)
            if alias is not None and self.state.alias_use.get(alias):
                return cst.RemoveFromParent()
        updated = self.state.stmt_replaced.pop(original_node, updated)
        if original_node in self.state.else_kept:  # a remat flag's two branches: the else one's list
            updated = updated.orelse.body.body[0]
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
            updated = updated.with_changes(body=[self.classes.with_out_features(s) for s in updated.body])
        if self.state.uses_nnx:
            updated = drop_unused_linen_imports(ensure_nnx_import(updated))
        if self.state.needs_jax_import:  # after the docstring and __future__ imports, never above them
            updated = ensure_plain_import(updated, "jax", blank_line_after=False)
        if self.state.needs_math_import:
            updated = ensure_plain_import(updated, "math")
        for module in sorted(self.state.plain_imports):  # a base's module, whose names a default reads
            updated = ensure_plain_import(updated, module, blank_line_after=False)
        if self.state.variable_classes:  # those the output uses (a class kept as Linen uses the string)
            used = names_in(updated)
            wanted = {c: n for c, n in self.state.variable_classes.items() if n in used}
            updated = add_variable_classes(updated, wanted, self.state.sown_collections)
        return updated

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)

    def transform_module(
        self, tree: cst.Module, source: str | None = None, resolver: NameResolver | None = None
    ) -> cst.Module:
        """One pass over a freshly parsed tree (no defensive copy, no extra import passes, no libcst
        metadata: names, parents and positions come from the cheaper helpers above). ``source``, the
        text ``tree`` was parsed from, lets findings be placed without a code generation of the tree;
        ``resolver``, one an earlier step built over ``tree``, saves building it again."""
        self.state.tree, self.state.resolver, self.state.parents = tree, resolver, None
        self.state.source = source
        migrated = transform(tree, self, _KEPT_TYPES)  # = tree.visit(self), cheaper
        self.ctx.place_findings()
        return migrated


def _lexical_types() -> frozenset[type]:
    """Whitespace, comments, punctuation and operators: node types the codemod has no handler for and
    that hold no statement or expression, so visiting them can change nothing."""
    bases = (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp)
    ops = {t for t in vars(cst).values() if isinstance(t, type) and issubclass(t, bases) and t not in bases}
    return frozenset(
        {
            cst.SimpleWhitespace,
            cst.ParenthesizedWhitespace,
            cst.Newline,
            cst.TrailingWhitespace,
            cst.EmptyLine,
            cst.Comment,
            cst.Comma,
            cst.Dot,
            cst.Colon,
            cst.Semicolon,
            cst.AssignEqual,
            cst.LeftParen,
            cst.RightParen,
            cst.LeftSquareBracket,
            cst.RightSquareBracket,
            cst.LeftCurlyBrace,
            cst.RightCurlyBrace,
            cst.ImportStar,
            cst.Asynchronous,
            cst.ParamSlash,
            cst.ParamStar,
            *ops,
        }
    )


_LEXICAL_TYPES = _lexical_types()
# names and literals: no handler either, and no child but lexical ones (parentheses, whitespace), so the
# rewrite uses them as parsed -- visiting one would only copy it (and re-validate the copy)
_LEAF_TYPES = frozenset(
    {
        cst.Name,
        cst.Integer,
        cst.Float,
        cst.Imaginary,
        cst.SimpleString,
        cst.Ellipsis,
        cst.FormattedStringText,
    }
)
_KEPT_TYPES = _LEXICAL_TYPES | _LEAF_TYPES


class _Handlers(dict):
    """type -> ``MigrateModules``' own ``visit_<Type>`` / ``leave_<Type>``, None where it has none (libcst's
    typed no-ops): what ``CSTTransformer.on_visit`` / ``on_leave`` find with an f-string and a ``getattr``
    for every node, looked up once per type."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def __missing__(self, kind: type) -> Callable[..., Any] | None:
        name = f"{self.prefix}_{kind.__name__}"
        own = getattr(MigrateModules, name, None)
        self[kind] = found = None if own is None or own is getattr(cst.CSTTransformer, name, None) else own
        return found


_VISITORS = _Handlers("visit")
_LEAVERS = _Handlers("leave")
