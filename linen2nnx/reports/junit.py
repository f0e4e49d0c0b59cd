"""A parity result as JUnit XML, so CI test dashboards show each check as a test.

Layout (the Jenkins / Ant JUnit dialect that GitHub, GitLab and Jenkins all read; validated against
``docs/schemas/junit.xsd`` in the tests):

- one ``<testsuite>`` per check group (``forward``, ``loss``, ``grad``, ``batch_stats``, ``train``, ...),
  ``divergence`` when the result has it, and ``verdict`` for the overall result
  (so a result that fails with no failing leaf — e.g. nothing compared — is still a red test);
- one ``<testcase>`` per check (``forward/eval``, ``grad``, ``training``, ``divergence``); a failing
  one carries a ``<failure>`` whose message names the worst leaf and whose text lists every failing
  leaf, one per line.

Rendered from the parity dict only (see :mod:`.parity_data`).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any

from linen2nnx.reports import parity_data as pd

FAILURE_TYPE = "ParityFailure"
# XML 1.0 forbids most control characters even when escaped; a note could carry one.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _class_name(data: dict[str, Any], group: str) -> str:
    """``linen2nnx.<model>.<group>``: dashboards show ``linen2nnx.<model>`` as the package."""
    model = re.sub(r"[^A-Za-z0-9_]+", "_", str(data.get("model") or "model"))
    return f"linen2nnx.{model}.{group}"


def _leaf_line(leaf: dict[str, Any]) -> str:
    parts = [
        f"{leaf.get('path', '')} {pd.shape_text(leaf)}",
        f"max|Δ|={pd.fmt(leaf.get('max_abs'))}",
        f"tol={pd.fmt(leaf.get('tol'))}",
        f"max_rel={pd.fmt(leaf.get('max_rel'))}",
        f"cosine={pd.fmt(leaf.get('cosine'), 6)}",
    ]
    if leaf.get("extra"):
        parts.append(pd.extra_text(leaf))
    if leaf.get("note"):
        parts.append(str(leaf["note"]))
    return "  ".join(parts)


class _Case:
    """One testcase before it is placed in its suite."""

    def __init__(self, name: str, group: str, failure: tuple[str, str] | None = None, out: str = "") -> None:
        self.name, self.group, self.failure, self.out = name, group, failure, out


def _check_cases(data: dict[str, Any]) -> list[_Case]:
    cases = []
    for name in pd.check_names(data):
        s = pd.check_summary(data, name)
        leaves = pd.leaves_of(data, name)
        failed = pd.failing_leaves(data, name)
        out = "\n".join(_leaf_line(lf) for lf in leaves)
        failure = None
        if not s["passed"]:
            first = failed[0] if failed else {}
            message = (
                f"{s['failed']} of {pd.leaves_text(s['leaves'])} over tolerance; first: {first.get('path', '?')} "
                f"max|Δ| {pd.fmt(first.get('max_abs'))} > tol {pd.fmt(first.get('tol'))}"
                + (f" ({first['note']})" if first.get("note") else "")
            )
            failure = (message, "\n".join(_leaf_line(lf) for lf in failed))
        cases.append(_Case(name, pd.group_of(name), failure, out))
    return cases


def _training_case(data: dict[str, Any]) -> _Case | None:
    train = pd.training(data)
    if not train:
        return None
    linen, nnx = train.get("linen_loss") or [], train.get("nnx_loss") or []
    summary = (
        f"{train.get('steps', len(linen))} steps; final loss Linen {pd.fmt(pd.last(linen), 6)}, "
        f"NNX {pd.fmt(pd.last(nnx), 6)}; max relative loss difference {pd.fmt(train.get('max_rel_loss'))}; "
        f"param leaves failed {train.get('param_leaves_failed', 0)}; "
        f"optimizer-state leaves failed {train.get('opt_state_leaves_failed', 0)}"
    )
    steps = "\n".join(
        f"step {i + 1}: linen {pd.fmt(a, 7)} nnx {pd.fmt(b, 7)}" for i, (a, b) in enumerate(zip(linen, nnx))
    )
    failure = None if train.get("passed") else (summary, steps)
    # in the ``train`` suite, next to the train/* leaf checks when the result has them
    return _Case("training", "train", failure, summary + "\n" + steps)


def _divergence_case(data: dict[str, Any]) -> _Case | None:
    div = pd.divergence(data)
    if not div:
        return None
    modules = div.get("modules") or []
    table = "\n".join(
        f"{m.get('order', '')}: {pd.module_name(m.get('linen_path'))} -> {pd.module_name(m.get('nnx_path'))} "
        f"max|Δ|={pd.fmt(m.get('max_abs'))} tol={pd.fmt(m.get('tol'))} "
        f"{'pass' if m.get('passed') else 'FAIL'}"
        for m in modules
    )
    culprit = div.get("culprit")
    failure = None
    if culprit:
        inputs = div.get("inputs_agree")
        message = (
            f"first divergent module: {pd.module_name(culprit.get('linen_path'))} (Linen) -> {pd.module_name(culprit.get('nnx_path'))} "
            f"(NNX) in {culprit.get('check', '')}: max|Δ| {pd.fmt(culprit.get('max_abs'))} > "
            f"tol {pd.fmt(culprit.get('tol'))}"
            + ("" if inputs is None else f"; inputs agree: {'yes' if inputs else 'no'}")
        )
        failure = (message, table)
    return _Case("divergence", "divergence", failure, table)


def _verdict_case(data: dict[str, Any]) -> _Case:
    n_checks, n_leaves, n_failed = pd.counts(data)
    text = f"{pd.leaves_text(n_leaves)} in {n_checks} checks; {n_failed} failed"
    failure = None if data.get("passed") else (f"parity FAIL: {text}", text)
    return _Case("overall", "verdict", failure, text)


def render_junit(result: Any) -> str:
    """The JUnit XML document (UTF-8, with declaration) of a parity result or its JSON dict."""
    data = pd.parity_dict(result)
    cases = _check_cases(data)
    cases += [c for c in (_training_case(data), _divergence_case(data)) if c is not None]
    cases.append(_verdict_case(data))
    groups: dict[str, list[_Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)

    total_time = sum(pd.num(v) for v in (data.get("timings_s") or {}).values())
    total_time = total_time if math.isfinite(total_time) and total_time >= 0 else 0.0
    root = ET.Element(
        "testsuites",
        {
            "name": _clean(f"linen2nnx parity: {data.get('model') or 'model'}"),
            "tests": str(len(cases)),
            "failures": str(sum(c.failure is not None for c in cases)),
            "errors": "0",
            "skipped": "0",
            "time": f"{total_time:.3f}",
        },
    )
    for i, (group, members) in enumerate(groups.items()):
        suite = ET.SubElement(
            root,
            "testsuite",
            {
                "name": _clean(group),
                "tests": str(len(members)),
                "failures": str(sum(c.failure is not None for c in members)),
                "errors": "0",
                "skipped": "0",
                "time": "0",
                "id": str(i),
                "package": _class_name(data, group).rsplit(".", 1)[0],
            },
        )
        props = ET.SubElement(suite, "properties")
        for key in ("model", "linen_source", "nnx_source", "schema"):
            ET.SubElement(props, "property", {"name": key, "value": _clean(data.get(key, ""))})
        ET.SubElement(props, "property", {"name": "tolerance", "value": _clean(pd.tolerance_text(data))})
        for case in members:
            el = ET.SubElement(
                suite,
                "testcase",
                {"name": _clean(case.name), "classname": _class_name(data, group), "time": "0"},
            )
            if case.failure is not None:
                failure = ET.SubElement(
                    el, "failure", {"message": _clean(case.failure[0]), "type": FAILURE_TYPE}
                )
                failure.text = _clean(case.failure[1])
            if case.out:
                ET.SubElement(el, "system-out").text = _clean(case.out)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False).join(
        ('<?xml version="1.0" encoding="UTF-8"?>\n', "\n")
    )
