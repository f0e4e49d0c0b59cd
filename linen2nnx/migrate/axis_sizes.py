"""Sizes written as axes of a shape, for the feature-size dataflow (``dataflow.py``).

A method often takes its input's sizes apart (``n, l, d = x.shape``, ``c = x.shape[-1]``) and writes
them back into a new shape: ``self.param("probe", init, (1, 1, d))``, ``x.reshape(b, h, w, c)``,
``jax.image.resize(x, shape=(b, 2 * h, 2 * w, c))``. The local is then exactly the last axis of the
value it was read from, at the time it was read: :class:`AxisSizes` records that for every binding,
and a read finds the binding that reaches it (one binding, or straight-line top-level rebindings:
``function_aliases.reaching_binding``; a name bound in a loop or a branch may hold anything). It
also answers what ``jnp.tile``, ``jnp.pad`` and ``jax.image.resize`` do to the last axis
(:func:`placed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

from linen2nnx.migrate.cst_utils import root_name
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.last_axis_ops import static_axis

SIZED = ("expr", "input")
TILE_FUNCTIONS = frozenset({"jax.numpy.tile", "numpy.tile"})
PAD_FUNCTIONS = frozenset({"jax.numpy.pad", "numpy.pad"})
RESIZE_FUNCTIONS = frozenset({"jax.image.resize"})
UNKNOWN = Feat.unknown("a size held in a local")


class AxisSizes:
    """The locals that hold the last axis of a value (``sole_binding``: the one node binding the name a
    read reads, or the one binding that reaches the read, or None; ``assigned``: the value a plain
    ``name = value`` that is a name's only binding assigns, or None)."""

    def __init__(
        self,
        sole_binding: Callable[[cst.Name], cst.CSTNode | None] = lambda node: None,
        assigned: Callable[[cst.Name], cst.BaseExpression | None] = lambda node: None,
    ) -> None:
        self.sole_binding = sole_binding
        self.assigned = assigned
        self.held: dict[cst.CSTNode, Feat] = {}  # a binding target -> the size it holds

    def note(self, assign: cst.Assign, env: Mapping[str, Feat]) -> None:
        """``c = x.shape[-1]`` / ``n, l, d = x.shape``: the local holds x's last axis, as it is now."""
        for target in assign.targets:
            name = _last_of(target.target, assign.value)
            source = (
                is_shape_last(assign.value) if type(target.target) is cst.Name else _shape_of(assign.value)
            )
            if name is None or source is None:
                continue
            held = _size_only(env.get(source)) or UNKNOWN
            # a later pass of a loop, or a helper inlined again, that sees another size: none holds
            self.held[name] = held if self.held.get(name, held) == held else UNKNOWN

    def size(self, node: cst.BaseExpression, env: Mapping[str, Feat], fields: frozenset[str]) -> Feat | None:
        """The size an axis written as ``node`` has: an integer or a field (``static_axis``), the last
        axis of a value the flow knows (``x.shape[-1]``), or a local :meth:`note` recorded."""
        known = static_axis(node, fields)
        if known is not None:
            return known
        source = is_shape_last(node)
        if source is not None:
            return _size_only(env.get(source))
        if type(node) is cst.Name:
            target = self.sole_binding(node)
            held = self.held.get(target) if target is not None else None
            return held if held is not None and held.kind in SIZED else None
        spelled = self._through_config_locals(node)
        return static_axis(spelled, fields) if spelled is not node else None

    def _through_config_locals(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """``node`` with each local bound once to a field chain (``c = self.cfg``) spelled as that chain:
        ``c.heads * c.hd`` -> ``self.cfg.heads * self.cfg.hd``, a size ``__init__`` reads from its start
        (the static dataflow left the reshape unknown, and a trace then took a config field that only
        happened to be equal); ``node`` itself when no such local is read."""
        if type(node) is cst.Name:
            value = self.assigned(node) if node.value != "self" else None
            root = root_name(value) if type(value) is cst.Attribute else None  # `c = self.cfg`
            return value if root is not None and root.value == "self" else node
        if type(node) is cst.Attribute:
            value = self._through_config_locals(node.value)
            return node if value is node.value else node.with_changes(value=value)
        if type(node) is cst.BinaryOperation:
            left, right = self._through_config_locals(node.left), self._through_config_locals(node.right)
            same = left is node.left and right is node.right
            return node if same else node.with_changes(left=left, right=right)
        return node

    def literal(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """``node``, or for a name bound once by ``name = value``, that value (``pad = ((0, 0), ...)``)."""
        if type(node) is cst.Name:
            value = self.assigned(node)
            if value is not None:
                return value
        return node


def _size_only(feat: Feat | None) -> Feat | None:
    """The size of ``feat``'s last axis alone, when known: not the rank of the array it was read from,
    which says nothing of the array a shape written with it builds."""
    if feat is None or feat.kind not in SIZED:
        return None
    return Feat(feat.kind, expr=feat.expr, input_name=feat.input_name)


def is_shape_last(node: cst.CSTNode) -> str | None:
    """``v.shape[-1]`` -> ``"v"`` (sites.py, which imports the dataflow, reads it from here)."""
    from linen2nnx.migrate.sites import is_shape_last as shape_last

    return shape_last(node)


def _last_of(target: cst.BaseExpression, value: cst.BaseExpression) -> cst.Name | None:
    """The name a shape's last axis lands in: ``c`` of ``c = ...`` or of ``n, h, w, c = ...``."""
    if type(target) is cst.Name:
        return target
    if type(target) in (cst.Tuple, cst.List) and target.elements:  # type: ignore[attr-defined]
        last = target.elements[-1]  # type: ignore[attr-defined]
        if type(last) is cst.Element and type(last.value) is cst.Name:
            return last.value
    return None


def _shape_of(value: cst.BaseExpression) -> str | None:
    """``x.shape`` -> ``"x"``."""
    if type(value) is cst.Attribute and value.attr.value == "shape" and type(value.value) is cst.Name:
        return value.value.value
    return None


def placed(
    node: cst.Call,
    qualnames: set[str],
    first: Feat,
    axis_size: Callable[[cst.BaseExpression], Feat | None],
    literal: Callable[[cst.BaseExpression], cst.BaseExpression],
) -> Feat | None:
    """What ``jnp.tile`` / ``jnp.pad`` / ``jax.image.resize`` give; None for any other call.

    - ``jnp.tile(x, reps)`` repeats the last axis ``reps[-1]`` times (shorter reps are padded with ones
      in front): kept when that is the literal 1;
    - ``jnp.pad(x, pad_width)`` widens each axis by its pair: kept when the last pair is ``(0, 0)``
      (a single pair, or a single number, applies to every axis: only a literal pair of zeros counts);
    - ``jax.image.resize(x, shape, ...)`` has the shape written: its last element's size.
    """
    if not qualnames & (TILE_FUNCTIONS | PAD_FUNCTIONS | RESIZE_FUNCTIONS):
        return None
    arg_name = "reps" if qualnames & TILE_FUNCTIONS else "pad_width" if qualnames & PAD_FUNCTIONS else "shape"
    arg = _argument(node, 1, arg_name)
    if arg is None:
        return Feat.unknown(f"a call without its {arg_name}")
    arg = literal(arg)
    last = arg.elements[-1] if type(arg) in (cst.Tuple, cst.List) and arg.elements else None  # type: ignore[attr-defined]
    last_value = last.value if type(last) is cst.Element else None
    if qualnames & RESIZE_FUNCTIONS:
        size = axis_size(last_value) if last_value is not None else None
        return size if size is not None else Feat.unknown("a resize to a shape of unknown last axis")
    if qualnames & TILE_FUNCTIONS:
        ones = last_value if last_value is not None else arg
        kept = type(ones) is cst.Integer and ones.value == "1"
        if not kept:
            return Feat.unknown("a tile of the last axis")
        reps = len(arg.elements) if type(arg) in (cst.Tuple, cst.List) else 1  # type: ignore[attr-defined]
        return first if 0 < reps <= first.rank else first.rankless()  # longer reps add leading axes
    pair = literal(last_value) if last_value is not None else None
    kept = (
        type(pair) in (cst.Tuple, cst.List)
        and len(pair.elements) == 2  # type: ignore[union-attr]
        and all(type(e.value) is cst.Integer and e.value.value == "0" for e in pair.elements)  # type: ignore[union-attr]
    )
    return first if kept else Feat.unknown("a padding of the last axis")


def _argument(node: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    """The argument at ``index`` (positional) or given as ``keyword``."""
    positional = [a for a in node.args if a.keyword is None]
    if any(a.star for a in node.args):
        return None
    if len(positional) > index:
        return positional[index].value
    return next((a.value for a in node.args if a.keyword is not None and a.keyword.value == keyword), None)
