"""A size that reads an attribute ``setup()`` binds only after the layer the size is for.

Linen builds a ``setup()`` submodule lazily, on its first call: ``self.out = nn.Dense(3)`` may come
before ``self.width = self.h * 2`` and still see an input ``self.width`` wide. ``__init__`` replays
``setup()`` in order and builds each layer where ``setup()`` assigned it, so an input size written as
``self.width`` there reads an attribute not bound yet: the module would fail at construction, or read
an earlier value of an attribute bound again later. Such an attribute is spelled out from its one
call-free binding (``self.h * 2``); when it cannot be, the size is unknown.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, nodes_of, syntax_children
from linen2nnx.migrate.cst_utils import (
    assigned_in,
    code,
    names_in,
    parse_expression,
    self_attr,
    self_targets,
    single_assign,
    substitute_self_fields,
)
from linen2nnx.migrate.helper_fold import substitute

MAX_DEPTH = 3  # attributes spelled out through attributes, as deep as a config chain goes


def ready_at(setup: cst.FunctionDef | None, built: cst.CSTNode | None, expr: str) -> str | None:
    """``expr`` as ``__init__`` can read it where the statement of ``setup`` holding ``built`` runs:
    itself when every ``self.X`` it reads is bound before that statement and never again (or is no
    attribute ``setup()`` binds: a field, a property), an attribute bound later spelled out from its
    single binding; None when one cannot be. ``expr`` as it is for a layer built outside ``setup()``."""
    if setup is None:
        return expr
    local = _local_bindings(setup)
    reads = (names_in(parse_expression(expr)) - {"self"}) & local.keys() if local else set()
    if reads:  # `w = 6` then `self.body = nn.Dense(w)`: the head before it reads the size as w
        expr = _locals_spelled(expr, reads, local, _statement_of(setup, built) if built is not None else None)
        if expr is None:
            return None
    if built is None or "self." not in expr:
        return expr
    bindings = _bindings(setup)
    if not _self_reads(parse_expression(expr)) & bindings.keys():  # most sizes read fields only
        return expr
    index = _statement_of(setup, built)
    if index is None:
        return expr
    return _spelled(expr, bindings, index, MAX_DEPTH)


def _spelled(
    expr: str, bindings: dict[str, list[tuple[int, cst.BaseExpression | None]]], index: int, depth: int
) -> str | None:
    tree = parse_expression(expr)
    late: dict[str, str] = {}
    for attr in _self_reads(tree):
        bound = bindings.get(attr, [])
        if all(at < index for at, _ in bound):
            continue
        value = bound[0][1] if len(bound) == 1 else None
        if depth == 0 or value is None or calls_in(value) or names_in(value) - {"self"}:
            return None
        spelled = _spelled(code(value), bindings, index, depth - 1)
        if spelled is None:
            return None
        late[attr] = spelled
    if not late:
        return expr
    whole = self_attr(tree)
    if whole in late:  # the whole size: no parentheses
        return late[whole]
    return substitute_self_fields(expr, late, others_kept=True)


def _locals_spelled(
    expr: str,
    reads: set[str],
    local: _Bindings,
    index: int | None,
) -> str | None:
    """``expr`` with the ``setup()`` locals it reads as ``__init__`` can read them at statement ``index``
    (None: after the whole ``setup()``): a local bound once, before it, as it is; bound once, later, as
    its value; bound several times, None (which binding the size meant is not followed: ``w = self.n``,
    a layer of ``w``, then ``w = w - 1``). A local bound otherwise (a loop's variable, under an ``if``)
    is left as it is, to what reads it where it is built."""
    spelled: dict[str, str] = {}
    for name in reads:
        bound = local[name]
        if any(value is None for _, value in bound):
            continue  # a loop's variable, a binding under an `if`: followed where it is built, as before
        if len(bound) != 1:
            return None
        at, value = bound[0]
        assert value is not None
        if index is not None and at >= index:
            if calls_in(value) or (names_in(value) - {"self"}) & local.keys():
                return None
            spelled[name] = f"({code(value)})"
    if not spelled:
        return expr
    return code(substitute(parse_expression(expr), {n: parse_expression(v) for n, v in spelled.items()}))


def _self_reads(tree: cst.CSTNode) -> set[str]:
    """The attributes ``self.X`` an expression reads (``self.a.b`` reads ``a``)."""
    found: set[str] = set()
    for node in nodes_of(tree, (cst.Attribute,)):  # the visitor's order, without rebuilding each node
        attr = self_attr(node)
        if attr is not None:
            found.add(attr)
    return found


def _statement_of(setup: cst.FunctionDef, node: cst.CSTNode) -> int | None:
    """The index of the statement of ``setup``'s body that holds ``node`` (None: none does)."""
    for i, stmt in enumerate(setup.body.body):
        stack: list[cst.CSTNode] = [stmt]
        while stack:
            current = stack.pop()
            if current is node:
                return i
            stack.extend(syntax_children(current))
    return None


_Bindings = dict[str, list[tuple[int, cst.BaseExpression | None]]]
_BINDINGS: dict[int, tuple[cst.FunctionDef, _Bindings, _Bindings]] = {}


def _bindings(setup: cst.FunctionDef) -> _Bindings:
    """Each attribute ``setup()`` binds: the statements that bind it, each with its value where the
    statement is a plain ``self.X = value`` (None for any other binding: augmented, unpacked, nested).
    Remembered per setup() (every size of its class asks)."""
    return _setup_bindings(setup)[0]


def _local_bindings(setup: cst.FunctionDef) -> _Bindings:
    """Each local ``setup()`` binds: the top-level statements that bind it, each with its value where
    the statement is a plain ``name = value`` (None otherwise: unpacked, augmented, nested, a loop)."""
    return _setup_bindings(setup)[1]


def _setup_bindings(setup: cst.FunctionDef) -> tuple[_Bindings, _Bindings]:
    """:func:`_bindings` and :func:`_local_bindings`, found in one pass over ``setup()`` and remembered."""
    memo = _BINDINGS.get(id(setup))
    if memo is not None and memo[0] is setup:
        return memo[1], memo[2]
    attrs: _Bindings = {}
    local: _Bindings = {}
    for i, stmt in enumerate(setup.body.body):
        plain = _plain_binding(stmt)
        for attr in _bound_attrs(stmt):
            attrs.setdefault(attr, []).append(
                (i, plain[1] if plain is not None and plain[0] == attr else None)
            )
        assign = single_assign(stmt)
        for name in assigned_in(stmt) - {"self"}:
            local.setdefault(name, []).append(
                (i, assign[1] if assign is not None and assign[0] == name else None)
            )
    if len(_BINDINGS) > 64:
        _BINDINGS.clear()
    _BINDINGS[id(setup)] = (setup, attrs, local)
    return attrs, local


def _plain_binding(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        attr = self_attr(small.targets[0].target)
        return (attr, small.value) if attr is not None else None
    return None


def _bound_attrs(stmt: cst.CSTNode) -> set[str]:
    """The attributes of ``self`` a statement assigns (plainly, augmented, annotated, unpacked, as a
    loop target), in one walk over the memoised children."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [stmt]
    while stack:
        node = stack.pop()
        found.update(attr for _, attr in self_targets(node))
        stack.extend(syntax_children(node))
    return found
