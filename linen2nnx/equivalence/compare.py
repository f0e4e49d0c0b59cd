"""Leaf-by-leaf comparison and the parity result types (JSON schema ``linen2nnx-parity/2``).

The reference is always the Linen side. A leaf passes iff ``max|Δ| <= tol`` with ``tol`` from the
tolerance table (:mod:`.tolerances`: per dtype, per path pattern, growing with depth); the metrics
themselves live in :mod:`.metrics`. Non-finite values must sit at the same places with the same
values on both sides, and a dtype that differs between the sides fails the leaf whatever the
numbers say: a dropped ``dtype=`` changes results on an accelerator even where it does not on CPU.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from linen2nnx.equivalence.metrics import cosine, logit_metrics, norm_ratio
from linen2nnx.equivalence.tolerances import Tolerances, less_precise
from linen2nnx.trees import dtype_name

SCHEMA = "linen2nnx-parity/2"

#: What ``kind=`` adds to a leaf's ``extra`` metrics.
LOGITS, GRAD = "logits", "grad"


@dataclasses.dataclass
class LeafResult:
    check: str
    """``forward/eval``, ``forward/train``, ``loss/eval``, ``grad``, ``batch_stats``, ``intermediates`` …"""
    path: str
    """NNX path for state and gradients, output key path for forward results."""
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    """Elementwise ``max |Δ| / (|ref| + 1e-12)`` — informational; the verdict uses ``tol``."""
    ref_max: float
    cosine: float
    tol: float
    passed: bool
    note: str = ""
    """Why a leaf failed without numbers (missing on one side, shape or dtype mismatch)."""
    dtype: str = ""
    mean_abs: float = 0.0
    extra: dict[str, float] = dataclasses.field(default_factory=dict)
    """``kl_max``, ``kl_mean``, ``top1``, ``top5`` for logits; ``norm_ratio`` for gradients."""

    @property
    def margin(self) -> float:
        """``max_abs / tol``: below 1 passes; how far past (or short of) failing a leaf is."""
        if self.tol <= 0:
            return math.inf if self.max_abs > 0 else 0.0
        return self.max_abs / self.tol

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "path": self.path,
            "shape": [int(s) for s in self.shape],
            "dtype": self.dtype,
            "max_abs": json_num(self.max_abs),
            "max_rel": json_num(self.max_rel),
            "mean_abs": json_num(self.mean_abs),
            "cosine": json_num(self.cosine),
            "tol": json_num(self.tol),
            "passed": bool(self.passed),
            "note": self.note,
            "extra": {k: json_num(v) for k, v in sorted(self.extra.items())},
        }


def compare_leaf(
    check: str,
    path: str,
    ref: Any,
    got: Any,
    tolerances: Tolerances | float | None = None,
    *,
    depth: int = 0,
    kind: str | None = None,
) -> LeafResult:
    """Compare one NNX leaf (``got``) against its Linen reference (``ref``).

    ``kind``: ``"logits"`` adds KL / top-k metrics, ``"grad"`` the norm ratio.
    """
    tols = Tolerances.coerce(tolerances)
    ref_dtype, got_dtype = dtype_name(getattr(ref, "dtype", None)), dtype_name(getattr(got, "dtype", None))
    ref = np.asarray(ref)
    got = np.asarray(got)
    ref_dtype, got_dtype = ref_dtype or dtype_name(ref.dtype), got_dtype or dtype_name(got.dtype)
    dtype = less_precise(ref_dtype, got_dtype)
    if ref.shape != got.shape:
        return missing(
            check, path, ref.shape, f"shape differs: Linen {ref.shape}, NNX {got.shape}", dtype=dtype
        )
    r, g = _as_float64(ref), _as_float64(got)
    finite = np.isfinite(r) & np.isfinite(g)
    same_nonfinite = bool(
        np.array_equal(finite, np.isfinite(r)) and np.array_equal(r[~finite], g[~finite], equal_nan=True)
    )
    diff = np.abs(g[finite] - r[finite])
    ref_max = float(np.max(np.abs(r[finite]))) if diff.size else 0.0
    max_abs = float(np.max(diff)) if diff.size else 0.0
    mean_abs = float(np.mean(diff)) if diff.size else 0.0
    max_rel = float(np.max(diff / (np.abs(r[finite]) + 1e-12))) if diff.size else 0.0
    if not same_nonfinite:
        max_abs = max_rel = mean_abs = math.inf
    tol = tols.tol(check, path, dtype, ref_max, depth)
    extra: dict[str, float] = {}
    if kind == LOGITS and (np.issubdtype(ref.dtype, np.floating) or ref_dtype in ("bfloat16", "float16")):
        extra = logit_metrics(r, g)
    elif kind == GRAD:
        extra = norm_ratio(r, g)
    passed, note = _verdict(max_abs <= tol, ref_dtype, got_dtype, r, g, kind == GRAD and ref_max > tol)
    return LeafResult(
        check,
        path,
        tuple(ref.shape),
        max_abs,
        max_rel,
        ref_max,
        cosine(r, g),
        tol,
        passed,
        note,
        dtype,
        mean_abs,
        extra,
    )


def _verdict(
    within: bool, ref_dtype: str, got_dtype: str, r: np.ndarray, g: np.ndarray, real_gradient: bool
) -> tuple[bool, str]:
    """Whether a leaf passes, and why not where its numbers alone would say it does."""
    if ref_dtype != got_dtype:
        return False, f"dtype differs: Linen {ref_dtype}, NNX {got_dtype}"
    if np.isnan(r).any():  # NaN on both sides matches whatever each computes: no evidence
        return False, "Linen's own value is NaN here: nothing is compared (change the example batch)"
    if real_gradient and not np.any(g != 0):  # Linen's beyond noise, NNX's none at all
        return False, "the NNX gradient is zero where Linen's is not (a stop_gradient, a frozen part)"
    return bool(within), ""


def _as_float64(x: np.ndarray) -> np.ndarray:
    """``x`` as float64 for the metrics; a complex array as its real and imaginary parts side by side
    (a cast would drop the imaginary part: a conjugated output would compare equal)."""
    if np.iscomplexobj(x):
        return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
    return x.astype(np.float64)


def compare_trees(
    check: str,
    ref: Mapping[str, Any],
    got: Mapping[str, Any],
    tolerances: Tolerances | float | None = None,
    *,
    depth: int = 0,
    kind: str | None = None,
) -> list[LeafResult]:
    """Compare two ``{path: array}`` dicts; a path on one side only is a failed leaf."""
    out = []
    for path in sorted(set(ref) | set(got)):
        if path not in got:
            out.append(missing(check, path, np.shape(ref[path]), "missing on the NNX side"))
        elif path not in ref:
            out.append(missing(check, path, np.shape(got[path]), "missing on the Linen side"))
        else:
            out.append(compare_leaf(check, path, ref[path], got[path], tolerances, depth=depth, kind=kind))
    return out


def compare_outputs(
    check_name: str, ref: Any, got: Any, tolerances: Tolerances | float | None = None, depth: int = 0
) -> list[LeafResult]:
    """Compare two output pytrees leaf by leaf (paths like ``out[0]['logits']``), as logits."""
    import jax

    ref_leaves = jax.tree_util.tree_flatten_with_path(ref)[0]
    got_leaves, got_def = jax.tree_util.tree_flatten_with_path(got)
    ref_def = jax.tree_util.tree_structure(ref)
    # a NamedTuple / dataclass output of the migrated copy is another class object of the same name and
    # fields (the Linen and NNX packages are imported side by side): the same structure as printed
    if ref_def != got_def and str(ref_def) != str(got_def):
        return [missing(check_name, "out", (), f"output structure differs: Linen {ref_def}, NNX {got_def}")]
    return [
        compare_leaf(check_name, "out" + jax.tree_util.keystr(rp), r, g, tolerances, depth=depth, kind=LOGITS)
        for (rp, r), (_, g) in zip(ref_leaves, got_leaves)
    ]


def missing(check: str, path: str, shape: tuple[int, ...], note: str, *, dtype: str = "") -> LeafResult:
    """A leaf that failed without numbers (absent on one side, shape mismatch, a side that raised)."""
    return LeafResult(
        check, path, tuple(shape), math.inf, math.inf, 0.0, 0.0, 0.0, False, note, dtype, math.inf
    )


@dataclasses.dataclass
class ParityResult:
    """The verdict of one ``check`` run: every compared leaf, localisation, training, timings."""

    leaves: list[LeafResult]
    passed: bool
    atol_factor: float = 1e-5
    """The fp32 base tolerance (kept for callers of the pre-table API)."""
    model: str = ""
    linen_source: str = ""
    nnx_source: str = ""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    tolerances: Tolerances | None = None
    divergence: Any = None
    """A :class:`~linen2nnx.equivalence.divergence.Divergence` when the check failed and was localised."""
    training: Any = None
    """A :class:`~linen2nnx.equivalence.training.TrainingResult` when ``steps > 0``."""

    @property
    def failures(self) -> list[LeafResult]:
        return [leaf for leaf in self.leaves if not leaf.passed]

    def by_check(self) -> dict[str, list[LeafResult]]:
        out: dict[str, list[LeafResult]] = {}
        for leaf in self.leaves:
            out.setdefault(leaf.check, []).append(leaf)
        return out

    def worst(self, check: str | None = None) -> LeafResult | None:
        """The leaf with the largest ``max_abs / tol`` (the one closest to, or furthest past, failing)."""
        cands = [lf for lf in self.leaves if check is None or lf.check == check]
        return max(cands, key=lambda lf: (not lf.passed, lf.margin), default=None)

    def failure_table(self, limit: int = 40) -> str:
        """A plain-text table of the failing leaves (and the culprit module), for assertion messages."""
        rows = [("check", "path", "shape", "dtype", "max|Δ|", "tol", "cosine", "note")]
        for lf in sorted(self.failures, key=lambda lf: (lf.check, lf.path))[:limit]:
            rows.append(
                (
                    lf.check,
                    lf.path,
                    str(tuple(lf.shape)),
                    lf.dtype,
                    f"{lf.max_abs:.3g}",
                    f"{lf.tol:.3g}",
                    f"{lf.cosine:.6f}",
                    lf.note,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = [
            f"parity FAILED for {self.model or 'model'}: {len(self.failures)} of {len(self.leaves)} leaves"
        ]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
        if len(self.failures) > limit:
            lines.append(f"  ... and {len(self.failures) - limit} more")
        if self.divergence is not None:
            lines.append(self.divergence.summary())
        if self.training is not None and not self.training.passed:
            lines.append(self.training.summary())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Stable JSON (``schema: linen2nnx-parity/2``, documented in docs/equivalence.md)."""
        checks = {
            name: {
                "passed": all(lf.passed for lf in leaves),
                "leaves": len(leaves),
                "failed": sum(not lf.passed for lf in leaves),
                "max_abs": json_num(max((lf.max_abs for lf in leaves), default=0.0)),
            }
            for name, leaves in sorted(self.by_check().items())
        }
        tolerances = self.tolerances or Tolerances.coerce(self.atol_factor)
        return {
            "schema": SCHEMA,
            "passed": bool(self.passed),
            "model": self.model,
            "linen_source": self.linen_source,
            "nnx_source": self.nnx_source,
            "tolerances": tolerances.to_json(),
            "checks": checks,
            "leaves": [lf.to_json() for lf in sorted(self.leaves, key=lambda lf: (lf.check, lf.path))],
            "divergence": self.divergence.to_json() if self.divergence is not None else None,
            "training": self.training.to_json() if self.training is not None else None,
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
        }


def json_num(x: float) -> float | str:
    """JSON has no inf / nan: spell them as strings so the file stays standard JSON."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
