"""Local partials and the forms around them that stay as they are: each keeps a located finding."""

from linen2nnx.migrate import migrate_source

SETUP_LIST = """
from functools import partial
import flax.linen as nn


class S(nn.Module):
    def setup(self):
        dense = partial(nn.Dense, use_bias=False)
        self.q = dense(3)
        self.layers = [dense(4), dense(5)]

    def __call__(self, x):
        return self.q(x) + self.layers[0](x)[..., :3]
"""


def test_a_setup_partial_with_a_use_that_is_not_an_attribute_stays_with_a_finding():
    result = migrate_source(SETUP_LIST, "m.py", module_name="m")
    found = {(f.rule, f.line) for f in result.findings}
    assert ("L2N-API-002", 8) in found  # the partial's layer, left where it is written
    assert ("L2N-MOD-007", 6) in found  # the class stays Linen behind the bridge
    assert "dense = partial(nn.Dense, use_bias=False)" in result.output


CYCLE = """
import flax.linen as nn


class A(nn.Module):
    @nn.compact
    def __call__(self, x):
        return B(3)(x)


class B(nn.Module):
    features: int
    parent_kind: type = A

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features)(x)
"""


def test_a_later_class_that_names_the_earlier_one_is_not_planned_first():
    """B (below A) names A, so planning it before A would read A as unknown: A keeps its finding."""
    result = migrate_source(CYCLE, "m.py", module_name="m")
    assert ("L2N-MOD-006", 8) in {(f.rule, f.line) for f in result.findings}


HELPER_LAMBDA = """
import flax.linen as nn
import jax.numpy as jnp


class Attn(nn.Module):
    kernel_init: object = nn.initializers.lecun_normal()

    def scale(self):
        return 2.0

    @nn.compact
    def __call__(self, x):
        init = lambda *args: self.kernel_init(*args) * self.scale()
        return nn.Dense(3, kernel_init=init)(x)
"""


def test_an_initializer_lambda_calling_a_method_is_not_replayed():
    """Only a call of a field may sit in a lambda ``__init__`` replays: a method may read call-time state."""
    result = migrate_source(HELPER_LAMBDA, "m.py", module_name="m")
    assert any(f.rule == "L2N-MOD-004" and "call-time value init" in f.message for f in result.findings), [
        f.format_text() for f in result.findings
    ]
