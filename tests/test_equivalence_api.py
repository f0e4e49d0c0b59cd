"""The ``check`` API: metrics, the tolerance table, the ``linen2nnx-parity/2`` JSON contract, eager vs
jitted runs, ``assert_parity``, typed errors and the mesh hook. Tiny hand-written twins only."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
import types
from pathlib import Path

import jax.numpy as jnp
import jsonschema
import numpy as np
import pytest

import linen2nnx.equivalence as equivalence
from linen2nnx.equivalence import Tolerances, assert_parity, check, compare_leaf
from linen2nnx.errors import L2NError, ModelBuildError, SpecError
from linen2nnx.spec import import_file

ROOT = Path(__file__).resolve().parents[1]
check_module = importlib.import_module(
    "linen2nnx.equivalence.check"
)  # the module; the package exports the function
twins = import_file(Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py")

LEAF_KEYS = {
    "check",
    "path",
    "shape",
    "dtype",
    "max_abs",
    "max_rel",
    "mean_abs",
    "cosine",
    "tol",
    "passed",
    "note",
    "extra",
}
TOP_KEYS = {
    "schema",
    "passed",
    "model",
    "linen_source",
    "nnx_source",
    "tolerances",
    "checks",
    "leaves",
    "divergence",
    "training",
    "timings_s",
}


def _validate(data: dict) -> None:
    """Against the published JSON Schema, when the renderers' schema file is there."""
    schema_file = ROOT / "docs" / "schemas" / "parity.v2.json"
    if schema_file.exists():
        jsonschema.validate(data, json.loads(schema_file.read_text()))


@pytest.fixture(scope="module")
def mlp_result():
    """The MLP twin from init (jitted and eager), the reference for the contract tests."""
    return check(twins.mlp_pair(), jit="both")


@pytest.fixture(scope="module")
def eps_result():
    """A CNN twin with a wrong BatchNorm epsilon: fails, localised."""
    return check(twins.cnn_eps_pair(), name_map=twins.cnn_name_map())


# ---- metrics and tolerances ----------------------------------------------------------------------
def test_logit_metrics_measure_the_prediction_not_only_the_numbers():
    ref = np.array([[2.0, 1.0, 0.0, -1.0, -2.0, -3.0], [0.0, 3.0, 1.0, 2.0, -1.0, -2.0]], np.float32)
    same = compare_leaf("forward/eval", "out", ref, ref.copy(), kind="logits")
    assert same.passed and same.extra == {"kl_max": 0.0, "kl_mean": 0.0, "top1": 1.0, "top5": 1.0}
    flipped = ref.copy()
    flipped[0, [0, 1]] = flipped[0, [1, 0]]  # row 0's top-1 changes, its top-5 set does not
    lf = compare_leaf("forward/eval", "out", ref, flipped, kind="logits")
    assert not lf.passed and lf.extra["top1"] == 0.5 and lf.extra["top5"] == 1.0
    p, q = np.exp(ref[0]) / np.exp(ref[0]).sum(), np.exp(flipped[0]) / np.exp(flipped[0]).sum()
    assert math.isclose(lf.extra["kl_max"], float(np.sum(p * np.log(p / q))), rel_tol=1e-6)
    assert math.isclose(lf.extra["kl_mean"], lf.extra["kl_max"] / 2, rel_tol=1e-6)
    assert lf.mean_abs == pytest.approx(2.0 / ref.size)


def test_gradient_norm_ratio_exposes_a_scaled_loss():
    g = np.array([0.5, -1.0, 2.0], np.float32)
    lf = compare_leaf("grad", "w", g, 2 * g, kind="grad")
    assert lf.cosine == pytest.approx(1.0) and lf.extra["norm_ratio"] == pytest.approx(2.0) and not lf.passed


def test_dtype_mismatch_fails_even_when_values_agree():
    lf = compare_leaf("forward/eval", "out", jnp.ones(3, jnp.float32), jnp.ones(3, jnp.bfloat16))
    assert not lf.passed and lf.max_abs == 0 and "dtype differs: Linen float32, NNX bfloat16" in lf.note
    assert lf.dtype == "bfloat16"  # the tolerance follows the less precise side


def test_tolerance_table_defaults_overrides_and_depth():
    t = Tolerances()
    assert t.tol("grad", "a/kernel", "float32", ref_max=2.0) == pytest.approx(3e-5)  # 1e-5 * (1 + 2)
    assert t.tol("grad", "a/kernel", "float32", 2.0, depth=8) == pytest.approx(3e-5 * 3)  # sqrt(1 + 8)
    assert t.tol("x", "p", "bfloat16", 0.0) == pytest.approx(2e-2)
    assert t.tol("x", "p", "float16", 0.0) == pytest.approx(2e-3)
    assert t.tol("x", "p", "int32", 5.0) == 0.0  # integers must match exactly
    o = Tolerances.coerce({"overrides": {"grad:*/embedding": 1e-3, "*/bias": 1e-4}, "depth_exponent": 1.0})
    assert o.tol("grad", "embed/embedding", "float32", 0.0) == pytest.approx(1e-3)
    assert o.tol("forward/eval", "embed/embedding", "float32", 0.0) == pytest.approx(
        1e-5
    )  # check-scoped pattern
    assert o.tol("loss", "x/bias", "float32", 0.0, depth=3) == pytest.approx(
        4e-4
    )  # path-only pattern, linear depth
    assert Tolerances.coerce(1e-3).tol("x", "p", "float32", 0.0) == pytest.approx(1e-3)  # the old atol_factor
    with pytest.raises(TypeError):
        Tolerances.coerce("tight")
    bf16 = compare_leaf("x", "p", jnp.full(4, 1.0, jnp.bfloat16), jnp.full(4, 1.0078125, jnp.bfloat16))
    assert bf16.passed and bf16.tol == pytest.approx(2e-2 * 2)  # one bf16 ulp at 1.0 passes


# ---- the result ----------------------------------------------------------------------------------
def test_json_contract_of_a_passing_check(mlp_result):
    data = json.loads(json.dumps(mlp_result.to_json(), allow_nan=False))
    assert set(data) == TOP_KEYS and data["schema"] == "linen2nnx-parity/2" and data["passed"] is True
    _validate(data)
    assert data["divergence"] is None and data["training"] is None
    assert data["tolerances"]["base"]["float32"] == 1e-5 and "formula" in data["tolerances"]
    for leaf in data["leaves"]:
        assert set(leaf) == LEAF_KEYS
    for name, summary in data["checks"].items():
        assert set(summary) == {"passed", "leaves", "failed", "max_abs"}
        assert summary["leaves"] == sum(lf["check"] == name for lf in data["leaves"])
    logits = [lf for lf in data["leaves"] if lf["check"] == "forward/eval"]
    assert logits and set(logits[0]["extra"]) == {"kl_max", "kl_mean", "top1", "top5"}
    assert all(set(lf["extra"]) == {"norm_ratio"} for lf in data["leaves"] if lf["check"] == "grad")
    assert {lf["path"] for lf in data["leaves"] if lf["check"] == "precision"} == {"dense1", "dense2", "head"}


def test_jit_both_also_compares_the_eager_runs(mlp_result):
    checks = set(mlp_result.by_check())
    for name in ("forward/eval", "forward/train", "loss/eval", "loss/train", "grad"):
        assert {name, name + "@eager"} <= checks
    assert {"linen", "nnx", "linen@eager", "nnx@eager"} <= set(mlp_result.timings)
    with pytest.raises(L2NError, match="jit"):
        check(twins.mlp_pair(), jit="sometimes")


def test_failed_check_names_the_culprit_and_assert_parity_prints_it(eps_result, monkeypatch):
    r = eps_result
    assert not r.passed
    div = r.divergence
    assert div.culprit.nnx_path == "batch_norm_0" and div.culprit.linen_path == "BatchNorm_0"
    assert div.inputs_agree is True and div.culprit.check == "forward/eval"
    assert [m.nnx_path for m in div.modules][:2] == ["conv_0", "batch_norm_0"] and div.modules[0].passed
    data = json.loads(json.dumps(r.to_json(), allow_nan=False))
    _validate(data)
    assert data["divergence"]["culprit"]["nnx_path"] == "batch_norm_0"
    assert data["divergence"]["modules"][1] == {
        **data["divergence"]["modules"][1],
        "order": 1,
        "passed": False,
    }
    table = r.failure_table()
    assert "forward/eval" in table and "batch_norm_1/mean" in table and "NNX batch_norm_0" in table
    seen = {}

    def fake_check(pair, linen_ckpt=None, nnx_ckpt=None, **kwargs):  # the same run, not a second one
        seen.update(kwargs, pair=pair)
        return eps_result

    monkeypatch.setattr(check_module, "check", fake_check)
    with pytest.raises(AssertionError, match=r"first divergence .*batch_norm_0") as e:
        assert_parity("spec:pair", name_map="map.json", steps=2)
    assert "parity FAILED for cnn" in str(e.value) and seen == {
        "pair": "spec:pair",
        "name_map": "map.json",
        "steps": 2,
    }
    monkeypatch.setattr(check_module, "check", lambda *a, **k: dataclasses.replace(eps_result, passed=True))
    assert assert_parity("spec:pair").model == "cnn"


# ---- typed errors --------------------------------------------------------------------------------
def test_not_a_pair_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="expected a ModelPair"):
        check(object())
    with pytest.raises(SpecError, match=r"missing\.py"):
        check(str(tmp_path / "missing.py"))


def test_missing_checkpoint_is_a_named_error(tmp_path):
    with pytest.raises(L2NError, match="no_such_ckpt: checkpoint not found"):
        check(twins.mlp_pair(), tmp_path / "no_such_ckpt")


def test_models_that_cannot_build_are_model_build_errors():
    def broken(rngs):
        raise RuntimeError("boom in __init__")

    with pytest.raises(ModelBuildError, match="boom in __init__"):
        check(dataclasses.replace(twins.mlp_pair(), nnx_factory=broken))
    pair = twins.mlp_pair()
    bad_batch = {**pair.linen.batch, "x": np.ones((), np.float32)}  # Dense needs a feature axis
    with pytest.raises(ModelBuildError, match="Linen model mlp"):
        check(dataclasses.replace(pair, linen=dataclasses.replace(pair.linen, batch=bad_batch)))


# ---- mesh hook -----------------------------------------------------------------------------------
def test_mesh_uses_the_mesh_module(monkeypatch):
    import contextlib

    calls = []

    @contextlib.contextmanager
    def mesh_scope(pair, shape):
        calls.append(("scope", dict(shape)))
        yield "MESH"

    def partition_spec_leaves(pair, model, table):
        calls.append(("specs", len(table)))
        return [
            equivalence.LeafResult("partition_spec", "dense1/kernel", (4, 8), 0.0, 0.0, 0.0, 1.0, 0.0, True)
        ]

    fake = types.SimpleNamespace(mesh_scope=mesh_scope, partition_spec_leaves=partition_spec_leaves)
    monkeypatch.setattr(equivalence, "mesh", fake, raising=False)
    monkeypatch.setitem(sys.modules, "linen2nnx.equivalence.mesh", fake)
    r = check(twins.mlp_pair(), mesh={"data": 1})
    assert calls == [("scope", {"data": 1}), ("specs", 6)] and r.passed and "partition_spec" in r.by_check()


def test_mesh_without_the_mesh_module_is_a_clear_error(monkeypatch):
    monkeypatch.delattr(equivalence, "mesh", raising=False)
    monkeypatch.setitem(sys.modules, "linen2nnx.equivalence.mesh", None)
    with pytest.raises(L2NError, match=r"check\(mesh=...\).*linen2nnx.equivalence.mesh"):
        check(twins.mlp_pair(), mesh={"data": 2})


def test_mesh_with_the_real_mesh_module_in_a_subprocess():
    """8 host devices must exist before jax starts, hence a child process."""
    import os
    import subprocess

    code = f"""
import dataclasses, json
from pathlib import Path
from flax import nnx
from linen2nnx.spec import import_file
from linen2nnx.equivalence import check
twins = import_file(Path({str(Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py")!r}))

class ReluFirst(twins.MLP):  # relu where Linen has gelu: dense1's consumer sees other inputs
    def __call__(self, x, *, train=False):
        x = self.dropout(nnx.relu(self.dense1(x)), deterministic=not train)
        x = self.dropout(nnx.relu(self.dense2(x)), deterministic=not train)
        return self.head(x)

pair = dataclasses.replace(twins.mlp_pair(), nnx_factory=lambda rngs: ReluFirst(
    twins.MLP_HIDDEN, twins.N_CLASSES, 0.5, in_features=twins.MLP_IN, rngs=rngs))
r = check(pair, mesh={{"data": 2, "fsdp": 2, "tensor": 2}})
print(json.dumps(r.to_json()))
"""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        data["passed"] is False and data["divergence"]["culprit"]["nnx_path"] == ""
    )  # the root's own activation
    modules = {m["nnx_path"]: m for m in data["divergence"]["modules"]}
    assert modules["dense1"]["passed"] and not modules["dense2"]["passed"]  # dense2 gets relu(.), not gelu(.)
    assert modules["dense1"]["order"] < modules["dense2"]["order"] < modules[""]["order"]
    assert data["checks"]["partition_spec"]["leaves"] == 6 and data["checks"]["partition_spec"]["passed"]


def test_perturbed_moves_floats_and_keeps_counters_and_flags():
    """Noise on an int32 counter turned it into float32: check then refused the checkpoint its own
    helper made ("dtype mismatch ... expected () int32, got () float32")."""
    import jax.numpy as jnp
    import numpy as np

    from linen2nnx.equivalence.perturb import perturbed

    tree = {
        "params": {"w": jnp.zeros((3,)), "h": jnp.zeros((2,), jnp.bfloat16)},
        "counter": {"n": jnp.asarray(4, jnp.int32), "on": jnp.asarray(True)},
        "batch_stats": {"var": jnp.ones((2,))},
    }
    out = perturbed(tree)
    assert out["counter"]["n"].dtype == jnp.int32 and int(out["counter"]["n"]) == 4
    assert out["counter"]["on"].dtype == jnp.bool_ and bool(out["counter"]["on"])
    assert out["params"]["h"].dtype == jnp.bfloat16 and np.any(
        np.asarray(out["params"]["h"], np.float32) != 0
    )
    assert np.any(np.asarray(out["params"]["w"]) != 0) and np.all(np.asarray(out["batch_stats"]["var"]) > 0)


def test_an_output_namedtuple_of_the_migrated_copy_is_the_same_structure():
    """The migrated package is imported beside the Linen one, so a NamedTuple the model returns is
    another class object of the same name: the outputs still compare (every dopamine network failed
    with "output structure differs" whose two sides printed the same)."""
    from collections import namedtuple

    import flax.linen as nn
    import jax.numpy as jnp
    from flax import nnx

    from linen2nnx.equivalence import check
    from linen2nnx.spec import LinenSide, ModelPair

    LinenOut, NNXOut = namedtuple("Out", ["q"]), namedtuple("Out", ["q"])

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return LinenOut(nn.Dense(3)(x))

    class NetNNX(nnx.Module):
        def __init__(self, rngs):
            self.dense_0 = nnx.Linear(4, 3, rngs=rngs)

        def __call__(self, x):
            return NNXOut(self.dense_0(x))

    side = LinenSide(
        model=Net(),
        batch={"x": jnp.ones((2, 4))},
        loss=lambda out, b: jnp.mean(out.q**2),
        train_kwargs={},
        eval_kwargs={},
    )
    result = check(ModelPair(linen=side, nnx_factory=NetNNX), long_batch=False)
    assert result.passed, result.failure_table()
    assert {lf.path for lf in result.leaves if lf.check == "forward/eval"} == {"out.q"}
