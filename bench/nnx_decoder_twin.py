"""A hand-written NNX twin of the zoo decoder (``linen2nnx/zoo/decoder/model.py``), MaxText style.

Used by ``bench/memory_decoder.py`` (and the mesh parity tests) until ``migrate`` converts the
decoder with no manual finding. It is written the way the design asks ``migrate`` to emit lifted
transforms, so it doubles as the target for that work:

- every attribute has its Linen name, so the Linen checkpoint converts by pure renaming (no name
  map): ``layers/self_attention/query/kernel`` etc., stacked on axis 0 like ``nn.scan``'s;
- the layer stack is built by ``nnx.vmap`` over ``nnx.transform_metadata(partition='layers')``
  (the mode-proof spelling, docs/nnx_facts.md#partition-names-on-a-stack), so every stacked ``out_sharding`` starts with
  ``'layers'`` exactly like Linen's ``metadata_params={nn.PARTITION_NAME: 'layers'}``;
- the forward is ``nnx.scan`` over ``nnx.remat`` with the Linen remat policy, in the mode that
  only carries *changed* Variables out of the loop (``graph_updates=False``): the body never
  returns the Params, which would cost a copy of the whole stack. Measured by
  ``bench/memory_decoder.py`` (config ``bench``): XLA temp memory 128.0 MiB, the same as Linen's;
  with the default ``graph_updates=True`` it is 138.1 MiB (+7.8%);
- partition names on every weight via ``out_sharding`` and ``nn.with_logical_constraint`` on the
  activations (the function works on plain arrays; ``migrate`` keeps it as is).

The KV cache (``decode=True``) is not part of the twin: the train step does not need it. The
``attention_entropy`` metric is sown as an ``nnx.Intermediate`` like Linen's ``intermediates``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from linen2nnx.zoo.decoder.model import NEG_INF, DecoderConfig, kernel_init, nd_dense_init, remat_policy

Array = jax.Array


def _tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


class RMSNorm(nnx.Module):
    """Linen ``RMSNorm``: normalise in float32, scale by a learned per-feature ``scale``."""

    def __init__(
        self,
        features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Any = jnp.float32,
        param_dtype: Any = jnp.float32,
        kernel_axes: tuple[str, ...] = ("norm",),
        rngs: nnx.Rngs,
    ):
        self.epsilon, self.dtype = epsilon, dtype
        self.scale = nnx.Param(jnp.ones((features,), param_dtype), out_sharding=kernel_axes)

    def __call__(self, x: Array) -> Array:
        x = jnp.asarray(x, jnp.float32)
        mean2 = jnp.mean(jax.lax.square(x), axis=-1, keepdims=True)
        y = jnp.asarray(x * jax.lax.rsqrt(mean2 + self.epsilon), self.dtype)
        return y * jnp.asarray(self.scale[...], self.dtype)


def rotary(
    inputs: Array, position: Array, embedding_dims: int, min_timescale: int = 1, max_timescale: int = 10_000
) -> Array:
    """Linen ``RotaryEmbedding`` (it has no state, so a function)."""
    half = embedding_dims // 2
    fraction = 2 * jnp.arange(0, half) / embedding_dims
    timescale = min_timescale * (max_timescale / min_timescale) ** fraction
    sinusoid = position[:, :, jnp.newaxis, jnp.newaxis] / timescale
    sin, cos = jnp.sin(sinusoid), jnp.cos(sinusoid)
    first_half, second_half = jnp.split(inputs, 2, axis=-1)
    return jnp.concatenate(
        [first_half * cos - second_half * sin, second_half * cos + first_half * sin], axis=-1
    ).astype(inputs.dtype)


class DenseGeneral(nnx.Module):
    """The zoo's N-d ``DenseGeneral``: kernel ``in_shape + features`` created in its final shape,
    contracting the last ``len(in_shape)`` input axes."""

    def __init__(
        self,
        in_shape: tuple[int, ...],
        features: int | tuple[int, ...],
        *,
        kernel_axes: tuple[str, ...],
        dtype: Any = jnp.float32,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        features = _tuple(features)
        self.n_in, self.dtype = len(in_shape), dtype
        kernel = nd_dense_init()(
            rngs.params(),
            (*in_shape, *features),
            param_dtype,
            tuple(range(self.n_in)),
            tuple(range(self.n_in, self.n_in + len(features))),
        )
        self.kernel = nnx.Param(kernel, out_sharding=kernel_axes)

    def __call__(self, inputs: Array) -> Array:
        axis = tuple(range(inputs.ndim - self.n_in, inputs.ndim))
        inputs = jnp.asarray(inputs, self.dtype)
        kernel = jnp.asarray(self.kernel[...], self.dtype)
        return jax.lax.dot_general(inputs, kernel, ((axis, tuple(range(self.n_in))), ((), ())))


def _dense_general(
    in_shape: tuple[int, ...],
    features: int | tuple[int, ...],
    kernel_axes: tuple[str, ...],
    cfg: DecoderConfig,
    rngs: nnx.Rngs,
) -> DenseGeneral:
    return DenseGeneral(
        in_shape, features, kernel_axes=kernel_axes, dtype=cfg.dtype, param_dtype=cfg.param_dtype, rngs=rngs
    )


class Attention(nnx.Module):
    """Causal multi-head self-attention with RoPE (no KV cache)."""

    def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
        cfg = self.config = config
        heads = (cfg.num_heads, cfg.head_dim)
        qkv = ("embed", "heads", "kv")
        self.query = _dense_general((cfg.emb_dim,), heads, qkv, cfg, rngs)
        self.key = _dense_general((cfg.emb_dim,), heads, qkv, cfg, rngs)
        self.value = _dense_general((cfg.emb_dim,), heads, qkv, cfg, rngs)
        self.out = _dense_general(heads, cfg.emb_dim, ("heads", "kv", "embed"), cfg, rngs)

    def __call__(self, inputs: Array, positions: Array) -> Array:
        cfg = self.config
        query, key, value = self.query(inputs), self.key(inputs), self.value(inputs)
        query = rotary(query, positions, cfg.head_dim, max_timescale=cfg.rope_max_timescale)
        key = rotary(key, positions, cfg.head_dim, max_timescale=cfg.rope_max_timescale)
        qkv_axes = ("activation_batch", "activation_length", "activation_heads", "activation_kv")
        query = nn.with_logical_constraint(query, qkv_axes)
        key = nn.with_logical_constraint(key, qkv_axes)
        value = nn.with_logical_constraint(value, qkv_axes)
        length = inputs.shape[1]
        causal_mask = jnp.arange(length)[:, None] >= jnp.arange(key.shape[1])[None, :]
        query = query / jnp.sqrt(cfg.head_dim).astype(cfg.dtype)
        logits = jnp.einsum("bqhd,bkhd->bhqk", query, key).astype(jnp.float32)
        logits = jnp.where(causal_mask[None, None], logits, NEG_INF)
        weights = jax.nn.softmax(logits, axis=-1)
        entropy = -jnp.sum(weights * jnp.log(weights + 1e-9), axis=-1)
        self.sow(nnx.Intermediate, "attention_entropy", jnp.mean(entropy))
        out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(cfg.dtype), value)
        out = nn.with_logical_constraint(out, qkv_axes)
        return self.out(out)


def _linear(
    n_in: int, n_out: int, axes: tuple[str, str], dtype: Any, cfg: DecoderConfig, rngs: nnx.Rngs
) -> nnx.Linear:
    """Linen ``nn.DenseGeneral(features, use_bias=False)`` over the last axis == ``nnx.Linear`` (same kernel)."""
    return nnx.Linear(
        n_in,
        n_out,
        use_bias=False,
        dtype=dtype,
        param_dtype=cfg.param_dtype,
        kernel_init=nnx.with_partitioning(kernel_init(), axes),
        rngs=rngs,
    )


class MlpBlock(nnx.Module):
    """Gated SiLU MLP: ``wo(silu(wi_0 x) * wi_1 x)``."""

    def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
        cfg = config
        self.wi_0 = _linear(cfg.emb_dim, cfg.mlp_dim, ("embed", "mlp"), cfg.dtype, cfg, rngs)
        self.wi_1 = _linear(cfg.emb_dim, cfg.mlp_dim, ("embed", "mlp"), cfg.dtype, cfg, rngs)
        self.wo = _linear(cfg.mlp_dim, cfg.emb_dim, ("mlp", "embed"), cfg.dtype, cfg, rngs)
        self.dropout = nnx.Dropout(cfg.dropout_rate, broadcast_dims=(-2,), rngs=rngs)

    def __call__(self, inputs: Array, deterministic: bool) -> Array:
        x = nnx.silu(self.wi_0(inputs)) * self.wi_1(inputs)
        x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_mlp"))
        x = self.dropout(x, deterministic=deterministic)
        return self.wo(x)


class DecoderLayer(nnx.Module):
    """Pre-norm transformer block: attention and MLP, each with a residual connection."""

    def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
        cfg = config
        norm = dict(
            epsilon=cfg.normalization_layer_epsilon, dtype=cfg.dtype, param_dtype=cfg.param_dtype, rngs=rngs
        )
        self.pre_self_attention_norm = RMSNorm(cfg.emb_dim, **norm)
        self.self_attention = Attention(cfg, rngs=rngs)
        self.post_self_attention_norm = RMSNorm(cfg.emb_dim, **norm)
        self.mlp = MlpBlock(cfg, rngs=rngs)
        self.attention_dropout = nnx.Dropout(cfg.dropout_rate, broadcast_dims=(-2,), rngs=rngs)
        self.mlp_dropout = nnx.Dropout(cfg.dropout_rate, broadcast_dims=(-2,), rngs=rngs)

    def __call__(self, inputs: Array, positions: Array, deterministic: bool) -> Array:
        act = ("activation_batch", "activation_length", "activation_embed")
        inputs = nn.with_logical_constraint(inputs, act)
        x = self.self_attention(self.pre_self_attention_norm(inputs), positions)
        x = self.attention_dropout(x, deterministic=deterministic) + inputs
        y = self.mlp(self.post_self_attention_norm(x), deterministic=deterministic)
        y = self.mlp_dropout(y, deterministic=deterministic) + x
        return nn.with_logical_constraint(y, act)


class Decoder(nnx.Module):
    """Token ids (batch, length) -> next-token logits (batch, length, vocab)."""

    def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
        cfg = self.config = config
        self.token_embedder = nnx.Embed(
            cfg.vocab_size,
            cfg.emb_dim,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            embedding_init=nnx.with_partitioning(nnx.initializers.normal(stddev=1.0), ("vocab", "embed")),
            rngs=rngs,
        )
        self.dropout = nnx.Dropout(cfg.dropout_rate, broadcast_dims=(-2,), rngs=rngs)
        if cfg.scan_layers:

            @nnx.split_rngs(splits=cfg.num_layers)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            @nnx.transform_metadata(in_axes=0, out_axes=0, partition="layers")
            def stack(rngs: nnx.Rngs) -> DecoderLayer:
                return DecoderLayer(cfg, rngs=rngs)

            self.layers = stack(rngs)
        else:
            for i in range(cfg.num_layers):  # Linen's layers_0, layers_1, ...
                setattr(self, f"layers_{i}", DecoderLayer(cfg, rngs=rngs))
        self.decoder_norm = RMSNorm(
            cfg.emb_dim,
            epsilon=cfg.normalization_layer_epsilon,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
        )
        self.final_dropout = nnx.Dropout(cfg.dropout_rate, broadcast_dims=(-2,), rngs=rngs)
        self.logits_dense = _linear(cfg.emb_dim, cfg.vocab_size, ("embed", "vocab"), jnp.float32, cfg, rngs)

    def __call__(
        self, tokens: Array, positions: Array | None = None, *, train: bool = False, decode: bool = False
    ) -> Array:
        if decode:
            raise NotImplementedError("the NNX decoder twin has no KV cache (decode=True)")
        cfg = self.config
        deterministic = not train
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1])[None, :], tokens.shape)
        y = self.token_embedder(tokens.astype(jnp.int32))
        y = self.dropout(y, deterministic=deterministic).astype(cfg.dtype)

        def block(layer: DecoderLayer, y: Array) -> Array:
            return layer(y, positions, deterministic)

        block = nnx.remat(
            block, prevent_cse=not cfg.scan_layers, policy=remat_policy(cfg.remat_policy), graph_updates=False
        )
        if cfg.scan_layers:
            y = nnx.scan(
                lambda y, layer: block(layer, y),
                in_axes=(nnx.Carry, 0),
                out_axes=nnx.Carry,
                graph_updates=False,
            )(y, self.layers)
        else:
            for i in range(cfg.num_layers):
                y = block(getattr(self, f"layers_{i}"), y)
        y = self.final_dropout(self.decoder_norm(y), deterministic=deterministic)
        logits = self.logits_dense(y)
        return nn.with_logical_constraint(
            logits, ("activation_batch", "activation_length", "activation_vocab")
        )


def make_twin(config: DecoderConfig, rngs: nnx.Rngs) -> Decoder:
    """The twin for a Linen ``Decoder(config)`` (a ModelPair ``nnx_factory`` with ``functools.partial``)."""
    return Decoder(config, rngs=rngs)
