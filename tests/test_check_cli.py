"""``linen2nnx check`` end to end: reports in every format, exit codes 0 / 1 / 2, option parsing and
passing, and ``$GITHUB_STEP_SUMMARY``.

Two real checks run (the zoo MLP twin, and a twin whose first activation is wrong); everything else
stubs ``equivalence.check`` so option handling and rendering are tested in milliseconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

import linen2nnx.equivalence
from linen2nnx.cli import main
from linen2nnx.cli_check import mesh_arg as _mesh
from linen2nnx.cli_check import tolerance_arg as _tolerance

ROOT = Path(__file__).resolve().parents[1]
TWINS = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
MLP = f"{TWINS}:mlp_pair"


@pytest.fixture(autouse=True)
def _outside_github(monkeypatch):
    """The tests decide whether they run "inside GitHub Actions", whatever CI they really run in."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def _schema(data: dict[str, Any]) -> dict[str, Any]:
    version = data["schema"].rsplit("/", 1)[1]
    return json.loads((ROOT / "docs" / "schemas" / f"parity.v{version}.json").read_text())


def _junit(path: Path) -> ET.Element:
    xmlschema.XMLSchema(str(ROOT / "docs" / "schemas" / "junit.xsd")).validate(str(path))
    return ET.parse(path).getroot()


# ---- real checks ---------------------------------------------------------------------------------
def test_parity_writes_every_report_and_exits_0(tmp_path, capsys, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "reports"
    code = main(
        [
            "check",
            MLP,
            "--json",
            str(out / "parity.json"),
            "--markdown",
            "-",
            "--junit",
            str(out / "junit.xml"),
            "--html",
            str(out / "parity.html"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads((out / "parity.json").read_text())
    jsonschema.validate(data, _schema(data))
    assert data["passed"] is True and data["model"] == "mlp"
    assert captured.out.startswith("## ✅ linen2nnx parity: PASS — mlp")  # --markdown -
    assert summary.read_text() == "earlier step\n" + captured.out + "\n"  # appended inside GitHub Actions
    root = _junit(out / "junit.xml")
    assert root.get("failures") == "0" and {c.get("name") for c in root.iter("testcase")} >= set(
        data["checks"]
    )
    page = (out / "parity.html").read_text()
    assert '<header class="pass">' in page and "<svg" in page
    assert "parity: mlp — PASS" in captured.err and f"wrote {out / 'junit.xml'}" in captured.err
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temp files


WRONG_ACTIVATION = """
from flax import nnx

from linen2nnx.spec import ModelPair, import_file

twins = import_file({twins!r})


class ReluMLP(twins.MLP):
    def __call__(self, x, *, train: bool = False):
        x = nnx.relu(self.dense1(x))  # Linen uses gelu here
        x = nnx.relu(self.dense2(x))
        return self.head(x)


def pair():
    return ModelPair(linen=twins.mlp_linen(), nnx_factory=lambda rngs: ReluMLP(
        twins.MLP_HIDDEN, twins.N_CLASSES, 0.5, in_features=twins.MLP_IN, rngs=rngs))
"""


def test_parity_failure_exits_1_with_failing_reports(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "wrong_activation.py"
    spec.write_text(WRONG_ACTIVATION.format(twins=str(TWINS)))
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code = main(
        [
            "check",
            "--spec",
            str(spec),
            "--json",
            str(tmp_path / "p.json"),
            "--markdown",
            str(tmp_path / "p.md"),
            "--junit",
            str(tmp_path / "j.xml"),
            "--no-github-summary",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["passed"] is False and not data["checks"]["forward/eval"]["passed"]
    md = (tmp_path / "p.md").read_text()
    assert md.startswith("## ❌ linen2nnx parity: FAIL") and "### Failing leaves" in md
    if data.get("divergence"):  # schema /2 localises: gelu -> relu is in the root module's own code
        assert data["divergence"]["culprit"]["linen_path"] == ""
        assert "First module whose output differs: `(root)` (Linen)" in md
    root = _junit(tmp_path / "j.xml")
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert {"forward/eval", "loss/eval", "grad", "overall"} <= failed
    assert "dense1/kernel" in root.find(".//testcase[@name='grad']/failure").text
    assert "parity: mlp — FAIL" in err
    assert not summary.exists()  # --no-github-summary


# ---- errors: exit 2, named, nothing written -------------------------------------------------------
BUILD_FAILS = """
from linen2nnx.spec import ModelPair, import_file

twins = import_file({twins!r})


def broken_factory(rngs):
    raise ValueError("in_features must be positive, got -4")


def pair():
    return ModelPair(linen=twins.mlp_linen(), nnx_factory=broken_factory)
"""


def test_model_that_fails_to_build_is_a_named_error(tmp_path, capsys):
    spec = tmp_path / "broken_model.py"
    spec.write_text(BUILD_FAILS.format(twins=str(TWINS)))
    report = tmp_path / "parity.json"
    assert main(["check", f"{spec}:pair", "--json", str(report)]) == 2
    err = capsys.readouterr().err
    assert "the NNX model failed to build" in err and "broken_model.py" in err
    assert "ValueError: in_features must be positive, got -4" in err
    assert not report.exists()


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{tmp}/no_such_spec.py", "no_such_spec.py: no such file"),
        ("{tmp}/syntax_error.py", "syntax_error.py: import failed: SyntaxError"),
        (f"{TWINS}:no_such_function", "has no function 'no_such_function'"),
    ],
)
def test_broken_spec_is_a_named_error(tmp_path, capsys, spec, message):
    (tmp_path / "syntax_error.py").write_text("def pair(:\n")
    assert main(["check", spec.format(tmp=tmp_path), "--junit", str(tmp_path / "j.xml")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "j.xml").exists()


def test_missing_checkpoint_exits_2_from_the_real_command(tmp_path):
    """Through a real process: the exit code CI sees."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "linen2nnx",
            "check",
            MLP,
            "--ckpt",
            str(tmp_path / "gone"),
            "--json",
            str(tmp_path / "p.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'gone'}: checkpoint not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "p.json").exists()


def test_missing_nnx_checkpoint_is_a_named_error(tmp_path, capsys):
    assert main(["check", MLP, "--nnx-ckpt", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_spec_is_required_and_unambiguous(capsys):
    assert main(["check"]) == 2
    assert "needs a model pair spec" in capsys.readouterr().err
    assert main(["check", MLP, "--spec", f"{TWINS}:cnn_pair"]) == 2
    assert "two different specs" in capsys.readouterr().err


def test_one_report_at_most_goes_to_stdout(capsys):
    assert main(["check", MLP, "--json", "-", "--markdown", "-"]) == 2
    assert "only one report can go to standard output" in capsys.readouterr().err


def test_github_summary_without_the_variable_is_an_error(capsys):
    assert main(["check", MLP, "--github-summary"]) == 2
    assert "$GITHUB_STEP_SUMMARY is not set" in capsys.readouterr().err


# ---- option parsing --------------------------------------------------------------------------------
def test_mesh_and_tolerance_parsing():
    assert _mesh("data=2,fsdp=2,tensor=2") == {"data": 2, "fsdp": 2, "tensor": 2}
    assert list(_mesh(" tensor = 4 , data=1")) == ["tensor", "data"]
    assert _tolerance("grad:*=1e-4") == ("grad:*", 1e-4)
    assert _tolerance("out['a=b']=0") == ("out['a=b']", 0.0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mesh", "data=two"], "is not an integer"),
        (["--mesh", "data=2,data=4"], "given twice"),
        (["--mesh", "data=0"], "must be >= 1"),
        (["--mesh", "2"], "AXIS=SIZE"),
        (["--tolerance", "grad"], "PATTERN=VALUE"),
        (["--tolerance", "grad=-1"], ">= 0"),
        (["--tolerance", "grad=nan"], "finite"),
        (["--steps", "-3"], "0 or more"),
    ],
)
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check", MLP, *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


class _Result:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def to_json(self) -> dict[str, Any]:
        return self.data


def _v2(passed: bool) -> dict[str, Any]:
    leaf = {
        "check": "forward/eval",
        "path": "out",
        "shape": [4, 3],
        "dtype": "float32",
        "max_abs": 0.0 if passed else 1.0,
        "max_rel": 0.0,
        "mean_abs": 0.0,
        "cosine": 1.0,
        "tol": 1e-5,
        "passed": passed,
        "note": "",
        "extra": {},
    }
    return {
        "schema": "linen2nnx-parity/2",
        "passed": passed,
        "model": "mlp",
        "linen_source": "init_variables()",
        "nnx_source": "converted in memory",
        "tolerances": {"default": 1e-5},
        "checks": {
            "forward/eval": {
                "passed": passed,
                "leaves": 1,
                "failed": int(not passed),
                "max_abs": leaf["max_abs"],
            }
        },
        "leaves": [leaf],
        "divergence": None,
        "training": {
            "steps": 2,
            "linen_loss": [1.0, 0.5],
            "nnx_loss": [1.0, 0.5],
            "max_rel_loss": 0.0,
            "passed": True,
            "param_leaves_failed": 0,
            "opt_state_leaves_failed": 0,
        },
        "timings_s": {},
    }


def test_options_reach_check_only_when_set(monkeypatch, tmp_path, capsys):
    calls: list[dict[str, Any]] = []

    def fake_check(
        pair, linen_ckpt=None, nnx_ckpt=None, *, name_map=None, steps=10, mesh=None, tolerances=None
    ):
        calls.append(
            {
                "linen_ckpt": linen_ckpt,
                "nnx_ckpt": nnx_ckpt,
                "name_map": name_map,
                "steps": steps,
                "mesh": mesh,
                "tolerances": tolerances,
            }
        )
        return _Result(_v2(passed=len(calls) == 1))

    monkeypatch.setattr(linen2nnx.equivalence, "check", fake_check)
    assert (
        main(
            [
                "check",
                MLP,
                "--steps",
                "3",
                "--mesh",
                "data=2,fsdp=2,tensor=2",
                "--tolerance",
                "grad:*=1e-4",
                "--tolerance",
                "*=2e-5",
                "--tolerance",
                "grad:*=3e-4",
                "--map",
                "m.json",
                "--html",
                str(tmp_path / "r.html"),
            ]
        )
        == 0
    )
    assert calls[0] == {
        "linen_ckpt": None,
        "nnx_ckpt": None,
        "name_map": "m.json",
        "steps": 3,
        "mesh": {"data": 2, "fsdp": 2, "tensor": 2},
        "tolerances": {"overrides": {"grad:*": 3e-4, "*": 2e-5}},
    }
    assert 'id="loss-curves"' in (tmp_path / "r.html").read_text()  # the /2 training run is drawn
    assert main(["check", MLP, "--junit", str(tmp_path / "j.xml")]) == 1  # a failing /2 result
    assert (
        calls[1]["steps"] == 10 and calls[1]["mesh"] is None and calls[1]["tolerances"] is None
    )  # defaults kept
    assert _junit(tmp_path / "j.xml").find(".//testcase[@name='forward/eval']/failure") is not None
    assert "training: 2 steps pass" in capsys.readouterr().err


def test_an_option_check_does_not_take_is_a_named_error(monkeypatch, capsys):
    def old_check(pair, linen_ckpt=None, nnx_ckpt=None, *, name_map=None, atol_factor=1e-5):
        raise AssertionError("must not be called")

    monkeypatch.setattr(linen2nnx.equivalence, "check", old_check)
    assert main(["check", MLP, "--steps", "2", "--mesh", "data=1"]) == 2
    assert "--steps, --mesh: not supported by this version" in capsys.readouterr().err


def test_html_without_matplotlib_fails_before_the_check(monkeypatch, tmp_path, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the check must not run")

    monkeypatch.setattr(linen2nnx.equivalence, "check", never)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["check", MLP, "--html", str(tmp_path / "r.html")]) == 2
    assert "pip install 'linen2nnx[html]'" in capsys.readouterr().err


def test_models_that_raise_while_running_are_an_error_not_a_verdict(monkeypatch, capsys):
    def crashing(*args, **kwargs):
        raise FloatingPointError("nan in dense_1")

    monkeypatch.setattr(linen2nnx.equivalence, "check", crashing)
    assert main(["check", MLP]) == 2
    err = capsys.readouterr().err
    assert (
        "check could not run the models: FloatingPointError: nan in dense_1" in err and "--traceback" in err
    )
    with pytest.raises(FloatingPointError):
        main(["check", MLP, "--traceback"])


def test_unwritable_report_is_a_named_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(linen2nnx.equivalence, "check", lambda *a, **k: _Result(_v2(passed=True)))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["check", MLP, "--json", str(blocker / "parity.json")]) == 2
    assert "cannot write the report" in capsys.readouterr().err


def test_example_workflow_runs_a_check_command_this_cli_accepts(monkeypatch):
    """docs/github-actions-parity.yml must not rot: its command parses, and it uploads and publishes
    the files that command writes."""
    import os
    import re
    import shlex

    import yaml

    from linen2nnx.cli import build_parser

    workflow = yaml.safe_load((ROOT / "docs" / "github-actions-parity.yml").read_text())
    for key, value in workflow["env"].items():
        monkeypatch.setenv(key, value)
    steps = workflow["jobs"]["parity"]["steps"]
    runs = [s["run"] for s in steps if "linen2nnx check" in s.get("run", "")]
    assert len(runs) == 1
    argv = shlex.split(os.path.expandvars(runs[0]))
    args = build_parser().parse_args(argv[1:])
    assert args.command == "check" and args.spec == workflow["env"]["SPEC"]
    assert args.json and args.markdown and args.junit and args.html and args.steps == 20

    def with_env(text: str) -> str:
        return re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: workflow["env"][m.group(1)], text)

    uses = {s["uses"].split("@")[0]: s for s in steps if "uses" in s}
    upload = with_env(uses["actions/upload-artifact"]["with"]["path"]).rstrip("/")
    assert all(Path(p).parent == Path(upload) for p in (args.json, args.markdown, args.junit, args.html))
    assert with_env(uses["mikepenz/action-junit-report"]["with"]["report_paths"]) == args.junit
    assert "!cancelled()" in uses["actions/upload-artifact"]["if"]  # evidence is kept when the gate fails


@pytest.mark.parametrize(
    "make_argv, message",
    [
        (lambda d: ["--json", str(d / "spec.py")], "--json .*spec.py: is the spec"),
        (
            lambda d: ["--ckpt", str(d / "ck.msgpack"), "--markdown", str(d / "ck.msgpack")],
            "the Linen checkpoint",
        ),
        (
            lambda d: ["--nnx-ckpt", str(d / "nnx"), "--junit", str(d / "nnx" / "j.xml")],
            "lies inside the NNX",
        ),
        (lambda d: ["--json", str(d / "r"), "--html", str(d / "r")], "--json writes there too"),
        (lambda d: ["--json", str(d)], "is a folder"),
    ],
)
def test_a_report_that_would_replace_an_input_is_refused_before_the_run(
    make_argv, message, monkeypatch, tmp_path, capsys
):
    """A report path that is the spec, a checkpoint (or inside one), another report's or a folder:
    exit 2 before the check runs, every input as it was."""
    ran = []
    monkeypatch.setattr(linen2nnx.equivalence, "check", lambda *a, **k: ran.append(1) or _Result(_v2(True)))
    (tmp_path / "spec.py").write_text("SPEC = 1\n")
    (tmp_path / "ck.msgpack").write_bytes(b"\x80")
    (tmp_path / "nnx").mkdir()
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main(["check", str(tmp_path / "spec.py"), *make_argv(tmp_path)]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not ran and {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_step_summary_that_cannot_take_the_report_fails_before_any_report_is_written(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(linen2nnx.equivalence, "check", lambda *a, **k: _Result(_v2(passed=True)))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder
    assert main(["check", MLP, "--json", str(tmp_path / "p.json")]) == 2
    assert "$GITHUB_STEP_SUMMARY" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_a_report_may_not_replace_a_spec_given_as_a_module_or_its_name_map(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(linen2nnx.equivalence, "check", lambda *a, **k: _Result(_v2(True)))
    (tmp_path / "my_spec.py").write_text("PAIR = 1\n")
    (tmp_path / "linen2nnx-map.json").write_text("{}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for target, what in (
        ("my_spec.py", "is the spec"),
        ("linen2nnx-map.json", "the name map beside the spec"),
    ):
        assert main(["check", "my_spec:pair", "--json", str(tmp_path / target)]) == 2
        assert what in capsys.readouterr().err
    assert (tmp_path / "my_spec.py").read_text() == "PAIR = 1\n"
