"""Linen vs NNX parity: forward (eval and train), loss, gradients and batch statistics, leaf by leaf.

Example::

    from linen2nnx.equivalence import check
    result = check(pair, "runs/linen/ckpt")          # converts the weights in memory
    assert result.passed, [leaf.path for leaf in result.failures]
"""

from linen2nnx.equivalence.build import Sides, build_sides, linen_dropout_off, nnx_dropout_off
from linen2nnx.equivalence.check import check, run_checks
from linen2nnx.equivalence.compare import SCHEMA, LeafResult, ParityResult, compare_leaf, compare_trees
from linen2nnx.equivalence.perturb import perturbed

__all__ = [
    "SCHEMA",
    "LeafResult",
    "ParityResult",
    "Sides",
    "build_sides",
    "check",
    "compare_leaf",
    "compare_trees",
    "linen_dropout_off",
    "nnx_dropout_off",
    "perturbed",
    "run_checks",
]
