"""convert at scale, part 5: optax states of the chains large-model teams use, not just adam.

Each chain's Linen state is ``tx.init`` on the MLP twin's params with every float leaf moved off its
init value; the converted ``nnx.Optimizer`` state must hold exactly those values at the paths the
report names, and a checkpoint whose optax state does not fit the pair's ``tx`` names its leaves.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx
from flax.training.train_state import TrainState

from linen2nnx.checkpoint_convert import convert, load_optimizer_state
from linen2nnx.checkpoint_convert.dryrun import dry_run
from linen2nnx.checkpoint_convert.optimizer import abstract_optimizer
from linen2nnx.errors import ConversionError
from linen2nnx.spec import import_file

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
twins = import_file(TWINS_FILE)


def _matrices(params):
    return jax.tree.map(lambda x: x.ndim > 1, params)


CHAINS = {
    "clip+adamw": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3),
    "multisteps": lambda: optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4),
    "schedule": lambda: optax.adam(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)),
    "masked": lambda: optax.chain(optax.masked(optax.add_decayed_weights(1e-4), _matrices), optax.adam(1e-3)),
    "multi_transform": lambda: optax.multi_transform(
        {"a": optax.adam(1e-3), "b": optax.sgd(1e-2, momentum=0.9)},
        lambda p: jax.tree.map(lambda x: "a" if x.ndim > 1 else "b", p),
    ),
}


def _pair(tx):
    pair = twins.mlp_pair()
    return dataclasses.replace(pair, linen=dataclasses.replace(pair.linen, optimizer=tx))


def _save(tx, path: Path) -> TrainState:
    params = twins.mlp_linen().init_variables()["params"]
    state = TrainState.create(apply_fn=None, params=params, tx=tx)
    rng = np.random.default_rng(0)

    def move(x):
        if isinstance(x, jax.Array) and jax.numpy.issubdtype(x.dtype, jax.numpy.floating):
            return x + rng.standard_normal(x.shape).astype(x.dtype)
        return x

    state = state.replace(step=jax.numpy.asarray(7, np.int32), opt_state=jax.tree.map(move, state.opt_state))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, state)
        ckptr.wait_until_finished()
    return state


def _at(tree, path):
    for k in path:
        tree = tree[int(k)] if isinstance(tree, (list, tuple)) else tree[k if k in tree else str(k)]
    return tree


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_optax_chain_state_converts_leaf_for_leaf(name, tmp_path):
    tx = CHAINS[name]()
    _save(tx, tmp_path / "linen")
    pair = _pair(tx)
    assert dry_run(tmp_path / "linen", pair).problems == []
    report = convert(tmp_path / "linen", tmp_path / "nnx", pair, optimizer=True)
    _, abstract = abstract_optimizer(pair.make_nnx, tx)
    converted = load_optimizer_state(tmp_path / "nnx", abstract)
    flat = {tuple(p): v for p, v in nnx.to_flat_state(converted)}
    with ocp.StandardCheckpointer() as ckptr:
        linen = ckptr.restore(tmp_path / "linen")
    checked = 0
    for m in report.optimizer:
        got = np.asarray(flat[tuple(m.nnx_path)].get_value())
        want = linen["step"] if m.collection == "step" else _at(linen["opt_state"], m.linen_path)
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype), err_msg=m.linen)
        checked += 1
    arrays_in_nnx = [v for v in flat.values() if getattr(v.get_value(), "shape", None) is not None]
    assert checked == len(arrays_in_nnx)  # every array of the NNX optimizer came from the checkpoint


def test_optax_state_that_does_not_fit_names_its_leaves(tmp_path):
    _save(optax.adam(1e-3), tmp_path / "linen")
    pair = _pair(optax.sgd(1e-2, momentum=0.9))
    problems = [str(p) for p in dry_run(tmp_path / "linen", pair).problems]
    assert any("optimizer no NNX home: Linen opt_state/0/mu/dense1/kernel" in p for p in problems)
    with pytest.raises(ConversionError, match=r"opt_state/0/mu/dense1/kernel"):
        convert(tmp_path / "linen", tmp_path / "nnx", pair, optimizer=True)
    assert not (tmp_path / "nnx").exists()


def test_a_pair_without_an_optimizer_names_the_state_it_leaves_out(tmp_path):
    """A TrainState checkpoint converted with a pair that has no optimizer: the optax state and the step
    are not in the NNX checkpoint, and the report says so (it said nothing)."""
    _save(optax.adam(1e-3), tmp_path / "linen")
    report = convert(tmp_path / "linen", tmp_path / "nnx", _pair(None))
    assert report.optimizer is None
    assert "LinenSide.optimizer" in report.ignored["opt_state"]
    assert "step" in report.ignored
    assert "ignored 2" in report.summary()


def test_a_step_nnx_cannot_hold_is_an_error(tmp_path):
    """NNX counts steps in uint32: a negative step would wrap to 4294967295, so it is a problem named
    with the step, and nothing is written."""
    state = _save(optax.adam(1e-3), tmp_path / "src")
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", state.replace(step=jax.numpy.asarray(-1, np.int32)))
        ckptr.wait_until_finished()
    with pytest.raises(ConversionError, match="step out of range"):
        convert(tmp_path / "linen", tmp_path / "nnx", _pair(optax.adam(1e-3)), optimizer=True)
    assert not (tmp_path / "nnx").exists()


def test_a_label_function_that_reads_linen_keys_is_a_named_problem(tmp_path):
    """multi_transform labelling by the last path key ('kernel' on Linen's dicts, 'value' on NNX's
    state): NNX's adam keeps no state where Linen's does. A named problem (exit 2), where it was an
    AttributeError on optax's MaskedNode (a raw traceback, exit 1)."""

    def last_key(p):
        return str(getattr(p, "key", getattr(p, "name", p)))

    def labels(params):
        return jax.tree_util.tree_map_with_path(
            lambda p, _: "a" if last_key(p[-1]) == "kernel" else "b", params
        )

    tx = optax.multi_transform({"a": optax.adam(1e-3), "b": optax.sgd(1e-2, momentum=0.9)}, labels)
    _save(tx, tmp_path / "linen")
    problems = [str(p) for p in dry_run(tmp_path / "linen", _pair(tx)).problems]
    assert any(
        "where the NNX optimizer holds none (MaskedNode)" in p and "dense1/kernel" in p for p in problems
    )
    with pytest.raises(ConversionError, match="MaskedNode"):
        convert(tmp_path / "linen", tmp_path / "nnx", _pair(tx), optimizer=True)
    assert not (tmp_path / "nnx").exists()
