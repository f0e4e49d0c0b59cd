"""Submodule lists filled by a loop in ``setup()`` and then assigned to an attribute::

    blocks = []
    for i in range(self.num_layers):
        in_ch = self.in_channels if i == 0 else self.out_channels
        block = Block(in_ch, self.features)
        blocks.append(block)
    self.blocks = blocks

Linen names the modules of a list assigned in ``setup()`` by their position in it, ``blocks_0``,
``blocks_1``, ... (a ``name=`` of their own wins), and stores the list as a tuple; one loop may fill
several lists. The loop stays a loop in ``__init__``: each construction is rewritten where it stands
(``rngs``, sizes), as the element of a setup() comprehension is (``setup_lists.py``, whose name
patterns and site fields this reuses), and the assignment becomes ``self.blocks = nnx.List(blocks)``.

Positions are the loop's count only when every iteration appends exactly once and nothing else
touches the list: so the loop has no ``break`` / ``continue`` / ``else``, the append is a statement of
the loop body itself (not under an ``if``), the list is bound once, to ``[]`` or to modules of the
appended class that Linen numbers first: auto-named (diffusers' mid blocks: ``resnets = [Block(...)]``)
or named as the loop names its modules, by position (Hugging Face's stages: ``[Stage(..., name="0")]``,
then ``name=str(i + 1)``),
and read only by that append and the one assignment after the loop, and a module held in a local is
read only by the append. A ``name=`` of the index and a size that differs per element (a tuple
argument indexed by position: ``[0]``, then ``[1 + i]``) need the index: ``for i in range(n)`` or
``for i, x in enumerate(s)``; over any other iterable (``for width in self.widths``) only auto-named
modules sized once for all elements are followed. Anything else is reported at the construction
(the class stays Linen behind the bridge where it can) rather than guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import (
    assigned_in,
    callee_name,
    code,
    keyword_arg,
    literal_name,
    name_counts,
    self_attr,
    single_assign,
)
from linen2nnx.migrate.setup_lists import element_names


@dataclasses.dataclass(frozen=True)
class LoopList:
    """One list a setup() loop fills exactly: its attribute, the construction and its names."""

    attr: str  # `blocks` of `self.blocks = blocks`
    ctor: cst.Call  # `Block(...)`, appended directly or through a local of the loop body
    names: str  # the elements' Linen names, `blocks_{i}`
    index: str  # the element's position: `i`, `1 + i` after seeds ("" for a loop without an index)
    assign: cst.Assign  # `self.blocks = blocks`
    seeds: tuple[cst.Call, ...] = ()  # modules the list starts with: `resnets = [ResnetBlock(...)]`


@dataclasses.dataclass(frozen=True)
class Unfollowed:
    """A construction appended to a list in a way whose Linen names the codemod cannot follow."""

    ctor: cst.Call
    reason: str


def _appends(loop: cst.For) -> list[tuple[str, cst.Call, bool]]:
    """``X.append(v)`` calls anywhere in the loop: (X, the call, whether it is a statement of the
    loop body itself)."""
    top = {
        s.body[0].value
        for s in loop.body.body
        if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Expr)
    }
    found = []
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and node.func.attr.value == "append"
            and len(node.args) == 1
        ):
            found.append((node.func.value.value, node, node in top))
        stack.extend(syntax_children(node))
    return found


def _jumps(loop: cst.For) -> bool:
    """Does the loop skip or end iterations (``break`` / ``continue``, an ``else`` clause)?"""
    if loop.orelse is not None:
        return True
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Break, cst.Continue)):
            return True
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(syntax_children(node))
    return False


def _loop_index(loop: cst.For) -> str | None:
    """The index of ``for i in range(n)`` / ``for i, x in enumerate(s)``: the element's position."""
    it, target = loop.iter, loop.target
    if not (
        isinstance(it, cst.Call)
        and isinstance(it.func, cst.Name)
        and len(it.args) == 1
        and it.args[0].keyword is None
        and it.args[0].star == ""
    ):
        return None
    if it.func.value == "range" and isinstance(target, cst.Name):
        return target.value
    if (
        it.func.value == "enumerate"
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
    ):
        return target.elements[0].value.value
    return None


def _bound_to(loop: cst.For, name: str) -> cst.BaseExpression | None:
    """The value the loop body's own statements bind ``name`` to, when exactly one does."""
    values = [a[1] for a in map(single_assign, loop.body.body) if a is not None and a[0] == name]
    return values[0] if len(values) == 1 else None


def _held_ctors(loop: cst.For, held: str, builds: Callable[[cst.BaseExpression], bool]) -> list[cst.Call]:
    """The submodules any assignment of the loop binds ``held`` to."""
    found = []
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if (
            isinstance(node, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == held for t in node.targets)
            and isinstance(node.value, cst.Call)
            and builds(node.value)
        ):
            found.append(node.value)
        stack.extend(syntax_children(node))
    return found


def _final_assign(body: Sequence[cst.BaseStatement], after: int, local: str) -> tuple[str, cst.Assign] | None:
    """``self.attr = local`` among the statements of ``body`` after position ``after``."""
    for stmt in body[after + 1 :]:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            small = stmt.body[0]
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.value, cst.Name)
                and small.value.value == local
            ):
                attr = self_attr(small.targets[0].target)
                return (attr, small) if attr is not None else None
    return None


def _self_assigns(setup: cst.FunctionDef, attr: str) -> int:
    """How many statements of ``setup`` assign ``self.attr``."""
    count = 0
    stack: list[cst.CSTNode] = [setup.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.AssignTarget) and self_attr(node.target) == attr:
            count += 1
        stack.extend(syntax_children(node))
    return count


def loop_lists(
    body: Sequence[cst.BaseStatement],
    setup: cst.FunctionDef,
    builds: Callable[[cst.BaseExpression], bool],
) -> tuple[list[LoopList], list[Unfollowed]]:
    """The lists the ``for`` loops among ``body`` (a block of ``setup``) fill with submodules: those
    followed exactly, and the constructions that are appended otherwise."""
    followed: list[LoopList] = []
    unfollowed: list[Unfollowed] = []
    uses = name_counts(setup.body)
    for position, loop in enumerate(body):
        if not isinstance(loop, cst.For):
            continue
        for local, append, at_top in _appends(loop):
            value = append.args[0].value
            held = value.value if isinstance(value, cst.Name) else None
            ctor = _bound_to(loop, held) if held is not None else value
            if held is not None and ctor is None:  # the local is bound under a condition of the loop
                for other in _held_ctors(loop, held, builds):
                    unfollowed.append(
                        Unfollowed(
                            other, f"{_called(other)} appended to {local} through a local bound conditionally"
                        )
                    )
                continue
            if not (isinstance(ctor, cst.Call) and builds(ctor)):
                if isinstance(ctor, cst.Call) and _may_build_module(ctor):  # self.block_cls(8), remat(B)(8)
                    unfollowed.append(
                        Unfollowed(
                            ctor, f"{_called(ctor)} appended to {local} builds a module it does not follow"
                        )
                    )
                continue  # not a submodule
            index = _loop_index(loop)
            final = _final_assign(body, position, local)
            seeds = _seeds(body, position, local, ctor, builds)
            names = _names(ctor, index or "", final[0], seeds or ()) if final is not None else None
            reason = _unexact(loop, local, held, at_top, uses, seeds)
            if reason is None and index is None and keyword_arg(ctor, "name") is not None:
                reason = "it is named, and its loop is not `for i in range(n)` / `for i, x in enumerate(s)`"
            elif reason is None and index is not None and index in assigned_in(loop.body):
                reason = f"the loop rebinds its index {index}"
            elif reason is None and (final is None or _self_assigns(setup, final[0]) != 1):
                reason = f"the list {local} is not assigned once to an attribute after the loop"
            elif reason is None and names is None:
                reason = "its name= is computed in a way the codemod cannot follow"
            elif reason is None and seeds and not _seeds_named_alike(seeds, names, final[0]):
                reason = "the modules the list starts with are not named as its elements are, by position"
            if reason is not None:
                unfollowed.append(Unfollowed(ctor, f"{_called(ctor)} appended to {local}: {reason}"))
                continue
            assert final is not None and names is not None and seeds is not None
            at = f"{len(seeds)} + {index}" if seeds and index else index or ""
            followed.append(LoopList(final[0], ctor, names, at, final[1], seeds))
    return followed, unfollowed


def _called(ctor: cst.Call) -> str:
    """``Block(...)`` / ``nn.Dense(...)`` for a message."""
    func = ctor.func
    parts = []
    while isinstance(func, cst.Attribute):
        parts.append(func.attr.value)
        func = func.value
    if isinstance(func, cst.Name):
        parts.append(func.value)
    return ".".join(reversed(parts)) + "(...)"


def _seeds(
    body: Sequence[cst.BaseStatement],
    position: int,
    local: str,
    ctor: cst.Call,
    builds: Callable[[cst.BaseExpression], bool],
) -> tuple[cst.Call, ...] | None:
    """The modules ``local`` is bound to before the loop, once, as a list literal: none (``[]``) or
    ones of the appended class, auto-named (Linen numbers them first, ``resnets_0``) or named by a
    string literal (``name="0"``, checked against the loop's names by the caller); None otherwise."""
    inits = [a for a in map(single_assign, body[:position]) if a is not None and a[0] == local]
    value = inits[0][1] if len(inits) == 1 else None
    if not isinstance(value, cst.List):
        return None
    seeds = tuple(e.value for e in value.elements)
    if all(
        isinstance(e, cst.Element)
        and isinstance(seed, cst.Call)
        and builds(seed)
        and (keyword_arg(seed, "name") is None or literal_name(seed) is not None)
        and code(seed.func) == code(ctor.func)
        for e, seed in zip(value.elements, seeds)
    ):
        return seeds  # type: ignore[return-value]
    return None


def _names(ctor: cst.Call, index: str, attr: str, seeds: Sequence[cst.Call]) -> str | None:
    """The elements' Linen names as a pattern of their position in the list (``{i}``). After ``k``
    seeds, a ``name=`` written with ``index + k`` (``str(i + 1)``, ``f'stage_{i + 1}'``) is the
    position: it is read as ``index``."""
    arg = keyword_arg(ctor, "name")
    if seeds and index and arg is not None:
        shifted = cst.BinaryOperation(cst.Name(index), cst.Add(), cst.Integer(str(len(seeds))))
        unshift = _Unshift(code(shifted), index)
        value = arg.value.visit(unshift)
        if not unshift.hits:  # named by the loop's index alone: not by position
            return None
        ctor = ctor.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in ctor.args])
    return element_names(ctor, index, attr)


class _Unshift(cst.CSTTransformer):
    """``i + k`` (``k`` the seeds' count) -> ``i``: the loop's names written in terms of position."""

    def __init__(self, shifted: str, index: str) -> None:
        self.shifted, self.index, self.hits = shifted.replace(" ", ""), index, 0

    def leave_BinaryOperation(
        self, original: cst.BinaryOperation, updated: cst.BinaryOperation
    ) -> cst.BaseExpression:
        if code(original).replace(" ", "") != self.shifted:
            return updated
        self.hits += 1
        return cst.Name(self.index)


def _seeds_named_alike(seeds: Sequence[cst.Call], names: str | None, attr: str) -> bool:
    """The seeds are named as the loop names its elements, by position: all auto-named where the loop's
    are (``{attr}_{i}``), or each ``name=`` the loop's pattern at its position."""
    if names is None:
        return False
    literal = [literal_name(seed) for seed in seeds]  # the seeds' names are literals or none (_seeds)
    if names == f"{attr}_{{i}}":
        return all(n is None for n in literal)
    return literal == [names.replace("{i}", str(k)) for k in range(len(seeds))]


def _unexact(
    loop: cst.For,
    local: str,
    held: str | None,
    at_top: bool,
    uses: dict[str, int],
    seeds: tuple[cst.Call, ...] | None,
) -> str | None:
    """Why the appends to ``local`` in ``loop`` may not number the list as its index does; None when
    they do (see the module docstring)."""
    if not at_top:
        return "appended under a condition or an inner loop (Linen numbers the list by position)"
    if _jumps(loop):
        return "the loop may skip or end iterations (break / continue / else)"
    if sum(1 for name, _, _ in _appends(loop) if name == local) != 1:
        return f"{local} is appended to more than once per iteration"
    if seeds is None:
        return f"{local} is not bound once before the loop to [] or a list of auto-named modules of its class"
    if uses.get(local) != 3:  # `local = []`, `local.append(...)`, `self.attr = local`
        return f"{local} is read, bound or changed elsewhere in setup()"
    if held is not None and uses.get(held) != 2:  # `held = Block(...)`, `local.append(held)`
        return f"the local {held} is read or bound elsewhere in setup()"
    return None


def _may_build_module(call: cst.Call) -> bool:
    """A call that may build a module the codemod does not follow: a field's factory
    (``self.block_cls(8)``), the result of a call (``nn.remat(Block)(8)``), a capitalised name."""
    func = call.func
    if isinstance(func, cst.Call):
        return True
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return True
    return callee_name(call)[:1].isupper()
