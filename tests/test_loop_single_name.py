"""A loop's ``name=`` chosen by a config test between a literal and the loop's pattern
(``linen2nnx/migrate/loop_names.py``): followed only where the test reads no value of the call."""

import pytest

from linen2nnx.migrate import migrate_source

TEMPLATE = """import flax.linen as nn


class Mlp(nn.Module):
    activations: tuple = ("relu",)

    @nn.compact
    def __call__(self, inputs):
        out = 1.0
        for idx, act_fn in enumerate(self.activations):
{name_lines}
            out = out * nn.Dense(8, name=dense_name)(inputs)
        return out
"""


def _migrated(name_lines: str):
    result = migrate_source(TEMPLATE.format(name_lines=name_lines), "m.py", module_name="m")
    manual = [f.message for f in result.findings if f.severity.value == "manual"]
    return result.name_map.classes.get("m.Mlp"), manual


@pytest.mark.parametrize(
    "name_lines",
    [
        '            dense_name = "wi" if len(self.activations) == 1 else f"wi_{idx}"',
        '            dense_name = f"wi_{idx}" if len(self.activations) > 1 else "wi"',  # the literal second
    ],
)
def test_a_config_choice_names_element_zero_alone(name_lines):
    entry, manual = _migrated(name_lines)
    assert manual == []
    assert entry.children["wi"].attr == "wi/0" and entry.children["wi_{i}"].container == "list"


@pytest.mark.parametrize(
    "name_lines",
    [
        '            dense_name = "wi" if idx == 0 else f"wi_{idx}"',  # a test of the loop's index
        '            dense_name = "wi" if inputs.ndim == 2 else f"wi_{idx}"',  # of the call's input
        '            dense_name = "wi" if len(self.activations) == 1 else "wo"',  # no pattern of the loop
        '            dense_name = "wi"\n            dense_name = f"wi_{idx}"',  # bound twice
    ],
)
def test_other_choices_stay_a_finding(name_lines):
    _, manual = _migrated(name_lines)
    assert any("name=" in m for m in manual), manual
