"""Linen vs NNX on an 8-device CPU mesh (data=2, fsdp=2, tensor=2) under logical axis rules.

The sharded runs happen in ``tests/mesh_worker.py``, a fresh process started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``: XLA reads the flag once, when jax starts its
CPU backend, and this process's jax may already have started with one device. Each test asserts on
the JSON report the worker writes.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from linen2nnx.equivalence.mesh import (
    MeshError,
    check_rules_fit,
    format_mesh,
    host_device_env,
    make_mesh,
    mesh_scope,
    parse_mesh,
)

WORKER = Path(__file__).with_name("mesh_worker.py")
TOL = 1e-5
HANDWRITTEN_PARAMS = {
    "embed/embedding",
    "final_scale",
    "head/kernel",
    *(f"blocks/{p}" for p in ("ln/scale", "ln/bias", "up/kernel", "up/bias", "down/kernel", "down/bias")),
}
DECODER_PARAMS = 12


def run_worker(scenario: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The worker's JSON report for ``scenario``, computed once per test session.

    Several tests read one report; under pytest-xdist they may sit in different processes, so the
    report is cached in the session's shared temp folder behind a file lock (the pytest-xdist
    recipe for a session fixture that must run once).
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the session's workers (and only by them)
    out = root / f"mesh_worker_{scenario}.json"
    with open(root / f"mesh_worker_{scenario}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            proc = subprocess.run(
                [sys.executable, str(WORKER), scenario, str(out)],
                env=host_device_env(8),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode != 0:
                out.unlink(missing_ok=True)
                pytest.fail(f"mesh worker {scenario!r} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def small_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_worker("small", tmp_path_factory)


@pytest.fixture(scope="session")
def decoder_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_worker("decoder", tmp_path_factory)


def assert_parity(leaves: list[dict], n_params: int) -> None:
    """Every numeric leaf within 1e-5·(1+max|ref|) (fp32), one grad and one spec per parameter, all equal."""
    assert all(lf["passed"] for lf in leaves), [lf for lf in leaves if not lf["passed"]]
    for lf in leaves:
        if lf["check"].startswith(("forward/", "loss/", "grad")):
            assert lf["max_abs"] <= TOL * (1 + lf["ref_max"]), lf
    checks = {lf["check"] for lf in leaves}
    assert {"forward/eval", "forward/train", "loss/eval", "grad", "partition_spec"} <= checks
    assert len([lf for lf in leaves if lf["check"] == "grad"]) == n_params
    specs = [lf for lf in leaves if lf["check"] == "partition_spec"]
    assert len(specs) == n_params


# ---- in-process: parsing and the named errors ---------------------------------------------------
def test_parse_mesh_keeps_order_and_names_every_mistake():
    assert parse_mesh("data=2, fsdp=2,tensor=2") == {"data": 2, "fsdp": 2, "tensor": 2}
    assert list(parse_mesh("tensor=4,data=2")) == ["tensor", "data"]
    assert format_mesh(parse_mesh("data=2,fsdp=1")) == "data=2,fsdp=1"
    for text, words in [
        ("", "AXIS=SIZE"),
        ("data=2,", "AXIS=SIZE"),
        ("data", "no '='"),
        ("data=two", "'two'"),
        ("data=0", ">= 1"),
        ("data=2,data=2", "twice"),
        ("2x=2", "identifier"),
    ]:
        with pytest.raises(MeshError, match=words):
            parse_mesh(text)


def test_too_few_devices_says_how_to_get_them():
    n = jax.device_count() + 1
    with pytest.raises(MeshError, match=f"xla_force_host_platform_device_count={n}"):
        make_mesh({"data": n})
    env = host_device_env(8, {"XLA_FLAGS": "--xla_cpu_foo=1 --xla_force_host_platform_device_count=2"})
    assert env["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"
    assert env["JAX_PLATFORMS"] == "cpu"


def test_rules_that_name_a_missing_mesh_axis_are_refused():
    from linen2nnx.zoo.decoder.train import spec

    side = spec("tiny")
    mesh = make_mesh({"data": 1})
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,)
    with pytest.raises(MeshError, match=r"'fsdp'.*data, fsdp, tensor"):
        check_rules_fit(side, mesh)
    with pytest.raises(MeshError, match="'fsdp'"), mesh_scope(side, {"data": 1}):
        pass
    check_rules_fit(side, make_mesh({"data": 1, "fsdp": 1, "tensor": 1}))


# ---- sharded, in the 8-device worker ------------------------------------------------------------
def test_handwritten_pair_sharded_parity_and_wrong_specs_caught(small_report):
    report = small_report["handwritten"]
    assert report["device_count"] == 8
    # (a) forward + per-leaf gradient parity and every PartitionSpec equal, the nn.scan stack included
    assert_parity(report["leaves"], len(HANDWRITTEN_PARAMS))
    specs = {lf["path"]: lf["note"] for lf in report["leaves"] if lf["check"] == "partition_spec"}
    assert set(specs) == HANDWRITTEN_PARAMS
    assert (
        "Linen P(None, 'fsdp', 'tensor') (logical P('layers', 'embed', 'mlp'))" in specs["blocks/up/kernel"]
    )
    assert "out_sharding ('layers', 'embed', 'mlp')" in specs["blocks/up/kernel"]
    # ... and it really ran sharded: weights split as their names say, the batch over data x fsdp
    where = report["placement"]
    assert where["linen/blocks/up/kernel"] == where["nnx/blocks/up/kernel"] == [None, "fsdp", "tensor"]
    assert where["linen/embed/embedding"] == where["nnx/embed/embedding"] == ["tensor", "fsdp"]
    assert where["batch"] == [["data", "fsdp"]] and where["devices"] == 8
    # (b) a wrong NNX sharding name is caught on exactly that leaf, naming both specs
    wrong = [lf for lf in report["wrong_name"] if not lf["passed"]]
    assert [lf["path"] for lf in wrong] == ["blocks/up/kernel"]
    assert (
        "Linen P(None, 'fsdp', 'tensor')" in wrong[0]["note"]
        and "NNX P(None, 'tensor', 'fsdp')" in wrong[0]["note"]
    )
    # a stack built without nnx.transform_metadata(partition='layers') loses the layers axis on every leaf
    no_layers = {lf["path"]: lf["note"] for lf in report["no_layers_axis"] if not lf["passed"]}
    assert set(no_layers) == {p for p in HANDWRITTEN_PARAMS if p.startswith("blocks/")}
    assert "2 names for a rank-3 array" in no_layers["blocks/up/kernel"]
    # another logical name that these rules happen to place alike still fails: other rules split it apart
    renamed = [lf for lf in report["renamed"] if not lf["passed"]]
    assert [lf["path"] for lf in renamed] == ["blocks/up/kernel"]
    assert "the partition names differ" in renamed[0]["note"]
    # an activation constraint dropped or with its names swapped: only the `sharding` leaf of that block fails
    for name in ("no_constraint", "swapped_constraint"):
        failed = report[name]
        assert [(lf["check"], lf["path"]) for lf in failed] == [("sharding", "blocks")], failed
    assert "NNX none" in report["no_constraint"][0]["note"]
    # placing a twin whose name the rules do not know is a named error, not an XLA traceback
    assert "NNX blocks/up/kernel (out_sharding ('layers', 'embed', 'hidden'))" in report["unknown_name_error"]


def test_migrated_zoo_encoder_and_mlp_sharded_parity(small_report):
    report = small_report["zoo"]
    for model, n_params in (("encoder", 40), ("mlp", 6)):
        assert "manual" not in report[model], report[model]["manual"]
        assert report[model]["passed"]
        assert_parity(report[model]["leaves"], n_params)


def test_linen_decoder_trains_sharded(decoder_report):
    """The Linen half: MaxText-style sharded init + train step under the mesh and the zoo's rules."""
    linen = decoder_report["linen_train"]
    assert linen["wi_0"] == linen["mu_wi_0"] == [None, "fsdp", "tensor"]  # 'layers' axis -> None
    assert linen["embedding"] == ["tensor", "fsdp"] and linen["devices"] == 8
    assert all(math.isfinite(x) for x in linen["losses"])
    assert linen["losses"] == pytest.approx(linen["unsharded_losses"], rel=1e-4)


def test_migrated_decoder_sharded_parity(decoder_report):
    migrated = decoder_report["migrated"]
    if "manual" in migrated:
        pytest.skip(
            f"`linen2nnx migrate --trace` on linen2nnx/zoo/decoder/model.py still reports "
            f"{len(migrated['manual'])} manual finding(s), e.g. {migrated['manual'][0]}"
        )
    assert migrated["passed"]
    assert_parity(migrated["leaves"], DECODER_PARAMS)
    layouts = decoder_report["layouts"]  # scan off (layers_0, layers_1) and the minimal remat policy too
    assert set(layouts) == {"scan=True,remat=minimal", "scan=False,remat=full", "scan=False,remat=minimal"}
    for name, report in layouts.items():
        assert report["passed"], name
        assert_parity(report["leaves"], DECODER_PARAMS if name.startswith("scan=True") else 21)


def test_decoder_twin_sharded_parity(decoder_report):
    """The hand-written twin ``bench/memory_decoder.py`` falls back to, checked when it is the fallback."""
    if "twin" not in decoder_report:
        pytest.skip("the migrated decoder is checked instead (the twin is only the memory bench's fallback)")
    assert decoder_report["twin"]["passed"]
    assert_parity(decoder_report["twin"]["leaves"], DECODER_PARAMS)


def test_demo_with_a_mesh_reruns_itself_with_host_devices(tmp_path, capfd):
    """The pipeline model's whole chain on a stage mesh: Linen training, migrate, convert, check."""
    from linen2nnx.cli import main

    out = tmp_path / "demo"
    mesh = "stage=2,data=2,fsdp=2"
    assert main(["demo", "--model", "pipeline", "--out", str(out), "--steps", "3", "--mesh", mesh]) == 0
    text = "".join(capfd.readouterr())
    if jax.device_count() < 8:
        assert "rerunning the demo with 8 host CPU devices" in text
    assert "PARITY PASS" in text and f"train (Linen) on mesh {mesh}" in text
    parity = json.loads((out / "parity.json").read_text())
    assert parity["passed"] and parity["checks"]["partition_spec"]["leaves"] == 7
    assert {"train/loss", "train/params", "train/opt_state"} <= parity["checks"].keys()  # 10 steps
    findings = json.loads((out / "migration-report.json").read_text())["findings"]
    assert findings and all(f["severity"] == "converted" for f in findings)
    assert f"--mesh {mesh}" in (out / "README.md").read_text()
    assert "xla_force_host_platform_device_count=8" in (out / "README.md").read_text()
    with pytest.raises(SystemExit):  # a malformed mesh is a usage error
        main(["demo", "--model", "mlp", "--out", str(tmp_path / "x"), "--mesh", "data=two"])
