"""The verifier: the migrated output read once more, so that a class the output calls NNX holds no Linen.

The rewrite can leave Linen inside a class it turned into an ``nnx.Module`` (a submodule list built
by a comprehension, a tied embedding read through ``.variables`` and applied with ``.apply``, a class
of the run still built with ``name=``). Such code neither builds nor computes the same thing, yet it
used to get no finding: the worst outcome, a silent one. The verifier parses the final output
(read-only, one walk), checks every class the output defines as NNX (it subclasses ``nnx.Module``,
or another NNX class of the file or of the run; a class kept as Linen behind ``nnx.bridge.ToNNX`` is
Linen and is not checked), and reports each leftover as a ``manual`` ``L2N-VERIFY-*`` finding with
an inline marker, located at the *input*'s line. It never rewrites code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import (
    CHILDREN_MEMO,
    IS_STATEMENT,
    NAME_OR_ATTRIBUTE,
    code_of,
    parse_module,
    start_positions,
    syntax_children,
)
from linen2nnx.migrate.cst_utils import absolute_qualname, assigned_names, code, is_super_call, self_attr
from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.function_factories import FunctionFactory
from linen2nnx.migrate.linen_factories import LinenFactory, linen_factories
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.param_helpers import helper_of
from linen2nnx.migrate.rules import verify as verify_rules
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.sites import MARKER, ClassSummary, StatementMarker, markers_of, one_line
from linen2nnx.migrate.star_imports import star_names
from linen2nnx.migrate.training.driver import line_map
from linen2nnx.migrate.unknown_builders import outside_maker
from linen2nnx.migrate.verify_aliases import child_alias, method_aliases, module_class_aliases
from linen2nnx.migrate.verify_methods import class_attribute_notes, method_notes
from linen2nnx.migrate.verify_names import (
    LINEN_SELF_ONLY,
    LINEN_TREE_PLACE,
    VARIABLE_METHODS,
    Signature,
    flax_class_kind,
    impure_linen_name,
    signature_of,
    star_imports,
    unresolved_build,
)
from linen2nnx.migrate.verify_outside import builds_run_class, check_builds_outside
from linen2nnx.migrate.verify_syntax import (
    applied_locals,
    container_items,
    container_kind,
    handed_self,
    imported_helper,
    linen_args,
    linen_decorators,
    linen_helpers,
    linen_partial,
    marked_by_another_rule,
    method_helpers,
    module_partials,
    names_with_bases,
    self_chain,
    self_target,
    top_classes,
)


def verify_output(
    output: str,
    original: str,
    *,
    path: str,
    module_name: str,
    external: Mapping[str, ClassSummary],
    rule_enabled: Callable[[str], bool],
    tree: cst.Module | None = None,
    factories: Mapping[str, Any] | None = None,
    converted: Collection[str] | None = None,
    names_of_tree: Callable[[], NameResolver] | None = None,
    built: set[str] | None = None,
    outside_classes: bool = True,
) -> tuple[str, list[Finding]]:
    """``output`` with an inline marker on each leftover of Linen in its NNX classes, and the findings
    (with the lines of ``original``, the input of the whole migration).

    ``converted``: the classes this run rewrote (None: all of them); in an NNX class the input already
    had, ``.apply`` / ``.init`` / ``.variables`` are its author's (a hand-written bridge), not leftovers.

    ``tree``: a tree whose code is ``output`` (the module pass's own), read instead of parsing
    ``output`` again. Such a tree may hold one memoised node at two places, so when it shows a
    leftover the output is parsed after all: positions and markers need one node per place.
    ``names_of_tree``: the resolver of ``tree``, when the caller built (or will build) one anyway.
    ``built`` gains the keys of the run's classes that NNX classes here build with every argument
    their ``__init__`` requires (:mod:`.caller_sizes`). ``outside_classes``: also check the builds of
    the run's NNX classes in functions and module-level statements (:mod:`.verify_outside`).
    """
    if not any(rule_enabled(r.id) for r in verify_rules.RULES):
        return output, []
    if "nnx" not in output and not (outside_classes and builds_run_class(output, external)):
        return output, []
    options = (module_name, external, factories or {}, rule_enabled, converted)
    if tree is not None:
        names = names_of_tree() if names_of_tree is not None else None
        if not _leftovers(tree, *options, names, built, outside_classes):
            return output, []
    module = parse_module(output)  # = cst.parse_module(output), cheaper
    notes = _leftovers(module, *options, None, built, outside_classes)
    if not notes:
        return output, []
    positions = start_positions(module, [node for _, node, _, _ in notes])
    to_input = line_map(output, original)
    findings: list[Finding] = []
    markers: dict[cst.CSTNode, list[str]] = {}
    for rule, node, stmt, message in notes:
        line, col = positions.get(node, (1, 0))
        findings.append(Finding.of(rule, path, to_input(line), col + 1, message))
        # a statement an earlier run's verifier marked keeps its words: what a run knows of the other
        # files differs once their classes are NNX, and a second run must change nothing
        if not markers_of(stmt, f"{MARKER} L2N-VERIFY"):
            markers.setdefault(stmt, []).append(f"{MARKER} {rule.id} {message}")
    marked = module.visit(StatementMarker(markers))
    return code_of(marked), findings


def _leftovers(
    module: cst.Module,
    module_name: str,
    external: Mapping[str, ClassSummary],
    factories: Mapping[str, Any],
    rule_enabled: Callable[[str], bool],
    converted: Collection[str] | None = None,
    names: NameResolver | None = None,
    built: set[str] | None = None,
    outside_classes: bool = True,
) -> list[tuple[Rule, cst.CSTNode, cst.CSTNode, str]]:
    verifier = _Verifier(module, module_name, external, factories, converted, names)
    verifier.run(outside_classes)
    if built is not None:
        built |= verifier.built
    return [n for n in verifier.notes if rule_enabled(n[0].id)]


class _Verifier:
    """One walk over the module; ``notes`` collects ``(rule, node, statement, message)``."""

    def __init__(
        self,
        module: cst.Module,
        module_name: str,
        external: Mapping[str, ClassSummary],
        factories: Mapping[str, Any],
        converted: Collection[str] | None = None,
        names: NameResolver | None = None,
    ) -> None:
        self.module = module
        self.converted = converted
        self._marked: dict[cst.ClassDef, bool] = {}  # class -> carries linen2nnx markers (see _rewritten)
        self.module_name = module_name
        self.external = external
        self.names = names if names is not None else NameResolver(module, star_names(factories, module_name))
        self._stars = star_imports(module)  # modules whose names a bare unresolved name may be
        self.nnx_classes: dict[str, cst.ClassDef] = {}  # NNX classes of this file, by name
        self.linen_classes: set[str] = set()  # Linen classes of this file (kept ones included)
        self.defs = {c.name.value: c for c in top_classes(module)}
        self._helpers: dict[str, tuple[list[str], dict[str, str]]] | None = None  # see _linen_helpers
        self._decorators: dict[str, str] | None = None  # see _check_decorator
        self._partials = module_partials(module)  # `Dense = partial(nn.Dense, ...)`: see linen_partial
        self._signatures: dict[str, Signature | None] = {}
        self.notes: list[tuple[Rule, cst.CSTNode, cst.CSTNode, str]] = []
        self.built: set[str] = set()  # keys of the run's classes NNX classes here build with all arguments
        self._class: cst.ClassDef | None = None  # the NNX class being checked
        self._own: dict[cst.ClassDef, set[str]] = {}  # NNX class -> the names it (and its bases) define
        self._factories: dict[str, LinenFactory] | None = None  # see _factory
        self._applied: set[int] = set()  # ids of calls whose result is called at once (see _check_unresolved)
        # per method being checked: the method, and its locals that hold a class (found on first need)
        self._methods: list[tuple[cst.FunctionDef, dict[str, cst.BaseExpression] | None]] = []
        self._module_aliases: dict[str, cst.BaseExpression] | None = None  # see _alias_of
        self.factories = factories  # functions of the run that build layers: rewritten, or still Linen
        self.function_factories = {k: v for k, v in factories.items() if isinstance(v, FunctionFactory)}

    def run(self, outside_classes: bool = True) -> None:
        for node in self.defs.values():  # a Linen class written below the NNX class that builds it counts too
            if self._class_kind(node) == "linen":
                self.linen_classes.add(node.name.value)
        self._walk(self.module, None)
        check_builds_outside(self, classes_only=not outside_classes)

    def _report(self, rule: Rule, node: cst.CSTNode, stmt: cst.CSTNode | None, message: str) -> None:
        """A leftover on ``stmt``, unless another rule marked the statement: that leftover is reported
        already (the verifier is there for the silent ones)."""
        if stmt is not None and not marked_by_another_rule(stmt):
            self.notes.append((rule, node, stmt, message))

    # ---- the walk --------------------------------------------------------------------------------
    def _walk(self, node: cst.CSTNode, stmt: cst.CSTNode | None) -> None:
        kind = type(node)  # node types by dict lookups: libcst's abstract bases make isinstance slow
        if IS_STATEMENT[kind]:
            stmt = node
            if kind is cst.SimpleStatementLine and self._class is None and not self.function_factories:
                return  # outside NNX classes only classes (statements of their own) and factory calls count
        if kind is cst.ClassDef:
            self._enter_class(node, stmt)  # type: ignore[arg-type]
            return
        if kind is cst.Call and self.function_factories:
            self._check_factory_call(node, stmt)  # type: ignore[arg-type]
        if kind is cst.FunctionDef and self._class is not None:
            if node.name.value in ("__init__", "__post_init__"):  # type: ignore[attr-defined]
                # a default reading a name the file does not bind fails the whole file at import: checked
                # in every NNX class of the output (a bridge wrapper's too), the rest in the run's own
                rewritten = self._rewritten()
                for rule, at, where, message in method_notes(self._class, node, self.module):  # type: ignore[arg-type]
                    if rewritten or rule is verify_rules.VERIFY_008:
                        self._report(rule, at, where, message)
            self._methods.append((node, None))  # type: ignore[arg-type]
            self._applied |= applied_locals(node)  # type: ignore[arg-type]
            for child in syntax_children(node):
                self._walk(child, stmt)
            self._methods.pop()
            return
        if self._class is not None:
            if kind is cst.Call:
                if self._check_call(node, stmt):  # type: ignore[arg-type]
                    return  # a bridge call: the Linen module it wraps is meant to be there
            elif kind is cst.Attribute:
                self._check_attribute(node, stmt)  # type: ignore[arg-type]
            elif kind is cst.Assign or kind is cst.AnnAssign:
                self._check_container(node, stmt)  # type: ignore[arg-type]
            elif kind is cst.Decorator:
                self._check_linen_reference(node.decorator, node, stmt)  # type: ignore[attr-defined]
                self._check_decorator(node, stmt)  # type: ignore[arg-type]
        entry = CHILDREN_MEMO.get(id(node))  # syntax_children(node), its memo read inline
        for child in entry[1] if entry is not None and entry[0] is node else syntax_children(node):
            self._walk(child, stmt)

    def _enter_class(self, node: cst.ClassDef, stmt: cst.CSTNode | None) -> None:
        kind = self._class_kind(node)
        name = node.name.value
        outer = self._class
        if kind == "nnx":
            self.nnx_classes[name] = node
            self._class = node
        else:
            if kind == "linen":
                self.linen_classes.add(name)
            self._class = None
        before = len(self.notes)
        for child in syntax_children(node.body):
            self._walk(child, stmt)
        if self._class is not None and len(self.notes) > before and not self._rewritten():
            # its markers make the next run read it as the run's own: check it as such now (idempotent)
            del self.notes[before:]
            self._marked[node] = True
            for child in syntax_children(node.body):
                self._walk(child, stmt)
        if self._class is not None and self._rewritten():
            for rule, at, where, message in class_attribute_notes(node, self.module):
                self._report(rule, at, where, message)
        self._class = outer

    def _rewritten(self) -> bool:
        """Did this run rewrite the class being checked? An NNX class the input already had may hold a
        Linen module on purpose (a hand-written bridge applies it with ``.apply``): only the Linen API
        calls of the classes the run converted (now, or in an earlier run that marked them) are
        leftovers."""
        if self.converted is None or self._class is None or self._class.name.value in self.converted:
            return True
        if self._class not in self._marked:  # the output of an earlier run: its markers say it is ours
            self._marked[self._class] = MARKER in code_of(self._class)
        return self._marked[self._class]

    def _own_names(self) -> set[str]:
        """What the NNX class being checked defines on ``self`` (found on first need: most classes never ask)."""
        if self._class is None:
            return set()
        if self._class not in self._own:
            self._own[self._class] = names_with_bases(self._class, self.defs)
        return self._own[self._class]

    def _class_kind(self, node: cst.ClassDef) -> str | None:
        """``"nnx"``, ``"linen"`` or None, from the bases (of flax, of this file, of the run)."""
        for base in node.bases:
            if base.keyword is not None:
                continue
            value = base.value
            if isinstance(value, cst.Name) and value.value in self.nnx_classes:
                return "nnx"
            if isinstance(value, cst.Name) and value.value in self.linen_classes:
                return "linen"
            for q in self.names.qualnames(value):
                kind = flax_class_kind(q)
                if kind is not None:
                    return kind
                if self._external(q) is not None:
                    return "nnx"  # the run migrated it: in its file's output it is an NNX class
        return None

    def _external(self, qualname: str) -> ClassSummary | None:
        """The summary of a class another file of the run migrated."""
        return self.external.get(absolute_qualname(qualname, self.module_name)) if self.external else None

    # ---- the checks ------------------------------------------------------------------------------
    def _check_call(self, call: cst.Call, stmt: cst.CSTNode | None) -> bool:
        """Checks ``call``; True when it is a bridge call, whose arguments are not checked."""
        func = call.func
        if type(func) is cst.Call:  # `make(...)(x)`: the inner call's result is applied at once
            self._applied.add(id(func))
        qualnames = self.names.qualnames(func) if type(func) in NAME_OR_ATTRIBUTE else set()
        if any(q.startswith("flax.nnx.bridge.") for q in qualnames):
            return True
        assert self._class is not None
        owner = self._class.name.value
        linen_q = next((q for q in qualnames if flax_class_kind(q) == "linen"), None)
        if type(func) is cst.Name and func.value in self.linen_classes:
            linen_q = func.value
        elif type(func) is cst.Name and linen_q is None and qualnames == {func.value}:  # a partial?
            linen_q = linen_partial(self._partials.get(func.value), self.names, self.linen_classes)
        if linen_q is not None:
            self._report(
                verify_rules.VERIFY_001,
                call,
                stmt,
                f"{code(func)}(...) is a Linen module ({linen_q}) constructed inside NNX class {owner}"
                f"{linen_args(call)}: build its NNX counterpart with rngs=rngs",
            )
            return False
        if isinstance(func, cst.Attribute) and func.attr.value in VARIABLE_METHODS and self_chain(func.value):
            if self._rewritten() and not (
                isinstance(func.value, cst.Name) and func.attr.value in self._own_names()
            ):
                self._report(
                    verify_rules.VERIFY_003,
                    call,
                    stmt,
                    f"{code(func)}(...) is Linen API (NNX modules are called directly, their "
                    "variables are attributes)",
                )
            return False
        factory = self._factory(func, qualnames)
        if factory is not None and factory.nnx:
            self._report(
                verify_rules.VERIFY_002,
                call,
                stmt,
                f"{one_line(code(call))} builds {factory.builds} at call time inside NNX class {owner}, "
                f"without the rngs its __init__ requires ({factory.key} builds it): build it in __init__",
            )
            return False
        if factory is not None and (factory.gives == "table") == (type(func) is cst.Subscript):
            shown = one_line(code(func if factory.gives == "table" else call))
            self._report(verify_rules.VERIFY_001, call, stmt, factory.message(shown, owner))
            return False
        self._check_linen_reference(func, call, stmt)
        self._check_signature(call, qualnames, stmt)
        self._check_linen_helper(call, stmt)
        return False

    def _factory(self, func: cst.BaseExpression, qualnames: set[str]) -> LinenFactory | None:
        """The Linen factory function ``func`` names: one of this file, or of a file the run migrated."""
        if self._factories is None:  # found on first need
            self._factories = linen_factories(self.module, self.module_name, self.names)
        if type(func) is cst.Subscript and type(func.value) in NAME_OR_ATTRIBUTE:  # `NORMS[self.norm]`
            func, qualnames = func.value, self.names.qualnames(func.value)
        local = func.value if type(func) is cst.Name else None
        key = f"{self.module_name}.{local}" if self.module_name and local else local
        if key in self._factories:
            return self._factories[key]
        for q in qualnames:
            fact = self.factories.get(absolute_qualname(q, self.module_name))
            if isinstance(fact, LinenFactory):
                return fact
        return None

    def _check_factory_call(self, call: cst.Call, stmt: cst.CSTNode | None) -> None:
        """A call of a layer factory function the run rewrote (anywhere in the file) must pass the
        ``rngs`` (and input size) its NNX version requires: a call the module pass did not turn into
        a submodule (training code, a layer built and kept in a local) does not."""
        func = call.func
        if not isinstance(func, (cst.Name, cst.Attribute)) or any(
            a.star == "**" or (a.keyword is not None and a.keyword.value == "rngs") for a in call.args
        ):
            return
        keys = {absolute_qualname(q, self.module_name) for q in self.names.qualnames(func)}
        if isinstance(func, cst.Name):
            keys.add(f"{self.module_name}.{func.value}" if self.module_name else func.value)
        factory = next((self.function_factories[k] for k in keys if k in self.function_factories), None)
        if factory is not None:
            needs = f"{factory.rule.in_arg}= and rngs=" if factory.rule.in_arg else "rngs="
            self._report(
                verify_rules.VERIFY_002,
                call,
                stmt,
                f"{one_line(code(call))} misses {needs}, which the migrated {factory.key} requires "
                f"(it builds an nnx.{factory.rule.nnx})",
            )

    def _check_linen_helper(self, call: cst.Call, stmt: cst.CSTNode | None) -> None:
        """``get_posemb(self, ...)``: ``self`` handed to a function using Linen Module API on it (``self.param``)."""
        func = call.func
        if not any(isinstance(a.value, cst.Name) and a.value.value == "self" for a in call.args):
            return
        if self._helpers is None:  # found on first need: few calls hand `self` to a function
            self._helpers = linen_helpers(self.module)
        if isinstance(func, cst.Name) and func.value in self._helpers:
            found: tuple[list[str], dict[str, str]] | None = self._helpers[func.value]
        elif self_attr(func) is not None and self._class is not None:  # `self._normalize(self, x, ...)`
            found = method_helpers(self._class).get(self_attr(func) or "")  # rare: few calls hand self on
        else:  # another file's: its own linen_helpers, or a parameter helper replay refused
            found = imported_helper(call, self.names, self.module_name, self.factories)
        use = handed_self(call, found) if found is not None else None
        if use is None and found is None and helper_of(call, self.names, self.module_name, self.factories):
            use = "self.param"
        if use is not None:
            self._report(
                verify_rules.VERIFY_004,
                call,
                stmt,
                f"{code(func)}(...) is handed self and calls {use}(...): Linen Module API an NNX module "
                "does not have; create the variable in __init__",
            )

    def _check_decorator(self, node: cst.Decorator, stmt: cst.CSTNode | None) -> None:
        """``@add_bias`` on a method, ``add_bias`` a function of the file whose wrapper calls Linen
        Module API on the module (verify_syntax.linen_decorators)."""
        if self._decorators is None:
            self._decorators = linen_decorators(self.module)
        name = node.decorator.value if isinstance(node.decorator, cst.Name) else ""
        if name in self._decorators:
            why = f"@{name} wraps the method in a function that calls self.{self._decorators[name]}(...)"
            self._report(
                verify_rules.VERIFY_004, node, stmt, why + ": Linen Module API an NNX module does not have"
            )

    def _check_linen_reference(
        self, func: cst.BaseExpression, node: cst.CSTNode, stmt: cst.CSTNode | None
    ) -> None:
        """``nn.<name>(...)`` (or a decorator) that is not a pure function of flax.linen."""
        q = impure_linen_name(self.names, func)
        if q is not None:
            why = f"{code(func)} ({q}) is Linen API, not a pure function; it has no place in an NNX class"
            self._report(verify_rules.VERIFY_005, node, stmt, why)

    def _alias_of(self, name: str) -> cst.BaseExpression | None:
        fn, aliases = self._methods[-1]
        if aliases is None:  # most methods never call a local: found on first need
            aliases = method_aliases(fn, self._class, self._names_a_class)
            self._methods[-1] = (fn, aliases)
        found = aliases.get(name)
        if found is None and name not in assigned_names(fn):  # a module-level `N2 = Norm`, bound once
            if self._module_aliases is None:
                self._module_aliases = module_class_aliases(self.module, self._names_a_class)
            found = self._module_aliases.get(name)
        return found

    def _names_a_class(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Name) and node.value in self.defs:
            return True
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return False
        return any(self._external(q) is not None for q in self.names.qualnames(node))

    def _check_signature(
        self, call: cst.Call, qualnames: set[str], stmt: cst.CSTNode | None, alias: Any = None
    ) -> None:
        func = call.func
        if alias is None:
            alias = self._alias_of(func.value) if type(func) is cst.Name and self._methods else None
        if isinstance(alias, cst.IfExp):  # `layer = A if cond else B`: built as either, checked as each
            for branch in (alias.body, alias.orelse):
                self._check_signature(call, qualnames, stmt, branch)
            return
        shown = code(func)
        if alias is not None:  # `block_class(...)`, a local holding a class of the run
            func = alias
            qualnames = self.names.qualnames(alias) if isinstance(alias, (cst.Name, cst.Attribute)) else set()
            shown = f"{shown}(...) (a {code(func)})"
        else:
            shown = f"{shown}(...)"
        summary = None
        if type(func) is cst.Name and func.value in self.defs:
            signature = self._signature(func.value)
            key = f"{self.module_name}.{func.value}" if self.module_name else func.value
        else:
            summary = next((s for q in qualnames if (s := self._external(q)) is not None), None)
            signature = Signature.of_summary(summary) if summary is not None else None
            key = summary.key if summary is not None else ""
        if signature is None:
            if alias is None and self._rewritten():
                self._check_unresolved(call, qualnames, stmt)
            return
        problem = signature.problem(call)
        if problem:
            self._report(verify_rules.VERIFY_002, call, stmt, f"{shown} {problem}")
        elif self._class is not None and self._class.name.value != key.rpartition(".")[2]:
            self.built.add(key)  # built with every argument its __init__ requires (see caller_sizes)

    def _check_unresolved(self, call: cst.Call, qualnames: set[str], stmt: cst.CSTNode | None) -> None:
        """A call nothing resolves that builds a module as Linen does (:func:`.verify_names.unresolved_build`)."""
        applied, method = id(call) in self._applied, self._methods[-1][0] if self._methods else None
        how = unresolved_build(call, qualnames, applied=applied, stars=self._stars)
        if how is None and applied and any(a.keyword for a in call.args):  # `net(features=16)(x)`
            how = outside_maker(method, call.func, self.names.qualnames)
        if how is not None:
            owner = self._class.name.value if self._class is not None else "?"
            why = f"{how} inside NNX class {owner}, and this run cannot tell what it builds: build its NNX "
            self._report(
                verify_rules.VERIFY_001, call, stmt, why + "counterpart with rngs=rngs (and no name=)"
            )

    def _signature(self, name: str) -> Signature | None:
        """The ``__init__`` signature of an NNX class of this file (inherited from its bases of the file)."""
        if name not in self._signatures:
            self._signatures[name] = None  # a cycle of bases: no signature
            cls = self.defs[name]
            found: Signature | None = None
            if self._class_kind_by_name(name) == "nnx" and not cls.decorators:
                found = signature_of(cls)
                if found is None:  # no __init__ of its own: its first base of the file has it
                    base = next(
                        (
                            b.value.value
                            for b in cls.bases
                            if isinstance(b.value, cst.Name) and b.value.value in self.defs
                        ),
                        None,
                    )
                    found = self._signature(base) if base is not None else None
            self._signatures[name] = found
        return self._signatures[name]

    def _class_kind_by_name(self, name: str) -> str | None:
        if name in self.nnx_classes:
            return "nnx"
        return self._class_kind(self.defs[name])

    def _check_container(self, node: cst.Assign | cst.AnnAssign, stmt: cst.CSTNode | None) -> None:
        """``self.x = [Block(..., rngs=rngs) for ...]``: modules in a plain container attribute."""
        target = self_target(node)
        if target is None or node.value is None:
            return
        kind = container_kind(node.value)
        if kind is None or not any(self._builds_module(e) for e in container_items(node.value)):
            return
        wrapper = "nnx.Dict" if kind == "dict" else "nnx.List"
        self._report(
            verify_rules.VERIFY_006,
            node.value,
            stmt,
            f"{code(target)} holds NNX modules in a plain {kind}: wrap it in {wrapper}(...)",
        )

    def _builds_module(self, node: cst.BaseExpression) -> bool:
        """A call that constructs an NNX module (of flax.nnx, this file or the run; or given ``rngs=``)."""
        if not isinstance(node, cst.Call):
            return False
        if any(a.keyword is not None and a.keyword.value == "rngs" for a in node.args):
            return True
        func = node.func
        if isinstance(func, cst.Name) and func.value in self.defs:
            return self._class_kind_by_name(func.value) == "nnx"
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return False
        return any(
            flax_class_kind(q) == "nnx" or self._external(q) is not None for q in self.names.qualnames(func)
        )

    def _check_attribute(self, node: cst.Attribute, stmt: cst.CSTNode | None) -> None:
        attr = node.attr.value
        if attr == "variables" and (self_chain(node.value) or child_alias(self._methods, node.value)):
            if self._rewritten() and not (isinstance(node.value, cst.Name) and attr in self._own_names()):
                self._report(
                    verify_rules.VERIFY_003,
                    node,
                    stmt,
                    f"{code(node)} is Linen API: an NNX module holds its variables as attributes "
                    "(nnx.state(module) gives them all)",
                )
        elif attr == "setup" and is_super_call(node.value):
            self._report(
                verify_rules.VERIFY_004,
                node,
                stmt,
                "super().setup() calls Linen's setup, which NNX classes do not have: call the base's "
                "__init__ with its arguments",
            )
        elif attr in LINEN_SELF_ONLY and isinstance(node.value, cst.Name) and node.value.value == "self":
            if attr not in self._own_names() and (attr not in LINEN_TREE_PLACE or self._rewritten()):
                self._report(
                    verify_rules.VERIFY_004,
                    node,
                    stmt,
                    f"self.{attr} is Linen Module API with no meaning in an NNX class",
                )
