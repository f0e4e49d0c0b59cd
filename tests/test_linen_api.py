"""The flax.linen names the codemod re-points to flax.nnx must behave identically there."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linen2nnx.migrate.linen_api import EQUIVALENT_IN_NNX, initializer_in_nnx, same_in_nnx


def _resolve(root, dotted):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


q = jnp.array([[1, 2, 0, 3]])
SAMPLES = {
    "make_attention_mask": lambda f: f(q > 0, q > 0),
    "make_causal_mask": lambda f: f(q),
    "combine_masks": lambda f: f(jnp.ones((1, 1, 4, 4), bool), jnp.tril(jnp.ones((1, 1, 4, 4), bool))),
    "initializers.zeros_init": lambda f: f()(jax.random.key(0), (2, 3)),
    "initializers.ones_init": lambda f: f()(jax.random.key(0), (2, 3)),
}


def test_every_equivalence_has_a_sample():
    assert set(SAMPLES) == set(EQUIVALENT_IN_NNX)


@pytest.mark.parametrize("name", sorted(EQUIVALENT_IN_NNX))
def test_equivalent_names_compute_the_same(name):
    a = SAMPLES[name](_resolve(nn, name))
    b = SAMPLES[name](_resolve(nnx, name))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert a.dtype == b.dtype


def test_identity_check_accepts_shared_functions_and_rejects_layers():
    assert same_in_nnx("relu") and same_in_nnx("initializers.lecun_normal")
    assert not same_in_nnx("Dense") and not same_in_nnx("initializers")


def test_top_level_initializers_are_found_under_nnx_initializers_by_identity():
    """``nn.zeros`` / ``nn.ones`` (Linen re-exports them at its top level; NNX has no ``nnx.zeros``) are
    the very objects of ``nnx.initializers``; an activation, a layer or a module is none of them."""
    assert initializer_in_nnx("zeros") == "initializers.zeros"
    assert initializer_in_nnx("ones") == "initializers.ones"
    assert _resolve(nnx, initializer_in_nnx("zeros")) is nn.zeros
    for other in ("relu", "Dense", "initializers", "initializers.zeros", "no_such_name"):
        assert initializer_in_nnx(other) is None, other


def test_every_kept_linen_function_exists_in_flax_linen():
    """A kept name that flax.linen does not have would silently never match (a typo, a flax upgrade)."""
    import importlib

    from linen2nnx.migrate.linen_api import KEPT_LINEN_FUNCTIONS

    for dotted in sorted(KEPT_LINEN_FUNCTIONS):
        *modules, name = f"flax.linen.{dotted}".split(".")
        owner = importlib.import_module(".".join(modules))  # flax.linen.partitioning is imported by name
        assert callable(getattr(owner, name, None)), f"flax.linen.{dotted} does not exist"


def test_a_kept_linen_function_in_a_converted_class_is_no_verifier_finding():
    """``nn.recurrent.flip_sequences`` (a function of its arguments) in a class the run converts: kept as
    written, not reported as Linen API left behind (L2N-VERIFY-005)."""
    from linen2nnx.migrate import migrate_source

    src = """import flax.linen as nn


class Reverse(nn.Module):
    @nn.compact
    def __call__(self, x, lengths):
        return nn.recurrent.flip_sequences(nn.Dense(3)(x), lengths, num_batch_dims=1, time_major=False)
"""
    result = migrate_source(src, "rev.py", module_name="rev")
    assert not [f for f in result.findings if f.severity.value != "converted"], result.findings
    assert "nn.recurrent.flip_sequences(self.dense_0(x), lengths" in result.output
