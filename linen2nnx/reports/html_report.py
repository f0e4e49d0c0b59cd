"""A parity result as one self-contained HTML page: verdict, tables and plots.

Self-contained means one file with no network and no side files: the CSS is inline, the plots are
inline SVG drawn by matplotlib (:mod:`.plots`), there is no script. Open it from a CI artifact or
attach it to a bug report and it reads the same anywhere.

Page order puts the answer first: the verdict banner, the per-check summary, the Linen-vs-NNX loss
curves (when the check trained both sides), the per-module / per-leaf error plot, the divergence
culprit, the failing leaves, then every leaf by check (collapsed unless the check failed).
Rendered from the parity dict only (see :mod:`.parity_data`).
"""

from __future__ import annotations

import html
import math
from typing import Any

from linen2nnx.reports import parity_data as pd
from linen2nnx.reports.plots import MAX_BARS, ErrorRow, error_plot_svg, loss_curves_svg, require_matplotlib

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1100px;margin:0 auto;padding:0 16px 40px}
header{padding:18px 16px;color:#fff}
header.pass{background:#1a7f37} header.fail{background:#b3261e}
header h1{margin:0 0 6px;font-size:26px} header p{margin:0;font-size:14px}
h2{font-size:19px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#ffebe9} .ok{color:#1a7f37;font-weight:600} .bad{color:#b3261e;font-weight:700}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
figure{margin:8px 0} figure svg{max-width:100%;height:auto}
details{margin:6px 0} summary{cursor:pointer}
footer{color:#57606a;font-size:12px;margin-top:30px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _verdict(ok: bool) -> str:
    return '<span class="ok">pass</span>' if ok else '<span class="bad">FAIL</span>'


def _table(header: list[str], rows: list[tuple[list[str], bool]]) -> str:
    """``rows``: (already escaped cells, passed). Numeric-looking columns are right-aligned by the caller."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(f'<tr class="{"" if ok else "fail"}">' + "".join(cells) + "</tr>" for cells, ok in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(text: Any, num: bool = False, code: bool = False) -> str:
    inner = f"<code>{_e(text)}</code>" if code else _e(text)
    return f'<td class="n">{inner}</td>' if num else f"<td>{inner}</td>"


_LEAF_HEADER = ["path", "shape", "dtype", "max|Δ|", "tol", "max rel", "mean|Δ|", "cosine", "extra", "verdict"]


def _leaf_cells(leaf: dict[str, Any], with_check: bool = False) -> list[str]:
    cells = [_td(leaf.get("check", ""), code=True)] if with_check else []
    note = f" — {_e(leaf['note'])}" if leaf.get("note") else ""
    return [
        *cells,
        _td(leaf.get("path", ""), code=True),
        _td(pd.shape_text(leaf)),
        _td(leaf.get("dtype") or ""),
        _td(pd.fmt(leaf.get("max_abs")), num=True),
        _td(pd.fmt(leaf.get("tol")), num=True),
        _td(pd.fmt(leaf.get("max_rel")), num=True),
        _td(pd.fmt(leaf.get("mean_abs")), num=True),
        _td(pd.fmt(leaf.get("cosine"), 6), num=True),
        _td(pd.extra_text(leaf)),
        f"<td>{_verdict(bool(leaf.get('passed')))}{note}</td>",
    ]


def _summary(data: dict[str, Any]) -> str:
    rows = []
    for name in pd.check_names(data):
        s = pd.check_summary(data, name)
        rows.append(
            (
                [
                    _td(name, code=True),
                    _td(s["leaves"], num=True),
                    _td(s["failed"], num=True),
                    _td(pd.fmt(s.get("max_abs")), num=True),
                    f"<td>{_verdict(bool(s['passed']))}</td>",
                ],
                bool(s["passed"]),
            )
        )
    train = pd.training(data)
    if train:
        rows.append(
            (
                [
                    _td("training", code=True),
                    _td(f"{train.get('steps', 0)} steps", num=True),
                    _td(
                        f"{train.get('param_leaves_failed', 0)} params, {train.get('opt_state_leaves_failed', 0)} opt",
                        num=True,
                    ),
                    _td(f"{pd.fmt(train.get('max_rel_loss'))} (rel. loss)", num=True),
                    f"<td>{_verdict(bool(train.get('passed')))}</td>",
                ],
                bool(train.get("passed")),
            )
        )
    div = pd.divergence(data)
    if div:
        culprit = div.get("culprit")
        rows.append(
            (
                [
                    _td("divergence", code=True),
                    _td(f"{len(div.get('modules') or [])} modules", num=True),
                    _td(int(culprit is not None), num=True),
                    _td(pd.fmt(culprit.get("max_abs")) if culprit else "—", num=True),
                    f"<td>{_verdict(culprit is None)}</td>",
                ],
                culprit is None,
            )
        )
    return _table(["check", "leaves", "failed", "max|Δ|", "verdict"], rows)


def _training(data: dict[str, Any]) -> str:
    train = pd.training(data)
    if not train:
        return ""
    linen = [pd.num(v) for v in train.get("linen_loss") or []]
    nnx = [pd.num(v) for v in train.get("nnx_loss") or []]
    text = (
        f"{_e(train.get('steps', len(linen)))} steps, {_verdict(bool(train.get('passed')))}. "
        f"Final loss: Linen {_e(pd.fmt(pd.last(linen), 6))}, NNX {_e(pd.fmt(pd.last(nnx), 6))}; "
        f"largest relative loss difference {_e(pd.fmt(train.get('max_rel_loss')))}; "
        f"param leaves failed: {_e(train.get('param_leaves_failed', 0))}; "
        f"optimizer-state leaves failed: {_e(train.get('opt_state_leaves_failed', 0))}."
    )
    return (
        f'<section id="training"><h2>Training side by side</h2><p>{text}</p>'
        f'<figure id="loss-curves">{loss_curves_svg(linen, nnx)}</figure></section>'
    )


def _ratio(max_abs: float, tol: float) -> float:
    if not math.isfinite(max_abs):
        return math.inf
    return max_abs / tol if tol > 0 else (math.inf if max_abs > 0 else 0.0)


def _pick(rows: list[ErrorRow]) -> list[ErrorRow]:
    """At most ``MAX_BARS`` rows: failures first, then those closest to their tolerance; original order kept."""
    if len(rows) <= MAX_BARS:
        return rows
    ranked = sorted(range(len(rows)), key=lambda i: (rows[i].passed, -_ratio(rows[i].max_abs, rows[i].tol)))
    keep = sorted(ranked[:MAX_BARS])
    return [rows[i] for i in keep]


def _error_plots(data: dict[str, Any]) -> str:
    parts = []
    div = pd.divergence(data)
    modules = (div or {}).get("modules") or []
    if modules:
        rows = [
            ErrorRow(
                f"{m.get('order', '')}: {pd.module_name(m.get('nnx_path') or m.get('linen_path'))}",
                pd.num(m.get("max_abs")),
                pd.num(m.get("tol")),
                bool(m.get("passed")),
            )
            for m in modules
        ]
        shown = _pick(rows)
        title = "max|Δ| per module, in call order" + (
            f" ({len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
        )
        parts.append(f'<figure id="module-errors">{error_plot_svg(shown, title)}</figure>')
    leaves = pd.leaves_of(data)
    rows = [
        ErrorRow(
            f"{lf.get('check', '')}: {lf.get('path', '')}",
            pd.num(lf.get("max_abs")),
            pd.num(lf.get("tol")),
            bool(lf.get("passed")),
        )
        for lf in leaves
    ]
    shown = _pick(rows)
    title = "max|Δ| per leaf" + (
        f" ({len(shown)} of {len(rows)}: failures and those nearest tolerance)"
        if len(shown) < len(rows)
        else ""
    )
    parts.append(f'<figure id="leaf-errors">{error_plot_svg(shown, title)}</figure>')
    return '<section id="errors"><h2>Error per layer</h2>' + "".join(parts) + "</section>"


def _divergence(data: dict[str, Any]) -> str:
    div = pd.divergence(data)
    if not div:
        return ""
    culprit = div.get("culprit")
    if culprit:
        head = (
            f"<p><strong>First module whose output differs:</strong> <code>{_e(pd.module_name(culprit.get('linen_path')))}</code> "
            f"(Linen) → <code>{_e(pd.module_name(culprit.get('nnx_path')))}</code> (NNX), check "
            f"<code>{_e(culprit.get('check', ''))}</code>: max|Δ| {_e(pd.fmt(culprit.get('max_abs')))} &gt; tol "
            f"{_e(pd.fmt(culprit.get('tol')))}.</p>"
        )
    else:
        head = "<p>Every module's output agrees within tolerance.</p>"
    inputs = div.get("inputs_agree")
    if inputs is not None:
        head += (
            "<p>Inputs agree: yes — the module itself computes differently.</p>"
            if inputs
            else "<p>Inputs agree: <strong>no</strong> — the difference comes from upstream of this module.</p>"
        )
    if culprit and culprit.get("note"):
        head += f"<p>Why: {_e(culprit['note'])}</p>"
    rows = [
        (
            [
                _td(m.get("order", ""), num=True),
                _td(pd.module_name(m.get("linen_path")), code=True),
                _td(pd.module_name(m.get("nnx_path")), code=True),
                _td(pd.fmt(m.get("max_abs")), num=True),
                _td(pd.fmt(m.get("tol")), num=True),
                f"<td>{_verdict(bool(m.get('passed')))}</td>",
            ],
            bool(m.get("passed")),
        )
        for m in div.get("modules") or []
    ]
    table = _table(["#", "Linen", "NNX", "max|Δ|", "tol", "verdict"], rows) if rows else ""
    return f'<section id="divergence"><h2>Divergence</h2>{head}{table}</section>'


def _failures(data: dict[str, Any]) -> str:
    failed = pd.failing_leaves(data)
    if not failed:
        return ""
    rows = [(_leaf_cells(lf, with_check=True), False) for lf in failed]
    return (
        f'<section id="failures"><h2>Failing leaves ({len(failed)})</h2>'
        f"{_table(['check', *_LEAF_HEADER], rows)}</section>"
    )


def _per_check(data: dict[str, Any]) -> str:
    parts = []
    for name in pd.check_names(data):
        s = pd.check_summary(data, name)
        rows = [(_leaf_cells(lf), bool(lf.get("passed"))) for lf in pd.leaves_of(data, name)]
        parts.append(
            f"<details{'' if s['passed'] else ' open'}><summary><code>{_e(name)}</code>: {pd.leaves_text(s['leaves'])}, "
            f"{s['failed']} failed</summary>{_table(_LEAF_HEADER, rows)}</details>"
        )
    return '<section id="checks"><h2>Leaves by check</h2>' + "".join(parts) + "</section>"


def render_parity_html(result: Any) -> str:
    """The whole page for a parity result (``ParityResult`` or its JSON dict). Needs matplotlib."""
    require_matplotlib()
    data = pd.parity_dict(result)
    ok = bool(data.get("passed"))
    word = "PASS" if ok else "FAIL"
    model = data.get("model") or "model"
    n_checks, n_leaves, n_failed = pd.counts(data)
    timings = data.get("timings_s") or {}
    footer = f"schema {_e(data.get('schema', ''))}" + (
        "; timings: " + ", ".join(f"{_e(k)} {_e(pd.fmt(v))} s" for k, v in timings.items()) if timings else ""
    )
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>linen2nnx parity: {word} — {_e(model)}</title><style>{_CSS}</style></head><body>",
            f'<header class="{"pass" if ok else "fail"}"><h1 id="verdict">Parity {word} — {_e(model)}</h1>',
            f"<p>{pd.leaves_text(n_leaves)} in {n_checks} checks; {n_failed} failed. Linen: <code>{_e(data.get('linen_source', ''))}</code>"
            f" · NNX: <code>{_e(data.get('nnx_source', ''))}</code> · tolerance: {_e(pd.tolerance_text(data))}</p></header>",
            '<main><section id="summary"><h2>Checks</h2>',
            _summary(data),
            "</section>",
            _training(data),
            _error_plots(data),
            _divergence(data),
            _failures(data),
            _per_check(data),
            f"<footer>{footer}</footer></main></body></html>\n",
        ]
    )
