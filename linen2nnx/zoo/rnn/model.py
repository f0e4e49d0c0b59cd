"""A Linen sequence classifier: an ``nn.RNN`` over an LSTM cell, then a hand-scanned GRU-style cell."""

import jax
import jax.numpy as jnp
from flax import linen as nn


class MinimalGRUCell(nn.Module):
    """A minimal gated recurrent cell (update gate + candidate state, no reset gate).

    Called as ``cell(h, x) -> (h, h)``: the carry and the per-step output are the new hidden state.
    """

    features: int

    @nn.compact
    def __call__(self, h, x):
        update = nn.sigmoid(
            nn.Dense(self.features, name="update_x")(x)
            + nn.Dense(self.features, use_bias=False, name="update_h")(h)
        )
        candidate = jnp.tanh(
            nn.Dense(self.features, name="candidate_x")(x)
            + nn.Dense(self.features, use_bias=False, name="candidate_h")(h)
        )
        h = (1.0 - update) * h + update * candidate
        return h, h

    @staticmethod
    def initialize_carry(batch_size: int, features: int, dtype=jnp.float32):
        return jnp.zeros((batch_size, features), dtype)


class SequenceClassifier(nn.Module):
    """Inputs (batch, time, features) -> class logits (batch, num_classes)."""

    hidden: int = 32
    num_classes: int = 4
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False) -> jax.Array:
        x = nn.Dense(self.hidden, name="input_proj")(x)
        x = nn.RNN(nn.LSTMCell(self.hidden), name="lstm")(x)  # (batch, time, hidden)
        x = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(x)

        # The same cell applied at every time step: params broadcast, time on axis 1.
        ScanGRU = nn.scan(
            MinimalGRUCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        carry = MinimalGRUCell.initialize_carry(x.shape[0], self.hidden, x.dtype)
        last, _ = ScanGRU(self.hidden, name="gru")(carry, x)

        last = nn.LayerNorm(name="norm")(last)
        last = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(last)
        return nn.Dense(self.num_classes, name="head")(last)
