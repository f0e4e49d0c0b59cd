"""Rich console rendering of parity results and conversion reports.

The parity view is one row per check (leaves, failures, largest max|Δ|) followed by a row per
failing leaf, so the first screen says *what* drifted and *where* (``all_leaves=True`` lists every
leaf), then the module where Linen and NNX first diverge and the side-by-side training summary.
It is rendered from the parity JSON dict (:mod:`.parity_data`), like every other parity report.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from linen2nnx.reports import parity_data as pd


def make_console(stderr: bool = True) -> Console:
    """A console for reports: the terminal's width, or 120 columns when output is a file or a CI log."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, emoji=False, width=None if probe.is_terminal else 120)


def _verdict(ok: bool) -> str:
    return "[green]pass[/green]" if ok else "[bold red]FAIL[/bold red]"


# (header, justify, never wrap): numbers stay on one line; a path folds rather than being cut short
_LEAF_COLUMNS = (
    ("check", "left", True),
    ("path", "left", False),
    ("shape dtype", "left", True),
    ("max|Δ|", "right", True),
    ("tol", "right", True),
    ("max rel", "right", True),
    ("mean|Δ|", "right", True),
    ("cosine", "right", True),
    ("", "left", True),
)


def parity_table(result: Any, *, all_leaves: bool = False) -> Table:
    """A table of a parity result (``ParityResult`` or its JSON dict): a summary row per check, then
    leaf rows (failures, or all). A leaf's extra metrics (KL, top-k, norm ratio) and note sit dimmed
    under its path, so the path keeps the width; fields a schema version lacks (``dtype`` in /1) are blank."""
    data = pd.parity_dict(result)
    title = f"parity: {data.get('model') or 'model'} — {'PASS' if data.get('passed') else 'FAIL'}"
    table = Table(
        title=escape(title),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption_justify="left",
        caption=escape(
            f"tolerance: {pd.tolerance_text(data)}; ref = Linen; "
            f"Linen: {data.get('linen_source', '')}; NNX: {data.get('nnx_source', '')}"
        ),
    )
    for col, just, no_wrap in _LEAF_COLUMNS:
        table.add_column(
            col, justify=just, no_wrap=no_wrap, overflow="fold", ratio=1 if col == "path" else None
        )
    for name in pd.check_names(data):
        s = pd.check_summary(data, name)
        shown = pd.leaves_of(data, name) if all_leaves else pd.failing_leaves(data, name)
        table.add_row(
            f"[bold]{escape(name)}[/bold]",
            f"{pd.leaves_text(s['leaves'])}, {s['failed']} failed",
            "",
            pd.fmt(s.get("max_abs")),
            "",
            "",
            "",
            "",
            _verdict(bool(s["passed"])),
            end_section=not shown,
        )
        for i, lf in enumerate(shown):
            details = [x for x in (pd.extra_text(lf), str(lf.get("note") or "")) if x]
            path = escape(str(lf.get("path", ""))) + "".join(f"\n[dim]{escape(d)}[/dim]" for d in details)
            table.add_row(
                "",
                path,
                f"{pd.shape_text(lf)} {escape(str(lf.get('dtype') or ''))}".rstrip(),
                pd.fmt(lf.get("max_abs")),
                pd.fmt(lf.get("tol")),
                pd.fmt(lf.get("max_rel")),
                pd.fmt(lf.get("mean_abs")),
                pd.fmt(lf.get("cosine"), 6),
                _verdict(bool(lf.get("passed"))),
                end_section=i == len(shown) - 1,
            )
    return table


def divergence_text(data: dict[str, Any]) -> str | None:
    """One or two lines of console markup naming the first divergent module, or ``None``."""
    div = pd.divergence(data)
    if not div:
        return None
    culprit = div.get("culprit")
    if not culprit:
        return f"divergence: [green]all {len(div.get('modules') or [])} modules agree[/green]"
    inputs = div.get("inputs_agree")
    where = (
        ""
        if inputs is None
        else "\n  inputs agree: "
        + (
            "yes — the module itself computes differently"
            if inputs
            else "[bold]no[/bold] — the difference comes from upstream"
        )
    )
    return (
        f"divergence: first differing module [bold]{escape(pd.module_name(culprit.get('linen_path')))}[/bold] "
        f"(Linen) → [bold]{escape(pd.module_name(culprit.get('nnx_path')))}[/bold] (NNX) in {escape(str(culprit.get('check', '')))}: "
        f"max|Δ| {pd.fmt(culprit.get('max_abs'))} > tol {pd.fmt(culprit.get('tol'))}"
        + where
        + (f"\n  why: {escape(culprit['note'])}" if culprit.get("note") else "")
    )


def training_text(data: dict[str, Any]) -> str | None:
    """The side-by-side training summary as one line of console markup, or ``None``."""
    train = pd.training(data)
    if not train:
        return None
    linen, nnx = train.get("linen_loss") or [], train.get("nnx_loss") or []
    return (
        f"training: {train.get('steps', len(linen))} steps {_verdict(bool(train.get('passed')))}; final loss "
        f"Linen {pd.fmt(pd.last(linen), 6)}, NNX {pd.fmt(pd.last(nnx), 6)}; max rel. loss diff "
        f"{pd.fmt(train.get('max_rel_loss'))}; failed leaves: params {train.get('param_leaves_failed', 0)}, "
        f"opt_state {train.get('opt_state_leaves_failed', 0)}"
    )


def render_parity(result: Any, console: Console | None = None, *, all_leaves: bool = False) -> None:
    """Print a parity result (``ParityResult`` or its JSON dict): the table, the divergence culprit,
    the training summary and timings."""
    console = console or Console()
    data = pd.parity_dict(result)
    console.print(parity_table(data, all_leaves=all_leaves))
    for line in (divergence_text(data), training_text(data)):
        if line:
            console.print(line, soft_wrap=True)
    timings = data.get("timings_s") or {}
    if timings:
        console.print(
            "timings: " + ", ".join(f"{escape(str(k))} {pd.num(v):.2f}s" for k, v in timings.items()),
            soft_wrap=True,
        )


def conversion_table(report: Any) -> Table:
    """A table of a ``ConversionReport``: every Linen leaf and its NNX home, then kept-from-init state."""
    table = Table(
        title=escape(f"conversion: {report.source} → {report.destination or report.target}"),
        title_justify="left",
        caption=report.summary(),
    )
    for col in ("Linen", "NNX", "type", "shape", "dtype", "how"):
        table.add_column(col)
    for m in report.mapped:
        table.add_row(escape(m.linen), escape(m.nnx), m.var_type, str(tuple(m.shape)), m.dtype, m.how)
    for k in report.kept_from_init:
        table.add_row(
            "[dim]—[/dim]",
            escape(k.nnx),
            k.var_type,
            str(tuple(k.shape)),
            k.dtype,
            f"[dim]kept from init{': ' + escape(k.why) if k.why else ''}[/dim]",
        )
    for m in report.optimizer or []:
        table.add_row(escape(m.linen), escape(m.nnx), m.var_type, str(tuple(m.shape)), m.dtype, m.how)
    for name, why in sorted(report.ignored.items()):
        table.add_row(escape(name), "[dim]—[/dim]", "", "", "", f"[yellow]ignored[/yellow]: {escape(why)}")
    return table


def render_conversion(report: Any, console: Console | None = None) -> None:
    """Print a ``ConversionReport`` table and its one-line summary."""
    console = console or Console()
    console.print(conversion_table(report))
