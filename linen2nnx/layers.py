"""The built-in layer table: one row per Linen layer, the single source of every per-layer fact.

The codemod reads it to rewrite constructors and calls, the name map reads it to know which
children are built-ins, and the checkpoint converter reads ``param_renames`` for their parameter
trees. Facts are those of ``docs/nnx_facts.md#layers-and-parameter-layouts`` (flax 0.12.8).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Collection, Mapping
from functools import cache

LINEN = "flax.linen"
NNX = "flax.nnx"


_MASK = frozenset({"mask"})
"""A norm's call-time ``mask=`` (see ``LayerRule.bool_call_args``)."""

KEEP_DTYPES = "lambda args, dtype=None, inexact=True: args"
"""The ``promote_dtype`` a norm given a ``dtype`` gets (see ``LayerRule.keeps_dtypes``): the values as they are."""


@dataclasses.dataclass(frozen=True)
class LayerRule:
    linen: str
    """Class name in ``flax.linen``."""
    nnx: str
    """Class name in ``flax.nnx``."""
    in_arg: str | None = "in_features"
    """NNX constructor argument (emitted first, positionally) that takes the input feature size."""
    positional: tuple[str, ...] = ()
    """Linen arguments emitted positionally after ``in_arg``, in this order."""
    out_arg: str | None = None
    """Linen argument that gives the output feature size; ``None`` means the layer keeps it."""
    rename_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Linen constructor keyword -> NNX constructor keyword where they differ."""
    unsupported_args: frozenset[str] = frozenset()
    """Linen arguments with no NNX equivalent: a ``manual`` finding when given."""
    call_args: frozenset[str] = frozenset()
    """Constructor arguments NNX also takes at call time; moved there when they use call-time values."""
    param_renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Linen parameter / child name -> NNX name inside this layer (identity when absent)."""
    nnx_only_state: tuple[str, ...] = ()
    """NNX state subtrees that have no Linen counterpart (kept from the NNX init)."""
    in_index: int = 0
    """Position of ``in_arg`` among the NNX positional arguments."""
    extra_kwargs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """NNX keyword -> source, emitted when the Linen code does not give that argument (differing defaults)."""
    only_values: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Linen arguments converted only for these literal source values; others are a ``manual`` finding."""
    call_renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Call-time keyword renames (Linen -> NNX)."""
    unsupported_call_args: frozenset[str] = frozenset()
    """Call-time keywords with no NNX equivalent: a ``manual`` finding when given."""
    function_args: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Constructor arguments that take a function the NNX layer calls with its own signature
    (``attention_fn``: NNX passes ``is_causal=``; ``dot_general``: NNX passes ``out_sharding=``) -> the
    functions that are Linen's default there, or the literal ``None`` where that is Linen's default
    (dropped: NNX's default is their counterpart); any other function is a ``manual`` finding."""
    data_args: frozenset[str] = frozenset()
    """Array arguments the NNX layer keeps as a plain attribute (``Conv``'s ``mask``): passed as
    ``nnx.data(...)``, so the array is the module's pytree data. Else an array computed in ``__init__`` is
    static under ``nnx.eval_shape`` / ``nnx.jit``, where it is a tracer that leaks out of the trace
    (docs/nnx_facts.md#array-attributes)."""
    nested: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Constructor arguments that take a module (``RNN(cell)``) -> the NNX attribute holding it."""
    nested_input: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Nested argument -> which positional argument of the module built there receives this layer's
    input (``nn.RNN`` calls ``cell(carry, x)``: 1); 0 when absent."""
    varargs_list: str | None = None
    """Linen list argument that NNX takes as ``*args`` (``Sequential(layers)``); element i lives at ``<it>/i``."""
    out_from: str | None = None
    """Where the output size comes from when not ``out_arg``: a nested argument name, ``last`` element,
    ``einsum`` (the output subscripts of its einsum string), or ``unknown``."""
    keeps_shape: bool = False
    """The output has the input's whole shape (a normalisation, dropout), so the same rank too."""
    keeps_rank: bool = False
    """The output has as many axes as the input, its last one ``out_arg`` wide (a Dense maps the last
    axis; a Conv keeps the number of spatial axes, and adds and drops a missing batch axis itself)."""
    output_dtype: bool = False
    """The output is in the constructor's ``dtype`` when given, else in the promotion of the input and
    the parameters (Flax's ``promote_dtype``): what a variable created in ``y.dtype`` of it reads
    (:mod:`linen2nnx.migrate.value_dtypes`). Not ``Embed``: without ``dtype`` its output is in its
    ``param_dtype``, whatever the (integer) input."""
    keeps_dtypes: bool = False
    """A norm: given a ``dtype`` (not None), the NNX layer gets ``promote_dtype=`` :data:`KEEP_DTYPES`
    (also without one for ``stats_promoted``). NNX's
    norms cast the input, scale, bias and running statistics to ``dtype`` before the statistics; Linen's
    compute them from the input as it is (in float32 at least) and cast only the output. A bfloat16
    LayerNorm of inputs near 300 differed by 1.5; with the input kept, the two are bit-identical."""
    stats_promoted: bool = False
    """A norm whose NNX promotion also takes its float32 running statistics (``BatchNorm``'s ``mean`` /
    ``var``): without a ``dtype`` NNX computes and returns the promotion of the input, the parameters and
    the statistics, float32, where Linen's output is the promotion of the input and the parameters alone.
    A bfloat16 input with bfloat16 parameters, or with none, differed by up to 0.06 (float32 output where
    Linen gives bfloat16). So it gets :data:`KEEP_DTYPES` without a ``dtype`` too, unless it has a
    parameter in float32 (:func:`gets_kept_dtypes`); with it every case of input, parameter dtype,
    ``use_scale`` / ``use_bias`` and mode is bit-identical (``tests/test_norm_dtypes.py``)."""
    query_promoted: bool = False
    """``Embed``: ``nnx.Embed`` sets ``self.dtype = dtype or`` the table's dtype, so without a ``dtype`` its
    ``attend`` casts the query to ``param_dtype``, where Linen's (``dtype=None``) promotes the query and
    the table together (a float32 query of a bfloat16 table: bfloat16 logits, 0.0024 off, where Linen gives
    float32). Unless ``param_dtype`` is float32 it gets the promote of :func:`kept_promote`, which promotes
    with Linen's ``dtype``; lookups are unchanged (the table alone, in its own dtype)."""
    norms_flag: str | None = None
    """Constructor flag under which the layer builds norms of its own in its ``dtype`` (attention's
    ``normalize_qk``: ``query_ln`` / ``key_ln``): given it (not False) and a ``dtype`` (not None), the NNX
    layer gets ``ln_promote_dtype=`` :data:`KEEP_DTYPES`, as a norm (``keeps_dtypes``). A bfloat16
    attention differed in 1560 of 2048 outputs (by up to 0.039); with it, and the attention of
    ``einsum_attention`` (else the attention core alone differs), bit-identical."""
    einsum_attention: bool = False
    """Attention whose NNX default ``attention_fn`` (``nnx.dot_product_attention``) takes
    ``jax.nn.dot_product_attention`` when its dropout rate is 0 and it sows nothing: float32 logits and
    softmax, where Linen's computes them in the layer's dtype. Identical in float32; a bfloat16 attention
    differed in 1439 of 2048 outputs (by up to 0.0625). Where ``dtype`` or ``param_dtype`` may be narrower
    than float32 the layer gets :data:`EINSUM_ATTENTION`, NNX's other path, Linen's computation
    (bit-identical for every dtype, parameter and input dtype, rate, mask and ``normalize_qk``)."""
    param_switches: tuple[str, ...] = ()
    """Constructor flags that each turn a parameter off (a norm's ``use_scale`` / ``use_bias``): with all
    of them False the layer has no parameter, and its output, without ``dtype``, is in its input's dtype."""
    manual_reason: str = ""
    """Set when no NNX layer is exact: every use is a ``manual`` finding with this reason (never a near miss)."""
    init_call_cache: str | None = None
    """Constructor flag (``decode``) under which Linen creates a cache on the init call, a call that
    does not decode. NNX needs ``init_cache(shape, dtype)`` first: the call site does that on the
    first call and runs it without decoding, so every later call sees Linen's cache (docs/nnx_facts.md#attention-decode-cache)."""
    out_attr: str | None = None
    """NNX attribute of a built layer that holds its output feature size: read from a layer a caller
    hands in (``self.shared_embedding``) where the class builds this layer in the other branch, and
    from the last element a loop nest built (``self.conv[-1].out_features``)."""
    setup_params: tuple[str, ...] = ()
    """Parameters the Linen layer binds in ``setup()``, so that code reads them as attributes of a built
    layer (``word.embedding``: an array); the NNX layer holds a Variable there, read with ``[...]``."""
    bool_call_args: frozenset[str] = frozenset()
    """Call-time keywords Linen casts to bool and NNX hands on as given (a norm's ``mask=``: Linen's
    statistics take ``jnp.asarray(mask, dtype=bool)``, NNX's ``jnp.mean(where=mask)`` refuses an int or
    float padding mask): written as that cast."""
    call_keywords: tuple[str, ...] = ()
    """Linen call signature; when set, positional call arguments after the first become these keywords
    (``SelfAttention(x, mask)``: NNX's second positional is ``inputs_k``)."""
    dropped_when: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Linen arguments the NNX layer already honours when their literal value passes the named check
    of :data:`ARG_CHECKS` (dropped, with a note); any other value is a ``manual`` finding."""
    input_index: int = 0
    """Positional call argument whose last axis is the input feature size (cells are called ``(carry, x)``)."""
    carry_init: bool = False
    """An RNN cell: Linen ``initialize_carry(rng, input_shape)`` is NNX ``initialize_carry(input_shape, rngs)``
    on the built cell (same ``features``, ``carry_init`` and ``param_dtype`` give the same carry)."""
    no_variables: bool = False
    """Linen creates no variable for it (``Dropout``): no auto-name of it maps a weight, so a loop may build
    one every iteration where Linen built it on some (a test of the loop's own names) and use each
    where Linen did."""
    callee: str | None = None
    """The constructor emitted instead of ``nnx.<nnx>``: a subclass of it the file defines (a layer
    subclass that transforms a parameter, :mod:`linen2nnx.migrate.layer_subclasses`), as the call writes
    it (``convs.StdConv``, an alias ``SC``)."""
    subclass: str | None = None
    """That subclass's own class name: Linen counts auto-names by ``type(self).__name__`` (``StdConv_0``),
    whatever module attribute or alias the call reaches it through."""

    @property
    def auto_name(self) -> str:
        """The class name Linen counts this layer's auto-names by (``Conv_0``; ``StdConv_0`` built as a
        subclass)."""
        return self.subclass or self.linen

    @property
    def linen_qualname(self) -> str:
        return f"{LINEN}.{self.linen}"

    @property
    def nnx_qualname(self) -> str:
        return f"{NNX}.{self.nnx}"

    def linen_arg_order(self) -> tuple[str, ...]:
        """Positional order of the Linen constructor (its dataclass fields), read from flax itself."""
        return _linen_arg_order(self.linen)

    def nnx_arg(self, linen_arg: str) -> str:
        return self.rename_args.get(linen_arg, linen_arg)


@cache
def _linen_arg_order(name: str) -> tuple[str, ...]:
    import flax.linen as nn

    params = inspect.signature(getattr(nn, name)).parameters
    return tuple(p for p in params if p not in ("parent", "name"))


_NORM_UNSUPPORTED = frozenset({"force_float32_reductions"})
_PROMOTE = {"promote_dtype": ("flax.linen.dtypes.promote_dtype",)}
"""Linen calls ``promote_dtype(*arrays, dtype=)``, NNX ``promote_dtype((arrays,), dtype=)``: only Linen's
own function is dropped (NNX's default is its counterpart); another one would be called wrongly."""
_DOT = ("jax.lax.dot_general", "None")
_CONV = ("jax.lax.conv_general_dilated", "None")
"""Linen calls a ``dot_general`` / ``conv_general_dilated`` with the arrays and ``precision=``; NNX passes
``out_sharding=`` too (and ``preferred_element_type=`` when set), which a function written for Linen does
not take: only jax's own function, or Linen's default ``None``, is dropped."""
_LAST_AXIS = ("-1", "(-1,)", "[-1]")
"""The feature axis of a norm whose size the rewrite passes as ``num_features``: another axis (``axis=1``,
``feature_axes=(-2, -1)``) would give its parameters the last axis's size instead."""

LAYER_RULES: tuple[LayerRule, ...] = (
    LayerRule(
        "Dense",
        "Linear",
        positional=("features",),
        out_arg="features",
        out_attr="out_features",
        rename_args={"features": "out_features"},
        unsupported_args=frozenset({"dot_general_cls"}),
        function_args={**_PROMOTE, "dot_general": _DOT},
        keeps_rank=True,
        output_dtype=True,
    ),
    LayerRule(
        "Conv",
        "Conv",
        positional=("features", "kernel_size"),
        data_args=frozenset({"mask"}),
        out_arg="features",
        rename_args={"features": "out_features"},
        out_attr="out_features",
        unsupported_args=frozenset({"conv_general_dilated_cls"}),
        function_args={**_PROMOTE, "conv_general_dilated": _CONV},
        keeps_rank=True,
        output_dtype=True,
    ),
    LayerRule(
        "ConvTranspose",
        "ConvTranspose",
        positional=("features", "kernel_size"),
        data_args=frozenset({"mask"}),
        out_arg="features",
        rename_args={"features": "out_features"},
        out_attr="out_features",
        function_args=_PROMOTE,
        keeps_rank=True,
        output_dtype=True,
    ),
    LayerRule(
        "Embed",
        "Embed",
        in_arg=None,
        positional=("num_embeddings", "features"),
        out_arg="features",
        out_attr="features",
        function_args=_PROMOTE,
        query_promoted=True,
        setup_params=("embedding",),
    ),
    LayerRule(
        "LayerNorm",
        "LayerNorm",
        in_arg="num_features",
        bool_call_args=_MASK,
        keeps_dtypes=True,
        only_values={"feature_axes": _LAST_AXIS},  # num_features is the last axis's size
        unsupported_args=_NORM_UNSUPPORTED,
        keeps_shape=True,
        output_dtype=True,
        param_switches=("use_scale", "use_bias"),
    ),
    LayerRule(
        "RMSNorm",
        "RMSNorm",
        in_arg="num_features",
        bool_call_args=_MASK,
        keeps_dtypes=True,
        only_values={"feature_axes": _LAST_AXIS},  # num_features is the last axis's size
        unsupported_args=_NORM_UNSUPPORTED,
        keeps_shape=True,
        output_dtype=True,
        param_switches=("use_scale",),
    ),
    LayerRule(
        "GroupNorm",
        "GroupNorm",
        in_arg="num_features",
        bool_call_args=_MASK,
        keeps_dtypes=True,
        # nnx.GroupNorm repeats the group statistics along axis 1, right only when it reduces every axis
        only_values={"reduction_axes": ("None",)},
        unsupported_args=_NORM_UNSUPPORTED,
        keeps_shape=True,
        output_dtype=True,
        param_switches=("use_scale", "use_bias"),
    ),
    LayerRule(
        "BatchNorm",
        "BatchNorm",
        in_arg="num_features",
        bool_call_args=_MASK,
        keeps_dtypes=True,
        stats_promoted=True,
        only_values={"axis": _LAST_AXIS},  # num_features is the last axis's size
        call_args=frozenset({"use_running_average"}),
        unsupported_args=_NORM_UNSUPPORTED,
        keeps_shape=True,
        output_dtype=True,
        param_switches=("use_scale", "use_bias"),
    ),
    LayerRule(
        "Dropout",
        "Dropout",
        in_arg=None,
        positional=("rate",),
        call_args=frozenset({"deterministic"}),
        nnx_only_state=("rngs",),
        call_keywords=("inputs", "deterministic", "rng"),
        unsupported_call_args=frozenset({"rng"}),
        no_variables=True,
        keeps_shape=True,
    ),
    *(
        LayerRule(
            linen,
            nnx_name,
            positional=("features",),
            out_arg="features",
            rename_args={"features": "hidden_features"},
            param_renames=renames,
            input_index=1,
            carry_init=True,
            extra_kwargs=extra,
        )
        for linen, nnx_name, renames, extra in (
            ("LSTMCell", "LSTMCell", {"if": "if_"}, {}),
            # Same equations as LSTMCell; Linen keeps the per-gate layout, so the unfused NNX cell is exact.
            ("OptimizedLSTMCell", "LSTMCell", {"if": "if_"}, {}),
            # nnx.SimpleCell computes in float32 unless told; Linen's dtype=None keeps the inputs' dtype
            ("SimpleCell", "SimpleCell", {"i": "dense_i", "h": "dense_h"}, {"dtype": "None"}),
        )
    ),
    LayerRule(
        "GRUCell",
        "GRUCell",
        positional=("features",),
        out_arg="features",
        rename_args={"features": "hidden_features"},
        input_index=1,
        manual_reason="nnx.GRUCell has no `hn` bias (Linen: n = tanh(W_in x + b_in + r*(W_hn h + b_hn))), so a "
        "trained Linen GRU cannot be converted exactly; keep a custom cell with Linen's layout",
    ),
    LayerRule(
        "Einsum",
        "Einsum",
        in_arg=None,
        positional=("einsum_str", "shape"),
        dropped_when={"use_bias": "literal_bool"},  # nnx.Einsum has a bias when given bias_shape
        rename_args={"shape": "kernel_shape"},
        out_from="einsum",
        function_args=_PROMOTE,
        output_dtype=True,
    ),
    LayerRule(
        "RNN",
        "RNN",
        in_arg=None,
        positional=("cell",),
        nested={"cell": "cell"},
        out_from="cell",
        nested_input={"cell": 1},
        unsupported_args=frozenset({"variable_axes", "variable_broadcast", "variable_carry"}),
        unsupported_call_args=frozenset({"init_key"}),
        dropped_when={"split_rngs": "fresh_keys_per_step"},
        nnx_only_state=("rngs",),
    ),
    LayerRule(
        "Bidirectional",
        "Bidirectional",
        in_arg=None,
        positional=("forward_rnn", "backward_rnn"),
        nested={"forward_rnn": "forward_rnn", "backward_rnn": "backward_rnn"},
        out_from="unknown",
        unsupported_call_args=frozenset({"init_key"}),
        nnx_only_state=("rngs",),
    ),
    LayerRule("Sequential", "Sequential", in_arg=None, varargs_list="layers", out_from="last"),
    LayerRule(
        "DenseGeneral",
        "LinearGeneral",
        positional=("features",),
        out_arg="features",
        rename_args={"features": "out_features"},
        only_values={"axis": ("-1",)},
        unsupported_args=frozenset({"batch_dims", "dot_general_cls"}),
        function_args={**_PROMOTE, "dot_general": _DOT},
        output_dtype=True,
    ),
    *(
        LayerRule(
            name,
            "MultiHeadAttention",
            in_index=1,
            positional=("num_heads",),
            out_arg="out_features",
            extra_kwargs={"decode": "False"},
            init_call_cache="decode",
            norms_flag="normalize_qk",
            einsum_attention=True,
            call_args=frozenset({"deterministic"}),
            call_renames={"inputs_kv": "inputs_k"},
            unsupported_call_args=frozenset({"dropout_rng"}),
            call_keywords=call_keywords,
            function_args={
                "attention_fn": (
                    "flax.linen.dot_product_attention",
                    "flax.linen.attention.dot_product_attention",
                ),
                "qkv_dot_general": _DOT,
                "out_dot_general": _DOT,
                "qkv_dot_general_cls": ("None",),  # NNX calls its instance as a dot_general
                "out_dot_general_cls": ("None",),
            },
            unsupported_args=frozenset(
                {"force_fp32_for_softmax", "qk_attn_weights_einsum_cls", "attn_weights_value_einsum_cls"}
            ),
            # nnx.dot_product_attention takes jax.nn.dot_product_attention's path when dropout is off,
            # which ignores precision=: the attention matmuls would run at the default precision
            only_values={"precision": ("None",)},
            nnx_only_state=("rngs",),
            keeps_rank=True,  # (..., length, out_features): the rank of inputs_q
        )
        for name, call_keywords in (
            ("MultiHeadDotProductAttention", ()),
            ("SelfAttention", ("inputs_q", "mask", "deterministic", "dropout_rng", "sow_weights")),
        )
    ),
)


def _fresh_keys_per_step(source: str) -> bool:
    """``split_rngs={'params': False, 'dropout': True}``: one params key for every step and a fresh key
    per step for each other stream, which is what ``nnx.RNN`` does with the streams its cell draws
    from (the keys themselves differ from Linen's: random draws are not bit-identical)."""
    import ast

    try:
        value = ast.literal_eval(source)
    except (ValueError, SyntaxError):
        return False
    return (
        isinstance(value, dict)
        and value.get("params", False) is False
        and all(v is True for k, v in value.items() if k != "params")
    )


@dataclasses.dataclass(frozen=True)
class ArgCheck:
    passes: Callable[[str], bool]  # the argument's source -> the NNX layer already does this
    note: str  # why dropping it is right, for the finding


ARG_CHECKS: Mapping[str, ArgCheck] = {
    "literal_bool": ArgCheck(
        lambda source: source in ("True", "False"),
        "nnx.Einsum has a bias exactly when it is given bias_shape: the shape Linen infers for True, "
        "none for False",
    ),
    "fresh_keys_per_step": ArgCheck(
        _fresh_keys_per_step,
        "one params key, a fresh key per step for every other "
        "stream the cell draws from, as nnx.RNN does (the draws differ from Linen's)",
    ),
}
"""Named checks of ``LayerRule.dropped_when`` (the table stays data)."""

_FLOAT32 = frozenset(
    {"jnp.float32", "jax.numpy.float32", "np.float32", "numpy.float32", "'float32'", '"float32"'}
)


def gets_kept_dtypes(rule: LayerRule, given: Mapping[str, str]) -> bool:
    """Whether a norm built with ``given`` (Linen argument -> its source) gets ``promote_dtype=``
    :data:`KEEP_DTYPES`: given a ``dtype`` (``LayerRule.keeps_dtypes``), or, for a norm whose statistics
    NNX promotes with the input (``LayerRule.stats_promoted``), unless it provably has a float32
    parameter (then both sides compute and return float32; anything else keeps the values, which is
    exact in every case)."""
    if not rule.keeps_dtypes:
        return False
    dtype = given.get("dtype")
    if dtype is not None and dtype != "None":
        return True
    if not rule.stats_promoted:
        return False
    has_param = any(given.get(switch, "True") == "True" for switch in rule.param_switches)
    return not has_param or given.get("param_dtype", "jnp.float32") not in _FLOAT32


EMBED_PROMOTE = "lambda args, dtype=None, inexact=True{bound}: nnx.nn.dtypes.promote_dtype(args, dtype={dtype}, inexact=inexact)"
"""The ``promote_dtype`` of an ``Embed`` (``LayerRule.query_promoted``): NNX's own, with Linen's ``dtype``
in place of the one NNX hands it (bound as a default where it is an expression, evaluated where Linen's is)."""
_DTYPE_NAME = re.compile(r"(jnp|jax\.numpy|np|numpy)\.\w+|'\w+'|\"\w+\"")


def kept_promote(rule: LayerRule, given: Mapping[str, str]) -> str | None:
    """The ``promote_dtype=`` source a layer built with ``given`` (Linen argument -> its source) gets, or
    None: :data:`KEEP_DTYPES` for a norm (:func:`gets_kept_dtypes`), :data:`EMBED_PROMOTE` for an ``Embed``
    whose ``param_dtype`` may not be float32 and whose ``dtype`` may be None (both then promote alike)."""
    if not rule.query_promoted:
        return KEEP_DTYPES if gets_kept_dtypes(rule, given) else None
    dtype = given.get("dtype", "None")
    if given.get("param_dtype", "jnp.float32") in _FLOAT32 or _DTYPE_NAME.fullmatch(dtype):
        return None
    if dtype == "None":
        return EMBED_PROMOTE.format(bound="", dtype="None")
    return EMBED_PROMOTE.format(bound=f", linen_dtype={dtype}", dtype="linen_dtype")


EINSUM_ATTENTION = (
    "lambda *args, dropout_rate, deterministic, **kwargs: nnx.dot_product_attention("
    "*args, dropout_rate=dropout_rate or 1.0, deterministic=deterministic or not dropout_rate, **kwargs)"
)
"""The ``attention_fn`` of ``LayerRule.einsum_attention``: ``nnx.dot_product_attention`` on its einsum path,
which it takes for a dropout rate other than 0. At rate 0 it is given rate 1.0 under ``deterministic``,
so it drops nothing; any other rate goes through as it is."""


def _dropping(given: Mapping[str, str]) -> bool:
    """A literal dropout rate above 0: ``nnx.dot_product_attention`` takes its einsum path already."""
    try:
        return float(given.get("dropout_rate", "0")) > 0
    except ValueError:
        return False


def dtype_kwargs(rule: LayerRule, given: Mapping[str, str], taken: Collection[str]) -> list[tuple[str, str]]:
    """The NNX keywords (-> their source) a layer built with ``given`` (Linen argument -> its source) gets
    so that it computes in Linen's dtypes, but for those in ``taken`` (already passed): the promote of
    :func:`kept_promote`, the ``attention_fn`` of ``einsum_attention``, the norms' promote of ``norms_flag``."""
    found = []
    promote = kept_promote(rule, given)
    if promote is not None and "promote_dtype" not in taken:
        found.append(("promote_dtype", promote))
    dtype = given.get("dtype", "None")
    narrow = dtype not in _FLOAT32 and (
        dtype != "None" or given.get("param_dtype", "jnp.float32") not in _FLOAT32
    )
    if rule.einsum_attention and narrow and not _dropping(given) and "attention_fn" not in taken:
        found.append(("attention_fn", EINSUM_ATTENTION))
    norms = given.get(rule.norms_flag, "False") if rule.norms_flag else "False"
    if norms != "False" and dtype != "None" and "ln_promote_dtype" not in taken:
        found.append(("ln_promote_dtype", KEEP_DTYPES))
    return found


LAYERS_BY_LINEN: Mapping[str, LayerRule] = {r.linen_qualname: r for r in LAYER_RULES}
LAYERS_BY_NNX: Mapping[str, LayerRule] = {r.nnx_qualname: r for r in LAYER_RULES}


def layer_rule(linen_qualname: str) -> LayerRule | None:
    """The rule for a fully qualified Linen class name (``flax.linen.Dense``), if it is a built-in."""
    return LAYERS_BY_LINEN.get(linen_qualname)


@cache
def nnx_ctor_params(nnx_name: str) -> frozenset[str]:
    """Parameter names of an NNX layer's ``__init__`` (read from flax; checks every emitted kwarg)."""
    from flax import nnx

    return frozenset(inspect.signature(getattr(nnx, nnx_name).__init__).parameters) - {"self"}
