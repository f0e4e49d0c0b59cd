"""Parity report renderers — Markdown, JUnit XML, HTML (+ plots), rich console — and the JSON schema.

Every renderer reads the parity dict (``ParityResult.to_json()``), so most inputs here are dicts built
by hand in the ``linen2nnx-parity/2`` shape (training run, divergence, extra metrics, non-finite
numbers); one real ``check`` of the zoo MLP twin is rendered too, whichever schema version it emits.
JSON output is validated against ``docs/schemas/parity.v{N}.json`` with ``jsonschema``, JUnit output
against ``docs/schemas/junit.xsd`` with ``xmlschema``. The screenshot test opens the HTML page in
headless Chromium and finds both loss curves by their colours in the PNG.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema
from rich.console import Console

from linen2nnx.errors import L2NError
from linen2nnx.reports import parity_data
from linen2nnx.reports.console import render_parity
from linen2nnx.reports.html_report import render_parity_html
from linen2nnx.reports.junit import render_junit
from linen2nnx.reports.parity_markdown import render_parity_markdown
from linen2nnx.reports.plots import LINEN_COLOR, NNX_COLOR, require_matplotlib

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"
TWINS = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
CHROMIUM = Path("/usr/bin/chromium")


# ---- inputs --------------------------------------------------------------------------------------
def _leaf(
    check: str,
    path: str,
    max_abs: Any,
    tol: Any,
    passed: bool,
    note: str = "",
    extra: dict | None = None,
    shape: tuple = (4, 3),
) -> dict[str, Any]:
    return {
        "check": check,
        "path": path,
        "shape": list(shape),
        "dtype": "float32",
        "max_abs": max_abs,
        "max_rel": 0.0 if max_abs == 0 else 1e-3,
        "mean_abs": 0.0 if max_abs == 0 else 1e-4,
        "cosine": 1.0,
        "tol": tol,
        "passed": passed,
        "note": note,
        "extra": extra or {},
    }


def _checks(leaves: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for lf in leaves:
        c = out.setdefault(lf["check"], {"passed": True, "leaves": 0, "failed": 0, "max_abs": 0.0})
        c["leaves"] += 1
        c["failed"] += not lf["passed"]
        c["passed"] = c["failed"] == 0
        c["max_abs"] = (
            lf["max_abs"]
            if lf["max_abs"] == "inf" or c["max_abs"] == "inf"
            else max(c["max_abs"], lf["max_abs"])
        )
    return dict(sorted(out.items()))


def _tolerances(overrides: dict | None = None) -> dict[str, Any]:
    return {
        "formula": "tol = base[dtype] * (1 + max|ref|) * (1 + depth) ** depth_exponent",
        "base": {"bfloat16": 2e-2, "float32": 1e-5},
        "depth_exponent": 0.5,
        "overrides": overrides or {},
    }


def passing_v2() -> dict[str, Any]:
    """A clean run with a training phase whose loss curves coincide exactly."""
    leaves = [
        _leaf("forward/eval", "out['logits']", 0.0, 2e-5, True, extra={"kl_max": 0.0, "top1": 1.0}),
        _leaf("grad", "dense1/kernel", 1e-8, 1.1e-5, True),
        _leaf("grad", "dense1/bias", 0.0, 1.1e-5, True),
        _leaf("loss/eval", "loss", 2e-7, 2.2e-5, True, shape=()),
    ]
    loss = [2.3 - 0.15 * i for i in range(8)]
    return {
        "schema": "linen2nnx-parity/2",
        "passed": True,
        "model": "mlp",
        "linen_source": "runs/linen_ckpt",
        "nnx_source": "converted in memory",
        "tolerances": _tolerances(),
        "checks": _checks(leaves),
        "leaves": leaves,
        "divergence": None,
        "training": {
            "steps": 8,
            "linen_loss": loss,
            "nnx_loss": list(loss),
            "max_rel_loss": 0.0,
            "passed": True,
            "param_leaves_failed": 0,
            "opt_state_leaves_failed": 0,
        },
        "timings_s": {"build": 0.5, "linen": 1.25, "nnx": 1.5},
    }


def failing_v2() -> dict[str, Any]:
    """Logits drift from ``dense_1`` on; a gradient leaf is missing; training diverges to nan."""
    leaves = [
        _leaf("forward/eval", "out['logits']", 3e-2, 2e-5, False, extra={"kl_max": 1e-3, "top1": 0.75}),
        _leaf("forward/eval", "out['aux']", 0.0, 2e-5, True),
        _leaf("grad", "dense_0/kernel", 1e-7, 1.1e-5, True),
        _leaf("grad", "head/bias", "inf", 0.0, False, note="missing on the NNX side | <b>x</b> __init__"),
        _leaf("train/params", "head/kernel", 2e-3, 3e-5, False, note="worst at step 4"),
    ]
    modules = [
        {
            "linen_path": "Dense_0",
            "nnx_path": "dense_0",
            "order": 0,
            "max_abs": 0.0,
            "tol": 1e-5,
            "passed": True,
        },
        {
            "linen_path": "Dense_1",
            "nnx_path": "dense_1",
            "order": 1,
            "max_abs": 3e-2,
            "tol": 2e-5,
            "passed": False,
        },
    ]
    return {
        "schema": "linen2nnx-parity/2",
        "passed": False,
        "model": "mlp",
        "linen_source": "runs/linen_ckpt",
        "nnx_source": "runs/nnx_ckpt",
        "tolerances": _tolerances(overrides={"grad:*": 1e-4}),
        "checks": _checks(leaves),
        "leaves": leaves,
        "divergence": {
            "culprit": {
                "linen_path": "Dense_1",
                "nnx_path": "dense_1",
                "check": "forward/eval",
                "max_abs": 3e-2,
                "tol": 2e-5,
            },
            "inputs_agree": True,
            "modules": modules,
        },
        "training": {
            "steps": 5,
            "linen_loss": [2.3, 2.0, 1.7, 1.5, 1.4],
            "nnx_loss": [2.3, 2.01, 1.75, 1.6, "nan"],
            "max_rel_loss": "nan",
            "passed": False,
            "param_leaves_failed": 3,
            "opt_state_leaves_failed": 6,
        },
        "timings_s": {"build": 0.5},
    }


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    """A real ``check`` of the zoo MLP twin, in whichever schema version it emits."""
    from linen2nnx.equivalence import check
    from linen2nnx.spec import load_pair

    return json.loads(json.dumps(check(load_pair(f"{TWINS}:mlp_pair")).to_json()))


def schema_for(data: dict[str, Any]) -> dict[str, Any]:
    version = data["schema"].rsplit("/", 1)[1]
    return json.loads((SCHEMAS / f"parity.v{version}.json").read_text())


# ---- JSON schema ---------------------------------------------------------------------------------
def test_schemas_are_valid_draft_2020_12():
    for path in SCHEMAS.glob("parity.v*.json"):
        schema = json.loads(path.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
    assert (SCHEMAS / "parity.v2.json").exists()


@pytest.mark.parametrize("make", [passing_v2, failing_v2])
def test_hand_built_v2_results_validate(make):
    data = make()
    jsonschema.Draft202012Validator(schema_for(data)).validate(data)


def _set(path: str, value: Any):
    def mutate(data: dict) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is KeyError:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return mutate


BAD = {
    "wrong schema string": _set("schema", "linen2nnx-parity/1"),
    "verdict missing": _set("passed", KeyError),
    "verdict not a bool": _set("passed", "yes"),
    "nan as a number-like word": _set("leaves.0.max_abs", "NaN"),
    "negative max_abs": _set("leaves.0.max_abs", -1.0),
    "negative dim": _set("leaves.0.shape", [4, -3]),
    "leaf without dtype": _set("leaves.1.dtype", KeyError),
    "extra metric not a number": _set("leaves.0.extra.top1", "high"),
    "check summary without count": _set("checks.grad.leaves", KeyError),
    "culprit without nnx_path": _set("divergence.culprit.nnx_path", KeyError),
    "module order negative": _set("divergence.modules.0.order", -1),
    "training steps fractional": _set("training.steps", 2.5),
    "loss entry not a number": _set("training.nnx_loss.1", None),
    "divergence is a list": _set("divergence", []),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_results_fail_validation(name):
    data = failing_v2()
    BAD[name](data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(json.loads((SCHEMAS / "parity.v2.json").read_text())).validate(data)


def test_renderers_refuse_a_dict_of_another_schema():
    with pytest.raises(ValueError, match="not a parity result"):
        render_parity_markdown({"schema": "linen2nnx-migration/1"})


# ---- Markdown ------------------------------------------------------------------------------------
def test_markdown_names_the_verdict_failures_culprit_and_training():
    md = render_parity_markdown(failing_v2())
    assert md.startswith("## ❌ linen2nnx parity: FAIL — mlp\n")
    assert "**5 leaves in 3 checks; 3 failed.**" in md
    assert "| `forward/eval` | 2 | 1 | 0.03 | ❌ **FAIL** |" in md
    assert "| `grad` | 2 | 1 | inf | ❌ **FAIL** |" in md
    failing = md.split("### Failing leaves (3)", 1)[1].split("###", 1)[0]
    assert "`out['logits']`" in failing and "`head/bias`" in failing and "dense_0/kernel" not in failing
    assert "kl\\_max=0.001, top1=0.75" in failing
    # a note with a pipe, HTML and dunder names cannot break the table or inject markup
    assert "missing on the NNX side \\| &lt;b&gt;x&lt;/b&gt; \\_\\_init\\_\\_" in failing
    assert all(
        line.count("|") - line.count("\\|") == 12 for line in failing.splitlines() if line.startswith("| `")
    )
    assert "First module whose output differs: `Dense_1` (Linen) → `dense_1` (NNX)" in md
    assert "max|Δ| 0.03 > tol 2e-05" in md and "Inputs agree: yes" in md
    assert "### Training (5 steps): ❌ **FAIL**" in md
    assert "Final loss: Linen 1.4, NNX nan" in md and "param leaves failed: 3" in md
    assert "| 5 | 1.4 | nan |" in md
    assert "<details open>\n<summary><code>grad</code>: 2 leaves, 1 failed</summary>" in md


def test_markdown_of_a_clean_run_is_short_and_green():
    md = render_parity_markdown(passing_v2())
    assert md.startswith("## ✅ linen2nnx parity: PASS — mlp")
    assert "Failing leaves" not in md and "### Divergence" not in md and "❌" not in md
    assert "### Training (8 steps): ✅ pass" in md
    assert (
        "<details>\n<summary><code>grad</code>: 2 leaves, 0 failed</summary>" in md
    )  # passing checks collapse


def test_markdown_caps_rows_and_counts_the_rest():
    data = failing_v2()
    data["leaves"] = [_leaf("grad", f"layer_{i}/kernel", 1.0, 1e-5, False) for i in range(7)]
    data["checks"] = _checks(data["leaves"])
    md = render_parity_markdown(data, max_rows=3)
    assert "… and 4 more (see the JSON report)." in md
    assert "layer_2/kernel" in md and "layer_3/kernel" not in md


# ---- JUnit XML -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMAS / "junit.xsd"))


def test_junit_suites_cases_and_failures(junit_schema):
    xml = render_junit(failing_v2())
    junit_schema.validate(xml)
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root}
    assert list(suites) == ["forward", "grad", "train", "divergence", "verdict"]
    cases = {c.get("name"): c for s in root for c in s.iter("testcase")}
    assert list(cases) == ["forward/eval", "grad", "train/params", "training", "divergence", "overall"]
    assert [c.get("name") for c in suites["train"].iter("testcase")] == ["train/params", "training"]
    assert int(root.get("tests")) == 6 and int(root.get("failures")) == 6
    grad = cases["grad"].find("failure")
    assert grad.get("type") == "ParityFailure"
    assert "1 of 2 leaves over tolerance; first: head/bias" in grad.get("message")
    assert (
        "head/bias" in grad.text and "dense_0/kernel" not in grad.text
    )  # only failing leaves in the failure
    assert "dense_0/kernel" in cases["grad"].find("system-out").text  # every leaf in the output
    assert "kl_max=0.001" in cases["forward/eval"].find("failure").text
    div = cases["divergence"].find("failure").get("message")
    assert (
        div.startswith("first divergent module: Dense_1 (Linen) -> dense_1 (NNX)")
        and "inputs agree: yes" in div
    )
    assert "step 5: linen 1.4 nnx nan" in cases["training"].find("failure").text
    assert cases["forward/eval"].get("classname") == "linen2nnx.mlp.forward"
    props = {p.get("name"): p.get("value") for p in suites["grad"].iter("property")}
    assert props["nnx_source"] == "runs/nnx_ckpt" and props["schema"] == "linen2nnx-parity/2"


def test_junit_of_a_clean_run_has_no_failures(junit_schema):
    data = passing_v2()
    xml = render_junit(data)
    junit_schema.validate(xml)
    root = ET.fromstring(xml)
    assert root.get("failures") == "0" and root.find(".//failure") is None
    assert [c.get("name") for c in root.iter("testcase")] == [*data["checks"], "training", "overall"]
    assert root.find("testsuite[@name='train']/testcase[@name='training']") is not None


def test_junit_verdict_fails_when_nothing_failed_but_the_result_did(junit_schema):
    data = passing_v2()
    data.update(passed=False, leaves=[], checks={}, training=None)
    root = ET.fromstring(render_junit(data))
    assert [c.get("name") for c in root.iter("testcase")] == ["overall"]
    assert root.find(".//failure").get("message") == "parity FAIL: 0 leaves in 0 checks; 0 failed"


def test_junit_strips_characters_xml_cannot_carry(junit_schema):
    data = failing_v2()
    data["leaves"][3]["note"] = "bad\x00byte\x1b[31m"
    xml = render_junit(data)
    junit_schema.validate(xml)
    assert "bad\ufffdbyte\ufffd[31m" in ET.fromstring(xml).find(".//testcase[@name='grad']/failure").text


@pytest.mark.parametrize(
    "bad",
    [
        '<testsuites><testsuite tests="1"><testcase name="x"/></testsuite></testsuites>',  # suite without name
        '<testsuites><testsuite name="s" tests="1"><testcase classname="c"/></testsuite></testsuites>',  # case w/o name
        '<testsuites><testsuite name="s" tests="1"><failure/></testsuite></testsuites>',  # failure outside a case
        '<testsuites><testsuite name="s" tests="-1"/></testsuites>',  # negative count
        '<testsuites><testsuite name="s" tests="1" time="nan"/></testsuites>',  # time not a number
        '<testsuites><testsuite name="s" tests="1"><testcase name="x"><system-out/><failure/></testcase>'
        "</testsuite></testsuites>",  # outcome after output
    ],
)
def test_junit_schema_rejects_malformed_reports(junit_schema, bad):
    assert not junit_schema.is_valid(bad)


# ---- HTML ----------------------------------------------------------------------------------------
def _assert_self_contained(page: str) -> None:
    assert page.startswith("<!doctype html>")
    for needle in ("<script", "<link", " src=", "@import", 'href="http', "href='http"):
        assert needle not in page, needle
    assert not re.search(r"url\((?!#)", page)  # only references to ids inside the page
    # the only URLs are XML namespace names inside the inline SVG, which nothing fetches
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }


@pytest.fixture(scope="module")
def failing_page() -> str:
    return render_parity_html(failing_v2())


def test_html_page_has_verdict_tables_and_plots(failing_page):
    page = failing_page
    _assert_self_contained(page)
    assert '<header class="fail"><h1 id="verdict">Parity FAIL — mlp</h1>' in page
    assert "<title>linen2nnx parity: FAIL — mlp</title>" in page
    for section in ("summary", "training", "errors", "divergence", "failures", "checks"):
        assert f'<section id="{section}">' in page
    assert page.count("<svg") == 3  # loss curves, per-module errors, per-leaf errors
    assert "<code>Dense_1</code> (Linen) → <code>dense_1</code> (NNX)" in page
    assert "missing on the NNX side | &lt;b&gt;x&lt;/b&gt;" in page  # escaped, not injected


def test_html_loss_plot_has_two_labelled_curves(failing_page):
    loss = failing_page.split('<figure id="loss-curves">', 1)[1].split("</figure>", 1)[0]
    assert LINEN_COLOR.lower() in loss.lower() and NNX_COLOR.lower() in loss.lower()
    labels = re.findall(r"<!-- (.*?) -->", loss)
    assert "Linen" in labels and "NNX" in labels and "training loss" in labels and "step" in labels


def test_html_error_plot_is_log_scale_with_a_tolerance_line(failing_page):
    leaves = failing_page.split('<figure id="leaf-errors">', 1)[1].split("</figure>", 1)[0]
    labels = re.findall(r"<!-- (.*?) -->", leaves)
    assert "tolerance" in labels and any(label.startswith("max|Δ| (log scale") for label in labels)
    assert any(
        re.fullmatch(r"\$\\mathdefault\{10\^\{.*\}\}\$", label) for label in labels
    )  # 10^k tick labels
    assert "grad: head/bias" in labels and "forward/eval: out['logits']" in labels
    assert LINEN_COLOR.lower() not in leaves.lower() and NNX_COLOR.lower() not in leaves.lower()


def test_html_without_training_or_divergence_draws_no_curves():
    data = passing_v2()
    data["training"] = None
    page = render_parity_html(data)
    _assert_self_contained(page)
    assert page.count("<svg") == 1 and 'id="loss-curves"' not in page and 'id="divergence"' not in page
    assert '<header class="pass">' in page
    for name in data["checks"]:
        assert f"<code>{name}</code>" in page


def test_html_error_plot_keeps_failures_when_there_are_many_leaves():
    data = passing_v2()
    data["leaves"] = [_leaf("grad", f"l{i}/kernel", 1e-9, 1e-5, True) for i in range(100)]
    data["leaves"][97] = _leaf("grad", "l97/kernel", 1.0, 1e-5, False)
    data["checks"] = _checks(data["leaves"])
    page = render_parity_html(data)
    leaves = page.split('<figure id="leaf-errors">', 1)[1].split("</figure>", 1)[0]
    labels = re.findall(r"<!-- (.*?) -->", leaves)
    assert "grad: l97/kernel" in labels and any("60 of 100" in label for label in labels)


def test_html_without_matplotlib_is_a_named_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(L2NError, match=r"matplotlib.*pip install 'linen2nnx\[html\]'"):
        require_matplotlib()
    with pytest.raises(L2NError, match="matplotlib"):
        render_parity_html(passing_v2())


def _screenshot(page: str, tmp: Path) -> Any:
    from matplotlib.image import imread

    tmp.mkdir(parents=True, exist_ok=True)
    html_path, png = tmp / "report.html", tmp / "shot.png"
    html_path.write_text(page, encoding="utf-8")
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
        f"--screenshot={png}",
        "--window-size=1200,2000",
        html_path.as_uri(),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)}
    )
    assert png.exists(), proc.stderr[-2000:]
    pixels = imread(png)  # float RGB(A) in [0, 1]
    assert pixels.shape[:2] == (2000, 1200)
    return (pixels[..., :3] * 255).round()


def _count(pixels: Any, hex_color: str, slack: int = 8) -> int:
    rgb = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
    near = abs(pixels - rgb).max(axis=-1) <= slack
    return int(near.sum())


def test_screenshot_shows_both_loss_curves(tmp_path):
    if not CHROMIUM.exists() or not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("LINEN2NNX_REQUIRE_CHROMIUM"):
            pytest.fail(f"{CHROMIUM} is required here (LINEN2NNX_REQUIRE_CHROMIUM is set) but missing")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    assert shutil.which(str(CHROMIUM))
    # identical curves: the NNX one is drawn dashed on top, so both colours must still show
    shot = _screenshot(render_parity_html(passing_v2()), tmp_path / "with")
    assert _count(shot, LINEN_COLOR) > 1000, _count(shot, LINEN_COLOR)
    assert _count(shot, NNX_COLOR) > 300, _count(shot, NNX_COLOR)
    # control: without a training run neither colour is anywhere on the page
    no_training = copy.deepcopy(passing_v2())
    no_training["training"] = None
    control = _screenshot(render_parity_html(no_training), tmp_path / "without")
    assert _count(control, LINEN_COLOR) == 0 and _count(control, NNX_COLOR) == 0
    assert _count(control, "#1a7f37") > 1000  # the green verdict banner rendered


# ---- console -------------------------------------------------------------------------------------
def _console_text(data: Any, **kwargs: Any) -> str:
    out = io.StringIO()
    render_parity(data, Console(file=out, width=220), **kwargs)
    return out.getvalue()


def test_console_shows_new_metrics_culprit_and_training():
    text = _console_text(failing_v2())
    assert "parity: mlp — FAIL" in text
    assert "out['logits']" in text and "kl_max=0.001, top1=0.75" in text and "float32" in text
    assert "dense_0/kernel" not in text  # passing leaves only with all_leaves
    assert "divergence: first differing module Dense_1 (Linen) → dense_1 (NNX) in forward/eval" in text
    assert "max|Δ| 0.03 > tol 2e-05" in text and "inputs agree: yes" in text
    assert "training: 5 steps FAIL; final loss Linen 1.4, NNX nan" in text
    assert "failed leaves: params 3, opt_state 6" in text
    assert "base: bfloat16=0.02, float32=1e-05; depth_exponent=0.5; overrides: grad:*=0.0001" in " ".join(
        text.split()
    )
    assert "dense_0/kernel" in _console_text(failing_v2(), all_leaves=True)


def test_a_version_1_result_still_validates_and_renders(junit_schema):
    """Archived ``/1`` reports (no dtype, training or divergence; one ``atol_factor``) still render."""
    leaf = {
        "check": "grad",
        "path": "dense/kernel",
        "shape": [4, 3],
        "max_abs": 1.0,
        "max_rel": 0.5,
        "ref_max": 2.0,
        "cosine": 0.9,
        "tol": 3e-5,
        "passed": False,
        "note": "",
    }
    data = {
        "schema": "linen2nnx-parity/1",
        "passed": False,
        "model": "cnn",
        "linen_source": "ckpt",
        "nnx_source": "converted in memory",
        "atol_factor": 1e-5,
        "checks": {"grad": {"passed": False, "leaves": 1, "failed": 1, "max_abs": 1.0}},
        "leaves": [leaf],
        "timings_s": {"build": 0.1},
    }
    jsonschema.Draft202012Validator(schema_for(data)).validate(data)
    assert "tolerance: max\\|Δ\\| ≤ 1e-05·(1 + max\\|ref\\|)" in render_parity_markdown(data)
    assert (
        "| `dense/kernel` | (4, 3) |  | 1 | 3e-05 | 0.5 | — | 0.9 |  | ❌ **FAIL** |"
        in render_parity_markdown(data)
    )
    junit_schema.validate(render_junit(data))
    assert "max|Δ| ≤ 1e-05·(1 + max|ref|)" in _console_text(data)
    assert "Parity FAIL — cnn" in render_parity_html(data)


# ---- a real result, every format (one check run: it is the slow part) --------------------------------
def test_a_real_check_result_validates_and_renders_in_every_format(real, junit_schema):
    from linen2nnx.reports.console import parity_table

    assert real["schema"] in parity_data.SUPPORTED_SCHEMAS
    jsonschema.Draft202012Validator(schema_for(real)).validate(real)

    md = render_parity_markdown(real)
    assert md.startswith("## ✅ linen2nnx parity: PASS — mlp")
    for name in real["checks"]:
        assert f"| `{name}` |" in md
    assert "`dense1/kernel`" in md

    xml = render_junit(real)
    junit_schema.validate(xml)
    root = ET.fromstring(xml)
    assert root.get("failures") == "0"
    assert {c.get("name") for c in root.iter("testcase")} >= set(real["checks"]) | {"overall"}

    page = render_parity_html(real)
    _assert_self_contained(page)
    assert '<header class="pass">' in page and 'id="leaf-errors"' in page
    for name in real["checks"]:
        assert f"<code>{name}</code>" in page

    text = _console_text(real, all_leaves=True)
    assert "parity: mlp — PASS" in text and "dense1/kernel" in text and "timings:" in text
    assert parity_table(real).row_count == len(real["checks"])  # failures only: none


@pytest.mark.parametrize(
    "text", ["a``<img src=x onerror=alert(1)>``b", "`<b>x</b>`", "plain <i>", "x```y`z", "|pipe|`"]
)
def test_a_code_span_keeps_any_backticks_inside_it(text):
    """Markdown ends an inline code span at a backtick run of the fence's length: a fence longer than
    every run inside keeps the text one span, so none of it renders as HTML (CommonMark, as GitHub)."""
    from markdown_it import MarkdownIt

    from linen2nnx.reports.markdown_text import md_code

    html = MarkdownIt("commonmark").renderInline(md_code(text))
    assert html.startswith("<code>") and html.endswith("</code>") and html.count("<code>") == 1, html
    assert "<img" not in html and "<b>" not in html and "<i>" not in html
