"""Leaf-by-leaf comparison and the parity result types.

A leaf passes iff ``max|Δ| <= atol_factor * (1 + max|ref|)``: absolute near zero, relative to the
leaf's scale for large values, one number per leaf so a report can say *which* tensor drifted.
The reference is always the Linen side. Metrics are computed in float64 on the host so they are
not themselves a source of error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

SCHEMA = "linen2nnx-parity/1"


@dataclasses.dataclass
class LeafResult:
    check: str
    """``forward/eval``, ``forward/train``, ``loss/eval``, ``loss/train``, ``grad`` or ``batch_stats``."""
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
    """Why a leaf failed without numbers (missing on one side, shape or structure mismatch)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check, "path": self.path, "shape": list(self.shape),
            "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel), "ref_max": _num(self.ref_max),
            "cosine": _num(self.cosine), "tol": _num(self.tol), "passed": self.passed, "note": self.note,
        }


@dataclasses.dataclass
class ParityResult:
    """The verdict of one ``check`` run: every compared leaf, the overall verdict, timings."""

    leaves: list[LeafResult]
    passed: bool
    atol_factor: float
    model: str = ""
    linen_source: str = ""
    nnx_source: str = ""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

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
        return max(cands, key=lambda lf: (not lf.passed, _ratio(lf)), default=None)

    def to_json(self) -> dict[str, Any]:
        """Stable JSON (``schema: linen2nnx-parity/1``): leaves sorted by check then path."""
        checks = {
            name: {"passed": all(lf.passed for lf in leaves), "leaves": len(leaves),
                   "failed": sum(not lf.passed for lf in leaves),
                   "max_abs": _num(max((lf.max_abs for lf in leaves), default=0.0))}
            for name, leaves in sorted(self.by_check().items())
        }
        return {
            "schema": SCHEMA,
            "passed": self.passed,
            "model": self.model,
            "linen_source": self.linen_source,
            "nnx_source": self.nnx_source,
            "atol_factor": self.atol_factor,
            "checks": checks,
            "leaves": [lf.to_json() for lf in sorted(self.leaves, key=lambda lf: (lf.check, lf.path))],
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
        }


def compare_leaf(check: str, path: str, ref: Any, got: Any, atol_factor: float) -> LeafResult:
    """Compare one NNX leaf (``got``) against its Linen reference."""
    ref = np.asarray(ref)
    got = np.asarray(got)
    if ref.shape != got.shape:
        return missing(check, path, ref.shape, f"shape differs: Linen {ref.shape}, NNX {got.shape}")
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    finite = np.isfinite(r) & np.isfinite(g)
    # Non-finite values must sit at the same places with the same values (nan == nan) on both sides.
    same_nonfinite = bool(np.array_equal(finite, np.isfinite(r))
                          and np.array_equal(r[~finite], g[~finite], equal_nan=True))
    diff = np.abs(g[finite] - r[finite])
    ref_max = float(np.max(np.abs(r[finite]))) if diff.size else 0.0
    max_abs = float(np.max(diff)) if diff.size else 0.0
    max_rel = float(np.max(diff / (np.abs(r[finite]) + 1e-12))) if diff.size else 0.0
    if not same_nonfinite:
        max_abs = max_rel = math.inf
    tol = atol_factor * (1.0 + ref_max)
    return LeafResult(check, path, tuple(ref.shape), max_abs, max_rel, ref_max, _cosine(r, g), tol,
                      bool(max_abs <= tol))


def compare_trees(check: str, ref: Mapping[str, Any], got: Mapping[str, Any], atol_factor: float) -> list[LeafResult]:
    """Compare two ``{path: array}`` dicts; a path on one side only is a failed leaf."""
    out = []
    for path in sorted(set(ref) | set(got)):
        if path not in got:
            out.append(missing(check, path, np.shape(ref[path]), "missing on the NNX side"))
        elif path not in ref:
            out.append(missing(check, path, np.shape(got[path]), "missing on the Linen side"))
        else:
            out.append(compare_leaf(check, path, ref[path], got[path], atol_factor))
    return out


def missing(check: str, path: str, shape: tuple[int, ...], note: str) -> LeafResult:
    return LeafResult(check, path, tuple(shape), math.inf, math.inf, 0.0, 0.0, 0.0, False, note)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.nan_to_num(a.ravel(), posinf=0.0, neginf=0.0)
    b = np.nan_to_num(b.ravel(), posinf=0.0, neginf=0.0)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _ratio(leaf: LeafResult) -> float:
    if leaf.tol <= 0:
        return math.inf if leaf.max_abs > 0 else 0.0
    return leaf.max_abs / leaf.tol


def _num(x: float) -> float | str:
    """JSON has no inf / nan: spell them as strings so the file stays standard JSON."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
