"""Rank guards: a method that checks the rank of a value before using it has told the dataflow that rank.

Real code guards its inputs: ``assert inputs.ndim == 3`` (a ViT encoder block), ``if inputs.ndim != 4:
raise ValueError(...)`` (a squeeze-and-excite layer), ``n, h, w, c = x.shape`` (a ViT stem: the
unpacking raises unless x has four axes). Past the guard the value has that rank, so a
reduction over leading axes (``jnp.mean(inputs, axis=(1, 2))``) keeps its last axis, and the layer
after it is sized by it instead of needing a size argument. A guard that does not hold raises, so
whatever runs after it sees the rank it states.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst


def ranked(env: dict[str, Any], guard: tuple[str, int] | None) -> None:
    """Past ``guard``, the guarded value of ``env`` (a dataflow's ``Feat`` values) has the rank it
    states, when it is a size whose rank was unknown."""
    if guard is None:
        return
    name, rank = guard
    held = env.get(name)
    if held is not None and held.kind in ("input", "expr", "choice") and not held.rank:
        env[name] = dataclasses.replace(held, rank=rank)


def asserted_rank(test: cst.BaseExpression) -> tuple[str, int] | None:
    """``x.ndim == 3`` / ``len(x.shape) == 3`` (an ``assert``'s test): ``("x", 3)``."""
    return _compared_rank(test, cst.Equal)


def raised_unless_rank(node: cst.If) -> tuple[str, int] | None:
    """``if x.ndim != 4: raise ...`` with no ``else``: past it, ``x`` has rank 4."""
    if node.orelse is not None or not _only_raises(node.body):
        return None
    return _compared_rank(node.test, cst.NotEqual)


def unpacked_rank(assign: cst.Assign) -> tuple[str, int] | None:
    """``n, h, w, c = x.shape``: an unpacking with no starred target raises unless ``x`` has exactly
    that many axes, so past it ``x`` has that rank (``("x", 4)``); None for anything else, or when the
    unpacking binds ``x`` itself anew."""
    if len(assign.targets) != 1:
        return None
    target, value = assign.targets[0].target, assign.value
    if not (
        isinstance(target, (cst.Tuple, cst.List))
        and target.elements
        and isinstance(value, cst.Attribute)
        and value.attr.value == "shape"
        and isinstance(value.value, cst.Name)
    ):
        return None
    name = value.value.value
    for element in target.elements:
        if isinstance(element, cst.StarredElement):
            return None
        if isinstance(element.value, cst.Name) and element.value.value == name:
            return None
    return name, len(target.elements)


def _compared_rank(test: cst.BaseExpression, operator: type) -> tuple[str, int] | None:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, operator):
        return None
    for rank_of, number in ((test.left, target.comparator), (target.comparator, test.left)):
        name = rank_read(rank_of)
        if name is not None and isinstance(number, cst.Integer) and int(number.value) > 0:
            return name, int(number.value)
    return None


def rank_read(node: cst.BaseExpression) -> str | None:
    """The name whose rank ``node`` reads: ``x.ndim`` or ``len(x.shape)``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "ndim" and isinstance(node.value, cst.Name):
        return node.value.value
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "len"
        and len(node.args) == 1
        and isinstance(shape := node.args[0].value, cst.Attribute)
        and shape.attr.value == "shape"
        and isinstance(shape.value, cst.Name)
    ):
        return shape.value.value
    return None


def _only_raises(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], cst.Raise)
    return False
