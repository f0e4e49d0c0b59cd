"""How close is close enough: a tolerance per dtype, per leaf-path pattern, growing with depth.

A leaf passes iff ``max|Δ| <= tol`` with

    tol = base(dtype, check, path) · (1 + max|ref|) · (1 + depth) ** depth_exponent

- ``base`` comes from the dtype of the compared values (the less precise of the two sides):
  ``float64`` 1e-12, ``float32`` 1e-5, ``float16`` 2e-3, ``bfloat16`` 2e-2 — about ten times the
  unit roundoff of the format at fp32 and a few ulps for the 16-bit formats, where one rounding
  step already moves a value by ~1e-3 / ~8e-3. Integer and bool leaves must match exactly (0).
- ``(1 + max|ref|)`` makes the bound absolute near zero and relative for large values, one number
  per leaf so a report can say *which* tensor drifted.
- ``depth`` is how many layers the value has passed through (see :mod:`.check`: the number of
  parameterised modules for outputs, losses and gradients, the number of parameterised module calls
  completed so far for the activations :mod:`.divergence` compares). Rounding errors of independent
  layers add up like a random walk, so the budget grows with the square root by default
  (``depth_exponent = 0.5``): a 0-layer value gets the bare base, a 24-layer model's logits 5x it.
- ``overrides`` replace ``base`` for leaves whose ``check:path`` (or just ``path``) matches a glob
  pattern, first match wins: ``{"grad:*/embedding": 1e-4, "forward/*:*": 5e-5}``.
- ``compute_dtype``: the least precise float dtype the Linen program computes in (a ``Dense(dtype=
  jnp.bfloat16)`` in a float32 model; :func:`.check.check` reads it off the traced program). A float
  leaf gets the base of that dtype when it is the less precise: a float32 gradient that went through
  a bfloat16 layer is as exact as bfloat16 arithmetic, and two faithful programs (or one program,
  jitted and not) differ by a few of its ulps. An output leaf none of whose operations is in it
  or sown value (``exact_outputs``) keeps its own dtype's base: one bfloat16 head does not loosen a
  float32 one.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

DEFAULT_BASE: dict[str, float] = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
FP32_BASE = DEFAULT_BASE["float32"]
DEFAULT_DEPTH_EXPONENT = 0.5
FORMULA = "tol = base[dtype] * (1 + max|ref|) * (1 + depth) ** depth_exponent"


@dataclasses.dataclass(frozen=True)
class Tolerances:
    """The tolerance table; ``Tolerances()`` is the documented default."""

    base: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_BASE))
    depth_exponent: float = DEFAULT_DEPTH_EXPONENT
    overrides: Mapping[str, float] = dataclasses.field(default_factory=dict)
    compute_dtype: str | None = None
    exact_outputs: frozenset[str] = frozenset()
    """Output leaves (``out[0]``) and sown values (their NNX paths) whose whole computation stays in
    float32 or wider though the program has a coarser ``compute_dtype`` elsewhere (an fp32 head or
    auxiliary loss beside bfloat16 layers): their ``forward/*`` and ``intermediates*`` leaves keep
    their own dtype's base (:func:`.precision.linen_compute_dtype`)."""

    @classmethod
    def coerce(cls, value: Tolerances | float | Mapping[str, Any] | None) -> Tolerances:
        """``None`` -> defaults; a float -> the fp32 (and fp64) base; a dict -> ``Tolerances(**dict)``.

        A bare float keeps the pre-table API (``atol_factor=1e-5``) working.
        """
        if value is None:
            return cls()
        if isinstance(value, Tolerances):
            return value
        if isinstance(value, (int, float)):
            return cls(base={**DEFAULT_BASE, "float32": float(value), "float64": float(value)})
        if isinstance(value, Mapping):
            data = dict(value)
            if "base" in data:
                data["base"] = {**DEFAULT_BASE, **data["base"]}
            return cls(**data)
        raise TypeError(f"tolerances: expected Tolerances, a float or a dict, got {type(value).__name__}")

    def base_for(self, check: str, path: str, dtype: str) -> float:
        """The base factor for one leaf: a matching override, else the dtype's entry."""
        for pattern, factor in self.overrides.items():
            if fnmatch.fnmatchcase(f"{check}:{path}", pattern) or fnmatch.fnmatchcase(path, pattern):
                return float(factor)
        exact = check.startswith(("forward/", "intermediates")) and path in self.exact_outputs
        if self.compute_dtype and not exact and dtype in DEFAULT_BASE and dtype != self.compute_dtype:
            dtype = less_precise(dtype, self.compute_dtype)  # a float leaf computed in a coarser dtype
        if dtype in self.base:
            return float(self.base[dtype])
        try:
            kind = np.dtype(dtype).kind
        except TypeError:
            kind = "f"
        if kind in "iub":
            return 0.0  # integers and booleans must match exactly
        return float(self.base.get("float32", FP32_BASE))

    def tol(self, check: str, path: str, dtype: str, ref_max: float, depth: int = 0) -> float:
        """The bound ``max|Δ|`` must not exceed (see the module docstring for the formula)."""
        growth = (1.0 + max(0, depth)) ** self.depth_exponent
        return self.base_for(check, path, dtype) * (1.0 + ref_max) * growth

    @property
    def fp32(self) -> float:
        return float(self.base.get("float32", FP32_BASE))

    def to_json(self) -> dict[str, Any]:
        return {
            "formula": FORMULA,
            "base": {k: float(v) for k, v in sorted(self.base.items())},
            "depth_exponent": self.depth_exponent,
            "overrides": {k: float(v) for k, v in self.overrides.items()},
            **({"compute_dtype": self.compute_dtype} if self.compute_dtype else {}),
        }


def less_precise(a: str, b: str) -> str:
    """Of two dtype names, the one with the larger default base (what a comparison is limited by)."""

    def rank(name: str) -> float:
        if name in DEFAULT_BASE:
            return DEFAULT_BASE[name]
        return -math.inf

    return a if rank(a) >= rank(b) else b
