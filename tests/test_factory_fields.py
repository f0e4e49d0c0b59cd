"""Module-factory fields (factory_fields.py) and shape tests (shape_tests.py): what is followed, and
what stays a manual finding because the codemod cannot tell what a field builds or when."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source

BLOCK = """
from functools import partial
from typing import Any

from flax import linen as nn

ModuleDef = Any


class Block(nn.Module):
    features: int
    conv: ModuleDef
    strides: tuple = (1, 1)

    @nn.compact
    def __call__(self, x):
        y = self.conv(self.features, (3, 3), self.strides{padding})(x)
        if x.shape != y.shape:
            x = self.conv(self.features, (1, 1), self.strides, name="proj")(x)
        return x + y

"""


def manual_rules(source: str) -> set[str]:
    result = migrate_source(textwrap.dedent(source), "m.py", module_name="m")
    return {f.rule for f in result.findings if f.severity.value == "manual"}


def migrate(source: str) -> str:
    return migrate_source(textwrap.dedent(source), "m.py", module_name="m").output


@pytest.mark.parametrize("binding", ["nn.Conv", "partial(nn.Conv, use_bias=False)"])
def test_a_field_bound_to_one_layer_is_built_in_init(binding):
    out = migrate(BLOCK.format(padding="") + f"Net = partial(Block, 4, {binding})\n")
    assert (
        "self.conv_0 = self.conv(in_features, self.features, (3, 3), strides=self.strides, rngs=rngs)" in out
    )
    assert "if in_features != self.features or self.strides not in (None, 1, (1, 1), [1, 1]):" in out
    assert "nnx.Conv" in out.strip().splitlines()[-1] and "nn.Conv" not in out


def test_a_field_with_no_binding_stays_manual():
    assert "L2N-MOD-008" in manual_rules(BLOCK.format(padding=""))


def test_a_field_bound_to_two_different_layers_stays_manual():
    src = (
        BLOCK.format(padding="") + "A = partial(Block, 4, nn.Conv)\nB = partial(Block, 4, nn.ConvTranspose)\n"
    )
    assert "L2N-MOD-008" in manual_rules(src)


def test_a_binding_the_pass_cannot_follow_stays_manual():
    src = BLOCK.format(padding="") + "def make(conv):\n    return Block(4, conv)\n"
    assert "L2N-MOD-008" in manual_rules(src)


def test_a_linen_layer_with_no_nnx_counterpart_is_reported_where_it_is_bound():
    src = BLOCK.format(padding="") + "A = partial(Block, 4, nn.Conv)\nB = partial(Block, 4, nn.ConvLocal)\n"
    rules = manual_rules(src)
    assert "L2N-MOD-008" not in rules and "L2N-API-002" in rules


@pytest.mark.parametrize("padding", [", padding='VALID'", ", kernel_dilation=2"])
def test_a_shape_test_the_spatial_arguments_leave_open_stays_manual(padding):
    src = BLOCK.format(padding=padding) + "Net = partial(Block, 4, nn.Conv)\n"
    assert "L2N-MOD-004" in manual_rules(src)


def test_a_partial_that_strides_leaves_the_shape_test_manual():
    src = BLOCK.format(padding="") + "Net = partial(Block, 4, partial(nn.Conv, strides=2))\n"
    assert "L2N-MOD-004" in manual_rules(src)


def test_an_activation_field_bound_by_the_caller_keeps_the_size():
    src = """
    from typing import Callable
    from flax import linen as nn

    class Block(nn.Module):
        act: Callable

        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(self.act(nn.Dense(5)(x)))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Block(act=nn.relu)(x)
    """
    assert "self.dense_0 = nnx.Linear(5, 3, rngs=rngs)" in migrate(src)
