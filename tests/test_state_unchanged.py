"""State a forward may not change: Linen's eval apply changes nothing but sown values, and its train
apply only the collections in ``pair.linen.mutable``. An NNX twin that updates a running statistic
in eval mode (or a frozen one in train mode) returns the right output on that call and corrupts every
later one: ``state/eval`` / ``state/train`` fail."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.spec import LinenSide, ModelPair


class LCenter(nn.Module):
    update: bool = True  # False: a frozen statistic (the pair's mutable is empty)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(3, name="proj")(x)
        mean = self.variable("batch_stats", "mean", jnp.zeros, (x.shape[-1],))
        if train and self.update:
            mean.value = 0.9 * mean.value + 0.1 * jnp.mean(x, axis=0)
        return x - mean.value


class Center(nnx.Module):
    """``updates``: "train" (as Linen with a mutable batch_stats), "train, eval" (also in eval mode,
    returning the old mean there), "silently" (in train mode, returning the old mean: as a frozen
    Linen statistic, but changing it), "" (never: as a frozen Linen statistic)."""

    def __init__(self, rngs, *, updates: str = "train"):
        self.proj = nnx.Linear(3, 3, rngs=rngs)
        self.mean = nnx.BatchStat(jnp.zeros((3,)))
        self.updates = updates

    def __call__(self, x, train: bool = False):
        x = self.proj(x)
        old = self.mean[...]
        if (train and self.updates) or (not train and "eval" in self.updates):
            self.mean[...] = 0.9 * old + 0.1 * jnp.mean(x, axis=0)
        return x - (self.mean[...] if train and "train" in self.updates else old)


def _pair(mutable: tuple[str, ...], **twin) -> ModelPair:
    batch = {"x": jax.random.normal(jax.random.key(0), (4, 3)) + 1.0}
    model = LCenter(update=bool(mutable))
    side = LinenSide(model=model, batch=batch, mutable=mutable, loss=lambda out, b: jnp.mean(out**2))
    return ModelPair(linen=side, nnx_factory=lambda rngs: Center(rngs, **twin))


@pytest.mark.parametrize(
    "mutable, updates, failing",
    [
        (("batch_stats",), "train", None),
        (("batch_stats",), "train, eval", "state/eval"),
        ((), "", None),
        ((), "silently", "state/train"),
    ],
)
def test_a_variable_the_linen_forward_may_not_change_stays(mutable, updates, failing):
    r = check(_pair(mutable, updates=updates), jit=False, long_batch=False)
    if failing is None:
        assert r.passed, r.failure_table()
        assert not [lf for lf in r.leaves if lf.check.startswith("state/")]
    else:
        assert {lf.check.split("@")[0] for lf in r.failures} == {failing}, r.failure_table()
        assert r.failures[0].path == "mean" and "Linen's may not change it" in r.failures[0].note
