"""A dropout the migration moved in the dataflow fails ``check`` (``forward/dropout``), named as the culprit.

With dropout off -- every other forward ``check`` runs -- a dropout is the identity wherever it sits, so
one moved before the activation it followed, or after the residual add it sat inside, changed no number
compared; trained, the models differ. The dropout-on forward draws the same masks on both sides.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.equivalence.dropout_on import has_active_dropout
from linen2nnx.spec import LinenSide, ModelPair


class LMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.gelu(nn.Dense(8)(x))
        h = nn.Dropout(0.5)(h, deterministic=not train)
        x = nn.Dense(4)(x) + h @ jnp.ones((8, 4)) * 0.1
        return nn.Dropout(0.25)(x, deterministic=not train)


class MLP(nnx.Module):
    def __init__(self, rngs, placement: str = "as Linen"):
        self.dense_0 = nnx.Linear(3, 8, rngs=rngs)
        self.dropout_0 = nnx.Dropout(0.5, rngs=rngs)
        self.dense_1 = nnx.Linear(3, 4, rngs=rngs)
        self.dropout_1 = nnx.Dropout(0.25, rngs=rngs)
        self.placement = placement

    def __call__(self, x, train: bool = False):
        h = self.dense_0(x)
        if self.placement == "before the activation":
            h = nnx.gelu(self.dropout_0(h, deterministic=not train))
        else:
            h = self.dropout_0(nnx.gelu(h), deterministic=not train)
        y = self.dense_1(x)
        if self.placement == "inside the residual":  # only the branch dropped out
            return y + self.dropout_1(h @ jnp.ones((8, 4)) * 0.1, deterministic=not train)
        return self.dropout_1(y + h @ jnp.ones((8, 4)) * 0.1, deterministic=not train)


def _pair(placement: str) -> ModelPair:
    batch = {"x": jax.random.normal(jax.random.key(0), (6, 3))}
    linen = LinenSide(model=LMLP(), batch=batch, name="mlp", loss=lambda out, b: jnp.mean(out**2))
    return ModelPair(linen=linen, nnx_factory=lambda rngs: MLP(rngs, placement))


def test_an_exact_twin_passes_with_dropout_on():
    result = check(_pair("as Linen"), long_batch=False)
    dropout = [lf for lf in result.leaves if lf.check in ("forward/dropout", "loss/dropout")]
    assert result.passed and len(dropout) == 2 and all(lf.max_abs == 0.0 for lf in dropout)


@pytest.mark.parametrize(
    ("placement", "culprit"), [("before the activation", "dropout_0"), ("inside the residual", "dropout_1")]
)
def test_a_moved_dropout_fails_and_is_named(placement, culprit):
    result = check(_pair(placement), long_batch=False)
    failed = {lf.check for lf in result.leaves if not lf.passed}
    assert not result.passed and failed <= {"forward/dropout", "loss/dropout"}, failed
    div = result.divergence
    assert div.culprit.nnx_path == culprit and "another place in the dataflow" in div.culprit.note
    assert div.to_json()["culprit"]["note"] == div.culprit.note


def test_models_without_an_active_dropout_skip_the_extra_forward():
    assert has_active_dropout(MLP(nnx.Rngs(0)))
    quiet = MLP(nnx.Rngs(0))
    quiet.dropout_0.rate, quiet.dropout_1.deterministic = 0.0, True
    assert not has_active_dropout(quiet)
