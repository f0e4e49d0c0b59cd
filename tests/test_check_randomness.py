"""Random numbers a model draws itself: stochastic depth (``self.make_rng('dropout')`` under a train
flag) and sampling (a VAE's ``make_rng('noise')``, also in eval mode). Linen and NNX derive keys
differently, so before the check drew every key from one fixed key on both sides an exact twin failed
``forward/train`` (DropPath) or every check (sampling); a twin that draws where Linen does not (its
train flag lost) must still fail."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.equivalence.randomness import same_keys
from linen2nnx.spec import LinenSide, ModelPair


class LDropPath(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        y = nn.Dense(3, name="proj")(x)
        if train:
            keep = jax.random.bernoulli(self.make_rng("dropout"), 0.5, (x.shape[0], 1))
            y = y * keep / 0.5
        return x + y


class DropPath(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, *, flag_lost: bool = False):
        self.proj = nnx.Linear(3, 3, rngs=rngs)
        self.rngs = rngs.fork()
        self.flag_lost = flag_lost

    def __call__(self, x, train: bool = False):
        y = self.proj(x)
        if train or self.flag_lost:
            keep = jax.random.bernoulli(self.rngs.dropout(), 0.5, (x.shape[0], 1))
            y = y * keep / 0.5
        return x + y


class LSampler(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        mu = nn.Dense(3, name="mu")(x)
        return mu + jax.random.normal(self.make_rng("noise"), mu.shape)


class Sampler(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.mu = nnx.Linear(3, 3, rngs=rngs)
        self.rngs = rngs.fork()

    def __call__(self, x, train: bool = False):
        mu = self.mu(x)
        return mu + jax.random.normal(self.rngs.noise(), mu.shape)


def _pair(linen: nn.Module, twin) -> ModelPair:
    batch = {"x": jax.random.normal(jax.random.key(0), (8, 3))}
    side = LinenSide(
        model=linen,
        batch=batch,
        loss=lambda out, b: jnp.mean(out**2),
        rng_streams=("params", "dropout", "noise"),
    )
    return ModelPair(linen=side, nnx_factory=twin)


@pytest.mark.parametrize(
    "linen, twin, failing",
    [
        (LDropPath(), DropPath, set()),
        (LDropPath(), lambda rngs: DropPath(rngs, flag_lost=True), {"forward/eval", "loss/eval"}),
        (LSampler(), Sampler, set()),
    ],
    ids=["drop_path", "drop_path_flag_lost", "sampler"],
)
def test_draws_of_both_sides_use_the_same_key(linen, twin, failing):
    r = check(_pair(linen, twin), jit=False, long_batch=False)
    assert {lf.check.split("@")[0] for lf in r.failures} == failing, r.failure_table()


def test_the_keys_are_fixed_only_inside_the_context():
    model = Sampler(nnx.Rngs(0, noise=1))
    x = jnp.ones((2, 3))
    with same_keys():
        a, b = model(x), model(x)
    assert jnp.array_equal(a, b)  # one key for every draw
    assert not jnp.array_equal(model(x), model(x))  # the stream counts on again outside
    assert not jnp.array_equal(model(x), a)


ATTENTION = """
import flax.linen as nn


class Block(nn.Module):
    train: bool = False

    @nn.compact
    def __call__(self, x):
        y = nn.MultiHeadDotProductAttention(num_heads=2, dropout_rate=0.3, deterministic=not self.train)(x, x)
        return nn.Dense(3)(y)
"""


@pytest.mark.parametrize("train", [True, False])
def test_attention_given_deterministic_in_its_constructor_is_checked(train, tmp_path):
    """The train forward turns attention dropout off by its rate, as on the NNX side: a
    ``deterministic=True`` keyword clashed with the constructor's (Linen raised "passed to the
    constructor and at call time"). With the constructor's dropout on, the eval forwards draw the
    same fixed key on both sides and agree."""
    from linen2nnx.equivalence import perturbed
    from linen2nnx.migrate import migrate_source
    from linen2nnx.spec import import_file

    result = migrate_source(ATTENTION, "attn.py", module_name="attn")
    (tmp_path / "linen_src.py").write_text(ATTENTION)
    (tmp_path / "nnx_src.py").write_text(result.output)
    result.name_map.save(tmp_path / "map.json")
    linen_module, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    x = jax.random.normal(jax.random.key(0), (2, 5, 4))
    side = LinenSide(
        model=linen_module.Block(train=train),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_module.Block(train=train, in_features=4, rngs=rngs),
        name_map=tmp_path / "map.json",
    )
    r = check(pair, perturbed(side.init_variables()), jit=False, long_batch=False)
    assert r.passed, r.failure_table()
