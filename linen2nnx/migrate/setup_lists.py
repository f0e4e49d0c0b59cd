"""Submodule lists built by a comprehension in ``setup()``: ``self.blocks = [Block(cfg, name=f'block_{i}')
for i in range(cfg.num_layers)]``.

LLM-style Linen code builds its layer stack this way. Linen names the elements of a list assigned in
``setup()`` ``blocks_0``, ``blocks_1``, ... unless each is given ``name=``; NNX needs an ``nnx.List`` of
modules built with ``rngs``. The comprehension keeps its loop: its element becomes the NNX constructor
and the whole is wrapped in ``nnx.List``; the name map records the elements' Linen names as a pattern
(``block_{i}``, ``{i}`` for ``name=str(i)``) so that element ``k`` maps to ``blocks/k``. Only a
comprehension whose index is known is taken: ``for i in range(...)`` or ``for i, x in enumerate(...)``,
one ``for``, no ``if``, and a name that is absent, ``str(i)`` or an f-string of ``i`` with literal text
around it; anything else stays as it is (the verifier reports what it leaves).
"""

from __future__ import annotations

import libcst as cst


def comprehension_index(comp: cst.ListComp) -> str | None:
    """The element index variable of ``[... for i in range(n)]`` / ``[... for i, x in enumerate(s)]``."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.ifs or loop.asynchronous is not None:
        return None
    it, target = loop.iter, loop.target
    if not (
        isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and not any(a.keyword for a in it.args)
    ):
        return None
    if it.func.value == "range" and isinstance(target, cst.Name):
        return target.value
    if (
        it.func.value == "enumerate"
        and len(it.args) == 1
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
    ):
        return target.elements[0].value.value
    return None


def element_names(ctor: cst.Call, index: str, attr: str) -> str | None:
    """The Linen names of the elements as a pattern with ``{i}`` for the index; None when the
    ``name=`` is not one the codemod can follow."""
    name = next((a.value for a in ctor.args if a.keyword is not None and a.keyword.value == "name"), None)
    if name is None:
        return f"{attr}_{{i}}"  # Linen's names for a list assigned in setup()
    if (
        isinstance(name, cst.Call)
        and isinstance(name.func, cst.Name)
        and name.func.value == "str"
        and len(name.args) == 1
        and isinstance(name.args[0].value, cst.Name)
        and name.args[0].value.value == index
    ):
        return "{i}"
    if not isinstance(name, cst.FormattedString):
        return None
    pattern = ""
    for part in name.parts:
        if isinstance(part, cst.FormattedStringText):
            if "{" in part.value or "}" in part.value:
                return None
            pattern += part.value
        elif (
            isinstance(part.expression, cst.Name)
            and part.expression.value == index
            and part.conversion is None
            and part.format_spec is None
            and "{i}" not in pattern
        ):
            pattern += "{i}"
        else:
            return None
    return pattern if "{i}" in pattern else None
