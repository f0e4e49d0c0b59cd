"""The array library functions the feature-size dataflow (``dataflow.py``) knows by name: which keep
their first argument's shape, which contract or reduce its last axis, which build a new array.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code, names_in
from linen2nnx.migrate.dataflow_types import Feat

ARRAY_CONSTRUCTORS = frozenset(
    {"jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.empty", "jax.numpy.full", "numpy.zeros", "numpy.ones"}
)
SHAPE_KEEPING_METHODS = frozenset({"astype", "clip"})  # not squeeze: it may drop the last axis
SHAPE_KEEPING_FUNCTIONS = frozenset(
    {
        "jax.numpy.flip",
        "jax.numpy.roll",
        "jax.lax.stop_gradient",
        "jax.lax.convert_element_type",
        # sharding annotations and remat names: the value itself, placed or named
        "jax.lax.with_sharding_constraint",
        "jax.ad_checkpoint.checkpoint_name",
        "flax.linen.with_logical_constraint",
        "flax.linen.spmd.with_logical_constraint",
        "flax.linen.partitioning.with_sharding_constraint",
    }
)
"""``f(x, ...)`` whose result has ``x``'s shape (whatever the other arguments)."""
LIKE_FUNCTIONS = {
    f"{module}.{name}": 3 if name == "full_like" else 2
    for module in ("jax.numpy", "numpy")
    for name in ("ones_like", "zeros_like", "empty_like", "full_like")
}
"""``f(x, ...)`` with ``x``'s shape unless given another (``shape=``, or positionally after this many)."""
MATMUL_FUNCTIONS = frozenset({"jax.numpy.dot", "jax.numpy.matmul", "numpy.dot", "numpy.matmul"})
"""``f(x, w)`` contracting x's last axis with w's second-to-last (for a w of rank >= 2), as ``x @ w``."""
ONE_HOT_FUNCTIONS = frozenset({"jax.nn.one_hot", "flax.linen.one_hot"})
CONCATENATE_FUNCTIONS = frozenset({"jax.numpy.concatenate", "numpy.concatenate"})
REDUCTIONS = frozenset({"mean", "sum", "max", "min", "prod", "var", "std", "median", "nanmean", "nansum"})
"""Reductions (``jnp.mean(x, axis=...)`` / ``x.mean(axis=...)``): the last axis survives unless reduced."""


def numpy_reduction(qualname: str) -> str | None:
    """The reduction of :data:`REDUCTIONS` a NumPy / jax.numpy function is (``jax.numpy.mean``: mean)."""
    module, _, name = qualname.rpartition(".")
    return name if module in ("jax.numpy", "numpy") and name in REDUCTIONS else None


EINOPS_FUNCTIONS = frozenset({"einops.rearrange", "einops.reduce", "einops.repeat"})
"""``f(x, "n h w c -> n (h w) c", ...)``: the last axis is kept when the pattern ends both sides with
the same axis (see :func:`~linen2nnx.migrate.last_axis_ops.einops_keeps_last`)."""
DOT_GENERAL_FUNCTIONS = frozenset({"jax.lax.dot_general"})
"""``f(x, w, dimension_numbers)``: the result's last axis is w's last free (uncontracted, unbatched) one."""
BROADCASTING_FUNCTIONS = {
    **{
        f"{module}.{name}": 2
        for module in ("jax.numpy", "numpy")
        for name in (
            "maximum",
            "minimum",
            "add",
            "subtract",
            "multiply",
            "divide",
            "true_divide",
            "power",
            "fmax",
            "fmin",
            "logical_and",
            "logical_or",
            "logical_xor",
            "greater",
            "greater_equal",
            "less",
            "less_equal",
            "equal",
            "not_equal",
        )
    },
    **{f"jax.lax.{name}": 2 for name in ("max", "min", "add", "sub", "mul", "div", "pow")},
    "jax.numpy.where": 3,  # one argument: the indices where it holds, not an array of its shape
    "numpy.where": 3,
}
"""Elementwise functions of this many arrays, all positional: the result broadcasts them, as ``a + b``
does (``jnp.maximum(0, x)``, ``jnp.where(mask, x, 0.0)``)."""


def one_hot_size(node: cst.Call, positional: list[cst.Arg]) -> Feat | None:
    """``one_hot(x, n)``: n classes on the last axis, where ``n`` reads config; unknown for a call-time
    ``n``, and for ``axis=`` anything but -1 (``one_hot(ids, n, axis=0)``: the last axis is the ids'
    own); None when the call gives no class count."""
    axis = next((a.value for a in node.args if a.keyword and a.keyword.value == "axis"), None)
    if axis is not None and code(axis) != "-1":
        return Feat.unknown("one_hot on another axis")
    if len(positional) < 2:
        return None
    if names_in(positional[1].value) <= {"self"}:
        return Feat("expr", expr=code(positional[1].value))
    return Feat.unknown("one_hot of a call-time size")
