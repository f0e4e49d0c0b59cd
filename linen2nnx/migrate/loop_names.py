"""Computed ``name=`` of a module built in a loop of ``@nn.compact``, read as a pattern of its list index.

``f'layer_{i}'`` inside ``for i in range(n)`` is the plain case (``sites.loop_name_prefix``): the name
map's ``layer`` list maps ``layer_k`` to element ``k``. Real code also writes ``f'EncDecBlock{lyr}'``
(no ``_`` before the number) and, after a first module built outside the loop, ``f'unit{i + 1}'``
inside ``for i in range(1, n)``: element ``k`` of the ``nnx.List`` is then Linen's ``unit{k + 2}``.
Such names become a pattern with the index and its offset (``EncDecBlock{i}``, ``unit{i+2}``, read by
``namemap``), so convert finds every element's weights. Anything else (a start that is not a
literal, a name of the loop variable times something, a format spec) is not followed: the caller
keeps its finding. A name chosen by a test of the config between a literal and such a pattern (T5X's
``'wi' if len(self.activations) == 1 else f'wi_{idx}'``, also through a local bound once) is the
pattern, and the literal names element 0 alone (Linen allows one module of a name).
"""

from __future__ import annotations

import re

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    attribute_for,
    names_in,
    parse_expression,
    snake_case,
)
from linen2nnx.migrate.function_aliases import sole_assigned_value
from linen2nnx.migrate.name_strings import as_fstring
from linen2nnx.migrate.sites import ClassPlan, LoopInfo, Site
from linen2nnx.namemap import split_pattern


def counting(node: cst.CSTNode | None) -> tuple[int, str] | None:
    """The first value of the variable that counts a loop's iterations, and its name: 0 and ``i`` over
    ``range(n)``; ``a`` of ``range(a, b)``; ``s`` of ``for i, v in enumerate(seq, s)`` (0 without
    ``s``). None for any other loop or a start that is no literal."""
    it = node.iter if isinstance(node, cst.For) else None
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name)):
        return None
    args = [a for a in it.args if a.keyword is None and not a.star]
    start = [a.value for a in it.args if a.keyword is not None and a.keyword.value == "start"]
    target = node.target  # type: ignore[union-attr]
    if it.func.value == "range" and isinstance(target, cst.Name) and len(args) == len(it.args) <= 2:
        first = args[0].value if len(args) == 2 else cst.Integer("0")
        return (int(first.value), target.value) if isinstance(first, cst.Integer) else None
    if not (
        it.func.value == "enumerate"
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
        and len(args) + len(start) == len(it.args)
        and 1 <= len(it.args) <= 2
    ):
        return None
    first = (args[1].value if len(args) == 2 else start[0]) if len(it.args) == 2 else cst.Integer("0")
    return (int(first.value), target.elements[0].value.value) if isinstance(first, cst.Integer) else None


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
    counted = counting(loop.node)
    if counted is None or counted[1] not in (loop.var, loop.index):  # enumerate's count: its index
        return None
    return name_pattern(value, *counted)


def name_pattern(value: cst.BaseExpression, start: int, var: str) -> str | None:
    """The pattern of ``value`` (see :func:`loop_name_pattern`) where ``var`` counts from ``start``;
    ``str(i)``, ``'block_' + str(i)`` and ``'block_{:d}'.format(i)`` are read as the f-strings they
    equal (name_strings.py)."""
    value = as_fstring(value)
    if not isinstance(value, cst.FormattedString):
        return None
    before, after, offset = [], [], None
    for part in value.parts:
        if isinstance(part, cst.FormattedStringText):
            if "{" in part.value or "}" in part.value:
                return None  # an escaped brace: not a plain name
            (before if offset is None else after).append(part.value)
            continue
        if offset is not None or part.conversion is not None or (width := _zero_padded(part)) is None:
            return None
        offset = _offset_of(part.expression, var)
        if offset is None:
            return None
    if offset is None or start + offset < 0:
        return None
    total = start + offset
    index = "i" + (f"+{total}" if total else "") + (f":0{width}d" if width else "")
    return "".join(before) + "{" + index + "}" + "".join(after)


def _single_choice(ctx: FileContext, value: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """``'wi' if len(self.activations) == 1 else f'wi_{idx}'`` (T5X's MlpBlock), written in ``name=`` or
    in a local bound once to it: the literal and the loop's name. Linen allows one module of a name, so
    where the test (of the class's fields only) picks the literal the loop builds at most one module,
    named so: element 0. None for anything else."""
    if isinstance(value, cst.Name):
        bound = sole_assigned_value(ctx, value)
        value = bound if isinstance(bound, cst.IfExp) else value
    fn = ctx.enclosing_function(value) if isinstance(value, cst.IfExp) else None
    if fn is None or (names_in(value.test) - NOT_LOCAL) & set(assigned_names(fn)):  # type: ignore[union-attr]
        return None  # a test of a call-time value (the loop's own index among them)
    branches = (value.body, value.orelse)
    literal = next((b for b in branches if isinstance(b, cst.SimpleString)), None)
    other = next((b for b in branches if not isinstance(b, cst.SimpleString)), None)
    if literal is None or other is None or not isinstance(literal.evaluated_value, str):
        return None
    return literal.evaluated_value, other


def loop_name_value(ctx: FileContext, value: cst.BaseExpression) -> cst.BaseExpression:
    """The loop's own name of ``name=value``: the other branch of a single-module choice
    (:func:`_single_choice`), else ``value`` itself."""
    choice = _single_choice(ctx, value)
    return choice[1] if choice is not None else value


def single_name(ctx: FileContext, value: cst.BaseExpression) -> str | None:
    """The Linen name element 0 has where the loop builds one module only (:func:`_single_choice`)."""
    choice = _single_choice(ctx, value)
    return choice[0] if choice is not None else None


def _zero_padded(part: cst.FormattedStringExpression) -> int | None:
    """The width of ``{i:02d}`` (0 without a format spec); None for any other format spec."""
    spec = part.format_spec
    if spec is None:
        return 0
    text = spec[0].value if len(spec) == 1 and isinstance(spec[0], cst.FormattedStringText) else ""
    return int(text[1:-1]) if re.fullmatch(r"0[1-9]d", text) else None


def pattern_attr(pattern: str, class_name: str) -> str:
    """A valid attribute for the list of a name pattern: its text, snake-cased (``EncDecBlock{i}`` ->
    ``enc_dec_block``, ``unit{i+2}`` -> ``unit``)."""
    before, _, after = split_pattern(pattern)
    text = (before + "_" + after).strip("_") if after else before.rstrip("_")
    return attribute_for(snake_case(text) if text else snake_case(class_name), class_name)


NNX_MODULE_NAMES = frozenset(
    {"eval", "iter_children", "iter_modules", "perturb", "set_attributes", "sow", "train"}
)
"""The public attributes of ``nnx.Module`` (flax 0.12): a child or variable of that name would hide them."""


def reserved(plan: ClassPlan, attr: str) -> bool:
    """An attribute no child or variable of the NNX class may take: one of the class's methods (a child
    named ``norm`` beside ``def norm(self, x)`` would be called where the method was), a name of
    ``nnx.Module``'s API (``eval``, ``sow``), or ``rngs`` (the class's own key streams)."""
    return attr in plan.method_names or attr in NNX_MODULE_NAMES or attr == "rngs"


def free_attribute(plan: ClassPlan, attr: str, ignore: list[Site] | tuple[Site, ...] = ()) -> str:
    """``attr``, or with ``_`` appended until no hoisted module or variable of ``plan`` (but those of
    ``ignore``, about to take it), no field and no :func:`reserved` name holds it: a distinct attribute."""
    taken = [s for s in plan.sites.values() if s.hoisted and not any(s is i for i in ignore)]
    while any(s.attr == attr for s in taken) or attr in plan.field_names or reserved(plan, attr):
        attr = f"{attr}_"
    return attr


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


def built_per_iteration(site: Site, built: cst.BaseExpression) -> cst.BaseExpression:
    """A module built in a plain loop: the ``nnx.List`` of one per iteration (``built`` as it is
    outside a loop)."""
    if site.loop is not None:
        comp = parse_expression(f"[None for {site.loop.target_src} in {site.loop.iter_src}]")
        assert isinstance(comp, cst.ListComp)
        built = cst.Call(parse_expression("nnx.List"), [cst.Arg(comp.with_changes(elt=built))])
    return built
