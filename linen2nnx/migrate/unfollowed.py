"""What the feature-size dataflow (dataflow.py) does not walk, made unknown rather than trusted.

The flow follows assignments, ``if`` / ``else``, loop bodies and ``with`` / ``try`` bodies. A name that
a part it does not walk binds (an ``except``, ``else`` or ``finally`` block, a loop's ``else``, any case
of a ``match``) may hold another value after the statement: its size and rank become unknown, so a
layer that reads it is a located finding, never sized from the value before the statement. ``x += y``
is ``x + y``; ``x @= w`` is ``x @ w``.

After an ``if``, a name one branch binds and the other does not is unbound on that other path: reading
it there raises, so every read that runs sees the binding branch's value (``if self.pre_norm: y =
norm(x)`` then ``dense(y)``). That holds only for names the flow sees every binding of:
:func:`absence_unsure` lists the others (a walrus, an ``as``, an import, a nested ``def`` or ``class``,
a ``global`` / ``nonlocal``, a binding in a part the flow does not walk), which stay unknown.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate import last_axis_ops
from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import assigned_in, names_in, root_name
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.last_axis_ops import is_number

_NOT_FOLLOWED = (
    "a value a block the size flow does not follow may rebind (except / finally / match / loop else)"
)


def forget_unfollowed(env: dict[str, Feat], stmt: cst.CSTNode) -> None:
    """Every name the parts of ``stmt`` the flow does not walk may bind becomes unknown in ``env``."""
    for part in _unfollowed_parts(stmt):
        for name in assigned_in(part) | bound_otherwise(part):
            if name in env:
                env[name] = Feat.unknown(_NOT_FOLLOWED)


def forget_test_bindings(env: dict[str, Feat], test: cst.BaseExpression) -> None:
    """A name an ``if`` test binds (``if (x := x[:, None]) is not None:``) becomes unknown in ``env``:
    the flow does not read tests, so it would keep the value (and rank) from before."""
    for name in bound_otherwise(test):
        env[name] = Feat.unknown(_NOT_FOLLOWED)


def _unfollowed_parts(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(stmt, cst.Match):
        return list(stmt.cases)
    parts: list[cst.CSTNode | None] = [getattr(stmt, "orelse", None)]
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        parts += [*stmt.handlers, stmt.finalbody]
    return [p for p in parts if p is not None]


def bound_otherwise(node: cst.CSTNode) -> set[str]:
    """Names bound under ``node`` other than by an assignment or a loop target: by a walrus, an
    ``as`` (``with`` / ``except``) or a ``match`` capture."""
    found: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.NamedExpr):
            found |= names_in(cur.target)
        elif isinstance(cur, (cst.AsName, cst.MatchAs, cst.MatchStar)) and cur.name is not None:
            found |= names_in(cur.name)
        elif isinstance(cur, cst.MatchMapping) and cur.rest is not None:
            found.add(cur.rest.value)
        stack.extend(syntax_children(cur))
    return found


def absence_unsure(fn: cst.FunctionDef) -> frozenset[str]:
    """The names ``fn`` (a method or helper the flow walks) may bind where the flow does not see it, so
    that a name absent from the flow's values may still be bound (see the module docstring): every
    parameter (the flow may leave a keyword-only one, ``*args`` or ``**kwargs`` out of its values)
    and the bindings the flow does not walk."""
    params = fn.params
    found = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    found |= {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
    stack: list[cst.CSTNode] = list(fn.body.body)
    while stack:
        cur = stack.pop()
        if isinstance(cur, (cst.FunctionDef, cst.ClassDef)):
            found.add(cur.name.value)  # its own scope, but a `nonlocal` in it binds one of fn's names
        elif isinstance(cur, (cst.Global, cst.Nonlocal)):
            found |= {n.name.value for n in cur.names}
        elif isinstance(cur, (cst.Import, cst.ImportFrom)) and not isinstance(cur.names, cst.ImportStar):
            for alias in cur.names:
                root = root_name(alias.name)
                found |= names_in(alias.asname.name) if alias.asname else {root.value} if root else set()
        elif isinstance(cur, (cst.For, cst.While, cst.Try, cst.TryStar, cst.Match)):
            for part in _unfollowed_parts(cur):
                found |= assigned_in(part)
        stack.extend(syntax_children(cur))
    for stmt in fn.body.body:
        found |= bound_otherwise(stmt)
    return frozenset(found)


def augmented_value(held: Feat, value: Feat, small: cst.AugAssign) -> Feat:
    """What ``x <op>= y`` leaves in ``x`` (``held``), ``y`` being ``value``."""
    if isinstance(small.operator, cst.MatrixMultiplyAssign):
        return last_axis_ops.contracted(value, -2)
    return last_axis_ops.broadcast(held, value, (False, is_number(small.value)))
