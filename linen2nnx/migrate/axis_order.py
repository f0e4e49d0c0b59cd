"""Array operations that reorder axes, for the feature-size dataflow (``dataflow.py``): whether the
result's last axis is the last axis of one of their operands.

- ``jnp.einsum("...hqk,...khd->...qhd", w, v)`` (also ``numpy.einsum``, and ``einops.einsum`` with its
  pattern last): the output's last subscript names an axis, and einsum gives every occurrence of a
  subscript one size, so an operand whose own subscripts end with it has that size as its last axis
  -- taken only where no other operand has that subscript (a size-1 axis may broadcast).
  The result has as many axes as the output has subscripts, when it has no ellipsis.
- ``jnp.transpose(x, (0, 2, 1, 3))`` / ``x.transpose(0, 2, 1, 3)`` / ``x.transpose((0, 2, 1, 3))``: a
  permutation spans every axis of ``x``, so one written as integers whose last entry is its last
  index (or ``-1``) keeps the last axis; its length is the rank.
- ``jnp.swapaxes(x, a, b)`` / ``x.swapaxes(a, b)`` and ``jnp.moveaxis(x, a, b)``: keep the last axis
  when neither literal axis is it -- a negative one other than ``-1``, or a non-negative one below the
  last when the flow knows the rank.
- ``jnp.expand_dims(x, a)``: keeps it when the new axis is not the last -- a negative literal other
  than ``-1``, or a non-negative one below ``x``'s rank when the flow knows it.

Anything else (subscripts, a permutation or axes not written as literals, an implicit einsum output
``"ij,jk"``) is left to the caller: the size stays unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import libcst as cst

from linen2nnx.migrate.cst_utils import code, names_in
from linen2nnx.migrate.dataflow_types import Feat

EINSUM_FUNCTIONS = frozenset({"jax.numpy.einsum", "numpy.einsum"})
EINOPS_EINSUM = frozenset({"einops.einsum"})
TRANSPOSE_FUNCTIONS = frozenset({"jax.numpy.transpose", "numpy.transpose"})
SWAPAXES_FUNCTIONS = frozenset({"jax.numpy.swapaxes", "numpy.swapaxes"})
MOVEAXIS_FUNCTIONS = frozenset({"jax.numpy.moveaxis", "numpy.moveaxis"})
EXPAND_DIMS_FUNCTIONS = frozenset({"jax.numpy.expand_dims", "numpy.expand_dims"})
REORDERING_METHODS = frozenset({"transpose", "swapaxes"})
"""Methods of an array that reorder its axes (``x.transpose(...)``, ``x.swapaxes(a, b)``)."""
SIZED = ("expr", "input")


def reordered(node: cst.Call, qualnames: set[str], arg_feats: Sequence[Feat]) -> Feat | None:
    """What an einsum, ``transpose`` or ``swapaxes`` function gives (``arg_feats``: the values of the
    call's arguments, in order); None for any other call, or one whose result is not known."""
    if any(a.star for a in node.args):
        return None
    positional = [a.value for a in node.args if a.keyword is None]
    feats = list(arg_feats[: len(positional)])
    if qualnames & EINSUM_FUNCTIONS and len(positional) >= 2:
        spec = _string(positional[0])
        return _einsum(_numpy_terms(spec), feats[1:]) if spec is not None else None
    if qualnames & EINOPS_EINSUM and len(positional) >= 2:
        pattern = _string(positional[-1])
        return _einsum(_einops_terms(pattern), feats[:-1]) if pattern is not None else None
    if qualnames & TRANSPOSE_FUNCTIONS and feats:
        axes = positional[1] if len(positional) > 1 else _keyword(node, "axes")
        return _permuted(feats[0], [axes] if axes is not None else [])
    if qualnames & (SWAPAXES_FUNCTIONS | MOVEAXIS_FUNCTIONS) and len(positional) == 3 == len(node.args):
        return _swapped(feats[0], positional[1:])  # moving one axis among the others keeps the last too
    if qualnames & EXPAND_DIMS_FUNCTIONS and feats and len(node.args) == 2:
        axis = positional[1] if len(positional) == 2 else _keyword(node, "axis")
        return _expanded(feats[0], axis) if axis is not None else None
    return None


def method_reordered(node: cst.Call, receiver: Feat) -> Feat | None:
    """What ``x.transpose(...)`` / ``x.swapaxes(a, b)`` gives for an ``x`` of value ``receiver``."""
    assert isinstance(node.func, cst.Attribute)
    if any(a.star or a.keyword is not None for a in node.args):
        return None
    args = [a.value for a in node.args]
    if node.func.attr.value == "transpose":
        return _permuted(receiver, args)
    return _swapped(receiver, args) if len(args) == 2 else None


def _permuted(value: Feat, args: Sequence[cst.BaseExpression]) -> Feat | None:
    """``value`` transposed by ``args``: one tuple or list of integers, or the integers themselves."""
    perm = args[0] if len(args) == 1 and type(args[0]) in (cst.Tuple, cst.List) else None
    items = [e.value for e in perm.elements] if perm is not None else list(args)  # type: ignore[attr-defined]
    axes = [_integer(item) for item in items]
    if not axes or None in axes:  # no permutation (all axes reversed) or one not written out
        return None
    if axes[-1] not in (len(axes) - 1, -1) or not (value.kind in SIZED or value.kind == "choice"):
        return None
    return _with_rank(value, len(axes))


def _swapped(value: Feat, args: Sequence[cst.BaseExpression]) -> Feat | None:
    """``value`` with the two literal axes ``args`` swapped: kept when neither is its last axis."""
    axes = [_integer(a) for a in args]
    if None in axes:
        return None
    rank = value.rank if value.kind in SIZED else 0
    for axis in axes:
        assert axis is not None
        if axis == -1 or (axis >= 0 and (not rank or axis >= rank - 1)):
            return None  # the last axis, or one that may be it
    return value if value.kind in SIZED or value.kind == "choice" else None


def _expanded(value: Feat, axis: cst.BaseExpression) -> Feat | None:
    """``value`` with a new axis at the literal ``axis``: kept when the new one is not the last -- a
    negative axis other than ``-1``, or a non-negative one below the rank when the flow knows it."""
    position = _integer(axis)
    rank = value.rank if value.kind in SIZED else 0
    if position is None or position == -1 or (position >= 0 and (not rank or position >= rank)):
        return None
    if not (value.kind in SIZED or value.kind == "choice"):
        return None
    return _with_rank(value, rank + 1) if rank else value


def _einsum(terms: tuple[list[list[str]], list[str]] | None, operands: Sequence[Feat]) -> Feat | None:
    """The operand whose subscripts end with the output's last one gives the result's last axis."""
    if terms is None:
        return None
    inputs, output = terms
    if len(inputs) != len(operands) or not output or output[-1] == "...":
        return None
    rank = 0 if "..." in output else len(output)
    if sum(term.count(output[-1]) for term in inputs) != 1:
        return None  # several operands hold it: one of size 1 may broadcast against another
    for term, feat in zip(inputs, operands):
        if term and term[-1] == output[-1] and (feat.kind in SIZED or feat.kind == "choice"):
            return _with_rank(feat, rank)
    return None


def _numpy_terms(spec: str) -> tuple[list[list[str]], list[str]] | None:
    """``"...hqk,...khd->...qhd"`` -> each input's subscripts and the output's (``...`` one item);
    None without an explicit output or with a character einsum does not take as a subscript."""
    lhs, arrow, rhs = spec.replace(" ", "").partition("->")
    if not arrow or not re.fullmatch(r"[A-Za-z.,]*", lhs) or not re.fullmatch(r"[A-Za-z.]*", rhs):
        return None

    def split(term: str) -> list[str] | None:
        items = re.findall(r"\.\.\.|[A-Za-z]|\.", term)
        return None if "." in items else items

    inputs = [split(t) for t in lhs.split(",")]
    output = split(rhs)
    if output is None or any(t is None for t in inputs):
        return None
    return inputs, output  # type: ignore[return-value]


def _einops_terms(pattern: str) -> tuple[list[list[str]], list[str]] | None:
    """``"b n t s, b s n h -> b t n h"`` -> each input's axis names and the output's; None for a
    pattern with groups or anything but names, ``...`` and commas."""
    lhs, arrow, rhs = pattern.partition("->")
    if not arrow or not re.fullmatch(r"[\w\s.,]*", lhs + rhs) or "->" in rhs:
        return None

    def split(term: str) -> list[str] | None:
        items = term.split()
        ok = all(i == "..." or i.isidentifier() for i in items)
        return items if ok else None

    inputs = [split(t) for t in lhs.split(",")]
    output = split(rhs)
    if output is None or any(t is None for t in inputs):
        return None
    return inputs, output  # type: ignore[return-value]


def _with_rank(feat: Feat, rank: int) -> Feat:
    """The size of ``feat``'s last axis, on a value of ``rank`` axes (0: unknown)."""
    if feat.kind in SIZED:
        return Feat(feat.kind, expr=feat.expr, input_name=feat.input_name, rank=rank)
    return feat  # a choice between sizes: the same choice


def _integer(node: cst.BaseExpression) -> int | None:
    """A literal integer, negative ones included."""
    if type(node) is cst.Integer:
        return int(node.value)
    if (
        type(node) is cst.UnaryOperation
        and isinstance(node.operator, cst.Minus)
        and type(node.expression) is cst.Integer
    ):
        return -int(node.expression.value)
    return None


def _string(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal."""
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _keyword(node: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in node.args if a.keyword is not None and a.keyword.value == name), None)


def einsum_layer(args: Mapping[str, cst.Arg]) -> Callable[[Feat], Feat]:
    """What ``nn.Einsum(shape, 'bd,dh->bh')`` (its arguments ``args``) gives for an input: the output's last subscript is an axis
    of the kernel (``shape``'s element there, when it reads config alone) or the input's own last
    axis; anything else (both hold it, an ellipsis, a shape the text does not spell) is unknown, never
    the input's width taken for granted."""
    spec, shape = args.get("einsum_str"), args.get("shape")
    text = _string(spec.value) if spec is not None else None
    terms = _numpy_terms(text) if text is not None else None
    dims = shape.value if shape is not None else None

    def out(first: Feat) -> Feat:
        if terms is None or len(terms[0]) != 2 or not terms[1] or not isinstance(dims, (cst.Tuple, cst.List)):
            return Feat.unknown("an Einsum's output")
        (operand, kernel), last = terms[0], terms[1][-1]
        if "..." in kernel or len(kernel) != len(dims.elements) or last == "...":
            return Feat.unknown("an Einsum's output")
        if kernel.count(last) == 1 and last not in operand:
            size = dims.elements[kernel.index(last)].value
            if not isinstance(size, cst.StarredElement) and names_in(size) <= {"self"}:
                return Feat("expr", expr=code(size))
        if operand.count(last) == 1 and last not in kernel and operand[-1] == last:
            return first.rankless()
        return Feat.unknown("an Einsum's output")

    return out
