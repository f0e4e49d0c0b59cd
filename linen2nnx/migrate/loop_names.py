"""Computed ``name=`` of a module built in a loop of ``@nn.compact``, read as a pattern of its list index.

``f'layer_{i}'`` inside ``for i in range(n)`` is the plain case (``sites.loop_name_prefix``): the name
map's ``layer`` list maps ``layer_k`` to element ``k``. Real code also writes ``f'EncDecBlock{lyr}'``
(no ``_`` before the number) and, after a first module built outside the loop, ``f'unit{i + 1}'``
inside ``for i in range(1, n)``: element ``k`` of the ``nnx.List`` is then Linen's ``unit{k + 2}``.
Such names become a pattern with the index and its offset (``EncDecBlock{i}``, ``unit{i+2}``, read by
``namemap``), so convert finds every element's weights. Anything else (a start that is not a
literal, a name of the loop variable times something, a format spec) is not followed: the caller
keeps its finding.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import attribute_for, snake_case
from linen2nnx.migrate.sites import LoopInfo, Site
from linen2nnx.namemap import split_pattern


def _start(loop: LoopInfo) -> int | None:
    """The first value of the loop variable: 0 over ``range(n)``, the literal ``a`` of ``range(a, b)``;
    None for a config sequence or a start that is no literal."""
    it = loop.node.iter if isinstance(loop.node, cst.For) else None
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"):
        return None
    if len(it.args) == 1:
        return 0
    first = it.args[0].value
    return int(first.value) if len(it.args) == 2 and isinstance(first, cst.Integer) else None


def _offset_of(expr: cst.BaseExpression, var: str) -> int | None:
    """``i`` -> 0, ``i + 2`` -> 2, ``i - 1`` -> -1 (``var`` the loop variable); None otherwise."""
    if isinstance(expr, cst.Name):
        return 0 if expr.value == var else None
    if not (
        isinstance(expr, cst.BinaryOperation)
        and isinstance(expr.left, cst.Name)
        and expr.left.value == var
        and isinstance(expr.right, cst.Integer)
    ):
        return None
    if isinstance(expr.operator, cst.Add):
        return int(expr.right.value)
    return -int(expr.right.value) if isinstance(expr.operator, cst.Subtract) else None


def loop_name_pattern(value: cst.BaseExpression, loop: LoopInfo) -> str | None:
    """``f'EncDecBlock{lyr}'`` -> ``EncDecBlock{i}``; ``f'unit{i + 1}'`` over ``range(1, n)`` ->
    ``unit{i+2}``: the names of the list's elements by their index; None when not followed."""
    start = _start(loop)
    if start is None or not isinstance(value, cst.FormattedString):
        return None
    before, after, offset = [], [], None
    for part in value.parts:
        if isinstance(part, cst.FormattedStringText):
            if "{" in part.value or "}" in part.value:
                return None  # an escaped brace: not a plain name
            (before if offset is None else after).append(part.value)
            continue
        if offset is not None or part.conversion is not None or part.format_spec is not None:
            return None
        offset = _offset_of(part.expression, loop.var)
        if offset is None:
            return None
    if offset is None or start + offset < 0:
        return None
    total = start + offset
    return "".join(before) + ("{i}" if total == 0 else f"{{i+{total}}}") + "".join(after)


def pattern_attr(pattern: str, class_name: str) -> str:
    """A valid attribute for the list of a name pattern: its text, snake-cased (``EncDecBlock{i}`` ->
    ``enc_dec_block``, ``unit{i+2}`` -> ``unit``)."""
    before, _, after = split_pattern(pattern)
    text = (before + "_" + after).strip("_") if after else before.rstrip("_")
    return attribute_for(snake_case(text) if text else snake_case(class_name), class_name)


def clashes(pattern: str, sites: list[Site]) -> bool:
    """Whether another loop-built list of the class has a pattern with the same text around the
    index: one Linen name would then match both (``b{i}`` and ``b{i+2}`` both read ``b3``)."""
    before, _, after = split_pattern(pattern)
    for site in sites:
        if site.container != "list":
            continue
        if "{i" in site.linen_name:
            other_before, _, other_after = split_pattern(site.linen_name)
            if (other_before, other_after) == (before, after):
                return True
        elif not after and before == f"{site.linen_name}_":  # the `unit` list of f'unit_{i}'
            return True
    return False
