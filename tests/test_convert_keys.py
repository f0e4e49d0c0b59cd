"""PRNG keys in a checkpoint: Orbax and msgpack store a key as its raw ``uint32`` data, the NNX target
may hold a typed key there (optax ``add_noise`` state, a key kept in a variable collection), or the
reverse. convert wraps (or unwraps) exactly that case, and the resumed NNX step draws the same noise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx, serialization
from flax.nnx import variablelib
from flax.training.train_state import TrainState

from linen2nnx.checkpoint_convert import convert, load_nnx_checkpoint, load_optimizer_state, restore_optimizer
from linen2nnx.checkpoint_convert.dryrun import dry_run
from linen2nnx.checkpoint_convert.optimizer import abstract_optimizer
from linen2nnx.errors import ConversionError
from linen2nnx.spec import LinenSide, ModelPair, import_file

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
twins = import_file(TWINS_FILE)


def _noisy_tx():
    return optax.chain(optax.add_noise(0.01, 0.55, 3), optax.sgd(0.1))


def _grads(tree):
    return jax.tree.map(lambda x: jnp.full_like(x, 0.5), tree)


def _raw(tree):
    """The tree as msgpack can hold it: every typed key as its key data."""

    def raw(x):
        return jax.random.key_data(x) if jnp.issubdtype(getattr(x, "dtype", int), jax.dtypes.prng_key) else x

    return jax.tree.map(raw, tree)


def _noisy_state(tmp_path: Path, fmt: str) -> tuple[TrainState, Path]:
    """A Linen TrainState one noisy step in (its key and count moved off tx.init's), saved as ``fmt``."""
    tx = _noisy_tx()
    params = twins.mlp_linen().init_variables()["params"]
    state = TrainState.create(apply_fn=None, params=params, tx=tx)
    state = state.apply_gradients(grads=_grads(state.params))
    if fmt == "orbax":
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(tmp_path / "linen", state)
            ckptr.wait_until_finished()
        return state, tmp_path / "linen"
    path = tmp_path / "linen.msgpack"
    path.write_bytes(serialization.to_bytes(_raw(state)))
    return state, path


def _pair(tx):
    pair = twins.mlp_pair()
    return dataclasses.replace(pair, linen=dataclasses.replace(pair.linen, optimizer=tx))


@pytest.mark.parametrize("fmt", ["orbax", "msgpack"])
def test_noise_key_data_fills_the_typed_key_and_the_resumed_step_matches_linen(fmt, tmp_path):
    """add_noise keeps a typed key; the checkpoint holds its (2,) uint32 data. It was refused as
    'expected () key<fry>, got (2,) uint32'; now wrapped, and the next NNX step equals Linen's."""
    state, src = _noisy_state(tmp_path, fmt)
    tx = _noisy_tx()
    pair = _pair(tx)
    assert dry_run(src, pair).problems == []
    report = convert(src, tmp_path / "nnx", pair, optimizer=True)
    hows = {m.linen: m.how for m in report.optimizer}
    assert hows["opt_state/0/rng_key"] == "key data wrapped"

    model = load_nnx_checkpoint(tmp_path / "nnx", pair)
    _, abstract = abstract_optimizer(pair.make_nnx, tx)
    opt = restore_optimizer(model, tx, load_optimizer_state(tmp_path / "nnx", abstract))
    key = opt.opt_state[0].rng_key.get_value()
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(state.opt_state[0].rng_key))

    linen = state.apply_gradients(grads=_grads(state.params))
    opt.update(model, _grads(nnx.state(model, nnx.Param)))
    flat = {tuple(p): v.get_value() for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    checked = 0
    for m in report.mapped:
        want = linen.params
        for k in m.linen_path:
            want = want[k]
        np.testing.assert_allclose(np.asarray(flat[tuple(m.nnx_path)]), np.asarray(want), rtol=0, atol=1e-6)
        checked += 1
    assert checked == len(flat)
    moved = np.abs(
        np.asarray(linen.params["dense1"]["kernel"]) - np.asarray(state.params["dense1"]["kernel"])
    )
    assert moved.max() > 0


def test_key_data_of_another_shape_stays_a_problem_naming_the_key(tmp_path):
    """Only the slot's own key implementation's data is wrapped: (4,) uint32 (an rbg key's data) into a
    threefry key slot is a named problem, and nothing is written."""
    state, _ = _noisy_state(tmp_path, "orbax")
    noise = state.opt_state[0]._replace(rng_key=np.zeros((4,), np.uint32))
    bad = state.replace(opt_state=(noise, state.opt_state[1]))
    path = tmp_path / "bad.msgpack"
    path.write_bytes(serialization.to_bytes(_raw(bad)))
    with pytest.raises(
        ConversionError, match=r"opt_state/0/rng_key: expected \(\) key<fry>, got \(4,\) uint32"
    ):
        convert(path, tmp_path / "nnx", _pair(_noisy_tx()), optimizer=True)
    assert not (tmp_path / "nnx").exists()


RngStateVar = variablelib.variable_type_from_name("rng_state", allow_register=True)


def _collection_pair(linen_typed: bool, nnx_typed: bool) -> ModelPair:
    def key(seed):
        return jax.random.key(seed) if linen_typed else jax.random.PRNGKey(seed)

    class Linen(nn.Module):
        @nn.compact
        def __call__(self, x, train=False):
            self.variable("rng_state", "key", lambda: key(0))
            return nn.Dense(3)(x)

    class NNX(nnx.Module):
        def __init__(self, rngs):
            self.Dense_0 = nnx.Linear(4, 3, rngs=rngs)
            self.key = RngStateVar(jax.random.key(0) if nnx_typed else jax.random.PRNGKey(0))

        def __call__(self, x, train=False):
            return self.Dense_0(x)

    batch = {"x": np.ones((2, 4), np.float32)}
    side = LinenSide(model=Linen(), batch=batch, loss=lambda o, b: o.sum(), inputs=lambda b: ((b["x"],), {}))
    return ModelPair(linen=side, nnx_factory=NNX)


@pytest.mark.parametrize(
    ("linen_typed", "nnx_typed", "source"),
    [
        (False, True, "orbax"),
        (False, True, "msgpack"),
        (True, True, "orbax"),
        (True, False, "memory"),
        (True, True, "memory"),
    ],
)
def test_a_key_in_a_variable_collection_converts_between_raw_and_typed(
    linen_typed, nnx_typed, source, tmp_path
):
    pair = _collection_pair(linen_typed, nnx_typed)
    variables = dict(pair.linen.model.init(jax.random.PRNGKey(1), pair.linen.batch["x"]))
    stored = jax.random.key(7) if linen_typed else jax.random.PRNGKey(7)
    variables["rng_state"] = {"key": stored}
    if source == "orbax":
        src = tmp_path / "linen"
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(src, variables)
            ckptr.wait_until_finished()
    elif source == "msgpack":
        src = tmp_path / "linen.msgpack"
        src.write_bytes(serialization.to_bytes(_raw(variables)))
    else:
        src = variables
    report = convert(src, tmp_path / "nnx", pair)
    how = {m.linen: m.how for m in report.mapped}["rng_state/key"]
    # Orbax stores a typed key as its data too; a typed key in memory into a typed slot is as it is
    # (it was a TypeError from numpy, which cannot read a key dtype)
    if linen_typed and nnx_typed and source == "memory":
        assert how == "identical"
    else:
        assert how == ("key data wrapped" if nnx_typed else "key data unwrapped")
    got = load_nnx_checkpoint(tmp_path / "nnx", pair).key.get_value()
    assert jnp.issubdtype(got.dtype, jax.dtypes.prng_key) == nnx_typed
    want = jax.random.key_data(stored) if linen_typed else stored
    np.testing.assert_array_equal(jax.random.key_data(got) if nnx_typed else got, want)
