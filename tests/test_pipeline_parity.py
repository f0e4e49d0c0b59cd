"""The pipeline zoo model through ``migrate`` and ``check``: no finding left to a person, and parity
of forward, loss, every gradient, every PartitionSpec and 10 training steps, on one device and on 8
host devices (mesh stage=2, data=2, fsdp=2), for the plain and the circular pipeline.

``migrate`` and ``check`` run as the CLI does, in subprocesses: the mesh needs a process that sees 8
CPU devices (XLA reads the flag once, when jax starts). ``convert`` of a Linen checkpoint is a rename:
the weights keep their (repeats, stages, ...) layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from linen2nnx import zoo
from linen2nnx.equivalence.mesh import host_device_env

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"plain": "spec", "circular": "circular_spec"}
PARAMS = 7  # embedding, final norm, logits; per stage layer: norm, token mix, wi, wo
CHECKS = {"forward/eval", "forward/train", "loss/train", "grad", "train/loss", "train/params"}

pytestmark = pytest.mark.slow


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run(
        [sys.executable, "-m", "linen2nnx", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module", params=sorted(SPECS))
def migrated(request, tmp_path_factory) -> tuple[str, Path]:
    """``(variant, spec file)``: the zoo model migrated with a trace of the variant's Linen spec."""
    out = tmp_path_factory.mktemp(f"pipeline_{request.param}")
    report = out / "report.json"
    spec = f"linen2nnx.zoo.pipeline.train:{SPECS[request.param]}"
    proc = _run(
        ["migrate", "--isolated", "--out-dir", str(out / "nnx"), "--trace", spec, "--report", str(report),
         "--format", "json", "--no-progress", str(zoo.model_source("pipeline"))]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    findings = json.loads(report.read_text())["findings"]
    assert [f for f in findings if f["severity"] != "converted"] == []
    rules = {f["rule"] for f in findings}
    assert {"L2N-XFORM-001", "L2N-PART-001", "L2N-PART-004"} <= rules  # PART-004: the unbox helper
    return request.param, out / "nnx" / "linen2nnx_spec.py"


def _parity(spec: Path, mesh: str | None) -> dict:
    out = spec.with_name(f"parity_{mesh or 'single'}.json")
    args = ["check", f"{spec}:pair", "--steps", "10", "--json", str(out)]
    proc = _run([*args, "--mesh", mesh], host_device_env(8)) if mesh else _run(args)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


def _assert_parity(report: dict, sharded: bool) -> None:
    assert report["passed"] and report["nnx_source"] == "converted in memory"  # by the name map
    checks = report["checks"]
    assert CHECKS <= set(checks) and all(c["passed"] for c in checks.values())
    assert checks["grad"]["leaves"] == PARAMS and checks["train/params"]["leaves"] == PARAMS
    assert checks["train/loss"]["leaves"] == 10 and report["training"]["passed"]
    if sharded:
        specs = [leaf["path"] for leaf in report["leaves"] if leaf["check"] == "partition_spec"]
        assert len(specs) == PARAMS and "pipeline/stages/layers/0/wi/kernel" in specs


def test_single_device_parity(migrated):
    _assert_parity(_parity(migrated[1], None), sharded=False)


def test_stage_data_fsdp_mesh_parity(migrated):
    _assert_parity(_parity(migrated[1], "stage=2,data=2,fsdp=2"), sharded=True)


def test_convert_is_a_rename(migrated, tmp_path):
    """A Linen checkpoint converts leaf by leaf through the name map: same shapes, renamed paths."""
    variant, spec = migrated
    state_py = (
        "import sys\n"
        "from linen2nnx.zoo.pipeline import train as T\n"
        "model = T.make_model('tiny', **(T.CIRCULAR if sys.argv[1] == 'circular' else {}))\n"
        "T.save_checkpoint(T.create_train_state('tiny', model=model), sys.argv[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ckpt = tmp_path / "linen"
    proc = subprocess.run(
        [sys.executable, "-c", state_py, variant, str(ckpt)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "conversion.json"
    proc = _run(
        ["convert", "--spec", f"{spec}:pair", str(ckpt), str(tmp_path / "nnx"), "--json", str(report)]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    mapped = {m["linen"]: m for m in json.loads(report.read_text())["mapped"]}
    assert len(mapped) == PARAMS and all(m["how"] == "name map" for m in mapped.values())
    wi = mapped["params/pipeline/stages/layers_0/wi/kernel"]
    repeats = 2 if variant == "circular" else 1
    assert wi["nnx"] == "pipeline/stages/layers/0/wi/kernel" and wi["shape"] == [repeats, 2, 32, 64]
