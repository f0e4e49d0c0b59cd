"""Module names written other than as an f-string, read as the f-string they equal.

A loop names its modules from its counter, and code spells that in several ways: ``f'block_{i}'``,
``str(i)`` (CLIP's ResNet layers), ``'encoderblock_' + str(i)`` (scenic's UViT), ``'EncoderBlock_{:d}'
.format(ll)``. The loop-name patterns (``loop_names.py``) read f-strings; :func:`as_fstring` gives the
f-string each of the other spellings equals, so one reader serves them all. Only forms whose value is
certain for an integer counter are read: a literal, ``str(expr)``, their ``+``, and ``.format`` of a
literal with one positional argument in fields ``{}`` / ``{0}`` (with no spec, ``d``, or a zero-padded
width ``0Nd``). Anything else comes back unchanged (and the loop-name reader refuses it as before).
"""

from __future__ import annotations

import re
import string

import libcst as cst

_SPEC = re.compile(r"d|0[1-9]d")


def as_fstring(value: cst.BaseExpression) -> cst.BaseExpression:
    """``value`` as the f-string it equals (see the module docstring), else ``value`` itself."""
    parts = _parts(value)
    if parts is None or not any(isinstance(p, cst.FormattedStringExpression) for p in parts):
        return value
    return cst.FormattedString(parts=parts)


def _parts(value: cst.BaseExpression) -> list[cst.BaseFormattedStringContent] | None:
    """The f-string parts of ``value``; None for a form not read."""
    if isinstance(value, cst.FormattedString):
        return list(value.parts)
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        text = value.evaluated_value
        return None if any(c in text for c in '{}"\\\n') else [cst.FormattedStringText(text)]
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        left, right = _parts(value.left), _parts(value.right)
        return left + right if left is not None and right is not None else None
    if isinstance(value, cst.Call) and _plain_args(value, 1):
        if isinstance(value.func, cst.Name) and value.func.value == "str":
            return [cst.FormattedStringExpression(expression=value.args[0].value)]
        if isinstance(value.func, cst.Attribute) and value.func.attr.value == "format":
            template = value.func.value
            if isinstance(template, cst.SimpleString) and isinstance(template.evaluated_value, str):
                return _formatted(template.evaluated_value, value.args[0].value)
    return None


def _plain_args(call: cst.Call, count: int) -> bool:
    return len(call.args) == count and all(a.keyword is None and not a.star for a in call.args)


def _formatted(template: str, arg: cst.BaseExpression) -> list[cst.BaseFormattedStringContent] | None:
    """``template.format(arg)`` as f-string parts, for fields ``{}`` / ``{0}`` with no spec, ``d`` or
    ``0Nd`` and no conversion; None for anything else (another field, an escaped brace)."""
    parts: list[cst.BaseFormattedStringContent] = []
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for text, field, spec, conversion in fields:
        if "{" in text or "}" in text:
            return None  # an escaped brace: not a plain name
        if text:
            parts.append(cst.FormattedStringText(text))
        if field is None:
            continue
        if field not in ("", "0") or conversion is not None or (spec and not _SPEC.fullmatch(spec)):
            return None
        padded = [cst.FormattedStringText(spec)] if spec and spec != "d" else None  # `d` of an int: itself
        parts.append(cst.FormattedStringExpression(expression=arg, format_spec=padded))
    return parts
