"""Parameters whose gradient is rounding noise on both sides (an attention key bias): their
``train/params`` leaves are excused after Adam steps, and nothing else is (rounding_grads.py)."""

from __future__ import annotations

import numpy as np

from linen2nnx.equivalence.compare import compare_leaf
from linen2nnx.equivalence.rounding_grads import RoundingGradients
from linen2nnx.equivalence.tolerances import Tolerances

REAL = np.array([0.13, -0.05], np.float32)


def _failing(path: str):
    lf = compare_leaf(
        "train/params", path, np.zeros(3, np.float32), np.full(3, 0.03, np.float32), Tolerances()
    )
    assert not lf.passed
    return lf


def test_a_rounding_level_gradient_on_both_sides_at_every_step_is_excused():
    rounding = RoundingGradients(Tolerances())
    for step in range(3):
        noise = np.array([2.5e-8, -(step + 1) * 1e-8], np.float32)
        rounding.add({"q/bias": REAL, "k/bias": noise}, {"q/bias": REAL, "k/bias": -noise})
    key, query = rounding.excuse([_failing("k/bias"), _failing("q/bias")])
    assert key.passed and "rounding level at every step" in key.note and "0.13" in key.note
    assert not query.passed  # a real gradient: its difference is the models'


def test_a_gradient_real_at_one_step_or_missing_on_one_side_is_not_excused():
    rounding = RoundingGradients(Tolerances())
    rounding.add({"w": REAL, "k": np.float32([1e-9])}, {"w": REAL, "k": np.float32([1e-9])})
    rounding.add({"w": REAL, "k": np.float32([0.01])}, {"w": REAL, "k": np.float32([0.01])})
    assert not rounding.excuse([_failing("k")])[0].passed
    rounding = RoundingGradients(Tolerances())
    rounding.add({"w": REAL, "k": np.float32([1e-9])}, {"w": REAL})  # NNX does not train it
    assert not rounding.excuse([_failing("k")])[0].passed
    rounding = RoundingGradients(Tolerances())
    rounding.add({"w": REAL, "k": np.float32([1e-9])}, {"w": REAL, "k": np.float32([0.01])})  # NNX's is real
    assert not rounding.excuse([_failing("k")])[0].passed


def test_a_parameter_one_side_never_trains_is_not_excused():
    """Linen's gradient exactly zero at every step (a stop_gradient), NNX's small but real: NNX trains
    the parameter and Linen never does, a difference of the models."""
    rounding = RoundingGradients(Tolerances())
    for _ in range(3):
        rounding.add(
            {"w": REAL, "b": np.zeros(3, np.float32)}, {"w": REAL, "b": np.full(3, 6.9e-7, np.float32)}
        )
    assert not rounding.excuse([_failing("b")])[0].passed
