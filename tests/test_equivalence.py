"""equivalence.check on the zoo twins: parity holds for faithful twins, fails (naming the leaf) for
broken ones. Reports are rendered from the same results."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from linen2nnx.checkpoint_convert import convert
from linen2nnx.equivalence import ParityResult, check, compare_leaf
from linen2nnx.errors import ConversionError
from linen2nnx.reports.console import render_conversion, render_parity
from linen2nnx.reports.json_report import parity_json, write_json
from linen2nnx.spec import import_file

twins = import_file(Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py")

CNN_PARAMS = {
    f"{layer}/{p}" for layer in ("conv_0", "conv_1", "dense_0", "dense_1") for p in ("kernel", "bias")
} | {f"batch_norm_{i}/{p}" for i in (0, 1) for p in ("scale", "bias")}
CNN_STATS = {f"batch_norm_{i}/{s}" for i in (0, 1) for s in ("mean", "var")}


@pytest.fixture(scope="module")
def cnn_ckpt(tmp_path_factory) -> Path:
    return twins.save_orbax(twins.trained_state("cnn"), tmp_path_factory.mktemp("linen") / "cnn")


@pytest.fixture(scope="module")
def cnn_result(cnn_ckpt) -> ParityResult:
    return check(twins.cnn_pair(), cnn_ckpt, name_map=twins.cnn_name_map())


def _paths(result: ParityResult, check_name: str) -> set[str]:
    return {lf.path for lf in result.leaves if lf.check == check_name}


def test_cnn_parity_from_trained_checkpoint(cnn_result):
    r = cnn_result
    assert r.passed, [(lf.check, lf.path, lf.max_abs, lf.note) for lf in r.failures]
    assert set(r.by_check()) == {
        "forward/eval",
        "forward/train",
        "forward/dropout",  # the twin's dropout, on with the same masks on both sides
        "loss/eval",
        "loss/train",
        "loss/dropout",
        "grad",
        "batch_stats",
        "precision",
        "config",
    }
    assert any(
        "momentum: Linen 0.9, NNX 0.9" in lf.note for lf in r.by_check()["config"]
    )  # the twin's BatchNorm
    assert _paths(r, "grad") == CNN_PARAMS
    assert _paths(r, "batch_stats") == CNN_STATS
    for lf in r.leaves:
        assert lf.max_abs <= 1e-5 * (1 + lf.ref_max)
        assert lf.cosine > 0.999999 or lf.ref_max == 0
    # the train-mode forward really used batch statistics (it differs from eval mode)
    assert r.worst("forward/train").ref_max > 0
    assert r.timings["linen"] > 0 and r.timings["nnx"] > 0


def test_cnn_parity_against_converted_nnx_checkpoint(cnn_ckpt, tmp_path):
    pair = twins.cnn_pair()
    report = convert(cnn_ckpt, tmp_path / "nnx", pair, twins.cnn_name_map())
    r = check(pair, cnn_ckpt, tmp_path / "nnx", name_map=twins.cnn_name_map())
    assert r.passed and r.nnx_source == str(tmp_path / "nnx")
    out = io.StringIO()
    render_conversion(report, Console(file=out, width=200))
    assert "params/BatchNorm_0/scale" in out.getvalue() and "kept from init" in out.getvalue()


def test_mlp_parity_from_init_without_name_map():
    r = check(
        twins.mlp_pair()
    )  # init variables, structural matching, dropout rate 0.5 disabled in train mode
    assert r.passed
    assert _paths(r, "grad") == {
        f"{lay}/{p}" for lay in ("dense1", "dense2", "head") for p in ("kernel", "bias")
    }
    assert "batch_stats" not in r.by_check()


def test_wrong_batchnorm_epsilon_fails_and_names_the_leaves(cnn_ckpt):
    r = check(twins.cnn_eps_pair(), cnn_ckpt, name_map=twins.cnn_name_map())
    assert not r.passed
    failed = {(lf.check, lf.path) for lf in r.failures}
    assert {("forward/eval", "out"), ("forward/train", "out"), ("loss/train", "loss")} <= failed
    assert ("grad", "conv_0/kernel") in failed
    # the first BatchNorm's running statistics do not depend on epsilon; the second's see its output
    stats = {lf.path: lf.passed for lf in r.leaves if lf.check == "batch_stats"}
    assert stats == {
        "batch_norm_0/mean": True,
        "batch_norm_0/var": True,
        "batch_norm_1/mean": False,
        "batch_norm_1/var": False,
    }


def test_wrong_batchnorm_momentum_fails_only_the_running_stats_and_the_setting(cnn_ckpt):
    r = check(twins.cnn_momentum_pair(), cnn_ckpt, name_map=twins.cnn_name_map())
    assert not r.passed
    assert {lf.path for lf in r.failures if lf.check == "batch_stats"} == CNN_STATS
    assert {lf.check for lf in r.failures} == {"batch_stats", "config"}
    config = {lf.path: lf.note for lf in r.failures if lf.check == "config"}
    assert set(config) == {"batch_norm_0", "batch_norm_1"} and all(
        "momentum: Linen" in n for n in config.values()
    )


def test_twin_without_a_linen_param_cannot_be_checked():
    with pytest.raises(ConversionError, match=r"params/head/bias"):
        check(twins.mlp_no_head_bias_pair(), name_map=twins.mlp_name_map())


def test_parity_json_and_console(cnn_result, tmp_path):
    data = json.loads(parity_json(cnn_result))
    assert data["schema"] == "linen2nnx-parity/2" and data["passed"] is True
    assert data["checks"]["grad"] == {
        "passed": True,
        "leaves": 12,
        "failed": 0,
        "max_abs": data["checks"]["grad"]["max_abs"],
    }
    assert {lf["check"] for lf in data["leaves"]} == set(data["checks"])
    assert json.loads(write_json(cnn_result, tmp_path / "parity.json").read_text()) == data
    out = io.StringIO()
    render_parity(cnn_result, Console(file=out, width=200), all_leaves=True)
    text = out.getvalue()
    assert "batch_norm_1/var" in text and "PASS" in text


def test_compare_leaf_tolerance_and_edge_cases():
    ref = np.array([1.0, -2.0, 0.0])
    ok = compare_leaf("x", "p", ref, ref + 2.9e-5, 1e-5)  # tol = 1e-5 * (1 + 2) = 3e-5
    bad = compare_leaf("x", "p", ref, ref + 3.1e-5, 1e-5)
    assert ok.passed and not bad.passed and math.isclose(ok.tol, 3e-5)
    nan = compare_leaf("x", "p", [np.nan, 1.0], [np.nan, 1.0], 1e-5)  # NaN on both sides proves nothing
    assert not nan.passed and "NaN" in nan.note
    assert not compare_leaf("x", "p", [np.nan, 1.0], [0.0, 1.0], 1e-5).passed
    shape = compare_leaf("x", "p", np.zeros(3), np.zeros(4), 1e-5)
    assert not shape.passed and "shape differs" in shape.note
    assert compare_leaf("x", "p", [0.0], [0.0], 1e-5).cosine == 1.0
    assert json.dumps(shape.to_json(), allow_nan=False)  # inf spelled as a string


_SINUS = """import flax.linen as nn
import jax.numpy as jnp


class Sinus(nn.Module):
    dim: int = 8

    @nn.compact
    def __call__(self, t):
        f = jnp.exp(-jnp.arange(self.dim // 2) / self.dim)
        a = t[:, None] * f[None]
        return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)
"""


def test_a_model_holding_no_variable_is_compared_by_its_outputs(tmp_path):
    """A sinusoidal timestep embedding holds no variable: its Linen init is ``{}``, which check read as
    "not a Linen checkpoint" (exit 2); now forward and loss are compared, and a slip fails."""
    import jax.numpy as jnp

    from linen2nnx.migrate import migrate_source
    from linen2nnx.spec import LinenSide, ModelPair

    result = migrate_source(_SINUS, "sinus.py", module_name="sinus")
    (tmp_path / "linen_src.py").write_text(_SINUS)
    (tmp_path / "nnx_src.py").write_text(result.output)
    (tmp_path / "wrong_src.py").write_text(
        result.output.replace("jnp.sin(a), jnp.cos(a)", "jnp.cos(a), jnp.sin(a)")
    )
    result.name_map.save(tmp_path / "map.json")
    side = LinenSide(
        model=import_file(tmp_path / "linen_src.py").Sinus(),
        batch={"x": np.linspace(0.0, 3.0, 4).astype(np.float32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    assert side.init_variables() == {}
    for stem, passes in (("nnx_src", True), ("wrong_src", False)):
        nnx_cls = import_file(tmp_path / f"{stem}.py").Sinus
        pair = ModelPair(
            linen=side, nnx_factory=lambda rngs, c=nnx_cls: c(rngs=rngs), name_map=tmp_path / "map.json"
        )
        parity = check(pair, {})
        assert parity.passed is passes and parity.by_check()["forward/eval"]


def test_a_model_whose_call_fails_under_capture_is_not_called_plainly_instead():
    """A ``sow`` inside a scanned step (the module broadcast into ``nnx.scan``) works in a plain call but
    changes the scan's carry under ``nnx.capture``, NNX's way to collect sown values: a TypeError. The
    check fell back to a plain call and passed; that error is raised now (other limits of capture, a class
    kept as Linen behind ``nnx.bridge.ToNNX``, still fall back), so the failure is the NNX side's, as for its
    users."""
    import jax.numpy as jnp
    from flax import nnx

    from linen2nnx.equivalence.sown import call_capturing

    class Cell(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.dense = nnx.Linear(3, 4, rngs=rngs)

        def __call__(self, c, x):
            step = lambda m, c, x: m.step(c, x)  # noqa: E731
            return nnx.scan(step, in_axes=(None, nnx.Carry, 1), out_axes=(nnx.Carry, 1), graph_updates=False)(
                self, c, x
            )

        def step(self, c, x):
            h = jnp.tanh(self.dense(x) + c)
            self.sow(nnx.Intermediate, "h", h)
            return h, h

    x, c0 = jnp.ones((2, 5, 3)), jnp.zeros((2, 4))
    with pytest.raises(TypeError, match="carry"):
        call_capturing(lambda: Cell(nnx.Rngs(0)), (c0, x), {})
