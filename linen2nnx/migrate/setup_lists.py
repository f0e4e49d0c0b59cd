"""Submodule lists built by a comprehension in ``setup()``: ``self.blocks = [Block(cfg, name=f'block_{i}')
for i in range(cfg.num_layers)]``.

LLM-style Linen code builds its layer stack this way. Linen names the elements of a list assigned in
``setup()`` ``blocks_0``, ``blocks_1``, ... unless each is given ``name=``; NNX needs an ``nnx.List`` of
modules built with ``rngs``. The comprehension keeps its loop: its element becomes the NNX constructor
and the whole is wrapped in ``nnx.List``; the name map records the elements' Linen names as a pattern
(``block_{i}``, ``{i}`` for ``name=str(i)``) so that element ``k`` maps to ``blocks/k``. Only a
comprehension whose index is known is taken: ``for i in range(...)``, ``for i, x in enumerate(...)`` or
``for i, x in zip(range(n), ...)``,
one ``for``, no ``if``, and a name that is absent, ``str(i)`` or an f-string of ``i`` with literal text
around it; anything else stays as it is (the verifier reports what it leaves).

The class may come through a local of ``setup()`` that a config flag wraps in a remat (Griffin's
``block_class = modules.ResidualBlock``; ``if self.gradient_checkpointing: block_class =
nn.remat(block_class, static_argnums=4)``; or EasyLM's ``block = FlaxLLaMABlock``; ``if
self.config.remat_policy != '': block = nn.remat(FlaxLLaMABlock, ..., policy=...)``, the class named
again): the elements are built from the class, and the remat, its keywords kept, moves to where they
are called, under the same test.
"""

from __future__ import annotations

import ast
import dataclasses

import libcst as cst

from linen2nnx.migrate.cst_utils import code, keyword_arg, names_in, self_attr, single_assign
from linen2nnx.migrate.name_strings import as_fstring


def comprehension_index(comp: cst.ListComp) -> str | None:
    """The element index variable of ``[... for i in range(n)]`` / ``[... for i, x in enumerate(s)]`` /
    ``[... for i, x in zip(range(n), s)]``.
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
    if it.func.value == "zip" and _zips_a_count(it, target):
        return target.elements[0].value.value  # type: ignore[attr-defined]
    return None


def _zips_a_count(it: cst.Call, target: cst.BaseAssignTargetExpression) -> bool:
    """``for i, kind in zip(range(n), kinds)`` (Gemma's blocks and their attention types): ``i`` counts
    the elements from 0 as ``enumerate`` does, the zip stopping at the shorter of the two."""
    first = it.args[0].value if it.args else None
    return (
        len(it.args) >= 2
        and not any(a.star for a in it.args)
        and isinstance(first, cst.Call)
        and isinstance(first.func, cst.Name)
        and first.func.value == "range"
        and len(first.args) == 1
        and not first.args[0].star
        and isinstance(target, cst.Tuple)
        and len(target.elements) == len(it.args)
        and all(
            isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement) for e in target.elements
        )
    )


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
    name = as_fstring(name)  # str(i), 'layer_' + str(i), 'layer_{}'.format(i): the f-string they equal
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
                or not _names_class(call.args[0].value, name, value)
                or any(a.keyword is None for a in call.args[1:])
                or names_in(stmt.test) - {"self"}
            ):
                return None
            remat, remat_stmt = call, stmt
        elif name in names_in(stmt):
            return None  # read or bound some other way
    return ClassAlias(value, remat, remat_stmt) if value is not None else None


def _names_class(arg: cst.BaseExpression, name: str, value: cst.BaseExpression) -> bool:
    """The remat's first argument is the local (``nn.remat(block_class, ...)``, Griffin) or the class
    the local was first bound to, spelled the same (``nn.remat(FlaxLLaMABlock, ...)``, EasyLM)."""
    if isinstance(arg, cst.Name) and arg.value == name:
        return True
    return code(arg) == code(value)


@dataclasses.dataclass
class RematBranches:
    """``if <flag>: L = remat(Block, ...); self.blocks = [L(...) for ...] else: self.blocks = [Block(...)
    for ...]``: the two branches build the same list, one of them through a remat of the class."""

    stmt: cst.If
    kept: cst.SimpleStatementLine  # the else branch's statement, which stands for both
    comp: cst.ListComp  # its comprehension
    attr: str
    remat: cst.Call  # `remat(Block, static_argnums=...)`, its first argument the class


def remat_branches(stmt: cst.If, later: list[cst.BaseStatement]) -> RematBranches | None:
    """The two-branch form of a remat flag over a setup comprehension, when the branches differ only
    in the class called and the local holding the remat is read nowhere else (``later``: the setup
    statements after ``stmt``); None for anything else (the caller checks the class and transform)."""
    orelse = stmt.orelse
    if not isinstance(orelse, cst.Else) or names_in(stmt.test) - {"self"}:
        return None
    then, other = stmt.body.body, orelse.body.body
    if len(then) != 2 or len(other) != 1 or not isinstance(other[0], cst.SimpleStatementLine):
        return None
    local, remat = single_assign(then[0]) or (None, None)
    built, plain = _attr_assign(then[1]), _attr_assign(other[0])
    if local is None or built is None or plain is None or not isinstance(remat, cst.Call) or not remat.args:
        return None
    (attr, made), (plain_attr, comp) = built, plain
    if (
        attr != plain_attr
        or remat.args[0].keyword is not None
        or any(a.keyword is None or a.star for a in remat.args[1:])
        or not isinstance(comp, cst.ListComp)
        or not isinstance(made, cst.ListComp)
        or not isinstance(made.elt, cst.Call)
        or not (isinstance(made.elt.func, cst.Name) and made.elt.func.value == local)
        or _same_code(made.with_deep_changes(made.elt, func=remat.args[0].value), comp) is False
        or local in names_in(comp)
        or any(local in names_in(s) for s in later)
    ):
        return None
    return RematBranches(stmt, other[0], comp, attr, remat)  # type: ignore[arg-type]


def _same_code(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Whether two expressions are the same code, whatever their layout (line breaks, comments)."""
    return ast.dump(ast.parse(f"({code(a)})", mode="eval")) == ast.dump(
        ast.parse(f"({code(b)})", mode="eval")
    )


def _attr_assign(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``self.attr = value`` on a line of its own -> ``(attr, value)``; None for any other statement."""
    if (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
    ):
        attr = self_attr(stmt.body[0].targets[0].target)
        return (attr, stmt.body[0].value) if attr is not None else None
    return None
