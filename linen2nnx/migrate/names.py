"""Qualified names of expressions (``nn.Dense`` -> ``flax.linen.Dense``) without libcst's metadata.

libcst's ``QualifiedNameProvider`` answers the question through ``ScopeProvider``, two full
visitor passes and a lazy value per node: about a third of a migration's time. The codemod only
needs the answer for the names it asks about, so :class:`NameResolver` walks the tree once with a
plain recursive function that records what libcst's scope pass records (the scopes, what each
binds, and for each read its scope, its order in the scope and its enclosing attribute chain),
and resolves a node the first time it is asked, with libcst's rules:

- a name read (``partial``) resolves to the bindings of the innermost visible scope that binds it,
  those made before the read when the scope is the read's own (class scopes are not visible from
  the functions nested in them);
- any other node (``nn.Dense``, ``nn.scan(...)``, ``x[0]``) resolves its dotted name
  (``get_full_name_for_node``) through the longest dotted prefix a visible scope binds;
- an import gives the imported name (``from flax import linen as nn``: ``nn.Dense`` ->
  ``flax.linen.Dense``; ``from .blocks import Block`` -> ``.blocks.Block``), any other binding the
  local name (``Block``, ``Model.__call__.<locals>.x``), a builtin ``builtins.<name>``.

Known differences from libcst (none matters to the migration, which only matches imported names):
string annotations (``x: "nn.Module"``) are not parsed, so their names resolve to nothing;
``typing.TypeVar`` / ``NewType`` calls do not skip their first argument; and PEP 695 type
parameters and ``type`` aliases bind in the enclosing scope (libcst gives them one of their own).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Collection, Iterator
from functools import cache
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import CHILDREN_MEMO, NAME_OR_ATTRIBUTE, node_full_name, syntax_children

# nodes after which libcst's scope pass counts one more assignment in the current scope (reads are
# ordered against bindings by that count)
_ASSIGNMENT_LIKE = (
    cst.AnnAssign,
    cst.AsName,
    cst.Assign,
    cst.AugAssign,
    cst.ClassDef,
    cst.CompFor,
    cst.FunctionDef,
    cst.Global,
    cst.Import,
    cst.ImportFrom,
    cst.NamedExpr,
    cst.Nonlocal,
    cst.Parameters,
    cst.WithItem,
    cst.TypeVar,
    cst.TypeAlias,
    cst.TypeVarTuple,
    cst.ParamSpec,
)
# the nodes get_full_name_for_node names: the only ones with a qualified name
_NAMED = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.FunctionDef, cst.ClassDef, cst.Decorator)
# as sets of exact types (none of these classes has subclasses): cheaper than an ABC isinstance
_ASSIGNMENT_TYPES = frozenset(_ASSIGNMENT_LIKE)
_NAMED_TYPES = frozenset(_NAMED)
_MEMO_GET = CHILDREN_MEMO.get


# ---- scopes and bindings (libcst.metadata.scope_provider, reduced to what names need) ---------------
class _Scope:
    """One namespace: the module, a class body, a function (or lambda) or a comprehension."""

    def __init__(self, kind: str, parent: _Scope | None, name: str | None = None) -> None:
        self.kind = kind  # "builtins" | "global" | "class" | "function" | "comprehension"
        self.parent = parent if parent is not None else self
        self.globals: _Scope = self if parent is None or kind == "global" else parent.globals
        self.bindings: dict[str, list[_Binding]] = {}
        self.redirects: dict[str, _Scope] = {}  # `global x` / `nonlocal x`
        self.count = 0  # assignment-like nodes left so far: orders bindings and reads
        if kind in ("builtins", "global"):
            self.prefix = ""
        else:
            last = {"function": [name, "<locals>"], "class": [name], "comprehension": ["<comprehension>"]}[
                kind
            ]
            self.prefix = ".".join(p for p in (self.parent.prefix, *last) if p)

    def visible_parent(self, first: _Scope | None = None) -> _Scope:
        """The next enclosing scope (from ``first`` on) whose names this one sees: class bodies are
        skipped."""
        parent = first if first is not None else self.parent
        while parent.kind == "class":
            parent = parent.parent
        return parent

    def target(self, name: str) -> _Scope:
        """The scope a binding of ``name`` made here lands in (``global`` / ``nonlocal`` redirect it)."""
        redirect = self.redirects.get(name)
        if redirect is None or self.kind in ("builtins", "global"):
            return self
        return self.visible_parent(redirect).target(name)

    def bind(self, binding: _Binding) -> None:
        binding.scope = scope = self.target(binding.name)
        binding.index = scope.count
        scope.bindings.setdefault(binding.name, []).append(binding)

    def __contains__(self, name: str) -> bool:
        scope = self  # up the visible scopes in a loop: the resolver asks this for every dotted prefix
        while scope.kind != "builtins":
            if name in scope.redirects and scope.kind != "global":
                return name in scope.redirects[name]
            if name in scope.bindings:
                return True
            scope = scope.parent
            while scope.kind == "class":  # visible_parent()
                scope = scope.parent
        return hasattr(builtins, name)

    def resolve(self, name: str) -> list[_Binding]:
        """The bindings a read of ``name`` here may see: this scope's, or the next visible one's."""
        if self.kind == "builtins":
            return [_builtin(name)] if hasattr(builtins, name) else []
        if name in self.redirects and self.kind != "global":
            return self.visible_parent(self.redirects[name]).resolve(name)
        found = self.bindings.get(name)
        if found:
            return found
        return self.visible_parent().resolve(name)


@dataclasses.dataclass(eq=False)
class _Binding:
    """A name bound by an assignment, a ``def`` / ``class``, a parameter, a loop target, ..."""

    name: str
    node: cst.CSTNode | None = None
    scope: _Scope | None = None
    index: int = -1

    def qualnames(self, full_name: str) -> set[str]:
        prefix = self.scope.prefix if self.scope is not None else ""
        return {f"{prefix}.{full_name}" if prefix else full_name}


class _BuiltinBinding(_Binding):
    def qualnames(self, full_name: str) -> set[str]:
        return {f"builtins.{self.name}"}


@cache
def _builtin(name: str) -> _Binding:
    return _BuiltinBinding(name)


class _ImportBinding(_Binding):
    """A name an ``import`` statement binds; it answers for all the names of that statement, as
    libcst's ``ImportAssignment`` does."""

    def qualnames(self, full_name: str) -> set[str]:
        node = self.node
        assert isinstance(node, (cst.Import, cst.ImportFrom))
        module = ""
        if type(node) is cst.ImportFrom:
            if node.module is not None:
                module = node_full_name(node.module) or ""
            if node.relative:
                module = "." * len(node.relative) + module
        results: set[str] = set()
        if type(node.names) is cst.ImportStar:
            return results
        for alias in node.names:
            real = node_full_name(alias.name)
            if not real:
                continue
            parts = real.split(".")
            for candidate in (".".join(parts[:i]) for i in range(len(parts), 0, -1)):
                as_name = candidate
                if module.endswith("."):
                    candidate = f"{module}{candidate}"
                elif module:
                    candidate = f"{module}.{candidate}"
                if alias.asname is not None and alias.evaluated_alias is not None:
                    as_name = alias.evaluated_alias
                if full_name.startswith(as_name):
                    rest = full_name.split(as_name, 1)[1]
                    if rest and not rest.startswith("."):
                        continue
                    rest = rest.lstrip(".")
                    results.add(f"{candidate}.{rest}" if rest else candidate)
                    break
        return results


class _StarBinding(_ImportBinding):
    """A name ``from module import *`` binds, for a module whose names the run knows (star_imports.py):
    ``Block`` -> ``module.Block``, as ``from module import Block`` gives."""

    def qualnames(self, full_name: str) -> set[str]:
        node = self.node
        assert type(node) is cst.ImportFrom
        module = "." * len(node.relative) + (node_full_name(node.module) or "" if node.module else "")
        return {f"{module}{full_name}" if module.endswith(".") else f"{module}.{full_name}"}


@dataclasses.dataclass(eq=False)
class _Read:
    """A name read: where, after how many assignments of its scope, inside which attribute chain."""

    scope: _Scope
    index: int
    attribute: cst.Attribute | None


def _dotted(node: cst.Attribute | cst.Name) -> Iterator[tuple[str, cst.CSTNode]]:
    """``a.b.c`` -> ``("a.b.c", a.b.c)``, ``("a.b", a.b)``, ``("a", a)`` (libcst's ``_gen_dotted_names``)."""
    if type(node) is cst.Name:
        yield node.value, node
        return
    value = node.value
    if type(value) is cst.Call:
        if type(value.func) in NAME_OR_ATTRIBUTE:
            yield from _dotted(value.func)
    elif type(value) in NAME_OR_ATTRIBUTE:
        inner = _dotted(value)
        first = next(inner, None)
        if first is not None:
            yield f"{first[0]}.{node.attr.value}", node
            yield first
            yield from inner


# ---- the walk (libcst's ScopeVisitor + ExpressionContextProvider, one pass) -------------------------
class _Walk:
    """Records scopes, bindings and reads; ``store`` marks an assignment target being walked."""

    def __init__(self, module: cst.Module, stars: Callable[[str], Collection[str]] | None = None) -> None:
        self.stars = stars  # module spelled as imported -> the names its star import binds
        self.scope = _Scope("global", _Scope("builtins", None))
        self.scopes = [self.scope, self.scope.parent]  # every scope entered (NameResolver.release)
        self.scope_of: dict[cst.CSTNode, _Scope] = {}
        self.reads: dict[cst.Name, _Read] = {}
        self._attribute: list[cst.Attribute | None] = [None]  # the outermost attribute around a read
        self.top_reads: dict[cst.CSTNode, set[str]] = {}  # a module-level statement -> the names it reads
        self.top_binders: set[cst.CSTNode] = set()  # module-level statements with an import or a class
        for stmt in module.body:  # the module's header and footer hold no names
            self._top, self._top_read = stmt, self.top_reads.setdefault(stmt, set())
            self.visit(stmt)

    def visit(self, node: cst.CSTNode, store: bool = False) -> None:
        kind = type(node)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, node, store)
        else:
            entry = _MEMO_GET(id(node))  # self.children(node, store), with the memo read inline
            for child in entry[1] if entry is not None and entry[0] is node else syntax_children(node):
                self.visit(child, store)
        if kind in _NAMED_TYPES:
            self.scope_of[node] = self.scope
        if kind in _ASSIGNMENT_TYPES:
            self.scope.count += 1

    def children(self, node: cst.CSTNode, store: bool = False) -> None:
        entry = _MEMO_GET(id(node))  # syntax_children(node), its memo read inline
        for child in entry[1] if entry is not None and entry[0] is node else syntax_children(node):
            self.visit(child, store)

    def visit_all(self, nodes: Any, store: bool = False) -> None:
        for node in nodes:
            self.visit(node, store)

    def in_scope(self, scope: _Scope, *nodes: cst.CSTNode | None) -> None:
        self.scopes.append(scope)
        outer, self.scope = self.scope, scope
        for node in nodes:
            if node is not None:
                self.visit(node)
        self.scope = outer

    def name(self, node: cst.Name, store: bool) -> None:
        if store:
            self.scope.bind(_Binding(node.value, node))
        else:
            self.reads[node] = _Read(self.scope, self.scope.count, self._attribute[-1])
            self._top_read.add(node.value)

    def attribute(self, node: cst.Attribute, store: bool) -> None:
        top = self._attribute[-1] is None
        if top:
            self._attribute[-1] = node
        self.visit(node.value)  # the attribute name itself is no read
        if top:
            self._attribute[-1] = None

    def call(self, node: cst.Call, store: bool) -> None:
        self._attribute.append(None)
        self.children(node)
        self._attribute.pop()

    def import_(self, node: cst.Import | cst.ImportFrom, store: bool) -> None:
        self.top_binders.add(self._top)
        if isinstance(node.names, cst.ImportStar):
            if self.stars is not None and type(node) is cst.ImportFrom:
                module = node_full_name(node.module) or "" if node.module is not None else ""
                for name in self.stars("." * len(node.relative) + module):
                    self.scope.bind(_StarBinding(name, node))
            return
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            for dotted, _ in _dotted(bound):  # type: ignore[arg-type]
                self.scope.bind(_ImportBinding(dotted, node))

    def function(self, node: cst.FunctionDef, store: bool) -> None:
        self.scope.bind(_Binding(node.name.value, node))
        self.scope_of[node.name] = self.scope
        if node.type_parameters is not None:
            self.visit(node.type_parameters)
        self.in_scope(_Scope("function", self.scope, node.name.value), node.params, node.body)
        self.visit_all(node.decorators)
        if node.returns is not None:
            self.visit(node.returns)

    def lambda_(self, node: cst.Lambda, store: bool) -> None:
        self.in_scope(_Scope("function", self.scope), node.params, node.body)

    def param(self, node: cst.Param, store: bool) -> None:
        self.scope.bind(_Binding(node.name.value, node))
        self.scope_of[node.name] = self.scope
        self.in_scope(self.scope.parent, node.default, node.annotation)

    def arg(self, node: cst.Arg, store: bool) -> None:
        self.visit(node.value)  # a keyword is no read

    def class_(self, node: cst.ClassDef, store: bool) -> None:
        self.top_binders.add(self._top)
        self.scope.bind(_Binding(node.name.value, node))
        self.scope_of[node.name] = self.scope
        self.visit_all(node.decorators)
        if node.type_parameters is not None:
            self.visit(node.type_parameters)
        self.visit_all(node.bases)
        self.visit_all(node.keywords)
        self.in_scope(_Scope("class", self.scope, node.name.value), *node.body.body)

    def global_(self, node: cst.Global | cst.Nonlocal, store: bool) -> None:
        for item in node.names:
            if self.scope.kind != "global":
                self.scope.redirects[item.name.value] = (
                    self.scope.globals if isinstance(node, cst.Global) else self.scope.parent
                )

    def comprehension(
        self, node: cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp, store: bool
    ) -> None:
        for_in = node.for_in
        self.visit(for_in.iter)  # the first iterable is read outside
        outer, self.scope = self.scope, _Scope("comprehension", self.scope)
        self.scopes.append(self.scope)
        self.visit(for_in.target, True)
        self.scope.count += 1
        self.visit_all(for_in.ifs)
        if for_in.inner_for_in is not None:
            self.visit(for_in.inner_for_in)
        if isinstance(node, cst.DictComp):
            self.visit(node.key)
            self.visit(node.value)
        else:
            self.visit(node.elt)
        self.scope = outer

    def comp_for(self, node: cst.CompFor, store: bool) -> None:
        self.visit(node.target, True)
        self.visit(node.iter)
        self.visit_all(node.ifs)
        if node.inner_for_in is not None:
            self.visit(node.inner_for_in)

    def for_(self, node: cst.For, store: bool) -> None:
        self.visit(node.target, True)
        self.scope.count += 1
        self.visit(node.iter)
        self.visit(node.body)
        if node.orelse is not None:
            self.visit(node.orelse)

    def targets(self, node: cst.Assign, store: bool) -> None:
        self.visit_all(node.targets, True)
        self.visit(node.value)

    def target(self, node: cst.AnnAssign | cst.AugAssign | cst.NamedExpr, store: bool) -> None:
        self.visit(node.target, True)
        for child in (getattr(node, "annotation", None), node.value):
            if child is not None:
                self.visit(child)

    def type_name(
        self, node: cst.TypeAlias | cst.TypeVar | cst.TypeVarTuple | cst.ParamSpec, store: bool
    ) -> None:
        self.scope.bind(_Binding(node.name.value, node))
        for child in (
            getattr(node, "type_parameters", None),
            getattr(node, "bound", None),
            getattr(node, "value", None),
        ):
            if child is not None:
                self.visit(child)

    def as_name(self, node: cst.AsName, store: bool) -> None:
        self.visit(node.name, True)

    def loaded(self, node: cst.CSTNode, store: bool) -> None:
        """Subscripts and ``del`` targets: their names are reads even inside an assignment target."""
        self.children(node)


_HANDLERS = {
    cst.Name: _Walk.name,
    cst.Attribute: _Walk.attribute,
    cst.Call: _Walk.call,
    cst.Import: _Walk.import_,
    cst.ImportFrom: _Walk.import_,
    cst.FunctionDef: _Walk.function,
    cst.Lambda: _Walk.lambda_,
    cst.Param: _Walk.param,
    cst.Arg: _Walk.arg,
    cst.ClassDef: _Walk.class_,
    cst.Global: _Walk.global_,
    cst.Nonlocal: _Walk.global_,
    cst.ListComp: _Walk.comprehension,
    cst.SetComp: _Walk.comprehension,
    cst.DictComp: _Walk.comprehension,
    cst.GeneratorExp: _Walk.comprehension,
    cst.CompFor: _Walk.comp_for,
    cst.For: _Walk.for_,
    cst.Assign: _Walk.targets,
    cst.AnnAssign: _Walk.target,
    cst.AugAssign: _Walk.target,
    cst.NamedExpr: _Walk.target,
    cst.AsName: _Walk.as_name,
    cst.TypeAlias: _Walk.type_name,
    cst.TypeVar: _Walk.type_name,
    cst.TypeVarTuple: _Walk.type_name,
    cst.ParamSpec: _Walk.type_name,
    cst.Subscript: _Walk.loaded,
    cst.Del: _Walk.loaded,
}


class NameResolver:
    """The qualified names of a module's nodes, as ``QualifiedNameProvider`` gives them (see the
    module docstring); each node is resolved on first request and remembered."""

    def __init__(self, module: cst.Module, stars: Callable[[str], Collection[str]] | None = None) -> None:
        """``stars``: the names ``from <module spelled as imported> import *`` binds (star_imports.py);
        without it a star import binds nothing."""
        walk = _Walk(module, stars)
        self._globals = walk.scope
        self._scopes = walk.scopes
        self._top_reads, self._top_binders = walk.top_reads, walk.top_binders
        self._scope_of = walk.scope_of
        self._reads = walk.reads
        self._moved: dict[cst.Name, cst.CSTNode] = {}  # a read -> the node that owns it (see _owner)
        self._cache: dict[cst.CSTNode, set[str]] = {}

    def release(self) -> None:
        """Break the reference cycles of the scopes (a binding and the scope holding it, a root scope and
        itself), so that the resolver, and the tree its bindings hold, are freed by reference counting
        when the file is done, not traversed by the cyclic collector. The resolver answers nothing
        after this."""
        for scope in self._scopes:
            scope.bindings, scope.redirects = {}, {}
            scope.parent = scope.globals = None  # type: ignore[assignment]
        self._scopes, self._scope_of, self._reads, self._cache, self._moved = [], {}, {}, {}, {}

    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """All the names ``node`` may stand for; empty for a node that names nothing (or is no part of
        the module). The caller must not change the returned set."""
        found = self._cache.get(node)
        if found is None:
            found = self._cache[node] = self._resolve(node)
        return found

    def sole_binding(self, node: cst.Name) -> cst.CSTNode | None:
        """The one node that binds the name ``node`` reads, when the scope the read sees binds it exactly
        once (every read then sees that value, or none); None otherwise (several bindings, a builtin, a
        name the resolver never saw read)."""
        bindings = self.bindings_of(node)
        return bindings[0] if bindings is not None and len(bindings) == 1 else None

    def bindings_of(self, node: cst.Name) -> list[cst.CSTNode | None] | None:
        """Every node that binds the name ``node`` reads in the scope the read sees (a builtin or a
        binding the walk made without a node is None); None for a name the resolver never saw read."""
        read = self._reads.get(node)
        if read is None:
            return None
        return [b.node for b in read.scope.resolve(node.value)]

    def plain_statements(
        self, linen_import: Callable[[str], bool], also_read: Collection[str] = ()
    ) -> set[cst.CSTNode]:
        """The module-level statements that read no name which may stand for Linen: no import or class
        in them, and none of their reads is a module-level name other than an import that
        ``linen_import`` (given its qualified name) says is not Linen's, or a function that is itself
        plain; ``also_read`` are names that count as Linen's anyway."""
        kept = set(also_read)  # module-level names a read of which may need a rewrite
        functions: dict[str, list[cst.CSTNode | None]] = {}
        for name, bindings in self._globals.bindings.items():
            if all(isinstance(b, _ImportBinding) for b in bindings):
                if any(linen_import(q) for b in bindings for q in b.qualnames(name)):
                    kept.add(name)
            elif all(isinstance(b.node, cst.FunctionDef) for b in bindings) and name not in kept:
                functions[name] = [b.node for b in bindings]
            else:
                kept.add(name)
        candidates = [s for s in self._top_reads if s not in self._top_binders]
        while True:
            plain = {s for s in candidates if not (self._top_reads[s] & kept)}
            touched = {name for name, defs in functions.items() if any(d not in plain for d in defs)}
            if touched <= kept:
                return plain
            kept |= touched

    def _owner(self, name: cst.Name) -> cst.CSTNode:
        """The node a read is attached to: the name, or in an attribute chain the longest dotted
        prefix the scope binds (``import flax.linen``: ``flax.linen`` in ``flax.linen.Dense``)."""
        owner = self._moved.get(name)
        if owner is None:
            read = self._reads[name]
            owner = name
            if read.attribute is not None:
                owner = next((node for dotted, node in _dotted(read.attribute) if dotted in read.scope), name)
            self._moved[name] = owner
        return owner

    def _read_of(self, node: cst.CSTNode) -> tuple[_Read, str] | None:
        """The read ``node`` owns, with the name it reads."""
        root: cst.CSTNode = node
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is cst.Name and root in self._reads and self._owner(root) is node:
            return self._reads[root], node_full_name(node) or ""
        return None

    def _resolve(self, node: cst.CSTNode) -> set[str]:
        scope = self._scope_of.get(node)
        if scope is None:
            return set()
        read = self._read_of(node) if type(node) in NAME_OR_ATTRIBUTE else None
        if read is not None:
            return {q for b in self._referents(*read) for q in b.qualnames(b.name)}
        full = node_full_name(node)
        if full is None:
            return set()
        bindings: list[_Binding] = []
        prefix: str | None = full
        while prefix:
            if prefix in scope:
                bindings = scope.resolve(prefix)
                break
            dot = prefix.rfind(".")
            prefix = None if dot == -1 else prefix[:dot]
        for binding in bindings:
            if binding.node is node:  # the name a def, class, parameter or assignment binds
                return binding.qualnames(full)
        return {q for b in bindings for q in b.qualnames(full)}

    @staticmethod
    def _referents(read: _Read, name: str) -> list[_Binding]:
        """The bindings a read sees: in its own scope only those made before it (libcst's
        ``Access.record_assignments``)."""
        scope = read.scope
        bindings = scope.resolve(name)
        earlier = [b for b in bindings if b.scope is not scope or b.index < read.index]
        if not earlier and bindings and scope.parent is not scope:
            earlier = scope.parent.resolve(name)
        return earlier
