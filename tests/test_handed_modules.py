"""Sizes that come out of a module a class is handed (handed_modules.py), and a compact local holding a
submodule handed to others (local_sites.held_submodule). Numeric parity: the fixtures
L2N-SHAPE-005/handed_module and L2N-MOD-003/held_submodule in test_module_forms_parity.py."""

import pytest

from linen2nnx.migrate import migrate_source

BLOCK = """import flax.linen as nn
import jax.numpy as jnp


class Block(nn.Module):
    embed: nn.Module
    flag: bool = True

    @nn.compact
    def __call__(self, tokens):
        x = {value}
        return nn.Dense(3, name="out")(x)


class Model(nn.Module):
    def setup(self):
        self.table = {table}
        self.block = Block({handed})

    def __call__(self, tokens):
        return self.block(tokens)
"""


def _migrated(value: str, table: str = "nn.Embed(10, 6)", handed: str = "self.table"):
    src = BLOCK.format(value=value, table=table, handed=handed)
    result = migrate_source(src, "m.py", module_name="m")
    assert migrate_source(result.output, "m.py", module_name="m").output == result.output
    kinds = result.name_map.classes["m.Block"].new_args
    manual = [(f.rule, f.message) for f in result.findings if f.severity.value == "manual"]
    return result.output, kinds, manual


def test_the_builder_passes_the_width_of_the_module_it_hands_in():
    output, kinds, manual = _migrated("self.embed(tokens)")
    assert kinds == {"out_in_features": "handed:embed"}
    assert "Block(self.table, out_in_features=6, rngs=rngs)" in output
    assert manual == []


def test_a_handed_module_of_unknown_width_stays_a_size_the_builder_asks_for():
    """A norm's output size is its input's: the builder cannot spell it."""
    _, kinds, manual = _migrated("self.embed(tokens)", table="nn.LayerNorm()")
    assert kinds == {"out_in_features": "handed:embed"}
    assert (
        "L2N-SHAPE-003",
        "out_in_features of Block is unknown statically; required constructor "
        "argument block_out_in_features added",
    ) in manual


@pytest.mark.parametrize(
    "value",
    [
        "self.embed(tokens) if self.flag else tokens",  # another size on the other path
        "self.embed(tokens)[..., :2]",  # a slice of it
        "self.embed(tokens).reshape(2, -1)",  # a reshape of it
        "jnp.concatenate([self.embed(tokens), tokens], -1)",
    ],
)
def test_only_the_handed_module_output_itself_is_passed_by_its_builder(value):
    _, kinds, manual = _migrated(value)
    assert kinds == {"out_in_features": "unresolved"}
    assert any(rule == "L2N-SHAPE-003" and "Model" not in message for rule, message in manual)


def test_a_module_built_at_the_handing_is_no_attribute_the_builder_can_size():
    _, kinds, manual = _migrated("self.embed(tokens)", handed="nn.Embed(10, 6)")
    assert kinds == {"out_in_features": "handed:embed"}
    assert any("of Block is unknown statically" in message for _, message in manual)


HELD = """import flax.linen as nn
import jax.numpy as jnp


class Layer(nn.Module):
    positions: nn.Module

    @nn.compact
    def __call__(self, x):
        return nn.Dense(5)(x) + self.positions(jnp.arange(x.shape[-2]))


class Stack(nn.Module):
    flag: bool = True

    @nn.compact
    def __call__(self, x):
{binding}
        return Layer(positions=shared, name="layer")(x)
"""


def test_a_local_holding_a_submodule_is_handed_as_its_attribute():
    src = HELD.format(binding='        shared = nn.Embed(8, 5, name="relpos")')
    result = migrate_source(src, "s.py", module_name="s")
    assert "Layer(positions=self.relpos, in_features=in_features, rngs=rngs)" in result.output
    assert not [f for f in result.findings if f.severity.value == "manual"]


@pytest.mark.parametrize(
    "binding",
    [
        '        if self.flag:\n            shared = nn.Embed(8, 5, name="relpos")\n        else:\n'
        '            shared = nn.Embed(8, 5, name="other")',  # bound twice
        '        shared = nn.Embed(8, 5, name="relpos") if self.flag else None',  # not a plain build
    ],
)
def test_a_local_not_bound_once_to_a_submodule_stays_a_call_time_value(binding):
    result = migrate_source(HELD.format(binding=binding), "s.py", module_name="s")
    assert any(f.rule == "L2N-MOD-004" and "call-time value shared" in f.message for f in result.findings)


@pytest.mark.parametrize(
    "value",
    [
        "jax.nn.sigmoid(self.gate(tokens)) * self.embed(tokens)",  # a width of 1 broadcasts to 6
        "self.embed(tokens, method='attend')",  # another method than __call__
    ],
)
def test_a_value_that_is_not_the_handed_output_itself_is_not_passed(value):
    src = BLOCK.format(value=value, table="nn.Embed(10, 6)", handed="self.table").replace(
        "    embed: nn.Module\n", "    embed: nn.Module\n    gate: nn.Module = None\n"
    )
    src = src.replace("import jax.numpy as jnp\n", "import jax\nimport jax.numpy as jnp\n")
    result = migrate_source(src, "m.py", module_name="m")
    assert result.name_map.classes["m.Block"].new_args == {"out_in_features": "unresolved"}


@pytest.mark.parametrize("ones", ["jnp.ones((1, 1))", "self.param('s', nn.initializers.ones, (1,))"])
def test_a_size_of_one_broadcast_against_an_unknown_size_is_unknown(ones):
    """``e * jnp.ones((1, 1))`` has ``e``'s width, whatever it is, not 1."""
    src = BLOCK.format(
        value=f"jnp.tanh(self.embed(tokens))[..., None, :] * {ones}",
        table="nn.Embed(10, 6)",
        handed="self.table",
    )
    result = migrate_source(src, "m.py", module_name="m")
    assert "nnx.Linear(1," not in result.output
    assert any(f.rule == "L2N-SHAPE-003" for f in result.findings)
