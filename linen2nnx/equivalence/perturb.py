"""Weights moved away from their initial values, so a parity check cannot pass by accident.

Freshly initialised biases are zeros and norm scales ones: a converter that swapped two of them, or
dropped one, would still give identical outputs. Every check on an init-only model should first
perturb the weights.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def perturbed(variables: Any, seed: int = 0, scale: float = 0.3) -> Any:
    """``variables`` plus ``scale``·N(0, 1) noise on every leaf (numpy: no XLA compiles).

    BatchNorm running variances (``batch_stats/.../var``) stay positive; a leaf that is not floating
    point (a step counter, an index, a flag) is left as it is: noise would change its dtype.
    """
    rng = np.random.default_rng(seed)

    def noisy(x: Any) -> Any:
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating) and x.dtype.name not in ("bfloat16", "float16"):
            return x
        return x + (scale * rng.standard_normal(x.shape)).astype(x.dtype)

    out = jax.tree.map(noisy, variables)
    if isinstance(out, dict) and "batch_stats" in out:
        out["batch_stats"] = jax.tree.map(np.abs, out["batch_stats"])
    return jax.device_put(out)


def perturbed_init(pair: Any, seed: int = 0, scale: float = 0.3) -> Any:
    """The pair's Linen init variables (jitted init) with :func:`perturbed` noise: a checkpoint
    stand-in whose biases and norm scales are no longer zeros and ones."""
    from linen2nnx.equivalence.build import linen_init_variables

    return perturbed(linen_init_variables(pair.linen), seed, scale)
