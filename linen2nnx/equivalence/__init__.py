"""Linen vs NNX parity: forward (eval and train), loss, gradients, batch statistics, sown values,
matmul precision and N-step training, leaf by leaf, with the first diverging submodule named.

Example::

    from linen2nnx.equivalence import assert_parity, check
    result = check(pair, "runs/linen/ckpt", steps=3)   # converts the weights in memory
    assert result.passed, result.failure_table()
    assert_parity(pair)                                 # raises AssertionError with the table

See docs/equivalence.md for the tolerance table and the JSON schema (``linen2nnx-parity/2``).
"""

from linen2nnx.equivalence.build import Sides, build_sides, linen_dropout_off, nnx_dropout_off
from linen2nnx.equivalence.check import assert_parity, check, run_checks
from linen2nnx.equivalence.compare import SCHEMA, LeafResult, ParityResult, compare_leaf, compare_trees
from linen2nnx.equivalence.divergence import Divergence, ModuleDiff
from linen2nnx.equivalence.perturb import perturbed
from linen2nnx.equivalence.tolerances import Tolerances
from linen2nnx.equivalence.training import TrainingResult, training_parity

__all__ = [
    "SCHEMA",
    "Divergence",
    "LeafResult",
    "ModuleDiff",
    "ParityResult",
    "Sides",
    "Tolerances",
    "TrainingResult",
    "assert_parity",
    "build_sides",
    "check",
    "compare_leaf",
    "compare_trees",
    "linen_dropout_off",
    "nnx_dropout_off",
    "perturbed",
    "run_checks",
    "training_parity",
]
