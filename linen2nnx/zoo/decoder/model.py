"""A Llama-style decoder-only LM written the MaxText way.

RMSNorm, rotary position embeddings, causal multi-head attention with N-d ``DenseGeneral`` q/k/v/o
projections, a gated SiLU (SwiGLU) MLP of ``nn.DenseGeneral`` layers, logical-axis partitioning metadata on every weight, the decoder layer
wrapped in ``nn.remat`` and stacked with ``nn.scan`` (or unrolled as ``layers_0``, ``layers_1``, ...),
an attention-entropy metric sown into ``intermediates`` and a KV cache in the ``cache`` collection.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

Array = jax.Array
DType = Any
Initializer = Any

NEG_INF = -1e10


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 32_000
    emb_dim: int = 512
    num_heads: int = 8
    head_dim: int = 64
    mlp_dim: int = 1536
    num_layers: int = 4
    dropout_rate: float = 0.0
    dtype: DType = jnp.float32
    param_dtype: DType = jnp.float32
    normalization_layer_epsilon: float = 1e-6
    rope_max_timescale: int = 10_000
    scan_layers: bool = True
    remat_policy: str = "full"  # 'full' | 'minimal' | 'save_dots'


def kernel_init(scale: float = 1.0) -> Initializer:
    return nn.initializers.variance_scaling(scale, "fan_in", "truncated_normal")


def nd_dense_init(scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal"):
    """A variance-scaling initializer told at call time which kernel axes are fan-in and fan-out."""

    def init_fn(key, shape, dtype, in_axis, out_axis):
        return nn.initializers.variance_scaling(scale, mode, distribution, in_axis, out_axis)(
            key, shape, dtype
        )

    return init_fn


def remat_policy(name: str):
    """The ``jax.checkpoint`` policy for a remat policy name (``None`` rematerialises everything)."""
    if name == "full":
        return None
    if name == "minimal":
        return jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims
    if name == "save_dots":
        return jax.checkpoint_policies.checkpoint_dots
    raise ValueError(f"unknown remat_policy {name!r}; expected 'full', 'minimal' or 'save_dots'")


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation with a learned per-feature scale."""

    epsilon: float = 1e-6
    dtype: DType = jnp.float32
    param_dtype: DType = jnp.float32
    kernel_axes: tuple[str, ...] = ("norm",)

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = jnp.asarray(x, jnp.float32)
        features = x.shape[-1]
        mean2 = jnp.mean(jax.lax.square(x), axis=-1, keepdims=True)
        y = jnp.asarray(x * jax.lax.rsqrt(mean2 + self.epsilon), self.dtype)
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, self.kernel_axes),
            (features,),
            self.param_dtype,
        )
        return y * jnp.asarray(scale, self.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) for inputs of shape (batch, length, heads, head_dim)."""

    embedding_dims: int
    min_timescale: int = 1
    max_timescale: int = 10_000

    def __call__(self, inputs: Array, position: Array) -> Array:
        if self.embedding_dims % 2:
            raise ValueError("RoPE needs an even embedding dimension")
        half = self.embedding_dims // 2
        fraction = 2 * jnp.arange(0, half) / self.embedding_dims
        timescale = self.min_timescale * (self.max_timescale / self.min_timescale) ** fraction
        position = position[:, :, jnp.newaxis, jnp.newaxis]
        sinusoid = position / timescale
        sin, cos = jnp.sin(sinusoid), jnp.cos(sinusoid)
        first_half, second_half = jnp.split(inputs, 2, axis=-1)
        first_part = first_half * cos - second_half * sin
        second_part = second_half * cos + first_half * sin
        return jnp.concatenate([first_part, second_part], axis=-1).astype(inputs.dtype)


class DenseGeneral(nn.Module):
    """A linear map over several input and/or output axes (MaxText's ``DenseGeneral``).

    Unlike ``nn.DenseGeneral``, the kernel is created in its final N-d shape, so its
    ``nn.with_logical_partitioning`` names (``kernel_axes``) hold when the box is unboxed under a
    mesh and logical axis rules (``nn.DenseGeneral`` unboxes the flat 2-d kernel first).
    """

    features: int | tuple[int, ...]
    axis: int | tuple[int, ...] = -1
    kernel_axes: tuple[str, ...] = ()
    dtype: DType = jnp.float32
    param_dtype: DType = jnp.float32
    kernel_init: Initializer = nd_dense_init()

    @nn.compact
    def __call__(self, inputs: Array) -> Array:
        features = _canonicalize_tuple(self.features)
        axis = tuple(ax % inputs.ndim for ax in _canonicalize_tuple(self.axis))
        inputs = jnp.asarray(inputs, self.dtype)
        kernel_shape = tuple(inputs.shape[ax] for ax in axis) + features
        kernel_in_axis = tuple(range(len(axis)))
        kernel_out_axis = tuple(range(len(axis), len(axis) + len(features)))
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(self.kernel_init, self.kernel_axes),
            kernel_shape,
            self.param_dtype,
            kernel_in_axis,
            kernel_out_axis,
        )
        kernel = jnp.asarray(kernel, self.dtype)
        return jax.lax.dot_general(inputs, kernel, ((axis, kernel_in_axis), ((), ())))


def _canonicalize_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


class Attention(nn.Module):
    """Causal multi-head self-attention with RoPE and an autoregressive KV cache."""

    config: DecoderConfig

    def projection(self, features, axis, kernel_axes, name):
        cfg = self.config
        return DenseGeneral(
            features=features,
            axis=axis,
            kernel_axes=kernel_axes,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name=name,
        )

    @nn.compact
    def __call__(
        self, inputs: Array, positions: Array, *, deterministic: bool, decode: bool = False
    ) -> Array:
        cfg = self.config
        heads = (cfg.num_heads, cfg.head_dim)
        query = self.projection(heads, -1, ("embed", "heads", "kv"), "query")(inputs)
        key = self.projection(heads, -1, ("embed", "heads", "kv"), "key")(inputs)
        value = self.projection(heads, -1, ("embed", "heads", "kv"), "value")(inputs)

        batch, length = inputs.shape[:2]
        decoding = decode and self.has_variable("cache", "cached_key")
        if decoding:  # positions come from the cache: we are at cache_index, cache_index + 1, ...
            index = self.get_variable("cache", "cache_index")
            positions = jnp.broadcast_to(index + jnp.arange(length)[None, :], (batch, length))

        rope = RotaryEmbedding(cfg.head_dim, max_timescale=cfg.rope_max_timescale, name="rotary")
        query = rope(query, positions)
        key = rope(key, positions)
        qkv_axes = ("activation_batch", "activation_length", "activation_heads", "activation_kv")
        query = nn.with_logical_constraint(query, qkv_axes)
        key = nn.with_logical_constraint(key, qkv_axes)
        value = nn.with_logical_constraint(value, qkv_axes)

        q_pos = jnp.arange(length)
        if decode:
            # The first call with decode=True (at init) only creates the cache, sized by the inputs.
            cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
            cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
            cache_index = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
            if decoding:
                cur = cache_index.value
                cached_key.value = jax.lax.dynamic_update_slice(cached_key.value, key, (0, cur, 0, 0))
                cached_value.value = jax.lax.dynamic_update_slice(cached_value.value, value, (0, cur, 0, 0))
                cache_index.value = cur + length
                key, value = cached_key.value, cached_value.value
                q_pos = cur + q_pos
        k_pos = jnp.arange(key.shape[1])
        causal_mask = q_pos[:, None] >= k_pos[None, :]  # (q, k)

        query = query / jnp.sqrt(cfg.head_dim).astype(cfg.dtype)
        logits = jnp.einsum("bqhd,bkhd->bhqk", query, key).astype(jnp.float32)
        logits = jnp.where(causal_mask[None, None], logits, NEG_INF)
        weights = jax.nn.softmax(logits, axis=-1)
        entropy = -jnp.sum(weights * jnp.log(weights + 1e-9), axis=-1)
        self.sow("intermediates", "attention_entropy", jnp.mean(entropy))

        out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(cfg.dtype), value)
        out = nn.with_logical_constraint(out, qkv_axes)
        return self.projection(cfg.emb_dim, (-2, -1), ("heads", "kv", "embed"), "out")(out)


class MlpBlock(nn.Module):
    """Gated SiLU MLP: ``wo(silu(wi_0 x) * wi_1 x)``."""

    config: DecoderConfig

    def dense(self, features, kernel_axes, name):
        cfg = self.config
        return nn.DenseGeneral(
            features,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            kernel_init=nn.with_logical_partitioning(kernel_init(), kernel_axes),
            name=name,
        )

    @nn.compact
    def __call__(self, inputs: Array, deterministic: bool) -> Array:
        cfg = self.config
        gate = self.dense(cfg.mlp_dim, ("embed", "mlp"), "wi_0")(inputs)
        up = self.dense(cfg.mlp_dim, ("embed", "mlp"), "wi_1")(inputs)
        x = nn.silu(gate) * up
        x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_mlp"))
        x = nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
        return self.dense(inputs.shape[-1], ("mlp", "embed"), "wo")(x)


class DecoderLayer(nn.Module):
    """Pre-norm transformer block: attention and MLP, each with a residual connection."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, inputs: Array, positions: Array, deterministic: bool, decode: bool):
        cfg = self.config
        inputs = nn.with_logical_constraint(
            inputs, ("activation_batch", "activation_length", "activation_embed")
        )
        x = RMSNorm(
            epsilon=cfg.normalization_layer_epsilon,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="pre_self_attention_norm",
        )(inputs)
        x = Attention(cfg, name="self_attention")(x, positions, deterministic=deterministic, decode=decode)
        x = nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
        x = x + inputs

        y = RMSNorm(
            epsilon=cfg.normalization_layer_epsilon,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="post_self_attention_norm",
        )(x)
        y = MlpBlock(cfg, name="mlp")(y, deterministic=deterministic)
        y = nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,))(y, deterministic=deterministic)
        y = y + x
        y = nn.with_logical_constraint(y, ("activation_batch", "activation_length", "activation_embed"))
        return (y, None) if cfg.scan_layers else y


class Decoder(nn.Module):
    """Token ids (batch, length) -> next-token logits (batch, length, vocab)."""

    config: DecoderConfig

    @nn.compact
    def __call__(
        self, tokens: Array, positions: Array | None = None, *, train: bool = False, decode: bool = False
    ):
        cfg = self.config
        deterministic = not train
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1])[None, :], tokens.shape)

        y = nn.Embed(
            num_embeddings=cfg.vocab_size,
            features=cfg.emb_dim,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(stddev=1.0), ("vocab", "embed")
            ),
            name="token_embedder",
        )(tokens.astype(jnp.int32))
        y = nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,))(y, deterministic=deterministic)
        y = y.astype(cfg.dtype)

        # self is argument 0 for Linen's static_argnums: (inputs, positions, deterministic, decode) = 1..4
        BlockLayer = nn.remat(
            DecoderLayer,
            prevent_cse=not cfg.scan_layers,
            policy=remat_policy(cfg.remat_policy),
            static_argnums=(3, 4),
        )
        if cfg.scan_layers:
            y, _ = nn.scan(
                BlockLayer,
                variable_axes={"params": 0, "cache": 0, "intermediates": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                length=cfg.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )(config=cfg, name="layers")(y, positions, deterministic, decode)
        else:
            for lyr in range(cfg.num_layers):
                y = BlockLayer(config=cfg, name=f"layers_{lyr}")(y, positions, deterministic, decode)

        y = RMSNorm(
            epsilon=cfg.normalization_layer_epsilon,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="decoder_norm",
        )(y)
        y = nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,))(y, deterministic=deterministic)
        logits = nn.DenseGeneral(
            cfg.vocab_size,
            use_bias=False,
            dtype=jnp.float32,
            param_dtype=cfg.param_dtype,
            kernel_init=nn.with_logical_partitioning(kernel_init(), ("embed", "vocab")),
            name="logits_dense",
        )(y)
        logits = nn.with_logical_constraint(
            logits, ("activation_batch", "activation_length", "activation_vocab")
        )
        return logits
