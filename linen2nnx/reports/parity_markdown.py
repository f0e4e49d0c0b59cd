"""A parity result as GitHub-flavoured Markdown, for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.

Laid out so the first lines answer the reviewer's question: a verdict headline, one summary row per
check, the failing leaves, the module where Linen and NNX first diverge, the side-by-side training
run; then a collapsible table per check with every leaf (``max_rows`` each, the rest counted).
Rendered from the parity dict only (see :mod:`.parity_data`).
"""

from __future__ import annotations

import html
from typing import Any

from linen2nnx.reports import parity_data as pd
from linen2nnx.reports.markdown_text import md_cell, md_code

_LEAF_HEADER = [
    "| path | shape | dtype | max\\|Δ\\| | tol | max rel | mean\\|Δ\\| | cosine | extra | verdict |",
    "|---|---|---|---:|---:|---:|---:|---:|---|---|",
]


def _verdict(ok: bool) -> str:
    return "✅ pass" if ok else "❌ **FAIL**"


def _leaf_row(leaf: dict[str, Any], with_check: bool = False) -> str:
    note = f" — {md_cell(leaf['note'])}" if leaf.get("note") else ""
    cells = [md_code(str(leaf.get("check", "")))] if with_check else []
    cells += [
        md_code(str(leaf.get("path", ""))),
        pd.shape_text(leaf),
        md_cell(str(leaf.get("dtype") or "")),
        pd.fmt(leaf.get("max_abs")),
        pd.fmt(leaf.get("tol")),
        pd.fmt(leaf.get("max_rel")),
        pd.fmt(leaf.get("mean_abs")),
        pd.fmt(leaf.get("cosine"), 6),
        md_cell(pd.extra_text(leaf)),
        _verdict(bool(leaf.get("passed"))) + note,
    ]
    return "| " + " | ".join(cells) + " |"


def headline(data: dict[str, Any]) -> str:
    """``✅ linen2nnx parity: PASS — mlp`` (or ❌ ... FAIL)."""
    word = "PASS" if data.get("passed") else "FAIL"
    icon = "✅" if data.get("passed") else "❌"
    return f"{icon} linen2nnx parity: {word} — {md_cell(str(data.get('model') or 'model'))}"


def _summary(data: dict[str, Any]) -> list[str]:
    n_checks, n_leaves, n_failed = pd.counts(data)
    lines = [
        f"**{pd.leaves_text(n_leaves)} in {n_checks} checks; {n_failed} failed.** "
        f"Linen: {md_code(str(data.get('linen_source', '')))} · NNX: {md_code(str(data.get('nnx_source', '')))} · "
        f"tolerance: {md_cell(pd.tolerance_text(data))}",
        "",
    ]
    lines += ["| check | leaves | failed | max\\|Δ\\| | verdict |", "|---|---:|---:|---:|---|"]
    for name in pd.check_names(data):
        s = pd.check_summary(data, name)
        lines.append(
            f"| {md_code(name)} | {s['leaves']} | {s['failed']} | {pd.fmt(s.get('max_abs'))} | "
            f"{_verdict(bool(s['passed']))} |"
        )
    train = pd.training(data)
    if train:
        lines.append(
            f"| `training` | {train.get('steps', 0)} steps | "
            f"{train.get('param_leaves_failed', 0)} params, {train.get('opt_state_leaves_failed', 0)} opt | "
            f"{pd.fmt(train.get('max_rel_loss'))} (rel. loss) | {_verdict(bool(train.get('passed')))} |"
        )
    div = pd.divergence(data)
    if div:
        culprit = div.get("culprit")
        lines.append(
            f"| `divergence` | {len(div.get('modules') or [])} modules | {int(culprit is not None)} | "
            f"{pd.fmt(culprit.get('max_abs')) if culprit else '—'} | {_verdict(culprit is None)} |"
        )
    return lines


def _failures(data: dict[str, Any], max_rows: int) -> list[str]:
    failed = pd.failing_leaves(data)
    if not failed:
        return []
    lines = [
        "",
        f"### Failing leaves ({len(failed)})",
        "",
        "| check " + _LEAF_HEADER[0],
        "|---" + _LEAF_HEADER[1],
    ]
    lines += [_leaf_row(leaf, with_check=True) for leaf in failed[:max_rows]]
    if len(failed) > max_rows:
        lines.append(f"\n… and {len(failed) - max_rows} more (see the JSON report).")
    return lines


def divergence_lines(data: dict[str, Any], max_rows: int = 200) -> list[str]:
    """Where Linen and NNX first part ways, module by module in call order."""
    div = pd.divergence(data)
    if not div:
        return []
    culprit = div.get("culprit")
    lines = ["", "### Divergence", ""]
    if culprit:
        lines.append(
            f"First module whose output differs: {md_code(pd.module_name(culprit.get('linen_path')))} (Linen) → "
            f"{md_code(pd.module_name(culprit.get('nnx_path')))} (NNX), check {md_code(str(culprit.get('check', '')))}: "
            f"max|Δ| {pd.fmt(culprit.get('max_abs'))} > tol {pd.fmt(culprit.get('tol'))}."
        )
    else:
        lines.append("Every module's output agrees within tolerance.")
    inputs = div.get("inputs_agree")
    if inputs is not None:
        lines.append("")
        lines.append(
            "Inputs agree: "
            + (
                "yes — the module itself computes differently."
                if inputs
                else "**no** — the difference comes from upstream of this module."
            )
        )
    if culprit and culprit.get("note"):
        lines += ["", f"Why: {culprit['note']}"]
    modules = div.get("modules") or []
    if modules:
        lines += [
            "",
            "<details>",
            f"<summary>{len(modules)} modules in call order</summary>",
            "",
            "| # | Linen | NNX | max\\|Δ\\| | tol | verdict |",
            "|---:|---|---|---:|---:|---|",
        ]
        for m in modules[:max_rows]:
            lines.append(
                f"| {m.get('order', '')} | {md_code(pd.module_name(m.get('linen_path')))} | "
                f"{md_code(pd.module_name(m.get('nnx_path')))} | {pd.fmt(m.get('max_abs'))} | {pd.fmt(m.get('tol'))} | "
                f"{_verdict(bool(m.get('passed')))} |"
            )
        if len(modules) > max_rows:
            lines.append(f"\n… and {len(modules) - max_rows} more.")
        lines += ["", "</details>"]
    return lines


def training_lines(data: dict[str, Any], max_rows: int = 200) -> list[str]:
    """The side-by-side training run: verdict, final losses, worst relative loss gap, state leaves."""
    train = pd.training(data)
    if not train:
        return []
    linen, nnx = train.get("linen_loss") or [], train.get("nnx_loss") or []
    lines = [
        "",
        f"### Training ({train.get('steps', len(linen))} steps): {_verdict(bool(train.get('passed')))}",
        "",
        f"Final loss: Linen {pd.fmt(pd.last(linen), 6)}, NNX {pd.fmt(pd.last(nnx), 6)}; "
        f"largest relative loss difference {pd.fmt(train.get('max_rel_loss'))}; "
        f"param leaves failed: {train.get('param_leaves_failed', 0)}; "
        f"optimizer-state leaves failed: {train.get('opt_state_leaves_failed', 0)}.",
    ]
    if linen or nnx:
        lines += [
            "",
            "<details>",
            "<summary>loss per step</summary>",
            "",
            "| step | Linen | NNX |",
            "|---:|---:|---:|",
        ]
        for i in range(min(max(len(linen), len(nnx)), max_rows)):
            lines.append(
                f"| {i + 1} | {pd.fmt(linen[i] if i < len(linen) else None, 7)} | "
                f"{pd.fmt(nnx[i] if i < len(nnx) else None, 7)} |"
            )
        lines += ["", "</details>"]
    return lines


def _per_check(data: dict[str, Any], max_rows: int) -> list[str]:
    lines: list[str] = []
    for name in pd.check_names(data):
        leaves = pd.leaves_of(data, name)
        s = pd.check_summary(data, name)
        opened = " open" if not s["passed"] else ""
        lines += [
            "",
            f"<details{opened}>",
            f"<summary><code>{html.escape(name)}</code>: {pd.leaves_text(s['leaves'])}, {s['failed']} failed</summary>",
            "",
            *_LEAF_HEADER,
        ]
        lines += [_leaf_row(leaf) for leaf in leaves[:max_rows]]
        if len(leaves) > max_rows:
            lines.append(f"\n… and {len(leaves) - max_rows} more (see the JSON report).")
        lines += ["", "</details>"]
    return lines


def render_parity_markdown(result: Any, *, max_rows: int = 200) -> str:
    """The whole Markdown report of a parity result (``ParityResult`` or its JSON dict)."""
    data = pd.parity_dict(result)
    lines = [f"## {headline(data)}", "", *_summary(data)]
    lines += _failures(data, max_rows)
    lines += divergence_lines(data, max_rows)
    lines += training_lines(data, max_rows)
    lines += ["", "### Leaves by check", *_per_check(data, max_rows)]
    timings = data.get("timings_s") or {}
    if timings:
        lines += ["", "Timings: " + ", ".join(f"{md_cell(str(k))} {pd.fmt(v)} s" for k, v in timings.items())]
    return "\n".join(lines) + "\n"
