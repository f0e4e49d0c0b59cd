"""Feature sizes through dicts that blocks fill and return.

Much Linen code returns its features in a dict -- ``return {'last_hidden_state': x, 'past': p}``, or
``out = {}`` filled with ``out['pre_logits'] = x`` and returned beside the logits -- and a head reads
one entry: ``output['last_hidden_state']``; ``dict(a=x, b=y)`` of the builtin is the same display. A
:class:`~linen2nnx.migrate.dataflow_types.Feat` of kind ``mapping`` holds the value of each key the
source spells out (``names``, ``elements``), so that the size of what a head reads is still known.

Only string keys written as literals are followed. A store under a key the source does not spell out
(``out[f'stage{i}'] = x``) may replace any entry that starts with the f-string's fixed text: those
keys are forgotten (every key, for a key of any other form), and only those stored later are known
again. A dict display with ``**other`` or a non-literal key is unknown. Stores
are followed in order (``mutation`` leaves ``name[key] = value`` on a local to the dataflow); any other
in-place change (``out.update(...)``, ``del out[k]``, a store inside a nested function) still forgets
the dict for the whole method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.dataflow_types import Feat

KIND = "mapping"


def literal_key(node: cst.BaseExpression) -> str | None:
    """The string a key written as a plain literal spells (``'k'``, ``"k"``); None for anything else
    (an f-string, a name, a number)."""
    value = node.evaluated_value if isinstance(node, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def string_key(node: cst.BaseExpression) -> bool:
    """Whether a subscript key is a string of any spelling (a literal, an f-string, a concatenation):
    a store under it changes a dict (or an object's item), never a list's element."""
    if isinstance(node, cst.SimpleString):
        return literal_key(node) is not None
    return isinstance(node, (cst.FormattedString, cst.ConcatenatedString))


def displayed(node: cst.Dict, value_of: Callable[[cst.BaseExpression], Feat]) -> Feat:
    """``{'a': x, 'b': y}``: each literal key's value (a later duplicate key wins, as in Python)."""
    names: list[str] = []
    elements: list[Feat] = []
    for el in node.elements:
        if not isinstance(el, cst.DictElement):
            value_of(el.value)
            return Feat.unknown("a dict display with ** entries")
        key = literal_key(el.key)
        feat = value_of(el.value)
        if key is None:
            return Feat.unknown("a dict key the source does not spell out")
        if key in names:
            elements[names.index(key)] = feat
        else:
            names.append(key)
            elements.append(feat)
    return Feat(KIND, elements=tuple(elements), names=tuple(names))


def is_dict_call(node: cst.Call, qualnames: set[str]) -> bool:
    """``dict(a=x, b=y)`` of the builtin ``dict`` (not a name the file binds), keywords only."""
    return (
        bool(qualnames & {"dict", "builtins.dict"})
        and bool(node.args)
        and all(a.keyword is not None and not a.star for a in node.args)
    )


def called(node: cst.Call, values: list[Feat]) -> Feat:
    """``dict(a=x, b=y)``: the value of each keyword (see :func:`is_dict_call`)."""
    names = tuple(a.keyword.value for a in node.args)  # type: ignore[union-attr]
    return Feat(KIND, elements=tuple(values), names=names)


def stored(held: Feat, key: cst.BaseExpression, value: Feat) -> Feat:
    """What a dict holds after ``held[key] = value``: the entry replaced or added under a literal key;
        under any other key (an f-string), only the known keys it cannot spell (``f'stage{i}'`` cannot replace
    ``'stem'``) are still known."""
    name = literal_key(key)
    if name is None:
        prefix = _fixed_prefix(key)
        kept = [(n, e) for n, e in zip(held.names, held.elements) if prefix and not n.startswith(prefix)]
        return Feat(KIND, elements=tuple(e for _, e in kept), names=tuple(n for n, _ in kept))
    if name in held.names:
        i = held.names.index(name)
        return dataclasses.replace(held, elements=(*held.elements[:i], value, *held.elements[i + 1 :]))
    return dataclasses.replace(held, elements=(*held.elements, value), names=(*held.names, name))


def _fixed_prefix(key: cst.BaseExpression) -> str:
    """The text every string an f-string key makes starts with (``'stage'`` of ``f'stage{i}'``); ''
    when unknown. The keys known so far that do not start with it are left as they are."""
    if not isinstance(key, cst.FormattedString) or "b" in key.prefix.lower():
        return ""
    text = ""
    for part in key.parts:
        if not isinstance(part, cst.FormattedStringText):
            break
        text += part.value
    if "\\" in text or "{" in text or "}" in text:  # escapes and doubled braces: not worth decoding
        return ""
    return text


def subscript_key(node: cst.Subscript) -> str | None:
    """``'k'`` of ``value['k']``: the one index, a string literal; None for any other subscript."""
    index = node.slice[0].slice if len(node.slice) == 1 else None
    return literal_key(index.value) if isinstance(index, cst.Index) else None


def looked_up(value: Feat, node: cst.Subscript) -> Feat:
    """``value['k']`` of a dict value: the entry when the key is a literal the dict is known to hold."""
    key = subscript_key(node)
    if key is None:
        return Feat.unknown("a dict key the source does not spell out")
    if key not in value.names:
        return Feat.unknown(f"the dict entry {key!r}, not known here")
    return value.elements[value.names.index(key)]


def merged(a: Feat, b: Feat, merge: Callable[[Feat, Feat], Feat]) -> Feat:
    """Two dicts one of which a later read sees: the keys both hold, each pair merged; a dict and
    anything else: unknown."""
    if a.kind != KIND or b.kind != KIND:
        return Feat.unknown("a dict on one path and another value on the other")
    names = tuple(n for n in a.names if n in b.names)
    elements = tuple(merge(a.elements[a.names.index(n)], b.elements[b.names.index(n)]) for n in names)
    return Feat(KIND, elements=elements, names=names)
