"""A pair's own Linen init, perturbed (:func:`.noise.perturbed`): a checkpoint stand-in for tests and
benchmarks whose biases and norm scales are no longer zeros and ones."""

from __future__ import annotations

from typing import Any

from linen2nnx.equivalence.noise import perturbed

__all__ = ["perturbed", "perturbed_init"]


def perturbed_init(pair: Any, seed: int = 0, scale: float = 0.3) -> Any:
    """The pair's Linen init variables (jitted init) with :func:`perturbed` noise: a checkpoint
    stand-in whose biases and norm scales are no longer zeros and ones."""
    from linen2nnx.equivalence.build import linen_init_variables

    return perturbed(linen_init_variables(pair.linen), seed, scale)
