"""Module-level partials of a Linen layer (``LayerNorm = partial(nn.LayerNorm, epsilon=EPS)``): a use in
a class the run rewrites is built in ``__init__`` as the layer it stands for, unless the partial's
arguments could read something else there, or the name is not bound once."""

import pytest

from linen2nnx.migrate import migrate_source

SOURCE = """import functools

import flax.linen as nn

EPS = 1e-5
{binding}


class Block(nn.Module):
    width: int = 4
{field}
    @nn.compact
    def __call__(self, x):
        return Norm(name="norm")(nn.Dense(self.width)(x))
"""


def _converted(binding: str, field: str = "") -> bool:
    result = migrate_source(SOURCE.format(binding=binding, field=field), "m.py")
    return "self.norm = nnx.LayerNorm(" in result.output


def test_a_partial_with_plain_arguments_is_built_as_its_layer():
    assert _converted("Norm = functools.partial(nn.LayerNorm, epsilon=EPS)")


@pytest.mark.parametrize(
    "binding, field",
    [
        ("Norm = functools.partial(nn.LayerNorm, scale_init=nn.initializers.zeros)", ""),  # reads Linen
        ("Norm = functools.partial(nn.LayerNorm, epsilon=EPS)", "    EPS: float = 1e-6\n"),  # a field
        ("Norm = functools.partial(nn.LayerNorm)\nNorm = functools.partial(nn.LayerNorm, epsilon=EPS)", ""),
        ("Norm = functools.partial(nn.LayerNorm, **{'epsilon': EPS})", ""),  # a splat
    ],
)
def test_a_partial_that_could_read_otherwise_is_not_followed(binding, field):
    assert not _converted(binding, field)


@pytest.mark.parametrize("binding", ["Norm = nn.LayerNorm", "from flax.linen import LayerNorm as Norm"])
def test_a_layer_under_another_name_is_built_as_the_layer(binding):
    """A module-level alias (module_level_alias fixture, with parity) or an import under another name."""
    assert _converted(binding)


@pytest.mark.parametrize(
    "binding",
    [
        "Norm = nn.LayerNorm\nNorm = nn.RMSNorm",  # bound twice: which one a use sees is not one line
        "if EPS:\n    Norm = nn.LayerNorm\nelse:\n    Norm = nn.RMSNorm",  # under a test
        "Norm = nn.LayerNorm if EPS else nn.RMSNorm",  # an expression of two
    ],
)
def test_an_alias_that_could_name_otherwise_is_not_followed(binding):
    result = migrate_source(SOURCE.format(binding=binding, field=""), "m.py")
    assert "self.norm = nnx.LayerNorm(" not in result.output
    assert any(f.severity.value == "manual" for f in result.findings)


ALIAS_ELSEWHERE = """import flax.linen as nn

Dense = nn.Dense


class Block(nn.Module):
{body}
"""


@pytest.mark.parametrize(
    "body",
    [
        # read in a method that is neither compact nor setup
        "    def block(self, x):\n        return Dense(3)(x)\n\n    @nn.compact\n"
        "    def __call__(self, x):\n        return self.block(Dense(4)(x))",
        # handed to a lifted transform
        "    @nn.compact\n    def __call__(self, x):\n        return nn.remat(Dense)(5)(Dense(4)(x))",
        # held in a local
        "    @nn.compact\n    def __call__(self, x):\n        d = Dense\n        return d(3)(Dense(4)(x))",
        # a constructor argument: stays Linen, and the verifier names it
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Sequential([Dense(5), nn.relu])(x)",
    ],
)
def test_an_alias_read_other_than_as_a_built_layer_is_not_followed(body):
    """Following it would leave the other reads Linen inside an NNX class (they were silent)."""
    result = migrate_source(ALIAS_ELSEWHERE.format(body=body), "m.py")
    manual = {f.rule for f in result.findings if f.severity.value == "manual"}
    assert manual & {"L2N-MOD-006", "L2N-MOD-007", "L2N-VERIFY-001"}, manual
    assert "nnx.Linear(" not in result.output or "L2N-VERIFY-001" in manual
