"""Weights moved away from their initial values, so a parity check cannot pass by accident.

Freshly initialised biases are zeros and norm scales ones: a converter that swapped two of them, or
dropped one, would still give identical outputs. ``check`` with no checkpoint runs on these
(``build.py``); :mod:`.perturb` gives them for a pair's own init.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

RUNTIME_COLLECTIONS = ("cache", "intermediates", "perturbations")
"""Collections a model fills afresh at run time: left as they are (a checkpoint holds no trained
values there, and the NNX twin starts them from its own init)."""


def perturbed(variables: Any, seed: int = 0, scale: float = 0.3) -> Any:
    """``variables`` plus ``scale``·N(0, 1) noise on every leaf (numpy: no XLA compiles).

    BatchNorm running variances (``batch_stats/.../var``) stay positive; a leaf that is not floating
    point (a step counter, an index, a flag) is left as it is: noise would change its dtype; so are
    the :data:`RUNTIME_COLLECTIONS`.
    """
    rng = np.random.default_rng(seed)

    def noisy(x: Any) -> Any:
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating) and x.dtype.name not in ("bfloat16", "float16"):
            return x
        return x + (scale * rng.standard_normal(x.shape)).astype(x.dtype)

    if isinstance(variables, dict) and any(c in variables for c in RUNTIME_COLLECTIONS):
        out = {c: v if c in RUNTIME_COLLECTIONS else jax.tree.map(noisy, v) for c, v in variables.items()}
    else:
        out = jax.tree.map(noisy, variables)
    if isinstance(out, dict) and "batch_stats" in out:
        out["batch_stats"] = jax.tree.map(np.abs, out["batch_stats"])
    return jax.device_put(out)
