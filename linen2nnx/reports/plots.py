"""Plots for the HTML parity report, drawn with matplotlib and returned as inline SVG text.

matplotlib is an optional dependency (the ``html`` extra): only ``--html`` needs it, and the CLI
calls :func:`require_matplotlib` before the (long) check so a missing install fails in a second.
Text is drawn as paths (``svg.fonttype = path``) so the SVG needs no font and no network, and each
figure gets its own id salt so several SVGs can live in one page without clashing ids.

The two loss-curve colours are used by nothing else in the page: the screenshot test finds each
curve by its colour.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from linen2nnx.errors import L2NError

LINEN_COLOR = "#0072B2"  # blue (Okabe-Ito): the Linen reference
NNX_COLOR = "#E69F00"  # orange (Okabe-Ito): the NNX twin
PASS_COLOR = "#009E73"
FAIL_COLOR = "#CC3311"
TOL_COLOR = "#222222"
INSTALL_HINT = "pip install 'linen2nnx[html]'"
MAX_BARS = 60  # an error plot shows at most this many rows (the ones closest to their tolerance)


class ErrorRow(NamedTuple):
    """One bar of the per-layer error plot."""

    label: str
    max_abs: float
    tol: float
    passed: bool


def require_matplotlib() -> None:
    """Raise a named error (exit 2 at the CLI) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise L2NError(
            f"the HTML report draws its plots with matplotlib, which is not installed: {INSTALL_HINT}"
        ) from e


def _svg(fig: Any, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    # a glyph the font lacks (a CJK module name) or a layout a huge label defeats still draws; the
    # report is the output, not matplotlib's warnings on the console
    with warnings.catch_warnings(), matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": salt}):
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # drop the XML declaration and doctype: it is inlined in HTML
    return re.sub(
        r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S
    )  # RDF block: URLs, no content


def _figure(width: float, height: float) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _finite(values: Sequence[float]) -> list[float]:
    return [v if math.isfinite(v) else math.nan for v in values]


def loss_curves_svg(linen_loss: Sequence[float], nnx_loss: Sequence[float]) -> str:
    """Linen and NNX training loss per step: two labelled lines (the NNX one dashed, on top, so a
    perfect match still shows both colours), and below them |Linen − NNX| on a log scale."""
    fig = _figure(9.0, 5.2)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.4))
    steps_l = range(1, len(linen_loss) + 1)
    steps_n = range(1, len(nnx_loss) + 1)
    top.plot(
        steps_l, _finite(linen_loss), color=LINEN_COLOR, linewidth=5, label="Linen", solid_capstyle="butt"
    )
    top.plot(steps_n, _finite(nnx_loss), color=NNX_COLOR, linewidth=2.2, linestyle=(0, (5, 3)), label="NNX")
    top.set_ylabel("training loss")
    top.set_title("Training loss per step: Linen vs NNX")
    top.legend(loc="upper right")
    top.grid(alpha=0.3)
    gaps = [
        abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.nan
        for a, b in zip(linen_loss, nnx_loss)
    ]
    floor = _floor([g for g in gaps if g > 0])
    steps = range(1, len(gaps) + 1)
    bottom.plot(
        steps,
        [g if g > 0 else math.nan for g in gaps],
        color=TOL_COLOR,
        marker="o",
        markersize=3,
        linewidth=1,
    )
    zeros = [s for s, g in zip(steps, gaps) if g == 0]
    if zeros:  # exact agreement has no place on a log axis: hollow markers on the floor, said in words
        bottom.plot(
            zeros,
            [floor] * len(zeros),
            linestyle="none",
            marker="o",
            markersize=4,
            markerfacecolor="none",
            markeredgecolor=TOL_COLOR,
            label="exactly 0 (drawn at the floor)",
        )
        bottom.legend(loc="upper right", fontsize=7)
    bottom.set_yscale("log")
    bottom.set_ylabel("|Linen − NNX|")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3, which="both")
    from matplotlib.ticker import MaxNLocator

    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _svg(fig, "loss")


def _floor(positive: Sequence[float]) -> float:
    """Where an exact zero is drawn on a log axis: a decade below the smallest positive value."""
    finite = [v for v in positive if math.isfinite(v) and v > 0]
    return min(finite) / 10 if finite else 1e-12


def error_plot_svg(rows: Sequence[ErrorRow], title: str) -> str:
    """max|Δ| per module or leaf as horizontal bars on a log axis, with each row's tolerance as a
    black stepped line. Exact zeros sit on the left edge (hatched); inf (missing) on the right edge."""
    rows = list(rows)
    fig = _figure(9.0, 1.2 + 0.24 * max(len(rows), 1))
    ax = fig.subplots()
    if not rows:
        ax.text(0.5, 0.5, "nothing compared", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _svg(fig, "errors-" + title)
    values = [r.max_abs for r in rows] + [r.tol for r in rows]
    floor = _floor(values)
    ceiling = max([v for v in values if math.isfinite(v)] + [floor]) * 100
    widths, hatches = [], []
    for r in rows:
        v = r.max_abs
        widths.append(ceiling if not math.isfinite(v) else max(v, floor))
        hatches.append("//" if v == 0 else ("xx" if not math.isfinite(v) else ""))
    ys = list(range(len(rows)))
    bars = ax.barh(
        ys, widths, left=floor / 10, color=[PASS_COLOR if r.passed else FAIL_COLOR for r in rows], height=0.7
    )
    for bar, hatch in zip(bars, hatches):
        bar.set_hatch(hatch)
    tol_x, tol_y = [], []
    for y, r in zip(ys, rows):
        t = r.tol if math.isfinite(r.tol) and r.tol > 0 else math.nan
        tol_x += [t, t]
        tol_y += [y - 0.5, y + 0.5]
    ax.plot(tol_x, tol_y, color=TOL_COLOR, linewidth=1.6, linestyle="--", label="tolerance")
    ax.set_xscale("log")
    ax.set_xlim(floor / 10, ceiling * 10)
    ax.set_yticks(ys, [r.label for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("max|Δ| (log scale; hatched: exactly 0 / missing)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3, which="major")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color=PASS_COLOR, label="pass"),
            Patch(color=FAIL_COLOR, label="fail"),
            *ax.get_legend_handles_labels()[0],
        ],
        loc="lower right",
        fontsize=7,
    )
    return _svg(fig, "errors-" + title)
