"""Whether a ``for`` loop of a method ran: the sizes after a loop that may run zero times.

``for i in range(self.depth): x = nn.Dense(3)(x)`` leaves ``x`` 3 wide only where ``self.depth > 0``;
with ``depth=0`` it keeps its width from before the loop. A size the loop changes is then a choice on
the test that the loop ran, which ``__init__`` decides as the call does -- when the iterable reads the
config alone (a count, a sequence, ``enumerate`` of one, read from the class's fields).
``FeatureFlow._leave_loop`` rewrites the sizes that read the loop variable (``seq[-1]``);
:func:`unrun_choices`, called by ``MethodFlow.after_loop``, the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import libcst as cst
import libcst.matchers as m

from linen2nnx.migrate import tuple_flow
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_in,
    code,
    names_in,
    parse_expression,
    rebound_names,
    replace_name,
    self_attr,
    self_targets,
    subscriptable,
)
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.setup_loop_lists import loop_lists

SIZED_OR_CHOICE = frozenset({*tuple_flow.SIZED, "choice"})
"""Sizes a choice can hold: each side a config expression, an input's size, or a choice itself."""


NUMBER_LITERALS = ("Integer", "Float")
"""The reasons the flow gives a number literal's unknown size (the literal's node type)."""


def ran_test(it: cst.BaseExpression) -> str:
    """The source of a test that a loop over ``it`` runs at least once: ``n > 0`` of ``range(n)``,
    ``b > a`` of ``range(a, b)``, ``len(s) > 0`` of a sequence ``s`` or ``enumerate(s)``; "" for
    another call (``zip``, a step) or anything else."""
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and not any(a.keyword for a in it.args):
        bounds = [code(a.value) for a in it.args]
        if it.func.value == "range" and len(bounds) in (1, 2):
            return f"{bounds[0]} > 0" if len(bounds) == 1 else f"{bounds[1]} > {bounds[0]}"
        if it.func.value == "enumerate" and len(bounds) == 1:
            return f"len({bounds[0]}) > 0"
        return ""
    return "" if isinstance(it, cst.Call) else f"len({code(it)}) > 0"


def last_values(loop: cst.For | cst.CompFor) -> tuple[dict[str, str], str]:
    """What each name the loop's target binds holds after the loop ran (``range(n)``: ``(n - 1)``;
    ``for v in s``: ``s[-1]``; ``for i, v in enumerate(s)``: ``(len(s) - 1)`` and ``s[-1]``), and the
    test that it ran; no names where the source does not say (``zip``, a step, other targets). For a
    comprehension's ``for`` (its last element's names), none where it filters or nests."""
    it, target, ran = loop.iter, loop.target, ran_test(loop.iter)
    func = it.func.value if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) else ""
    if not ran:
        return {}, ""
    if isinstance(loop, cst.CompFor) and (loop.ifs or loop.inner_for_in or loop.asynchronous):
        return {}, ran  # the last element is not the last value's
    if isinstance(loop, cst.For) and names_in(target) & rebound_names(loop.body):
        return {}, ran  # `for w in s: w = w * 2`: after the loop `w` is the body's value
    if isinstance(target, cst.Name) and func != "enumerate":
        last = f"({code(it.args[-1].value)} - 1)" if func == "range" else f"{subscriptable(code(it))}[-1]"  # type: ignore[attr-defined]
        return {target.value: last}, ran
    pair = target.elements if isinstance(target, (cst.Tuple, cst.List)) else ()
    if func == "enumerate" and len(pair) == 2 and all(isinstance(e.value, cst.Name) for e in pair):
        seq = code(it.args[0].value)  # type: ignore[attr-defined]
        return {
            pair[0].value.value: f"(len({seq}) - 1)",
            pair[1].value.value: f"{subscriptable(seq)}[-1]",
        }, ran  # type: ignore[attr-defined]
    return {}, ran


def unrun_choices(
    loop: cst.For,
    before: dict[str, Feat],
    env: dict[str, Feat],
    fields: Collection[str],
    setup: cst.FunctionDef | None = None,
) -> None:
    """In ``env`` after ``loop``: each size the loop changed, of a value sized before it too, becomes a
    choice between the two on whether the loop ran, where ``fields`` of the config, or a list
    ``setup()`` builds from them (``for layer in self.layers``, of ``[nn.Dense(4) for _ in
    range(self.n)]``, which is empty where n is 0), decide that; a loop over a call-time value keeps
    the size its body gives. The test on a setup list reads it in ``__init__`` where built before the
    layer the size is for (setup_order.py), and a caller never reads it (no field of its own)."""
    setup_list_lasts(loop, before, env, setup)
    test = setup_list_test(setup, loop.iter)
    test = ran_test(loop.iter) if test is None else test  # "": a setup list that is never empty
    tree = cst.parse_expression(test) if test else None
    if tree is None or not names_in(tree) - NOT_LOCAL - {"len"} <= {"self"}:
        return  # a loop over a call-time value: __init__ cannot tell whether it runs
    read = {a.attr.value for a in m.findall(tree, m.Attribute(value=m.Name("self")))}  # type: ignore[union-attr]
    if not read or not read <= set(fields) | setup_bound(setup):
        return
    for name, feat in list(env.items()):
        previous = before.get(name)
        if previous is None or feat == previous or {feat.kind, previous.kind} & set(tuple_flow.COMPOUND):
            continue  # bound by the loop alone, unchanged, or a tuple / object (element-wise elsewhere)
        if feat.kind == "choice" and feat.elements[1:] == (previous,):
            continue  # already the size from before where the loop did not run (`seq[-1]` or before)
        if previous.kind == "unknown" and previous.reason in NUMBER_LITERALS:
            continue  # `out = 1.0`, then `out = out * h`: a number has no axis to size a layer (nor in Linen)
        if {feat.kind, previous.kind} <= SIZED_OR_CHOICE:
            env[name] = Feat("choice", expr=test, elements=(feat, previous))
        else:  # `x` of unknown size before the loop: with no iteration it keeps that size
            env[name] = Feat.unknown(f"a size from before a loop that may not run ({test})")


def setup_list_lasts(
    loop: cst.For, before: dict[str, Feat], env: dict[str, Feat], setup: cst.FunctionDef | None
) -> None:
    """In ``env`` after ``for d in self.denses: x = d(x)``, of ``self.denses = [nn.Dense(w) for i, w in
    enumerate(self.widths)]`` in setup(): a size the loop changed that reads the comprehension's own
    names (``w``, the last element's width) reads their last values (``self.widths[-1]``), as after a
    ``for`` loop; unknown where the comprehension does not say. Left as ``w`` it named nothing outside
    the comprehension (NameError in ``__init__``), or another ``w``."""
    name = self_attr(loop.iter)
    values = [getattr(small, "value", None) for bound, small in _setup_bindings(setup) if bound == name]
    comp = values[0] if name and len(values) == 1 else None
    if isinstance(comp, cst.ListComp):
        own, lasts = names_in(comp.for_in.target), last_values(comp.for_in)[0]
    elif setup is not None and isinstance(
        comp, cst.Name
    ):  # `blocks = []`, a loop appends, `self.blocks = blocks`
        filled = _filling_loop(setup, name or "")
        if filled is None:
            return
        own = names_in(filled[0].target) | set(assigned_in(filled[0].body))  # the body's locals: unknown
        lasts = {} if filled[1] else last_values(filled[0])[0]  # modules before the loop: maybe the last
    else:
        return
    for key, feat in list(env.items()):
        if feat != before.get(key):
            env[key] = _at_last(feat, own, lasts)


def _filling_loop(setup: cst.FunctionDef, attr: str) -> tuple[cst.For, bool] | None:
    """The top-level ``for`` loop of ``setup()`` that fills the list bound to ``self.<attr>``
    (setup_loop_lists.py), and whether modules start the list before it."""
    body = setup.body.body
    for found in loop_lists(body, setup, lambda node: isinstance(node, cst.Call))[0]:
        loop = next(
            (s for s in body if isinstance(s, cst.For) and any(c is found.ctor for c in calls_in(s.body))),
            None,
        )
        if found.attr == attr and loop is not None:
            return loop, bool(found.seeds)
    return None


def _at_last(feat: Feat, own: set[str], lasts: dict[str, str]) -> Feat:
    """``feat`` with the names ``own`` replaced by their ``lasts`` (unknown where one has none)."""
    if feat.kind in ("expr", "choice") and feat.expr:
        read = names_in(parse_expression(feat.expr)) & own
        if read - set(lasts):
            return Feat.unknown(f"a size that depends on a comprehension's variable {min(read)}")
        expr = feat.expr
        for var in sorted(read):
            expr = replace_name(expr, var, lasts[var])
        feat = dataclasses.replace(feat, expr=expr)
    parts = {
        "elements": tuple(_at_last(e, own, lasts) for e in feat.elements),
        "tail": tuple(_at_last(e, own, lasts) for e in feat.tail),
        "base": feat.base and _at_last(feat.base, own, lasts),
    }
    return dataclasses.replace(feat, **parts)  # type: ignore[arg-type]


def _setup_bindings(setup: cst.FunctionDef | None) -> list[tuple[str, cst.BaseSmallStatement]]:
    """Each attribute a top-level line of ``setup()`` binds, with the statement binding it."""
    lines = [stmt for stmt in setup.body.body if isinstance(stmt, cst.SimpleStatementLine)] if setup else []
    return [(name, small) for stmt in lines for small in stmt.body for _, name in self_targets(small)]


def setup_bound(setup: cst.FunctionDef | None) -> set[str]:
    """The attributes the top-level lines of ``setup()`` bind."""
    return {name for name, _ in _setup_bindings(setup)}


def setup_list_test(setup: cst.FunctionDef | None, it: cst.BaseExpression) -> str | None:
    """Whether a loop over a list ``setup()`` binds once runs, in config terms: "" (it always does) for
    a display with elements or a comprehension over ``range`` of a positive literal, the range's test
    (``self.n > 0``) for a comprehension over ``range`` of config; None for anything else (the loop's
    own test, ``len(self.layers) > 0``, stands)."""
    name = self_attr(it)
    values = [
        getattr(small, "value", None) for bound, small in _setup_bindings(setup) if name and bound == name
    ]
    value = values[0] if len(values) == 1 else None
    if isinstance(value, (cst.List, cst.Tuple)) and value.elements:
        return None if any(isinstance(e, cst.StarredElement) for e in value.elements) else ""
    if not isinstance(value, cst.ListComp) or value.for_in.inner_for_in or value.for_in.ifs:
        return None
    it = value.for_in.iter
    ranged = isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"
    test = ran_test(it) if ranged else ""
    if not test:
        return None
    bounds = [a.value for a in it.args]  # type: ignore[union-attr]
    ints = [int(b.value) for b in bounds if isinstance(b, cst.Integer)]
    if len(ints) != len(bounds):
        return test  # `self.n > 0`
    return "" if (ints[0] > 0 if len(ints) == 1 else ints[1] > ints[0]) else None
