"""A chain of PRNG key splits whose keys a compact method hands to the layers it builds
(``init_rng, init_key = random.split(init_rng)`` then ``Layer(..., rng=init_key)``, StyleGAN2's
blocks): ``__init__`` replays the chain, so every layer gets the very key Linen hands it, and the NNX
model as built holds bit for bit the parameters Linen's ``init`` makes; where that cannot be shown,
the class keeps its L2N-MOD-004 finding, which says why.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_parity import assert_parity, build
from flax import nnx

from linen2nnx.checkpoint_convert import convert_tree
from linen2nnx.spec import LinenSide, ModelPair

REPLAYED = {"Tower": (2, 3), "Grid": (2, 3), "Pair": (2, 3)}  # class -> input shape


def _pair(linen_model, nnx_factory, x, map_path) -> ModelPair:
    side = LinenSide(
        model=linen_model,
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    return ModelPair(linen=side, nnx_factory=nnx_factory, name_map=map_path)


def _params(model) -> dict:
    return {"/".join(map(str, k)): v.get_value() for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.parametrize("cls", sorted(REPLAYED))
def test_replayed_chain_builds_linen_s_init_bit_for_bit(cls, tmp_path):
    """Linen's init and the NNX constructor (its own Rngs seeded apart: the layers draw from their keys
    alone) give the same parameters, mapped through the name map, bit for bit."""
    linen_mod, nnx_mod, result, map_path = build("key_split_chain_replayed", tmp_path)
    assert not [f for f in result.findings if f.severity in ("manual", "error")], result.findings
    x = jax.random.normal(jax.random.PRNGKey(2), REPLAYED[cls])
    linen_model = getattr(linen_mod, cls)()
    nnx_factory = lambda rngs: getattr(nnx_mod, cls)(rngs=rngs)  # noqa: E731
    init = linen_model.init(jax.random.PRNGKey(0), x)
    converted = convert_tree(init, _pair(linen_model, nnx_factory, x, map_path), map_path, optimizer=False)
    built, expected = _params(nnx_factory(nnx.Rngs(123))), _params(converted.model())
    assert len(jax.tree.leaves(init["params"])) == len(built) == len(expected) > 1
    assert built.keys() == expected.keys()
    for path, value in built.items():
        assert np.array_equal(np.asarray(value), np.asarray(expected[path])), path
    assert len({np.asarray(v).tobytes() for v in built.values()}) == len(built)  # every layer its own key


@pytest.mark.parametrize("cls", sorted(REPLAYED))
def test_replayed_chain_has_parity(cls, tmp_path):
    """Forward, loss and gradients agree with perturbed weights converted through the name map. (Its
    own test: flax refuses a second ``nnx.eval_shape`` of a class holding a key array it computed.)"""
    linen_mod, nnx_mod, _, map_path = build("key_split_chain_replayed", tmp_path)
    x = jax.random.normal(jax.random.PRNGKey(2), REPLAYED[cls])
    assert_parity(getattr(linen_mod, cls)(), lambda rngs: getattr(nnx_mod, cls)(rngs=rngs), x, map_path)


def test_the_call_keeps_none_of_a_replayed_chain(tmp_path):
    _, _, result, _ = build("key_split_chain_replayed", tmp_path)
    calls = [part.split("\nclass ")[0] for part in result.output.split("def __call__")[1:]]
    assert calls and not any("random.split" in c or "fold_in" in c for c in calls)
