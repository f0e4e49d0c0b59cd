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

The class may come through a local of ``setup()`` that a config flag wraps in a remat (Griffin's
``block_class = modules.ResidualBlock``; ``if self.gradient_checkpointing: block_class =
nn.remat(block_class, static_argnums=4)``): the elements are built from the class, and the remat moves
to where they are called, under the same flag.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.cst_utils import code, keyword_arg, names_in, single_assign


def comprehension_index(comp: cst.ListComp) -> str | None:
    """The element index variable of ``[... for i in range(n)]`` / ``[... for i, x in enumerate(s)]``.
    Over ``range(start, stop)`` the variable is no index, so it is returned only when the elements
    are not named after it (:func:`element_names` takes their position then)."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.ifs or loop.asynchronous is not None:
        return None
    it, target = loop.iter, loop.target
    if not (
        isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and not any(a.keyword for a in it.args)
    ):
        return None
    if it.func.value == "range" and isinstance(target, cst.Name):
        if len(it.args) > 1 and isinstance(comp.elt, cst.Call) and keyword_arg(comp.elt, "name") is not None:
            return None  # ``name=f'block_{i}'`` over ``range(1, n)``: block_1 is element 0
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


def element_position(comp: cst.ListComp, index: str) -> str:
    """The position of an element, as an expression of the comprehension's ``index``: the index itself,
    or over ``range(start, stop[, step])`` the count of steps from ``start`` (what a tuple of one size
    per element is indexed by)."""
    it = comp.for_in.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"):
        return index
    args = [
        code(a.value) if isinstance(a.value, (cst.Name, cst.Integer, cst.Attribute)) else f"({code(a.value)})"
        for a in it.args
    ]
    if len(args) == 2:
        return f"({index} - {args[0]})"
    if len(args) == 3:
        return f"({index} - {args[0]}) // {args[2]}"
    return index


def element_names(ctor: cst.Call, index: str, attr: str) -> str | None:
    """The Linen names of the elements as a pattern with ``{i}`` for the index; None when the
    ``name=`` is not one the codemod can follow."""
    name_arg = keyword_arg(ctor, "name")
    name = name_arg.value if name_arg is not None else None
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


@dataclasses.dataclass(frozen=True)
class ClassAlias:
    """A local of ``setup()`` holding a class: its value, and the remat a config flag may wrap it in."""

    value: cst.BaseExpression  # the class: `modules.ResidualBlock`
    remat: cst.Call | None = None  # `nn.remat(block_class, static_argnums=4)`
    remat_stmt: cst.If | None = None  # `if self.gradient_checkpointing: block_class = nn.remat(...)`


def class_alias(body: list[cst.BaseStatement], before: cst.BaseStatement, name: str) -> ClassAlias | None:
    """How the top-level statements of ``body`` before ``before`` bind ``name``: one plain assignment,
    then at most one ``if <flag of self>: name = <transform>(name, <keywords>)``; None for any other
    binding (the caller checks that the value is a class and the call a transform)."""
    value: cst.BaseExpression | None = None
    remat: cst.Call | None = None
    remat_stmt: cst.If | None = None
    for stmt in body:
        if stmt is before:
            break
        assign = single_assign(stmt)
        if assign is not None and assign[0] == name:
            if value is not None or name in names_in(assign[1]):
                return None
            value = assign[1]
            continue
        if isinstance(stmt, cst.If) and name in names_in(stmt.body):
            inner = stmt.body.body
            assign = single_assign(inner[0]) if len(inner) == 1 else None
            call = assign[1] if assign is not None else None
            if (
                value is None
                or remat is not None
                or stmt.orelse is not None
                or not isinstance(call, cst.Call)
                or not call.args
                or not (isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == name)
                or any(a.keyword is None for a in call.args[1:])
                or names_in(stmt.test) - {"self"}
            ):
                return None
            remat, remat_stmt = call, stmt
        elif name in names_in(stmt):
            return None  # read or bound some other way
    return ClassAlias(value, remat, remat_stmt) if value is not None else None
