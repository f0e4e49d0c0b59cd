"""Calls of the elements of a submodule list, one per iteration of a loop over it, in a method.

``self.layers = [Block(cfg, name=str(i)) for i in range(cfg.depth)]`` in ``setup`` and, in
``__call__``, ``for layer in self.layers: h = layer(h)`` (or ``for i, layer in enumerate(self.layers)``,
or ``for resnet, attn in zip(self.resnets, self.attentions)``, one element of each list):
iteration ``k`` of the loop applies element ``k``, so the dataflow's first pass over the loop body
sees what element 0 reads and its later passes what every later element reads (the same size once
the flow settles; sizing.py refuses a size that keeps changing). Element ``k``'s input size is then
the first if ``k == 0``, else the later one.

Only a loop written at the top of the method (inside ``if`` / ``with`` / ``try`` at most, never in
another loop, whose later passes would show element 0 a later size) over the list itself (no slice,
no ``reversed``), whose variable the body never rebinds, is taken, and only calls of that variable
inside it; the list must be the one site of its attribute (a setup comprehension or the list a setup
loop fills, with no elements written before it). Every iteration must apply its element exactly once:
a body that can leave an iteration early (``continue`` / ``break`` / ``return`` / ``raise``), or whose
one call of the variable is not a statement of its own level (under an ``if``, a ``with``, a
conditional expression, ``and`` / ``or``, a lambda or a comprehension), or that calls it more than once,
is not taken -- a skipped element would see another element's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, contains
from linen2nnx.migrate.cst_utils import assigned_in, names_in, parse_expression, self_attr
from linen2nnx.migrate.sites import Site


def element_calls(fn: cst.FunctionDef, sites: Iterable[Site]) -> dict[cst.Call, Site]:
    """The calls in ``fn`` that apply an element of a submodule list in a loop over it, and its site."""
    lists: dict[str, list[Site]] = {}
    for site in sites:
        if site.container == "list" or site.elements is not None:
            lists.setdefault(site.attr, []).append(site)
    single = {attr: found[0] for attr, found in lists.items() if len(found) == 1 and usable_index(found[0])}
    found: dict[cst.Call, Site] = {}
    for loop in _top_loops(fn.body.body):
        for var, attr in _loop_over_lists(loop):
            site = single.get(attr)
            if site is None or var in assigned_in(loop.body):
                continue
            call = _one_plain_call(loop, var)
            if call is not None:
                found[call] = site
    return found


_EXITS = (cst.Break, cst.Continue, cst.Return, cst.Raise, cst.Yield, cst.Await)
# expressions whose parts may run zero times, or apart from the statement that holds them
MAYBE_SKIPPED = (
    cst.IfExp,
    cst.BooleanOperation,
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


def _one_plain_call(loop: cst.For, var: str) -> cst.Call | None:
    """The one call of ``var`` in ``loop``'s body when every iteration makes it exactly once: a body
    that can leave an iteration early, calls ``var`` twice or under a guard, gives None."""
    body = loop.body
    if contains(body, _EXITS, opaque=(cst.FunctionDef, cst.ClassDef)):
        return None
    calls = [c for c in calls_in(body) if isinstance(c.func, cst.Name) and c.func.value == var]
    if len(calls) != 1:
        return None
    for stmt in body.body if isinstance(body, cst.IndentedBlock) else (body,):
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and calls[0] in calls_in(
            stmt
        ):
            guarded = (g for g in _nodes(stmt) if isinstance(g, MAYBE_SKIPPED))
            return None if any(calls[0] in calls_in(g) for g in guarded) else calls[0]
    return None


def _nodes(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """Every node under ``node`` (itself included), not entering nested functions or classes."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(c for c in cur.children if not isinstance(c, (cst.FunctionDef, cst.ClassDef)))


def later_size_holds(site: Site, later: str, allowed: set[str]) -> bool:
    """Whether ``later``, the size the previous element gives, can size every element after the
    first: not when it reads a name beyond ``allowed`` (``self`` and the class's constructor
    arguments) -- a name of the method, or the comprehension's index, would not mean the previous
    element's size there."""
    return usable_index(site) and names_in(parse_expression(later)) <= allowed


def usable_index(site: Site) -> bool:
    """Whether each element's position is an expression of the list's own loop index."""
    return bool(site.elements_index) and not site.elements_index.isdigit()


def _top_loops(body: Iterable[cst.BaseStatement]) -> Iterable[cst.For]:
    for stmt in body:
        if isinstance(stmt, cst.For):
            yield stmt
        elif isinstance(stmt, cst.If):
            yield from _top_loops(stmt.body.body)
            orelse = stmt.orelse
            while orelse is not None:
                if isinstance(orelse, cst.If):
                    yield from _top_loops(orelse.body.body)
                    orelse = orelse.orelse
                else:
                    yield from _top_loops(orelse.body.body)
                    orelse = None
        elif isinstance(stmt, (cst.With, cst.Try)):
            yield from _top_loops(stmt.body.body)


def _loop_over_lists(loop: cst.For) -> list[tuple[str, str]]:
    """(variable, list attribute) of each list the loop walks: ``for v in self.attr``, ``for i, v in
    enumerate(self.attr)``, or ``for a, b in zip(self.resnets, self.attentions)`` (diffusers' UNet
    blocks: iteration ``k`` applies element ``k`` of each); [] for any other loop."""
    it, target = loop.iter, loop.target
    if loop.orelse is not None or loop.asynchronous is not None:
        return []
    if isinstance(target, cst.Name) and self_attr(it) is not None:
        return [(target.value, self_attr(it))]  # type: ignore[list-item]
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and isinstance(target, cst.Tuple)):
        return []
    if any(a.keyword is not None or a.star for a in it.args) or not all(
        isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements
    ):
        return []
    names = [e.value.value for e in target.elements]  # type: ignore[attr-defined]
    attrs = [self_attr(a.value) for a in it.args]
    if it.func.value == "enumerate" and len(attrs) == 1 and attrs[0] is not None and len(names) == 2:
        return [(names[1], attrs[0])]
    if it.func.value == "zip" and len(attrs) == len(names) >= 2 and None not in attrs:
        if len(set(names)) == len(names) and len(set(attrs)) == len(attrs):
            return list(zip(names, attrs))  # type: ignore[arg-type]
    return []


def elements_expr(
    sizer: Any, plan: Any, site: Site, first: Any, later: Any, params: list[str], node: cst.CSTNode
) -> str:
    """The input size of each element of a list a loop applies in order: the first element's, else
    the size the previous element gives (``sizer``: the :class:`~.sizing.Sizer` asking)."""
    rest = sizer._resolve_in(plan, site, later, params, node, each="")  # the trace of elements 1, 2, ...
    if not later_size_holds(site, rest, {"self", *plan.new_args}):
        return sizer._required_arg(  # located at the list's construction, as an unsized element is
            plan,
            site,
            f"input feature size of {plan.name}.{site.attr} after the first element",
            site.ctor,
        )
    head = sizer._resolve_in(plan, site, first, params, node)
    return head if head == rest else f"{head} if {site.elements_index} == 0 else {rest}"


def per_iteration(ctx: Any, plan: Any, site: Site, arg: str, node: cst.CSTNode, position: str) -> str:
    """``arg``, a size the loop's previous iteration leaves that nothing explains, asked for once per
    iteration after the first (a tuple, read at ``position - 1``): the previous layer's output went
    through something the flow cannot follow (``self.activation``, a field), so one number for every
    later layer would fit equal widths only (a scalar argument was asked for: no value of it built an
    MLP of widths 16, 8)."""
    from linen2nnx.migrate.rules import SHAPE_003

    plan.new_args[arg] = "unresolved_each"
    ctx.report(
        SHAPE_003,
        node,
        f"input feature size of {plan.name}.{site.attr} after the first iteration is unknown statically "
        f"and may change with every iteration; required constructor argument {arg} (a tuple of sizes, which "
        "the loop reads by its position) added",
        "pass the sizes explicitly, one per iteration the loop reads it for (a trace does not fill them)",
    )
    return f"{arg}[{position} - 1]"


def later_size(
    sizer: Any, plan: Any, site: Site, later: Any, params: list[str], node: cst.CSTNode, at: tuple[str, str]
) -> str:
    """The input size of a loop's elements after the first (``at``: the first's size, the element's
    position; ``sizer``: the :class:`~.sizing.Sizer` asking): one per iteration where nothing explains it
    (:func:`per_iteration`), read at ``position - 1``, or at ``position`` when the first element's size
    is that same argument (nothing explained it either: one tuple, the first included)."""
    first, position = at
    rest = sizer._resolve_in(plan, site, later, params, node, each=position)
    arg = rest.removesuffix(f"[{position} - 1]")
    return f"{arg}[{position}]" if arg != rest and arg == first else rest
