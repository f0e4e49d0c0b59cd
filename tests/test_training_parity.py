"""N-step training parity: Linen (optax loop) and NNX (``nnx.Optimizer``) trained side by side from
the same converted weights, per-step losses, params, BatchNorm statistics and optimizer state."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jsonschema
import optax
import pytest

from linen2nnx.equivalence import check
from linen2nnx.spec import import_file

twins = import_file(Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py")


def _batches(n: int) -> list[dict]:
    keys = jax.random.split(jax.random.key(11), n)
    return [
        {
            "x": jax.random.normal(k, (twins.BATCH, twins.MLP_IN)),
            "y": jax.random.randint(k, (twins.BATCH,), 0, twins.N_CLASSES),
        }
        for k in keys
    ]


def test_adam_steps_match_step_by_step():
    r = check(twins.mlp_pair(), steps=3, batches=_batches(3))
    assert r.passed, r.failure_table()
    t = r.training
    assert t.steps == 3 and len(t.linen_loss) == len(t.nnx_loss) == 3
    assert t.linen_loss == pytest.approx(t.nnx_loss, rel=1e-5) and t.max_rel_loss < 1e-5
    assert len(set(t.linen_loss)) == 3  # different batches, moving params: a real run, not one step repeated
    paths = {(lf.check, lf.path) for lf in t.leaves}
    assert ("train/opt_state", "opt_state/0/mu/dense1/kernel") in paths
    assert ("train/opt_state", "opt_state/0/nu/head/bias") in paths and (
        "train/opt_state",
        "opt_state/0/count",
    ) in paths
    assert {p for c, p in paths if c == "train/params"} == {
        f"{m}/{w}" for m in ("dense1", "dense2", "head") for w in ("kernel", "bias")
    }
    full = json.loads(json.dumps(r.to_json(), allow_nan=False))
    schema = Path(__file__).resolve().parents[1] / "docs" / "schemas" / "parity.v2.json"
    if schema.exists():
        jsonschema.validate(full, json.loads(schema.read_text()))
    data = full["training"]
    assert set(data) == {
        "steps",
        "linen_loss",
        "nnx_loss",
        "max_rel_loss",
        "passed",
        "param_leaves_failed",
        "opt_state_leaves_failed",
    }
    assert data["passed"] is True and data["param_leaves_failed"] == data["opt_state_leaves_failed"] == 0


def test_gradient_accumulation_with_multisteps():
    tx = optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2)
    r = check(twins.mlp_pair(), steps=4, train_tx=tx, batches=_batches(4))
    assert r.passed, r.failure_table()
    opt_paths = {lf.path for lf in r.training.leaves if lf.check == "train/opt_state"}
    assert {
        "opt_state/mini_step",
        "opt_state/gradient_step",
        "opt_state/acc_grads/dense1/kernel",
        "opt_state/inner_opt_state/0/mu/head/bias",
    } <= opt_paths
    assert r.training.optimizer == "optax.MultiSteps"


@pytest.mark.parametrize("kind", ["multi_transform", "masked"])
def test_masked_out_optimizer_slots_are_no_leaves(kind):
    """A stateful transform under a label or mask holds ``optax.MaskedNode`` where it does not apply: no
    state on the Linen side (its state dict drops them), none compared on the NNX side either (they were
    'missing on the Linen side', a FAIL for a correct conversion)."""

    def labels(params):
        return jax.tree.map(lambda x: "mat" if x.ndim > 1 else "vec", params)

    def matrices(params):
        return jax.tree.map(lambda x: x.ndim > 1, params)

    tx = (
        optax.multi_transform({"mat": optax.adam(1e-2), "vec": optax.sgd(1e-1, momentum=0.9)}, labels)
        if kind == "multi_transform"
        else optax.chain(optax.masked(optax.adam(1e-2), matrices), optax.sgd(1e-1))
    )
    r = check(twins.mlp_pair(), steps=2, train_tx=tx, batches=_batches(2))
    assert r.passed, r.failure_table()
    opt_paths = {lf.path for lf in r.training.leaves if lf.check == "train/opt_state"}
    assert any(p.endswith("mu/dense1/kernel") for p in opt_paths)
    assert not any(p.endswith("mu/dense1/bias") for p in opt_paths)  # masked out: no state either side


def test_wrong_momentum_shows_up_in_the_trained_statistics_only():
    r = check(twins.cnn_momentum_pair(), name_map=twins.cnn_name_map(), steps=2, divergence=False)
    t = r.training
    assert {lf.path for lf in t.leaves if lf.check == "train/state"} == {
        f"batch_norm_{i}/{s}" for i in (0, 1) for s in ("mean", "var")
    }
    assert not t.passed and not r.passed
    assert t.linen_loss == pytest.approx(t.nnx_loss, rel=1e-5)  # train-mode losses use batch statistics
    assert t.param_leaves_failed == 0 and t.opt_state_leaves_failed == 0
    failed = {(lf.check, lf.path) for lf in r.failures}
    assert ("train/state", "batch_norm_0/mean") in failed
    assert all(c in ("batch_stats", "train/state", "config") for c, _ in failed)
    assert {p for c, p in failed if c == "config"} == {
        "batch_norm_0",
        "batch_norm_1",
    }  # the momentum setting itself
    assert "worst at step" in next(lf.note for lf in r.failures if lf.check == "train/state")
