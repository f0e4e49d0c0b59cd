"""Parameters whose gradient is rounding noise: their updates under Adam are noise too.

A parameter the loss does not depend on in exact arithmetic (the key bias of dot-product attention
adds the same number to every score of a softmax row) gets a gradient of rounding size, different in
sign and size between any two programs that compute the same thing. An optimizer that normalises its
updates (Adam divides by the root of the second moment) turns that noise into updates of about the
learning rate, so after a few steps the two sides' copies of such a parameter differ by far more than
any tolerance, though the migration changed nothing. ``check --steps`` would fail every correct
migration of an attention layer with a key bias.

So a ``train/params`` leaf that fails is excused when, at every step, its gradient on *both* sides
stayed at rounding level next to the model's largest gradient (``base x max |g|``, the fp32 base of
the tolerance table), and neither side's was exactly zero at every step while the other's was not
(a ``stop_gradient`` one side lost: one side trains the parameter, the other never does): the note
says so and by how much. Its gradient itself is still compared by the
``grad`` check, and its optimizer moments (built from those gradients) by ``train/opt_state``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from linen2nnx.equivalence.compare import LeafResult
from linen2nnx.equivalence.tolerances import Tolerances


def _max_abs(value: Any) -> float:
    array = np.asarray(value)
    return float(np.max(np.abs(array))) if array.size else 0.0


class RoundingGradients:
    """Which parameters have had a rounding-level gradient on both sides at every step so far."""

    def __init__(self, tols: Tolerances) -> None:
        self.tols = tols
        self.noise: dict[str, tuple[float, float]] | None = None  # path -> (its max |g|, the model's)
        self.moved: dict[str, list[bool]] = {}  # path -> [a Linen gradient was not 0, an NNX one was not]

    def add(self, linen: Mapping[str, Any], nnx_grads: Mapping[str, Any]) -> None:
        """One step's gradients, by NNX path on both sides."""
        sizes = {path: _max_abs(g) for path, g in linen.items()}
        scale = max(sizes.values(), default=0.0)
        noise = {}
        for path, size in sizes.items():
            if path not in nnx_grads:
                continue
            dtype = str(np.asarray(linen[path]).dtype)
            bound = self.tols.base_for("grad", path, dtype) * scale
            other = _max_abs(nnx_grads[path])
            moved = self.moved.setdefault(path, [False, False])
            moved[0], moved[1] = moved[0] or size > 0, moved[1] or other > 0
            if scale > 0 and max(size, other) <= bound:
                noise[path] = (max(size, other), scale)
        if self.noise is None:
            self.noise = noise
            return
        self.noise = {
            path: (max(seen[0], noise[path][0]), max(seen[1], noise[path][1]))
            for path, seen in self.noise.items()
            if path in noise
        }

    def excuse(self, leaves: list[LeafResult]) -> list[LeafResult]:
        """``leaves`` with each failing ``train/params`` leaf of a rounding-noise parameter passed, noted."""
        out = []
        for lf in leaves:
            seen = (self.noise or {}).get(lf.path)
            one_sided = self.moved.get(lf.path, [True, True]).count(True) == 1  # one side never trains it
            if lf.check == "train/params" and not lf.passed and seen is not None and not one_sided:
                note = (
                    f"its gradient stayed at rounding level at every step (max |g| {seen[0]:.2g}, the model's "
                    f"{seen[1]:.2g}): an optimizer that normalises updates turns that noise into steps of "
                    "about its learning rate, which no two programs share; not a difference of the models"
                )
                lf = dataclasses.replace(lf, passed=True, note=f"{lf.note}; {note}" if lf.note else note)
            out.append(lf)
        return out
