"""Facts about the flax.linen namespace that the codemod reads, derived from flax itself.

Rather than a hand-kept list, the names that ``flax.nnx`` re-exports *as the same object*
(activations, pooling, initializers, ...) are found by identity, so a flax upgrade keeps it right.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import libcst as cst

LINEN_PREFIXES = ("flax.linen.", "flax.linen")

# The jax.nn functions whose result has their first argument's shape: elementwise activations, and
# normalisations along an axis (softmax, standardize) that keep every axis whatever the axis argument.
# An explicit list, not ``dir(jax.nn)``: that namespace also holds reductions (``logsumexp``,
# ``logmeanexp``), contractions (``scaled_matmul``, ``scaled_dot_general``), ``glu`` (halves an axis),
# ``one_hot`` and attention, and a jax upgrade may add more of those.
_SHAPE_KEEPING_ACTIVATIONS = frozenset(
    {
        "celu",
        "elu",
        "gelu",
        "hard_sigmoid",
        "hard_silu",
        "hard_swish",
        "hard_tanh",
        "identity",
        "leaky_relu",
        "log1mexp",
        "log_sigmoid",
        "log_softmax",
        "mish",
        "relu",
        "relu6",
        "selu",
        "sigmoid",
        "silu",
        "soft_sign",
        "softmax",
        "softplus",
        "sparse_plus",
        "sparse_sigmoid",
        "squareplus",
        "standardize",
        "swish",
        "tanh",
    }
)


@cache
def feature_preserving_functions() -> frozenset[str]:
    """Qualified names of functions whose output keeps the input's last-axis size."""
    import flax.linen as nn
    import jax

    kept = {name: getattr(jax.nn, name) for name in _SHAPE_KEEPING_ACTIVATIONS if hasattr(jax.nn, name)}
    names = {f"jax.nn.{name}" for name in kept}
    kept_ids = {id(fn) for fn in kept.values()}
    # flax.linen re-exports them as the same objects (``nn.relu``, and ``nn.normalize`` for standardize)
    names.update(f"flax.linen.{name}" for name in dir(nn) if id(getattr(nn, name, None)) in kept_ids)
    for name in (
        "tanh",
        "exp",
        "log",
        "sin",
        "cos",
        "abs",
        "square",
        "sqrt",
        "negative",
        "maximum",  # with a number (an activation's clamp); of two arrays: broadcast_call in the flow
        "minimum",
        "clip",
        "asarray",
        "array",
        "sign",
        "floor",
        "round",
        "ceil",
        "trunc",
        "reciprocal",
        "log1p",
        "expm1",
        "log2",
        "tan",
        "arctan",
        "sinh",
        "cosh",
        "logical_not",
        "isnan",
        "isfinite",
    ):
        names.add(f"jax.numpy.{name}")
    names.update(
        f"jax.lax.{name}" for name in ("rsqrt", "exp", "tanh", "erf", "logistic", "sqrt", "abs", "neg")
    )
    names.update(
        {
            "flax.linen.max_pool",
            "flax.linen.avg_pool",
            "flax.linen.min_pool",
            "flax.linen.with_logical_constraint",
            "flax.linen.spmd.with_logical_constraint",
            "flax.linen.partitioning.with_sharding_constraint",
            "flax.linen.spmd.with_sharding_constraint",
            "jax.lax.with_sharding_constraint",
        }
    )
    return frozenset(names)


@cache
def same_in_nnx(dotted: str) -> bool:
    """True when ``flax.linen.<dotted>`` and ``flax.nnx.<dotted>`` are the very same object.

    Such a reference (``nn.relu``, ``nn.initializers.ones``) can be re-pointed to ``nnx`` with no
    behaviour change; classes are excluded because Linen and NNX layers differ.
    """
    import inspect

    import flax.linen as nn
    from flax import nnx

    a, b = nn, nnx
    for part in dotted.split("."):
        if not (hasattr(a, part) and hasattr(b, part)):
            return False
        a, b = getattr(a, part), getattr(b, part)
    return a is b and not inspect.isclass(a) and not inspect.ismodule(a)


def _reexported(dotted: str, package: Any) -> str | None:
    """The last name of ``dotted`` (a flax.linen submodule's name) where ``package`` binds the very same
    object at its top level under that name; None for a class or module, or where it does not."""
    import inspect

    import flax.linen as nn

    if "." not in dotted or dotted.startswith("initializers."):
        return None
    value: Any = nn
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    last = dotted.rsplit(".", 1)[1]
    same = (
        getattr(package, last, None) is value and not inspect.isclass(value) and not inspect.ismodule(value)
    )
    return last if same else None


@cache
def top_level_name(dotted: str) -> str | None:
    """``relu`` for ``activation.relu``: a name of a flax.linen submodule that is the very object flax.linen
    re-exports at its top level (``nn.activation.relu is nn.relu``), so it converts as ``nn.relu`` does;
    None for any other name (a class included: layers are converted through their table)."""
    import flax.linen as nn

    return _reexported(dotted, nn)


@cache
def nnx_top_level_name(dotted: str) -> str | None:
    """``min_pool`` for ``pooling.min_pool``: a function of a flax.linen submodule that flax.linen does not
    re-export but flax.nnx does at its top level, the very same object (``nnx.min_pool``); None for any
    other name."""
    from flax import nnx

    return _reexported(dotted, nnx)


@cache
def initializer_in_nnx(dotted: str) -> str | None:
    """``initializers.<dotted>`` for a name Linen re-exports at its top level (``nn.zeros``, ``nn.ones``)
    that NNX keeps under ``nnx.initializers`` only, the very same object; None for any other name."""
    import inspect

    import flax.linen as nn
    from flax import nnx

    if "." in dotted or not hasattr(nn, dotted) or not hasattr(nnx.initializers, dotted):
        return None
    same = getattr(nn, dotted) is getattr(nnx.initializers, dotted)
    return f"initializers.{dotted}" if same and not inspect.isclass(getattr(nn, dotted)) else None


# flax.linen names whose flax.nnx namesake is a *different* object with the same behaviour; each pair
# is checked numerically by tests/test_linen_api.py, so a flax upgrade that breaks one is caught.
EQUIVALENT_IN_NNX = frozenset(
    {
        "make_attention_mask",
        "make_causal_mask",
        "combine_masks",
        "initializers.zeros_init",
        "initializers.ones_init",
    }
)


def equivalent_in_nnx(dotted: str) -> bool:
    return dotted in EQUIVALENT_IN_NNX


# flax.linen names whose NNX counterpart has another name but the same role; the rename is exact
# for what the codemod emits (an initializer wrapper carrying sharding names as metadata).
RENAMED_IN_NNX = {
    "with_logical_partitioning": "with_partitioning",  # logical vs mesh names: decided by active rules
    "with_partitioning": "with_partitioning",
    "spmd.with_logical_partitioning": "with_partitioning",
    "partitioning.with_partitioning": "with_partitioning",
}


# Keywords of those flax.linen functions that NNX spells otherwise: a logical box's own rules are the
# Variable's `sharding_rules` metadata (what LogicallyPartitioned.to_nnx_metadata writes); left as
# `rules=` they would be dead metadata, and the weight placed by the context's rules instead.
_SHARDING_RULES = {"rules": "sharding_rules"}
RENAMED_KEYWORDS = {
    "flax.linen.with_logical_partitioning": _SHARDING_RULES,
    "flax.linen.spmd.with_logical_partitioning": _SHARDING_RULES,
}
_RENAMED_NAMES = frozenset(k for table in RENAMED_KEYWORDS.values() for k in table)


def renamed_keywords(
    qualnames: Callable[[cst.BaseExpression], set[str]], original: cst.Call, updated: cst.Call
) -> cst.Call | None:
    """``updated`` with the keywords NNX spells otherwise renamed (``rules=`` -> ``sharding_rules=``),
    for a call of a function ``qualnames(original.func)`` names; None when nothing changes. The
    keywords are looked at first: every call of a file passes here, and few have one of them."""
    if not any(a.keyword is not None and a.keyword.value in _RENAMED_NAMES for a in original.args):
        return None
    table = next((RENAMED_KEYWORDS[q] for q in qualnames(original.func) if q in RENAMED_KEYWORDS), None)
    if table is None:
        return None
    args = [
        a.with_changes(keyword=cst.Name(table[a.keyword.value]))
        if a.keyword is not None and a.keyword.value in table
        else a
        for a in updated.args
    ]
    return updated.with_changes(args=args)


_BOXING = frozenset({"with_logical_partitioning", "with_partitioning"})


def names_as_tuple(
    qualnames: Callable[[cst.BaseExpression], set[str]], original: cst.Call, updated: cst.Call
) -> cst.Call | None:
    """``updated`` with a list display of sharding names (``nn.with_partitioning(init, ['embed', 'mlp'])``)
    as a tuple; None when there is none. Linen's boxes take a list as they take a tuple, NNX places a
    Variable only by a tuple or a PartitionSpec: with a list its weight is replicated, with no error."""
    names = original.args[1] if len(original.args) > 1 and original.args[1].keyword is None else None
    names = names or next(
        (a for a in original.args if a.keyword is not None and a.keyword.value == "names"), None
    )
    if names is None or type(names.value) is not cst.List:
        return None
    if not any(
        q.startswith("flax.linen.") and q.rsplit(".", 1)[-1] in _BOXING for q in qualnames(original.func)
    ):
        return None
    index = original.args.index(names)
    listed = updated.args[index].value
    if type(listed) is not cst.List:
        return None
    as_tuple = cst.Tuple(elements=listed.elements, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    if len(listed.elements) == 1:  # ('embed',): the one element keeps its comma
        as_tuple = as_tuple.with_changes(elements=[listed.elements[0].with_changes(comma=cst.Comma())])
    args = list(updated.args)
    args[index] = args[index].with_changes(value=as_tuple)
    return updated.with_changes(args=args)


# The functions of flax.linen.fp8_ops (flax/linen/fp8_ops.py); its Fp8DotGeneralBase subclasses and Fp8Einsum
# are Linen modules (with variables), NNX has none of them.
FP8_FUNCTIONS = (
    "get_fp8_max",
    "quantize",
    "dequantize",
    "qdq",
    "compute_scale",
    "compute_amax_history",
    "update_fp8_meta",
    "quantize_dequantize_update",
    "in_qdq",
    "out_qdq",
    "in_q",
    "out_dq",
    "quantized_dot",
    "fp8_scaled_dot_general",
    "dot_general_with_precision",
)


# Pure flax.linen functions with no NNX counterpart that stay correct in NNX code: they hold no module
# state (with_logical_constraint reads the same global axis rules as nnx.logical_axis_rules).
# logical_to_mesh_sharding maps a tree of PartitionSpecs (nnx.get_partition_spec's State included, checked
# by tests/test_partitioning.py) to NamedShardings, exactly like `nnx.get_named_sharding` under the rules.
# logical_to_mesh maps such a tree to mesh PartitionSpecs through the same active rules (also checked there).
# get_logical_axis_rules / partitioning.get_axis_rules are flax.core.spmd.get_logical_axis_rules itself: they
# read the very rules context nnx.logical_axis_rules sets (NNX has no reader of its own).
KEPT_LINEN_FUNCTIONS = frozenset(
    {
        # attention and masks: functions of their arguments (the NNX namesakes are other objects)
        "dot_product_attention",
        "dot_product_attention_weights",
        "attention.dot_product_attention",
        "attention.dot_product_attention_weights",
        "make_attention_mask",
        "make_causal_mask",
        "combine_masks",
        "attention.make_attention_mask",
        "attention.make_causal_mask",
        "attention.combine_masks",
        # dtype helpers (NNX's promote_dtype takes a tuple: another signature, so Linen's is kept)
        "dtypes.promote_dtype",
        "dtypes.canonicalize_dtype",
        "linear.promote_dtype",
        # private shape helpers of the Linen layers, functions of their arguments only (custom conv and
        # norm layers call them; NNX's namesakes are other objects of another module)
        "linear._conv_dimension_numbers",
        "linear.canonicalize_padding",
        "linear._canonicalize_tuple",
        "linear._normalize_axes",
        "normalization._canonicalize_axes",
        "normalization._abs_sq",
        "normalization._compute_stats",
        "normalization._l2_normalize",
        # the reversal a Linen RNN applies to padded sequences: a function of its arguments (nnx.RNN
        # has its own copy in another module), which custom bidirectional layers call
        "recurrent.flip_sequences",
        # the Linen layers' default initialisers: plain initialiser functions (jax.nn.initializers'),
        # which a field default or a parameter keeps (NNX's namesakes are other objects, made alike)
        "linear.default_kernel_init",
        "linear.default_embed_init",
        "recurrent.default_kernel_init",
        "attention.default_kernel_init",
        # logical sharding: read the global axis rules NNX shares with Linen
        "logical_to_mesh_axes",
        "spmd.logical_to_mesh_axes",
        "partitioning.logical_to_mesh_axes",
        "partitioning.with_sharding_constraint",
        # decorators that only mark a method for Linen, harmless on a plain method
        "nowrap",
        "module.nowrap",
        "with_logical_constraint",
        "spmd.with_logical_constraint",
        "logical_to_mesh_sharding",
        "spmd.logical_to_mesh_sharding",
        "logical_to_mesh",
        "spmd.logical_to_mesh",
        "partitioning.logical_to_mesh",
        "get_logical_axis_rules",
        "spmd.get_logical_axis_rules",
        "partitioning.get_axis_rules",
        # fp8 quantisation: jax functions of their arguments (custom_vjp / custom_jvp), which NNX code calls
        # with its Variables' values; their backward pass returns the new scale and amax history as the
        # gradients of those arguments (the "overwrite with gradient" convention), the same in both
        *(f"fp8_ops.{name}" for name in FP8_FUNCTIONS),
        # flax.core.FrozenDict itself (re-exported by flax.linen): a data structure, not module API
        "FrozenDict",
    }
)

# What a kept name is, where "a pure function NNX code can call as is" does not say it all.
_FP8_GRADIENTS = (
    "a pure function NNX code can call as is (its backward pass returns the new scale and amax history "
    "as those arguments' gradients, in NNX as in Linen)"
)
KEPT_AS = {
    "FrozenDict": "flax.core.FrozenDict itself, a data structure NNX code uses as is",
    "fp8_ops.in_qdq": _FP8_GRADIENTS,
    "fp8_ops.out_qdq": _FP8_GRADIENTS,
    "fp8_ops.in_q": _FP8_GRADIENTS,
}


# Partitioning API whose NNX counterpart takes NNX values: logical axis rules are one and the same
# context in both; partition specs are read from nnx.State Variables' sharding metadata.
PARTITION_API_IN_NNX = {
    "partitioning.axis_rules": "logical_axis_rules",
    "spmd.logical_axis_rules": "logical_axis_rules",
}

# nn.get_partition_spec returns *logical* names whatever rules are active; nnx.get_partition_spec maps
# them through the active rules, so a rename would map them twice in `logical_to_mesh_sharding(...)`
# under `axis_rules` (silently replicated weights): a manual finding with the exact recipe instead.
PARTITION_SPEC_FUNCTIONS = frozenset(
    {"get_partition_spec", "spmd.get_partition_spec", "partitioning.get_partition_spec"}
)

# Linen metadata boxes: NNX keeps sharding names on the Variable, its values are never boxed.
BOX_TYPES = frozenset(
    {
        "LogicallyPartitioned",
        "Partitioned",
        "spmd.LogicallyPartitioned",
        "meta.Partitioned",
        "partitioning.LogicallyPartitioned",
        "partitioning.Partitioned",
    }
)
UNBOX_FUNCTIONS = frozenset({"unbox", "meta.unbox"})
