"""A local a loop rebinds from config and its own variable, read after the loop: its last value.

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.static_locals.StaticLocals`. StyleGAN
discriminators and VQ encoders bind ``filters = self.filters``, rebind it at the top of a loop's body
(``filters = int(self.filters * self.mults[i])``) and size the layers after the loop with it
(``nn.Conv(filters, ...)``). The loop makes ``filters`` a call-time value, so those layers were
findings, though after the loop it holds the body's value for the loop's last element where the loop
ran, else the value before it -- what :mod:`~linen2nnx.migrate.loop_runs` already writes for the input
sizes. ``__init__`` replays that as one more binding after the one before the loop (``filters =
int(self.filters * self.mults[(len(self.mults) - 1)]) if len(self.mults) > 0 else filters``).

Only where that is exact: the loop is a top-level ``for`` of the method over what
:func:`~linen2nnx.migrate.loop_runs.last_values` follows (``range`` of config, a config sequence,
``enumerate`` of one), with no ``break`` / ``continue`` and no ``else``; the name is bound twice in the
method, once by a static line before the loop and once by a ``name = value`` line at the top level of
the body, which nothing in the body reads before it; the value reads only the loop's variables and
static locals the loop does not bind, and calls nothing but pure functions; and no statement before
the loop that ``__init__`` does not replay reads the name (``__init__`` replays every binding before
it builds a submodule, so such a reader would see the last value). Anything else stays a call-time value.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import libcst as cst
import libcst.matchers as m

from linen2nnx.migrate.cst_utils import NOT_LOCAL, assigned_in, bracketed, code, names_in, single_assign
from linen2nnx.migrate.factories import substitute
from linen2nnx.migrate.loop_runs import last_values


def carried_binding(
    loop: cst.For,
    name: str,
    static: Collection[str],
    counts: dict[str, int],
    pure: Callable[[cst.BaseExpression], bool],
) -> cst.SimpleStatementLine | None:
    """The line ``__init__`` replays after ``loop`` for ``name`` (``name = <last> if <ran> else name``),
    where ``static`` are the locals static before the loop (``name`` among them) and ``pure`` says a
    value calls nothing impure; None where the loop's value of ``name`` is not exactly that."""
    if (
        counts.get(name) != 2
        or loop.orelse is not None
        or name in names_in(loop.iter) | names_in(loop.target)
    ):
        return None
    if m.findall(loop.body, m.Break() | m.Continue()):
        return None
    body: Sequence[cst.BaseStatement] = loop.body.body  # type: ignore[assignment]
    at = [i for i, stmt in enumerate(body) if (single_assign(stmt) or ("",))[0] == name]
    if len(at) != 1 or sum(name in assigned_in(stmt) for stmt in body) != 1:
        return None  # bound under an `if` or in a nested loop of the body, or more than once
    if any(name in names_in(stmt) for stmt in body[: at[0]]):
        return None  # read before it is bound: the iteration before's value
    value = single_assign(body[at[0]])[1]  # type: ignore[index]
    last, ran = last_values(loop)
    targets = names_in(loop.target)
    if not ran or not targets <= set(last):
        return None
    free = names_in(value) - NOT_LOCAL - targets
    outside = {n for n in free if n in counts}  # the method's locals it reads
    if not outside <= set(static) - assigned_in(loop) or not pure(value):
        return None
    test = cst.parse_expression(ran)
    reads = {n for n in names_in(test) - NOT_LOCAL - {"len"} if n in counts}
    if not reads <= set(static) - assigned_in(loop):
        return None  # `range(num_blocks)` of a call-time count
    after = code(substitute(value, {t: last[t] for t in targets}))
    return cst.parse_statement(f"{name} = {bracketed(after)} if {ran} else {name}\n")  # type: ignore[return-value]


def read_before(body: Sequence[cst.BaseStatement], index: int, name: str, replayed: Collection[int]) -> bool:
    """Does a statement before ``body[index]`` that ``__init__`` does not replay (``replayed``: ids of
    those it does) read ``name``?"""
    return any(id(stmt) not in replayed and name in names_in(stmt) for stmt in body[:index])
