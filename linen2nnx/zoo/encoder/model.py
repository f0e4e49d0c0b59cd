"""A BERT-like Linen encoder for sequence classification.

Token + learned position embeddings, post-LayerNorm transformer blocks built from
``nn.MultiHeadDotProductAttention`` and a GELU MLP, a padding mask, and a pooled ``[CLS]``
classification head written as an ``nn.Sequential``.
"""

from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

PAD_ID = 0


class EncoderBlock(nn.Module):
    """Self-attention and MLP sub-layers, each followed by dropout, a residual and LayerNorm."""

    num_heads: int
    mlp_dim: int
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, mask=None, *, train: bool = False):
        h = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads,
            dtype=self.dtype,
            dropout_rate=self.attention_dropout_rate,
            kernel_init=nn.initializers.normal(stddev=0.02),
            deterministic=not train,
            name="attention",
        )(x, x, mask=mask)
        h = nn.Dropout(rate=self.dropout_rate)(h, deterministic=not train)
        x = nn.LayerNorm(epsilon=1e-12, dtype=self.dtype, name="attention_norm")(x + h)

        # full-precision matmuls: on TPU / GPU the default is a bfloat16 / TF32 pass
        h = nn.Dense(
            self.mlp_dim, dtype=self.dtype, precision=jax.lax.Precision.HIGHEST, name="intermediate"
        )(x)
        h = nn.gelu(h)
        h = nn.Dense(x.shape[-1], dtype=self.dtype, name="output")(h)
        h = nn.Dropout(rate=self.dropout_rate)(h, deterministic=not train)
        return nn.LayerNorm(epsilon=1e-12, dtype=self.dtype, name="output_norm")(x + h)


class Encoder(nn.Module):
    """Token ids (batch, length), ``PAD_ID``-padded, with ``[CLS]`` first -> class logits (batch, classes)."""

    vocab_size: int
    num_classes: int
    max_len: int = 512
    emb_dim: int = 128
    num_heads: int = 4
    num_layers: int = 2
    mlp_dim: int = 512
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False) -> jax.Array:
        padding = tokens != PAD_ID
        mask = nn.make_attention_mask(padding, padding)
        positions = jnp.arange(tokens.shape[-1])[None, :]

        embed_init = nn.initializers.normal(stddev=0.02)
        x = nn.Embed(self.vocab_size, self.emb_dim, embedding_init=embed_init, name="token_embed")(tokens)
        x = x + nn.Embed(self.max_len, self.emb_dim, embedding_init=embed_init, name="position_embed")(
            positions
        )
        x = nn.LayerNorm(epsilon=1e-12, dtype=self.dtype, name="embed_norm")(x)
        x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=not train)

        for i in range(self.num_layers):
            x = EncoderBlock(
                num_heads=self.num_heads,
                mlp_dim=self.mlp_dim,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                dtype=self.dtype,
                name=f"layer_{i}",
            )(x, mask, train=train)

        cls = x[:, 0]  # the [CLS] token
        classifier = nn.Sequential(
            [
                nn.Dense(self.emb_dim, dtype=self.dtype, name="pooler"),
                nn.tanh,
                nn.Dropout(rate=self.dropout_rate, deterministic=not train),
                nn.Dense(self.num_classes, dtype=self.dtype, name="logits"),
            ],
            name="classifier",
        )
        return classifier(cls)
