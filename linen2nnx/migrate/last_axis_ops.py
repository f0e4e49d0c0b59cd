"""What array operations do to a value's last (feature) axis: einops patterns, concatenation,
reductions, contractions against a parameter of known rank, and reshapes.

The feature-size dataflow (``dataflow.py``) asks these when a value passes through such an operation;
each answers with the result's size or an unknown ``Feat`` naming why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import libcst as cst

from linen2nnx.migrate.array_functions import BROADCASTING_FUNCTIONS
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.rank_guards import rank_read


def einops_keeps_last(pattern: str) -> bool:
    """An einops pattern whose output ends with the input's last axis, as is: ``"n h w c -> n (h w) c"``,
    ``"b t d -> t b d"``, ``"... d -> ... d"`` (the same final token on both sides, an axis name or a
    group, never one the output builds or splits)."""
    lhs, arrow, rhs = pattern.partition("->")
    if not arrow:
        return False
    last_in, last_out = _einops_last(lhs), _einops_last(rhs)
    return last_in is not None and last_in == last_out


def _einops_last(side: str) -> str | None:
    """The last axis token of one side of an einops pattern (a name, ``...`` or a ``(group)``)."""
    tokens = re.findall(r"\([^()]*\)|[A-Za-z_][A-Za-z_0-9]*|\.\.\.|\S", side.strip())
    if not tokens:
        return None
    last = tokens[-1]
    if last.startswith("("):
        return "(" + " ".join(last[1:-1].split()) + ")"
    return last if last == "..." or last.isidentifier() else None


def concatenated(parts: Feat, axis: cst.BaseExpression | None) -> Feat:
    """``jnp.concatenate([a, b], -1)``: the feature sizes add up (``2 * (h)`` for equal parts); along
    any other literal axis the last axis is the parts' common one."""
    if parts.kind != "tuple" or not parts.elements:
        return Feat.unknown("a concatenation of an unknown sequence")
    number = literal_axis(axis)
    if number is None:
        return Feat.unknown("a concatenation along an unknown axis")
    rank = next((e.rank for e in parts.elements if e.rank), 0)
    if number != -1 and not (rank and number % rank == rank - 1):  # not the last axis, if rank says so
        same = dataclasses.replace(parts.elements[0], rank=rank)
        if any(dataclasses.replace(e, rank=rank) != same for e in parts.elements):  # (a rank one shows)
            sized = next((e for e in parts.elements if e.kind in ("expr", "input")), None)
            if sized is None or not (number < 0 or rank):
                return Feat.unknown("a concatenation of unequal parts")
            # along another axis every part has one last axis (concatenate requires it): a part whose
            # size is known tells it, whatever the text of the others (a token tiled from a param)
            return dataclasses.replace(sized, rank=rank)
        if number < 0 or rank:
            return same
        # `concatenate([a, b], axis=1)` keeps the last axis of 3-d parts and adds up that of 2-d ones:
        # only a trace that shows the parts' size confirms the first
        why = f"a concatenation along axis {number} of parts of unknown rank"
        return (
            Feat("unknown", reason=why, candidate=same)
            if same.kind in ("expr", "input")
            else Feat.unknown(why)
        )
    known = [e if e.kind == "expr" else e.candidate for e in parts.elements]
    if any(k is None or k.kind != "expr" for k in known):
        return Feat.unknown("a concatenation of parts of unknown size")
    exprs = [
        k.expr if k.expr.isidentifier() or k.expr.replace(".", "").isalnum() else f"({k.expr})" for k in known
    ]  # type: ignore[union-attr]
    total = Feat("expr", expr=f"{len(exprs)} * {exprs[0]}" if len(set(exprs)) == 1 else " + ".join(exprs))
    if any(e.kind != "expr" for e in parts.elements):  # some part's size is itself only a candidate
        return Feat("unknown", reason="a concatenation of parts of unconfirmed size", candidate=total)
    return total


def literal_axis(axis: cst.BaseExpression | None) -> int | None:
    """An axis written as a literal integer (``1``, ``-2``); the default 0 for none; None otherwise."""
    if axis is None:
        return 0
    negative = isinstance(axis, cst.UnaryOperation) and isinstance(axis.operator, cst.Minus)
    number = axis.expression if negative else axis  # type: ignore[attr-defined]
    if not isinstance(number, cst.Integer):
        return None
    return -int(number.value, 0) if negative else int(number.value, 0)


def reduced(
    value: Feat,
    positional: Sequence[cst.Arg],
    args: Sequence[cst.Arg],
    operand: cst.BaseExpression | None = None,
) -> Feat:
    """``mean(x, axis=...)``: ``x``'s last axis unless it is reduced. Leading axes given as
    non-negative numbers leave it only when ``x`` has more axes, which a trace confirms. ``keepdims``
    changes nothing here: a reduced last axis is then 1, not its size, so the same axes keep it.
    ``operand`` is ``x`` as written, for axes counted from its rank (``range(1, x.ndim - 1)``)."""
    keywords = {a.keyword.value: a.value for a in args if a.keyword is not None}
    axis = positional[0].value if positional else keywords.get("axis")
    if axis is None or (isinstance(axis, cst.Name) and axis.value == "None"):
        return Feat.unknown("a reduction over every axis")
    spans = _axis_range(axis, operand)
    if spans is not None:
        start, stop, below_rank = spans
        if below_rank is None:
            axis = cst.Tuple([cst.Element(cst.Integer(str(a))) for a in range(start, stop)])
        elif below_rank == 0:
            return Feat.unknown("a reduction over the last axis")
        elif value.kind not in ("expr", "input", "choice"):
            return Feat.unknown("a reduction of an unknown size")
        else:  # range(start, x.ndim - k), k >= 1: the last axis stays, and start + k axes are left
            kept = _kept_dims(keywords, positional)
            left = value.rank if kept else min(value.rank, start + below_rank)
            return dataclasses.replace(value, rank=0 if kept is None else left)
    items = [e.value for e in axis.elements] if isinstance(axis, (cst.Tuple, cst.List)) else [axis]
    axes = []
    for item in items:
        negative = isinstance(item, cst.UnaryOperation) and isinstance(item.operator, cst.Minus)
        number = item.expression if negative else item  # type: ignore[attr-defined]
        if not isinstance(number, cst.Integer):
            return Feat.unknown("a reduction over axes the source does not spell out")
        axes.append(-int(number.value) if negative else int(number.value))
    if -1 in axes or value.kind not in ("expr", "input", "choice"):
        return Feat.unknown(
            "a reduction over the last axis" if -1 in axes else "a reduction of an unknown size"
        )
    kept = _kept_dims(keywords, positional)
    rank = value.rank if kept or not value.rank else value.rank - len(set(a % value.rank for a in axes))
    rank = 0 if kept is None else rank  # keepdims=self.keep: the rank is not known
    if all(a < 0 for a in axes):
        return dataclasses.replace(value, rank=max(rank, 0))
    if value.rank:
        return (
            dataclasses.replace(value, rank=max(rank, 0))
            if value.rank - 1 not in {a % value.rank for a in axes}
            else Feat.unknown("a reduction over the last axis")
        )
    return Feat(
        "unknown",
        reason="a reduction over leading axes of a value of unknown rank",
        candidate=value,
        reduced=tuple(axes),
    )


def _kept_dims(keywords: dict[str, cst.BaseExpression], positional: Sequence[cst.Arg]) -> bool | None:
    """Does a reduction keep the reduced axes: ``keepdims=`` as a literal (False when not given); None
    when it is any other expression, or arguments after the axis are positional (their order differs
    between ``jnp.mean`` and ``jnp.max``)."""
    if len(positional) > 1:
        return None
    keepdims = keywords.get("keepdims")
    if keepdims is None:
        return False
    return {"True": True, "False": False}.get(code(keepdims)) if type(keepdims) is cst.Name else None


def _axis_range(
    axis: cst.BaseExpression, operand: cst.BaseExpression | None
) -> tuple[int, int, int | None] | None:
    """``range(a, b)`` (in ``list(...)`` / ``tuple(...)`` too) over literal bounds: ``(a, b, None)``;
    over ``range(a, x.ndim - k)`` (or ``len(x.shape) - k``) of the reduced ``x``: ``(a, 0, k)``."""
    while (
        isinstance(axis, cst.Call)
        and isinstance(axis.func, cst.Name)
        and axis.func.value in ("list", "tuple")
        and len(axis.args) == 1
    ):
        axis = axis.args[0].value
    if not (
        isinstance(axis, cst.Call)
        and isinstance(axis.func, cst.Name)
        and axis.func.value == "range"
        and 1 <= len(axis.args) <= 2
        and all(a.keyword is None and a.star == "" for a in axis.args)
    ):
        return None
    bounds = [a.value for a in axis.args]
    start = literal_axis(bounds[0]) if len(bounds) == 2 else 0
    if start is None or start < 0:
        return None
    stop = literal_axis(bounds[-1])
    if stop is not None:
        return (start, stop, None) if stop >= 0 else None
    below, top = 0, bounds[-1]
    if (
        isinstance(top, cst.BinaryOperation)
        and isinstance(top.operator, cst.Subtract)
        and isinstance(top.right, cst.Integer)
    ):
        below, top = int(top.right.value, 0), top.left
    operand_name = operand.value if isinstance(operand, cst.Name) else None
    read = rank_read(top)
    return (start, 0, below) if read is not None and read == operand_name else None


def contracted(rhs: Feat, *gone: int | None) -> Feat:
    """The result of contracting something with ``rhs`` over (and batching along) the axes ``gone``
    of ``rhs``: its last axis is ``rhs``'s last one if that survives; unknown when the rank of
    ``rhs`` or the axes are not known."""
    if rhs.rank == 1:
        return Feat.unknown("a contraction with a vector")
    if rhs.kind in ("expr", "input") and rhs.rank == 0 and gone == (-2,):
        # `x @ y`: y's last axis survives whenever y has rank >= 2; a trace can tell
        return Feat("unknown", reason="a contraction with a value of unknown rank", candidate=rhs)
    if rhs.rank < 2 or rhs.kind not in ("expr", "input") or None in gone:
        return Feat.unknown("a contraction with a value of unknown rank")
    if (rhs.rank - 1) in {g % rhs.rank for g in gone if -rhs.rank <= g < rhs.rank}:  # type: ignore[operator]
        return Feat.unknown("a contraction over the last axis")
    return rhs.rankless()


def rhs_axes(dims: cst.BaseExpression | None) -> tuple[int | None, ...]:
    """The rhs contracting and batch axes of a literal ``((lc, rc), (lb, rb))``; ``(None,)`` otherwise."""

    def ints(node: cst.BaseExpression) -> list[int] | None:
        if not isinstance(node, (cst.Tuple, cst.List)):
            return None
        out = []
        for el in node.elements:
            value = el.value
            sign = (
                -1 if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) else 1
            )
            value = value.expression if isinstance(value, cst.UnaryOperation) else value
            if not isinstance(value, cst.Integer):
                return None
            out.append(sign * int(value.value))
        return out

    if not (isinstance(dims, (cst.Tuple, cst.List)) and len(dims.elements) == 2):
        return (None,)
    pairs = [el.value for el in dims.elements]
    if not all(isinstance(p, (cst.Tuple, cst.List)) and len(p.elements) == 2 for p in pairs):
        return (None,)
    rc, rb = ints(pairs[0].elements[1].value), ints(pairs[1].elements[1].value)  # type: ignore[union-attr]
    if rc is None or rb is None:
        return (None,)
    return (*rc, *rb)


def reshaped(
    receiver: Feat,
    node: cst.Call,
    value: cst.BaseExpression,
    fields: frozenset[str] = frozenset(),
    sized: Callable[[cst.BaseExpression], Feat | None] = lambda node: None,
) -> Feat:
    """``value.reshape(..., -1)``: a flatten. When the axes before ``-1`` are ``value.shape[0]``,
    ``value.shape[1]``, ... in order, it keeps that many leading axes and flattens the rest. A last
    axis written as a size (see :func:`static_axis`, ``fields`` the class's dataclass fields) is it."""
    args = node.args
    dims: list[cst.BaseExpression] = []
    shape = args[0].value if len(args) == 1 else None
    if isinstance(shape, (cst.Tuple, cst.List)) and shape.elements:
        dims = [e.value for e in shape.elements]
        written = not isinstance(shape.elements[-1], cst.StarredElement)
    elif isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add):
        tail = shape.right  # x.shape[:2] + (heads, dim): the tuple on the right holds the last axes
        if not isinstance(tail, (cst.Tuple, cst.List)) or not tail.elements:
            return Feat.unknown("reshape")
        last_el = tail.elements[-1]
        axis = None if isinstance(last_el, cst.StarredElement) else static_axis(last_el.value, fields)
        return axis if axis is not None else Feat.unknown("reshape")
    else:
        dims = [a.value for a in args]
        # one argument that is no tuple may be a whole shape (x.reshape(self.shape)): only an integer
        # is then surely the last axis
        written = not any(a.star for a in args) and (len(args) > 1 or isinstance(shape, cst.Integer))
    last = dims[-1] if dims else None
    axis = (static_axis(last, fields) or sized(last)) if last is not None and written else None
    if axis is not None:  # x.reshape(b, t, self.hidden): the last axis is the size written there
        starred = isinstance(shape, (cst.Tuple, cst.List)) and any(
            isinstance(e, cst.StarredElement) for e in shape.elements
        )  # (*lead, d): lead may be empty, so only the written axes are sure
        rank = 0 if starred or any(a.star for a in args if a.value is not shape) else len(dims)
        return dataclasses.replace(axis, rank=rank) if axis.kind in ("expr", "input") else axis
    if (
        isinstance(last, cst.UnaryOperation)
        and isinstance(last.expression, cst.Integer)
        and last.expression.value == "1"
    ):
        source = code(value)
        kept = [code(d).replace(" ", "") for d in dims[:-1]]
        leading = len(kept) if kept == [f"{source}.shape[{i}]" for i in range(len(kept))] else 0
        return Feat("flatten", base=receiver, leading=leading)
    return Feat.unknown("reshape")


def _is_minus_one(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
        and node.expression.value == "1"
    )


ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)
"""Operators of sizes written as integer arithmetic of other sizes (``self.heads * self.head_dim``)."""


def static_axis(node: cst.BaseExpression, fields: frozenset[str]) -> Feat | None:
    """A reshape's last axis written as a size ``__init__`` can read: an integer, or a dataclass field of
    the class (``self.head_dim``, ``self.config.hidden``), which ``__init__`` has from its start, or
    integer arithmetic of those (``self.heads * self.head_dim``). Never
    an attribute ``setup()`` assigns (``__init__`` may read it before it is set) nor a submodule's
    (an NNX layer's attributes differ from Linen's): the result's last axis is that size."""
    if isinstance(node, cst.Integer):
        return Feat("expr", expr=code(node))
    if type(node) is cst.BinaryOperation and type(node.operator) in ARITHMETIC:  # heads * head_dim
        if static_axis(node.left, fields) is None or static_axis(node.right, fields) is None:
            return None
        return Feat("expr", expr=code(node))
    chain, first = node, None
    while isinstance(chain, cst.Attribute):
        chain, first = chain.value, chain.attr.value
    if isinstance(chain, cst.Name) and chain.value == "self" and first in fields:
        return Feat("expr", expr=code(node))
    return None


def index_keeps_last(node: cst.Subscript) -> bool:
    """Whether ``x[...]`` keeps ``x``'s last axis whatever ``x``'s rank: its last index is a bare
    ``:`` (``x[:, 0, :]``, ``x[..., :]``, ``x[idx, :]``). That ``:`` spans the last axis, or an axis
    before it with the axes after it kept too; axes an array index adds never come after a slice.
    ``x[:, 0]`` does not qualify: on a value of rank 2 it indexes the last axis."""
    last = node.slice[-1].slice if node.slice else None
    return (
        isinstance(last, cst.Slice)
        and last.lower is None
        and last.upper is None
        and last.step is None
        and not any(getattr(e.slice, "star", None) for e in node.slice)
    )


def indexed_leading_axes(value: Feat, node: cst.Subscript) -> Feat | None:
    """``x[:, 0]`` of a value whose rank is known to exceed the axes the index names (a reshape to
    ``[n, h * w, c]``, a parameter of literal shape): the last axis is not indexed, so it survives.
    Only plain slices and integer literals are read, each of which names exactly one axis: an array
    may be a tuple of index arrays (``w[jnp.triu_indices(n)]``) or a boolean mask of several axes, and
    ``...`` / ``None`` shift the axes. None when the rank is unknown or the index is not that plain."""
    if not value.rank or len(node.slice) >= value.rank or not all(_plain_index(e) for e in node.slice):
        return None
    return dataclasses.replace(value, rank=rank_after_index(value, node))


def rank_after_index(value: Feat, node: cst.Subscript) -> int:
    """The rank of ``x[...]`` when every index is an integer literal or a plain slice (each integer
    drops an axis); 0 (unknown) otherwise."""
    if not value.rank or len(node.slice) > value.rank or not all(_plain_index(e) for e in node.slice):
        return 0
    dropped = sum(isinstance(e.slice, cst.Index) for e in node.slice)
    return value.rank - dropped if dropped < value.rank else 0


def _plain_index(element: cst.SubscriptElement) -> bool:
    """``:`` / ``1:`` (a slice without a step), ``0`` or ``-1`` (an integer literal)."""
    index = element.slice
    if isinstance(index, cst.Slice):
        return index.step is None
    value = index.value if isinstance(index, cst.Index) and not index.star else None
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, cst.Integer)


def broadcast_call(node: cst.Call, qualnames: set[str], arg_feats: Sequence[Feat]) -> Feat | None:
    """``jnp.maximum(0, x)``, ``jnp.where(mask, x, 0.0)``: a function of :data:`BROADCASTING_FUNCTIONS`
    given exactly its number of arrays as positional arguments and nothing else, read as the operator
    form broadcasts them; None for any other call."""
    count = next((BROADCASTING_FUNCTIONS[q] for q in qualnames if q in BROADCASTING_FUNCTIONS), None)
    args = node.args
    if count is None or len(args) != count or any(a.keyword is not None or a.star for a in args):
        return None
    order = [1, 2, 0] if count == 3 else [0, 1]  # where(cond, x, y): the values' axis before the test's
    pairs = [(args[i], arg_feats[i]) for i in order]
    result, scalar = pairs[0][1], is_number(pairs[0][0].value)
    for arg, feat in pairs[1:]:
        result = broadcast(result, feat, (scalar, is_number(arg.value)))
        scalar = scalar and is_number(arg.value)
    return result


def broadcast(
    left: Feat, right: Feat, scalar: tuple[bool, bool] = (False, False), *, gated: bool = False
) -> Feat:
    """What an elementwise operation of two values gives: the sized one's last axis (broadcasting keeps
    it; ``x / 255.0`` with ``x`` unknown keeps ``x``'s reason, not the literal's), with a rank only when
    the other operand proves it: a number literal (``scalar``: which operand is one), or a value of
    known rank (broadcasting may add axes: the larger rank). ``gated``: a product, where one operand
    is often a gate or mask of width 1: of two config sizes the text does not prove equal, their
    ``max`` (exact: they are equal or one is 1, ``gate * dense(x)`` with ``gate_features = 1``); of a config size and an input's, the config size (``sigmoid(ctx) *
    dense(x)``: the input is the gate); of two inputs' (``(1.0 - done) * h``), none, since either may
    be the 1. A sum keeps the left one: a residual adds equals."""
    swap = left.kind == "unknown" and right.kind != "unknown"
    (result, other), other_scalar = ((right, left), scalar[0]) if swap else ((left, right), scalar[1])
    if not other_scalar and other != result:
        if result.kind == "expr" and result.expr == "1":  # an axis of 1 broadcasts to the other's size
            if other.kind not in ("expr", "input"):
                return Feat.unknown("a broadcast of a size-1 axis")
            result, other = other, result
        elif (
            gated
            and _sized(result)
            and _sized(other)
            and not (other.kind == "expr" and other.expr == "1")
            and (result.kind, result.expr, result.input_name) != (other.kind, other.expr, other.input_name)
        ):
            # two sizes the text does not prove equal: either may be the 1 that broadcasts
            if result.kind == other.kind == "expr":  # two config sizes: equal, or one is 1
                result = dataclasses.replace(result, expr=f"max({result.expr}, {other.expr})")
            elif result.kind == other.kind == "input":  # which input is the 1 (a mask) is not known
                return Feat.unknown("a product of two inputs whose last axes may differ (either may be 1)")
            elif other.kind == "expr":  # a config size and an input's: the input is the mask or gate
                result, other = other, result
        if result.handed:  # only the handed module's output itself is the size its builder knows
            result = dataclasses.replace(result, handed="")
    if not result.rank or other_scalar or other.rank == result.rank:
        return result
    return dataclasses.replace(result, rank=max(result.rank, other.rank)) if other.rank else result.rankless()


def _sized(feat: Feat) -> bool:
    return feat.kind in ("expr", "input")


def is_number(node: cst.BaseExpression) -> bool:
    """A number literal, signed or not: broadcasting it adds no axis."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


def squeezed(receiver: Feat, node: cst.Call) -> Feat | None:
    """``x.squeeze(-2)`` / ``x.squeeze(axis=(1, 2))``: the last axis stays when every literal axis is
    another one (counted from the end, or from the front of a value of known rank); None otherwise
    (no axis given, or one that may be the last: a squeeze that may drop it)."""
    if receiver.kind not in ("input", "expr") or len(node.args) != 1 or node.args[0].star:
        return None
    arg = node.args[0]
    if arg.keyword is not None and arg.keyword.value != "axis":
        return None
    items = arg.value.elements if isinstance(arg.value, cst.Tuple) else [arg.value]
    axes = [literal_axis(item.value if isinstance(item, cst.Element) else item) for item in items]
    if not axes or any(a is None for a in axes):
        return None
    rank = receiver.rank
    last_kept = all(a <= -2 or (rank and 0 <= a < rank - 1) for a in axes)  # type: ignore[operator]
    if not last_kept:
        return None
    return dataclasses.replace(receiver, rank=rank - len(axes) if rank else 0)
