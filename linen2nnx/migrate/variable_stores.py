"""``v.value = x`` of a Linen variable: an index store where it is exact, else ``v.set_value(x)``.

The attribute rewrite turns every ``v.value`` of a Linen variable into ``v[...]``, the NNX spelling.
As a store target that is ``v[...] = x``, which NNX runs as ``v.at[...].set(x)`` unless ``x`` has
``v``'s shape and dtype: it writes into the array, broadcasting ``x`` to its shape and casting it to
its dtype. Linen's ``v.value = x`` replaces the array, so a cache that grows by concatenation
(``ck.value = jnp.concatenate([ck.value, k], 1)``) stays empty in NNX, or fails, and a value of
another dtype is cast. ``v.set_value(x)`` replaces the array as Linen does; the index store is kept
where the new value has the old one's shape and dtype by construction: an update slice or ``.at``
update of ``v`` itself, ``v`` plus or minus a number, and a number (a reset, ``v.value = 0``).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import callee_name, code
from linen2nnx.migrate.last_axis_ops import is_number

_SLICE_UPDATES = frozenset(
    {"dynamic_update_slice", "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim"}
)


def variable_store(original: cst.Assign, updated: cst.Assign) -> cst.BaseSmallStatement:
    """``updated`` (one Assign), or ``v.set_value(x)`` in place of a ``v[...] = x`` the rewrite made of
    a Linen ``v.value = x`` that may change the array's shape or dtype."""
    if len(original.targets) != 1 or len(updated.targets) != 1:
        return updated
    before, after = original.targets[0].target, updated.targets[0].target
    if not (
        isinstance(before, cst.Attribute)
        and before.attr.value == "value"
        and isinstance(after, cst.Subscript)
        and len(after.slice) == 1
        and isinstance(after.slice[0].slice, cst.Index)
        and isinstance(after.slice[0].slice.value, cst.Ellipsis)
    ):
        return updated
    if _keeps_array(original.value, code(before)):
        return updated
    setter = cst.Attribute(value=after.value, attr=cst.Name("set_value"))
    return cst.Expr(cst.Call(func=setter, args=[cst.Arg(updated.value)]))


def _keeps_array(value: cst.BaseExpression, read: str) -> bool:
    """Does ``value`` have the shape and dtype of the variable read as ``read`` (``ck.value``)? A number
    counts: written into the array it is what Linen's stored number reads as (``v.value = 0`` resets),
    where ``set_value(0)`` would leave a Python int that ``v[...]`` cannot read."""
    if is_number(value):
        return True
    if isinstance(value, cst.Call):
        if callee_name(value) in _SLICE_UPDATES:
            return bool(value.args) and code(value.args[0].value) == read
        # v.value.at[i].set(u): an update of v itself
        func = value.func
        target = func.value if isinstance(func, cst.Attribute) else None
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Attribute):
            return target.value.attr.value == "at" and code(target.value.value) == read
        return False
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)):
        sides = (value.left, value.right)
        return any(code(s) == read for s in sides) and any(is_number(s) for s in sides)
    return False
