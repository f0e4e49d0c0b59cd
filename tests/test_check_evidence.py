"""``check`` passes only on evidence: weights that can tell a dropped bias from a kept one, values that
are numbers, every part of a complex output, and gradients that reach the parameters they should.
Each case is a deliberately wrong NNX twin that a weaker check passed."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.equivalence.compare import GRAD, compare_leaf
from linen2nnx.spec import LinenSide, ModelPair


def _mse(out, batch):
    return jnp.mean(out**2)


class _Norm(nn.Module):
    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],))
        centred = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-6)
        return centred * scale + bias


class _Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3, name="head")(_Norm(name="norm")(nn.Dense(6, name="dense")(x)))


class _BiasFirstNorm(nnx.Module):
    """Adds the bias before the scale: the same numbers only while the scale is 1 or the bias 0."""

    def __init__(self, width: int):
        self.scale = nnx.Param(jnp.ones(width))
        self.bias = nnx.Param(jnp.zeros(width))

    def __call__(self, x):
        centred = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-6)
        return (centred + self.bias[...]) * self.scale[...]


class _Twin(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Linear(4, 6, rngs=rngs)
        self.norm = _BiasFirstNorm(6)
        self.head = nnx.Linear(6, 3, rngs=rngs)

    def __call__(self, x):
        return self.head(self.norm(self.dense(x)))


def test_with_no_checkpoint_the_weights_are_perturbed_so_a_reordered_norm_fails():
    """A fresh init has zero biases and unit scales, under which the twin computes Linen's numbers
    exactly, gradients included: the check then runs on init plus noise instead."""
    x = jax.random.normal(jax.random.key(1), (4, 4))
    side = LinenSide(model=_Net(), batch={"x": x}, loss=_mse, train_kwargs={}, eval_kwargs={})
    result = check(ModelPair(linen=side, nnx_factory=lambda rngs: _Twin(rngs)))
    assert not result.passed
    assert any(f.check.startswith("forward") for f in result.failures)


def test_a_nan_reference_is_no_evidence():
    nan = np.array([np.nan, 1.0], np.float32)
    leaf = compare_leaf("forward/eval", "out", nan, nan.copy())
    assert not leaf.passed and "NaN" in leaf.note


def test_a_complex_output_compares_its_imaginary_part():
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    assert compare_leaf("forward/eval", "out", z, z.copy()).passed
    leaf = compare_leaf("forward/eval", "out", z, np.conj(z))
    assert not leaf.passed and leaf.max_abs == 4.0


def test_a_gradient_that_never_reaches_the_nnx_parameter_fails():
    """A stop_gradient or a frozen part: NNX's gradient is zero where Linen's is well above the
    tolerance. A Linen gradient that is only noise (an analytically zero one) may meet an exact 0."""
    linen = np.full((3,), 0.5, np.float32)
    leaf = compare_leaf("grad", "enc/kernel", linen, np.zeros(3, np.float32), kind=GRAD)
    assert not leaf.passed and "zero" in leaf.note
    noise = np.full((3,), 1e-9, np.float32)
    assert compare_leaf("grad", "key/bias", noise, np.zeros(3, np.float32), kind=GRAD).passed


GATED = """
import flax.linen as nn


class Gated(nn.Module):
    use_proj: bool = False

    def setup(self):
        self.proj = nn.Dense(4)

    def __call__(self, x):
        return self.proj(nn.relu(x)) if self.use_proj else nn.relu(x)
"""


def test_a_linen_model_that_creates_no_parameter_gets_a_verdict(tmp_path):
    """Its one layer off by a field, the Linen init holds no 'params' collection: check raised 'not a
    Linen checkpoint' instead of comparing. The layer NNX builds anyway is one Linen never reads."""
    from linen2nnx.migrate import migrate_source
    from linen2nnx.spec import import_file

    result = migrate_source(GATED, "gated.py", module_name="gated")
    (tmp_path / "linen_gated.py").write_text(GATED)
    (tmp_path / "nnx_gated.py").write_text(result.output)
    result.name_map.save(tmp_path / "map.json")
    linen_mod, nnx_mod = import_file(tmp_path / "linen_gated.py"), import_file(tmp_path / "nnx_gated.py")
    x = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    side = LinenSide(model=linen_mod.Gated(), batch={"x": x}, loss=_mse, train_kwargs={}, eval_kwargs={})
    assert "params" not in side.init_variables()
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Gated(in_features=3, rngs=rngs),
        name_map=tmp_path / "map.json",
    )
    parity = check(pair, divergence=False)
    assert parity.passed, [(lf.check, lf.path, lf.note) for lf in parity.failures]
