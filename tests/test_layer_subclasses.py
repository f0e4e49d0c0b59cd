"""Which ``param`` overrides of a built-in layer become an NNX subclass (``L2N-LAYER-004``): those that
forward exactly what they receive to ``super().param`` -- as ``*a, **kw`` or by name, in order --
and only transform the result; anything else stays as it was."""

import pytest

from linen2nnx.migrate import migrate_source

SOURCE = """import flax.linen as nn
import jax.numpy as jnp


class StdConv(nn.Conv):
    def param(self, {signature}):
        param = super().param({forwarded})
        if name == "kernel":
            param = param - jnp.mean(param, axis=(0, 1, 2))
        return param


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return StdConv(4, (3, 3))(x)
"""


def _rules(signature: str, forwarded: str) -> set[str]:
    result = migrate_source(SOURCE.format(signature=signature, forwarded=forwarded), "m.py")
    return {f.rule for f in result.findings}


@pytest.mark.parametrize(
    "signature, forwarded",
    [
        ("name, *a, **kw", "name, *a, **kw"),
        ("name, init_fn, *init_args", "name, init_fn, *init_args"),
        ("name: str, init_fn, *init_args", "name, init_fn, *init_args"),
        ("name, init_fn, shape, dtype", "name, init_fn, shape, dtype"),
        ("name, init_fn, *args, **kwargs", "name, init_fn, *args, **kwargs"),
    ],
)
def test_an_override_that_forwards_what_it_receives_converts(signature, forwarded):
    rules = _rules(signature, forwarded)
    assert "L2N-LAYER-004" in rules and "L2N-MOD-006" not in rules


@pytest.mark.parametrize(
    "signature, forwarded",
    [
        ("name, init_fn, *init_args", "name, *init_args"),  # drops an argument
        ("name, init_fn, shape", "name, shape, init_fn"),  # another order
        ("name, init_fn, *init_args", "name, init_fn, *init_args, 1"),  # adds one
        ("name, init_fn=None, *init_args", "name, init_fn, *init_args"),  # a default
        ("name, *, init_fn", "name, init_fn=init_fn"),  # keyword-only
    ],
)
def test_an_override_that_changes_the_arguments_stays_linen(signature, forwarded):
    assert "L2N-LAYER-004" not in _rules(signature, forwarded)
