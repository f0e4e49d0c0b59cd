"""Cheap stand-ins for libcst's ``ParentNodeProvider``, ``PositionProvider`` and ``CSTVisitor``.

libcst computes parents and positions for every node of a file, with a full visitor pass
(parents) and a code generation that tracks the line and column of every token (positions):
together about a fifth of a migration's time. The codemod asks for the parents of some nodes and
for the positions of the nodes it reports only, so:

- :func:`parent_map` walks the nodes' fields directly (no visitor dispatch), once, on the first
  question: the same parents as ``ParentNodeProvider`` for every node, for a tenth of the time;
- :func:`start_positions` runs one plain code generation that notes, for the wanted nodes only,
  at which token they start, and turns those into (line, column) at the end: the same starts as
  ``PositionProvider`` (its syntactic ones: whitespace and comments before a node excluded).

:class:`FastVisitor` does the same for the codemod's many small read-only visitors: libcst's own
visit rebuilds every node it passes, which costs ten times what reading the fields does.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import threading
import typing
from collections.abc import Callable, Collection
from functools import cache
from typing import Any, Literal

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata.position_provider import NEWLINE_RE

from linen2nnx.migrate.codegen import emit, record

# ``type(node) in NAME_OR_ATTRIBUTE`` is ``isinstance(node, (cst.Name, cst.Attribute))`` (neither class
# has a subclass) without the ABC instance check, a Python-level call each time the type differs: the
# hot name and attribute tests do thousands a file
NAME_OR_ATTRIBUTE = frozenset({cst.Name, cst.Attribute})
TUPLE_OR_LIST = frozenset({cst.Tuple, cst.List})  # the same for tuple and list displays


def node_full_name(node: str | cst.CSTNode) -> str | None:
    """libcst's ``get_full_name_for_node`` (the same answers, ``"None.x"`` for an attribute of an
    unnamed value included), with exact type tests: the name resolver asks it for every read."""
    kind = type(node)
    if kind is cst.Name:
        return node.value  # type: ignore[union-attr]
    if isinstance(node, str):
        return node
    if kind is cst.Attribute:
        return f"{node_full_name(node.value)}.{node.attr.value}"  # type: ignore[union-attr]
    if kind is cst.Call:
        return node_full_name(node.func)  # type: ignore[union-attr]
    if kind is cst.Subscript:
        return node_full_name(node.value)  # type: ignore[union-attr]
    if kind is cst.FunctionDef or kind is cst.ClassDef:
        return node_full_name(node.name)  # type: ignore[union-attr]
    if kind is cst.Decorator:
        return node_full_name(node.decorator)  # type: ignore[union-attr]
    return None


def parse_module(source: str) -> cst.Module:
    """``cst.parse_module(source)``, without libcst's check of each node the parser builds (a third of
    the parse's Python side): the parser only builds valid nodes (see :func:`unchecked`)."""
    return unchecked(cst.parse_module, source)


def unchecked(build: Callable[..., Any], *args: Any) -> Any:
    """``build(*args)`` without libcst's check of each node it builds, for work whose nodes are valid by
    construction: the parser's, or a metadata visitor's pass (libcst's visit rebuilds every node it
    enters from the same children, and the visitor throws the copies away). Only while this is the
    process's one thread (the check is switched off for the class: any node built meanwhile skips it)."""
    if threading.active_count() != 1:
        return build(*args)
    try:
        cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
        return build(*args)
    finally:
        cst.CSTNode.__post_init__ = _CHECKED  # type: ignore[method-assign]


_CHECKED = cst.CSTNode.__post_init__


def _unchecked(self: cst.CSTNode) -> None:
    return None


@cache
def _fields(node_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(node_type))


# children that are only punctuation, whitespace or comments
_LEXICAL_FIELDS = frozenset(
    "lpar rpar comma semicolon leading_lines lines_after_decorators header footer newline "
    "trailing_whitespace equal colon dot operator lbracket rbracket lbrace rbrace asynchronous "
    "first_colon second_colon posonly_ind".split()
)
STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


class _TypeTest(dict):
    """type -> whether it is a subclass of ``kinds``: ``test[type(node)]`` is ``isinstance(node, kinds)``
    without the ABC ``__instancecheck__`` call (libcst's node classes are ABCs), for the walks that
    test every node they pass."""

    def __init__(self, kinds: tuple[type, ...]) -> None:
        super().__init__()
        self.kinds = kinds

    def __missing__(self, kind: type) -> bool:
        self[kind] = found = issubclass(kind, self.kinds)
        return found


_TYPE_TESTS: dict[tuple[type, ...], _TypeTest] = {}


def type_test(kinds: tuple[type, ...]) -> dict[type, bool]:
    """The :class:`_TypeTest` of ``kinds``, one a tuple of types for the process."""
    test = _TYPE_TESTS.get(kinds)
    if test is None:
        test = _TYPE_TESTS[kinds] = _TypeTest(kinds)
    return test


IS_STATEMENT: dict[type, bool] = type_test(STATEMENT_TYPES)
"""``IS_STATEMENT[type(node)]``: is ``node`` a statement (the walks that mark statements read it)."""

# node types whose children libcst visits in another order than their fields'
_VISIT_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.Arg: ("keyword", "value"),
    cst.ImportFrom: ("relative", "module", "names"),
    cst.LazyImportFrom: ("relative", "module", "names"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.Parameters: ("posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"),
}


@cache
def syntax_fields(node_type: type) -> tuple[str, ...]:
    """The fields of ``node_type`` that may hold syntax (not only whitespace, comments or punctuation),
    in the order libcst visits them."""
    if node_type in _VISIT_ORDER:
        return _VISIT_ORDER[node_type]
    return tuple(
        name for name in _fields(node_type) if name not in _LEXICAL_FIELDS and "whitespace" not in name
    )


IS_NODE: dict[type, bool] = type_test((cst.CSTNode,))
"""``IS_NODE[type(value)]``: is ``value`` a libcst node (``CSTNode`` is an ABC, and its
``__instancecheck__`` was a tenth of a migration's time)."""


# node id -> (node, its syntax children): the walks of one file (the resolver, the planner's many
# FastVisitor walks of each class and method, the verifier) ask for the same nodes' children again and
# again. The entry holds the node, so its id cannot be reused while the entry lives.
_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}
_CHILDREN_LIMIT = 200_000  # entries, a few files' trees: a caller that never calls forget stays bounded
CHILDREN_MEMO = _CHILDREN
"""The memo :func:`syntax_children` reads, for the hot walks that read it inline (a call less a node):
``entry = CHILDREN_MEMO.get(id(node))``; ``entry[1]`` when ``entry is not None and entry[0] is node``,
else ``syntax_children(node)``."""


def syntax_children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """``node``'s children that may hold syntax, in libcst's visit order (remembered until
    :func:`forget_syntax_children`: nodes are immutable)."""
    entry = _CHILDREN.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_CHILDREN) >= _CHILDREN_LIMIT:
        _CHILDREN.clear()
    children = _CHILDREN[id(node)] = (node, _CHILDREN_OF[type(node)](node))
    return children[1]


def contains(node: cst.CSTNode, kinds: tuple[type, ...], opaque: tuple[type, ...] = ()) -> bool:
    """Whether a node of ``kinds`` lies under ``node`` (itself included), not looking inside nodes of
    ``opaque`` (a nested function's ``return`` is not the body's own)."""
    is_kind, is_opaque = type_test(kinds), type_test(opaque)
    if is_opaque[type(node)]:
        return is_kind[type(node)]
    stack = [node]
    while stack:
        cur = stack.pop()
        if is_kind[type(cur)]:
            return True
        stack.extend(c for c in syntax_children(cur) if not is_opaque[type(c)])
    return False


def nodes_of(node: cst.CSTNode, kinds: tuple[type, ...], opaque: tuple[type, ...] = ()) -> list[cst.CSTNode]:
    """The nodes of ``kinds`` under ``node`` (itself included), in source order, not looking inside
    nodes of ``opaque`` (a nested function's assignments are not the method's own)."""
    found: list[cst.CSTNode] = []
    is_kind, is_opaque, memo_get = type_test(kinds), type_test(opaque), _CHILDREN.get
    stack = [node]
    while stack:
        cur = stack.pop()
        kind = type(cur)
        if is_kind[kind]:
            found.append(cur)
        if cur is node or not is_opaque[kind]:
            entry = memo_get(id(cur))  # syntax_children(cur), its memo read here: one call less a node
            kids = entry[1] if entry is not None and entry[0] is cur else syntax_children(cur)
            if kids:
                stack.extend(reversed(kids))
    return found


def inside(node: cst.CSTNode, outer: cst.CSTNode, parent_of: Callable[[cst.CSTNode], Any]) -> bool:
    """Whether ``node`` lies under ``outer`` (or is it), by the parent links ``parent_of`` gives."""
    cur: cst.CSTNode | None = node
    while cur is not None and cur is not outer:
        cur = parent_of(cur)
    return cur is outer


def _field_kind(hint: Any) -> str:
    """What a field annotated ``hint`` may hold: ``"none"`` never a node (a string, a flag, None,
    ``MaybeSentinel``), ``"seq"`` a sequence of nodes, ``"node"`` a node or nothing, ``"any"`` unknown."""
    origin = typing.get_origin(hint)
    if hint is type(None) or hint is cst.MaybeSentinel or hint in (str, bool, int) or origin is Literal:
        return "none"
    if isinstance(hint, type) and issubclass(hint, cst.CSTNode):
        return "node"
    if origin is collections.abc.Sequence:
        return "seq"
    if origin is typing.Union:
        kinds = {_field_kind(arg) for arg in typing.get_args(hint)}
        if kinds <= {"none"}:
            return "none"
        if kinds <= {"none", "node"}:
            return "node"
    return "any"


class _ChildrenOf(dict):
    """type -> a function of a node of that type that returns its :func:`syntax_children`, written for
    the type from its fields' annotations (a field that never holds a node is not read at all, one that
    holds a sequence of nodes is taken whole): a third of the generic loop's cost, for the ~1,000 nodes
    a file whose children its walks ask for the first time."""

    def __missing__(self, kind: type) -> Callable[[cst.CSTNode], tuple[cst.CSTNode, ...]]:
        try:
            hints = typing.get_type_hints(kind)
        except Exception:  # an annotation that does not resolve: every field checked at run time
            hints = {}
        lines = ["def children(node):", "    out = []"]
        for name in syntax_fields(kind):
            field_kind = _field_kind(hints[name]) if name in hints else "any"
            if field_kind == "none":
                continue
            if field_kind == "seq":
                lines.append(f"    out.extend(node.{name})")
                continue
            lines += [f"    value = node.{name}", "    if is_node[type(value)]:", "        out.append(value)"]
            if field_kind == "any":
                lines += [
                    "    elif isinstance(value, (tuple, list)):",
                    "        out.extend(child for child in value if is_node[type(child)])",
                ]
        lines.append("    return tuple(out)")
        namespace: dict[str, Any] = {"is_node": IS_NODE}
        exec("\n".join(lines), namespace)  # the code is written here, from the field names only
        self[kind] = found = namespace["children"]
        return found


_CHILDREN_OF: dict[type, Callable[[cst.CSTNode], tuple[cst.CSTNode, ...]]] = _ChildrenOf()


def forget_syntax_children() -> None:
    """Drop what :func:`syntax_children` and the other per-file memos (:func:`file_memo`) remember (the
    engine does, after each file), so that the trees of files done can be freed."""
    _CHILDREN.clear()
    for memo in _FILE_MEMOS:
        memo.clear()


_FILE_MEMOS: list[dict[int, Any]] = []


def file_memo() -> dict[int, Any]:
    """A new memo of node id -> (node, answer) for a question whose answer a node's subtree decides
    (the node is kept in the entry, so its id cannot be reused while the entry lives): emptied with
    :func:`syntax_children`'s after each file."""
    memo: dict[int, Any] = {}
    _FILE_MEMOS.append(memo)
    return memo


_CALLS: dict[int, Any] = file_memo()


class FastVisitor:
    """A read-only visitor with the protocol of ``cst.CSTVisitor`` (``visit_<Type>`` returns False to
    skip the node's children, ``leave_<Type>`` follows them, in libcst's order), that reads the
    fields instead of rebuilding each node. It never visits whitespace, comments or punctuation.

    Start it with ``visitor.walk(node)`` (not ``node.visit(visitor)``), also from inside a
    ``visit_*`` method that walks a part of its node itself.
    """

    def walk(self, node: cst.CSTNode) -> None:
        if type(self).walk is not FastVisitor.walk:  # a subclass hooking walk() sees it for each node
            self._walk_each(node)
            return
        handlers: dict[type, tuple] = {}  # node type -> (visit_<Type>, leave_<Type>), looked up once a walk
        memo_get = _CHILDREN.get

        def go(node: cst.CSTNode) -> None:
            kind = type(node)
            found = handlers.get(kind)
            if found is None:
                name = kind.__name__
                found = handlers[kind] = (
                    getattr(self, "visit_" + name, None),
                    getattr(self, "leave_" + name, None),
                )
            visit, leave = found
            if visit is None or visit(node) is not False:
                entry = memo_get(id(node))  # syntax_children(node), its memo read here: one call less
                for child in entry[1] if entry is not None and entry[0] is node else syntax_children(node):
                    go(child)
            if leave is not None:
                leave(node)

        go(node)
        go = None  # type: ignore[assignment]  # the closure holds itself: freed now, not by the collector

    def _walk_each(self, node: cst.CSTNode) -> None:
        name = type(node).__name__
        visit = getattr(self, "visit_" + name, None)
        if visit is None or visit(node) is not False:
            for child in syntax_children(node):
                self.walk(child)
        leave = getattr(self, "leave_" + name, None)
        if leave is not None:
            leave(node)


def syntax_parent_map(root: cst.CSTNode) -> dict[cst.CSTNode, cst.CSTNode]:
    """:func:`parent_map` for the syntax nodes only (whitespace, comments and punctuation, see
    :func:`syntax_fields`, left out): all the module codemod asks about, for a third of the walk."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack = [root]
    children_of = _CHILDREN_OF
    while stack:
        node = stack.pop()
        children = children_of[type(node)](node)
        for child in children:
            parents[child] = node
        stack.extend(children)
    return parents


class _NoPosition:
    """The context manager libcst's code generation enters around each node whose position it could
    record: a no-op, without the generator ``@contextmanager`` costs (half a million a run)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


_NO_POSITION = _NoPosition()


@dataclasses.dataclass
class _PlainCodegen(CodegenState):
    """``CodegenState`` as libcst's ``Module.code`` uses it (which records no position), minus the
    per-node generator context manager: the same tokens, faster."""

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _NoPosition:
        return _NO_POSITION


def code_of(node: cst.CSTNode, module: cst.Module | None = None) -> str:
    """``module.code_for_node(node)`` (``module.code`` for ``code_of(module)``), faster."""
    simple = _simple_code(node)
    if simple is not None:
        return simple
    context = module if module is not None else node if isinstance(node, cst.Module) else _DEFAULT_MODULE
    state = _PlainCodegen(default_indent=context.default_indent, default_newline=context.default_newline)
    emit(node, state)
    return "".join(state.tokens)


_DEFAULT_MODULE = cst.Module([])
_ATOMS = (cst.Name, cst.Integer, cst.Float)


def _simple_code(node: cst.CSTNode) -> str | None:
    """The code of a name, a number or a dotted name without parentheses (most of the codemod's
    questions: ``nn.Dense``, ``self.features``, ``0.1``), without a code generation; None for anything else."""
    kind = type(node)
    if kind in _ATOMS:
        return None if node.lpar or node.rpar else node.value  # type: ignore[attr-defined]
    if kind is not cst.Attribute or node.lpar or node.rpar:  # type: ignore[attr-defined]
        return None
    value = _simple_code(node.value)  # type: ignore[attr-defined]
    dot, attr = node.dot, node.attr  # type: ignore[attr-defined]
    if value is None or type(dot) is not cst.Dot or attr.lpar or attr.rpar:
        return None
    before, after = dot.whitespace_before, dot.whitespace_after
    if type(before) is not cst.SimpleWhitespace or type(after) is not cst.SimpleWhitespace:
        return None
    return f"{value}{before.value}.{after.value}{attr.value}"


class _RecordStart:
    """Notes where a wanted node's syntactic position starts (see :class:`StartRecorder`)."""

    __slots__ = ("node", "start", "start_node", "state")

    def __init__(self, state: StartRecorder, node: cst.CSTNode, start_node: cst.CSTNode | None) -> None:
        self.state, self.node, self.start_node = state, node, start_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, exc_type: object, *exc: object) -> bool:
        if exc_type is None:
            state = self.state
            state.syntactic[self.node] = (
                state.start_of(self.start_node) if self.start_node is not None else self.start
            )
        return False


def parent_map(root: cst.CSTNode) -> dict[cst.CSTNode, cst.CSTNode]:
    """Every node under ``root`` -> its parent (``root`` itself has none)."""
    return _parents(root, _fields)


def _parents(root: cst.CSTNode, fields: Callable[[type], Collection[str]]) -> dict[cst.CSTNode, cst.CSTNode]:
    """Each node reached through ``fields`` of its parent -> that parent."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack = [root]
    is_node = IS_NODE
    while stack:
        node = stack.pop()
        for name in fields(type(node)):
            value = getattr(node, name)
            if is_node[type(value)]:
                parents[value] = node
                stack.append(value)
            elif isinstance(value, (tuple, list)):
                for child in value:
                    if is_node[type(child)]:
                        parents[child] = node
                        stack.append(child)
    return parents


@dataclasses.dataclass
class StartRecorder(CodegenState):
    """Code generation that notes the token index where each wanted node starts: where it records its
    syntactic position (``PositionProvider``'s start) or, for a node without one, where it begins.

    It asks for every node whether it is wanted by its ``id`` (a C call), not by the node's hash
    (``CSTNode.__hash__`` is a Python function, and this asks twice a node)."""

    wanted: Collection[cst.CSTNode] = ()
    starts: dict[cst.CSTNode, int] = dataclasses.field(default_factory=dict)
    syntactic: dict[cst.CSTNode, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.wanted_ids = {id(node) for node in self.wanted}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted_ids and node not in self.starts:
            self.starts[node] = len(self.tokens)

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _RecordStart | _NoPosition:
        if id(node) in self.wanted_ids:
            return _RecordStart(self, node, start_node)
        return _NO_POSITION

    def start_of(self, node: cst.CSTNode) -> int:
        return self.syntactic.get(node, self.starts.get(node, 0))


def wanted_with_start_nodes(nodes: Collection[cst.CSTNode]) -> set[cst.CSTNode]:
    """``nodes`` plus the children their start is taken from (an indented block starts with its first
    statement)."""
    wanted = set(nodes)
    for node in nodes:
        if type(node) is cst.IndentedBlock and node.body:
            wanted.add(node.body[0])
    return wanted


def start_positions(module: cst.Module, nodes: Collection[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int]]:
    """(line, column), both as ``PositionProvider`` counts them (line from 1, column from 0), of the
    start of each of ``nodes`` that is part of ``module``."""
    if not nodes:
        return {}
    state = StartRecorder(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        wanted=wanted_with_start_nodes(nodes),
    )
    record(module, state)
    index_of = {node: state.start_of(node) for node in nodes if node in state.starts}
    return dict(zip(index_of, line_columns(state.tokens, list(index_of.values()))))


def line_columns(tokens: list[str], indices: list[int]) -> list[tuple[int, int]]:
    """The (line, column) before ``tokens[i]`` for each ``i`` of ``indices``, advancing over the
    tokens as ``PositionProvider`` does (``\\r\\n``, ``\\r`` and ``\\n`` end a line, within a token)."""
    order = sorted(range(len(indices)), key=indices.__getitem__)
    out: list[tuple[int, int]] = [(0, 0)] * len(indices)
    line, column, done = 1, 0, 0
    for k in order:
        stop = indices[k]
        chunk = "".join(tokens[done:stop])
        if "\r" in chunk:  # a \r\n split over two tokens counts as two line ends there: go token by token
            for token in tokens[done:stop]:
                segments = NEWLINE_RE.split(token)
                if len(segments) == 1:
                    column += len(token)
                else:
                    line += len(segments) - 1
                    column = len(segments[-1])
        elif "\n" in chunk:
            line += chunk.count("\n")
            column = len(chunk) - chunk.rfind("\n") - 1
        else:
            column += len(chunk)
        done = stop
        out[k] = (line, column)
    return out


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call under ``node``, in source order (the order a visitor meets them: a stack of the
    children still to read, the first on top, not a visitor class built for each question);
    remembered for the file (the verifier and the file's factory functions ask about the same bodies;
    a part asked about before, a method's body inside its class, is taken from the memo, not walked)."""
    entry = _CALLS.get(id(node))
    if entry is not None and entry[0] is node:
        return list(entry[1])
    found: list[cst.Call] = []
    stack = [node]
    call, children, memo_get, calls_get = cst.Call, syntax_children, _CHILDREN.get, _CALLS.get
    while stack:
        cur = stack.pop()
        entry = calls_get(id(cur))
        if entry is not None and entry[0] is cur:  # its calls, in the same order, known already
            found.extend(entry[1])
            continue
        if type(cur) is call:
            found.append(cur)
        entry = memo_get(id(cur))  # syntax_children(cur), its memo read here: one call less a node
        kids = entry[1] if entry is not None and entry[0] is cur else children(cur)
        if kids:
            stack.extend(reversed(kids))
    if len(_CALLS) >= _CHILDREN_LIMIT:
        _CALLS.clear()
    _CALLS[id(node)] = (node, tuple(found))
    return found


_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})  # exact types: no ABC check


def returned_values(body: cst.CSTNode) -> list[cst.BaseExpression | None]:
    """The values of the ``return`` statements of a function body (not of functions nested in it)."""
    found: list[cst.BaseExpression | None] = []

    def visit(node: cst.CSTNode) -> None:
        if type(node) in _SCOPES:
            return
        if type(node) is cst.Return:
            found.append(node.value)
            return
        for child in syntax_children(node):
            visit(child)

    visit(body)
    return found
