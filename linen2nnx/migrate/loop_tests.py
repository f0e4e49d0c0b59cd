"""Modules a loop builds under an ``if`` on the loop's own names (``if i < self.n - 1: nn.LayerNorm()``).

Real code builds a norm between an MLP's layers but not after the last, a downsampling after every stage
but the last, an attention block at chosen resolutions. Linen builds such a module on the iterations
whose test holds, and counts it only then (``LayerNorm_0``, ``LayerNorm_1``, ...). When the test reads
nothing but the loops' own names (their targets and the body locals ``__init__`` can replay) and the
config, ``__init__`` can take the same decisions: the loop becomes a nest (:class:`~.sites.LoopNest`),
replayed in ``__init__`` with its ``if`` statements around the appends, so each list holds exactly the
modules Linen built, in Linen's order (``LayerNorm_k`` is element k), and each call in ``__call__`` takes
the next element of its list under the same ``if``. A test that reads anything else (a call-time value,
a local of the method bound outside the loops) leaves the module where it is, with a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import NOT_LOCAL, code, names_in

ParentOf = Callable[[cst.CSTNode], cst.CSTNode | None]


def tested_in_loop(node: cst.CSTNode, loop: cst.CSTNode | None, nest: list, parent_of: ParentOf) -> bool:
    """Is ``node`` built under an ``if`` inside ``loop`` whose test reads one of the loops' names (``nest``:
    per enclosing loop, its names and body locals, as the compact walk keeps them)?"""
    names = set().union(*(loop_names for loop_names, _ in nest))
    cur = parent_of(node)
    while cur is not None and cur is not loop:
        if isinstance(cur, cst.If) and names_in(cur.test) & names:
            return True
        cur = parent_of(cur)
    return False


def nest_conditions(
    planner: Any,
    node: cst.CSTNode,
    outer: cst.For,
    fn: cst.FunctionDef,
    local_names: set[str],
    plan: Any,
    nest: list,
) -> list[str] | None:
    """The config tests a module of the nest ``outer`` is built under: those around the nest (its own
    ``if`` statements on the loops' names are replayed with it), or None where a test around the module
    reads a call-time value -- also an ``x if t else y`` expression on the loops' names, which no replay
    of statements takes."""
    names = frozenset().union(*(loop_names for loop_names, _ in nest))
    if planner.conditions_of(node, fn, local_names, plan, names) is None:
        return None
    return planner.conditions_of(outer, fn, local_names, plan)


def replayable_test(
    test: cst.BaseExpression, local_names: Collection[str], loop_names: Collection[str]
) -> bool:
    """Does ``test`` read no local of the method but the loops' own names (config reads are fine)?"""
    return (names_in(test) - NOT_LOCAL) & set(local_names) <= set(loop_names)


def test_names(outer: cst.For) -> set[str]:
    """The names the ``if`` tests inside the nest ``outer`` read (the body locals they need replayed)."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [outer.body]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.If):
            found |= names_in(cur.test)
        stack.extend(c for c in cur.children if isinstance(c, (cst.BaseSuite, cst.BaseStatement, cst.Else)))
    return found


def replay_loops(
    loop: cst.For, needed: Collection[cst.CSTNode], appends: dict[cst.CSTNode, list[cst.BaseStatement]]
) -> cst.For | None:
    """``loop`` as ``__init__`` replays it: its nested loops and ``if`` statements, the body locals of
    ``needed``, and each line that built submodules replaced by its ``appends``; None when nothing in
    it builds."""
    body, builds = _replayed_block(list(loop.body.body), needed, appends)
    if not builds:
        return None
    return loop.with_changes(body=cst.IndentedBlock(body=body), leading_lines=[])


def _replayed_block(
    stmts: list[cst.BaseStatement], needed: Collection[cst.CSTNode], appends: dict[cst.CSTNode, list]
) -> tuple[list[cst.BaseStatement], bool]:
    body: list[cst.BaseStatement] = []
    builds = False
    for stmt in stmts:
        if isinstance(stmt, cst.For):
            inner = replay_loops(stmt, needed, appends)
            if inner is not None:
                body.append(inner)
                builds = True
        elif isinstance(stmt, cst.If):
            branch = _replayed_if(stmt, needed, appends)
            if branch is not None:
                body.append(branch)
                builds = True
        elif stmt in needed:
            body.append(stmt.with_changes(leading_lines=[]))
        elif stmt in appends:
            body.extend(appends[stmt])
            builds = True
    return body, builds


def _replayed_if(stmt: cst.If, needed: Collection[cst.CSTNode], appends: dict) -> cst.If | None:
    """An ``if`` of the loop body with its branches replayed (an ``elif`` as a nested one); None when
    neither branch builds."""
    body, builds = _replayed_block(list(stmt.body.body), needed, appends)
    orelse: cst.If | cst.Else | None = None
    if isinstance(stmt.orelse, cst.If):
        orelse = _replayed_if(stmt.orelse, needed, appends)
    elif isinstance(stmt.orelse, cst.Else):
        other, built = _replayed_block(list(stmt.orelse.body.body), needed, appends)
        orelse = stmt.orelse.with_changes(body=cst.IndentedBlock(body=other)) if built else None
    if not builds and orelse is None:
        return None
    filler = [cst.SimpleStatementLine([cst.Pass()])]
    return stmt.with_changes(body=cst.IndentedBlock(body=body or filler), orelse=orelse, leading_lines=[])


def first_built_test(site: Any, parent_of: ParentOf) -> str | None:
    """The test that a nest module is built where the nest's first iteration runs, as ``__init__``'s
    replay of the loops reads it: ``len(self.<list>) == 0`` when the module is built on every
    iteration (its first element is the first iteration's); under an ``if`` on the loops' names
    (``if i % 2 == 1: nn.LayerNorm()``) the first element is built later, and the test is the loop's
    own first index (``i == 0``) for a lone ``for i in range(...)`` around it; None otherwise (the
    size is then asked for)."""
    nest, cur, tested, loops = site.nest, parent_of(site.ctor), False, 0
    while cur is not None and cur is not nest.outer:
        tested = tested or (isinstance(cur, cst.If) and bool(names_in(cur.test) & nest.names))
        loops += isinstance(cur, cst.For)
        cur = parent_of(cur)
    if not tested:
        return f"len(self.{site.attr}) == 0"
    it, target = nest.outer.iter, nest.outer.target
    if loops or not isinstance(target, cst.Name) or not isinstance(it, cst.Call) or it.args[-1:] == []:
        return None
    ranged = isinstance(it.func, cst.Name) and it.func.value == "range" and len(it.args) in (1, 2)
    if not ranged or any(a.keyword or a.star for a in it.args):
        return None
    start = code(it.args[0].value) if len(it.args) == 2 else "0"
    return f"{target.value} == {start}"
