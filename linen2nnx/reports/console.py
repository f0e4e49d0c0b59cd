"""Rich console rendering of parity results and conversion reports.

The parity view is one row per check (leaves, failures, worst leaf and its margin) followed by a
row per failing leaf, so the first screen says *what* drifted and *where*; ``all_leaves=True``
lists every leaf.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def make_console(stderr: bool = True) -> Console:
    """A console for reports: the terminal's width, or 120 columns when output is a file or a CI log."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, width=None if probe.is_terminal else 120)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x == x and abs(x) != float("inf") else str(x)


def _verdict(ok: bool) -> str:
    return "[green]pass[/green]" if ok else "[bold red]FAIL[/bold red]"


def parity_table(result: Any, *, all_leaves: bool = False) -> Table:
    """A table of a ``ParityResult``: a summary row per check, then leaf rows (failures, or all)."""
    title = f"parity: {result.model or 'model'} — {'PASS' if result.passed else 'FAIL'}"
    table = Table(title=title, title_justify="left", caption=(
        f"pass iff max|Δ| ≤ {result.atol_factor:g}·(1 + max|ref|); ref = Linen; "
        + escape(f"Linen: {result.linen_source}; NNX: {result.nnx_source}")))
    for col, just in (("check", "left"), ("path", "left"), ("shape", "left"), ("max|Δ|", "right"),
                      ("tol", "right"), ("max rel", "right"), ("max|ref|", "right"), ("cosine", "right"),
                      ("", "left")):
        table.add_column(col, justify=just, no_wrap=col in ("max|Δ|", "tol"))
    for check, leaves in sorted(result.by_check().items()):
        failed = [lf for lf in leaves if not lf.passed]
        worst = result.worst(check)
        table.add_row(
            f"[bold]{check}[/bold]", f"{len(leaves)} leaves, {len(failed)} failed",
            "", _fmt(worst.max_abs) if worst else "", _fmt(worst.tol) if worst else "", "", "", "",
            _verdict(not failed), end_section=not (all_leaves or failed),
        )
        shown = leaves if all_leaves else failed
        for i, lf in enumerate(shown):
            table.add_row(
                "", escape(lf.path), str(tuple(lf.shape)), _fmt(lf.max_abs), _fmt(lf.tol), _fmt(lf.max_rel),
                _fmt(lf.ref_max), _fmt(lf.cosine), _verdict(lf.passed) + (f" {escape(lf.note)}" if lf.note else ""),
                end_section=i == len(shown) - 1,
            )
    return table


def render_parity(result: Any, console: Console | None = None, *, all_leaves: bool = False) -> None:
    """Print a ``ParityResult`` (summary per check, failing leaves named) and timings."""
    console = console or Console()
    console.print(parity_table(result, all_leaves=all_leaves))
    if result.timings:
        console.print("timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items()))


def conversion_table(report: Any) -> Table:
    """A table of a ``ConversionReport``: every Linen leaf and its NNX home, then kept-from-init state."""
    table = Table(title=escape(f"conversion: {report.source} → {report.destination or report.target}"),
                  title_justify="left", caption=report.summary())
    for col in ("Linen", "NNX", "type", "shape", "dtype", "how"):
        table.add_column(col)
    for m in report.mapped:
        table.add_row(escape(m.linen), escape(m.nnx), m.var_type, str(tuple(m.shape)), m.dtype, m.how)
    for k in report.kept_from_init:
        table.add_row("[dim]—[/dim]", escape(k.nnx), k.var_type, str(tuple(k.shape)), k.dtype, "[dim]kept from init[/dim]")
    for m in report.optimizer or []:
        table.add_row(escape(m.linen), escape(m.nnx), m.var_type, str(tuple(m.shape)), m.dtype, m.how)
    for name, why in sorted(report.ignored.items()):
        table.add_row(escape(name), "[dim]—[/dim]", "", "", "", f"[yellow]ignored[/yellow]: {escape(why)}")
    return table


def render_conversion(report: Any, console: Console | None = None) -> None:
    """Print a ``ConversionReport`` table and its one-line summary."""
    console = console or Console()
    console.print(conversion_table(report))
