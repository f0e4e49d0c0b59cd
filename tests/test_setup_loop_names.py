"""Names of a setup() list that starts with modules before the loop that fills it
(``linen2nnx/migrate/setup_loop_lists.py``): the loop's names must continue the first ones' by
position, else the construction is a located finding, never a list Linen would name otherwise."""

import pytest

from linen2nnx.migrate import migrate_source

TEMPLATE = """import flax.linen as nn


class Stages(nn.Module):
    def setup(self):
        stages = [{seed}]
        for i in range(2):
            stages.append({element})
        self.stages = stages

    def __call__(self, x):
        x = self.stages[0](x)
        for stage in self.stages[1:]:
            x = stage(x)
        return x
"""


def _findings(seed: str, element: str) -> list[str]:
    result = migrate_source(TEMPLATE.format(seed=seed, element=element), "m.py", module_name="m")
    return [f.message for f in result.findings if f.rule == "L2N-MOD-004"]


@pytest.mark.parametrize(
    "seed, element",
    [
        ('nn.Dense(4, name="0")', "nn.Dense(4, name=str(i + 1))"),
        ('nn.Dense(4, name="stage_0")', 'nn.Dense(4, name=f"stage_{i + 1}")'),
        ('nn.Dense(4, name="0"), nn.Dense(4, name="1")', "nn.Dense(4, name=str(i + 2))"),
        ("nn.Dense(4)", "nn.Dense(4)"),  # auto-named: stages_0, stages_1, ...
    ],
)
def test_names_that_continue_by_position_are_followed(seed, element):
    assert _findings(seed, element) == []


@pytest.mark.parametrize(
    "seed, element",
    [
        ('nn.Dense(4, name="0")', "nn.Dense(4, name=str(i))"),  # the loop restarts at 0: a clash
        ('nn.Dense(4, name="first")', "nn.Dense(4, name=str(i + 1))"),  # not the loop's pattern
        ('nn.Dense(4, name="0")', "nn.Dense(4, name=str(i + 2))"),  # skips a position
        ("nn.Dense(4)", "nn.Dense(4, name=str(i + 1))"),  # auto-named, then named
        ("nn.Dense(4, name=self.first)", "nn.Dense(4, name=str(i + 1))"),  # not a literal
    ],
)
def test_names_that_do_not_continue_are_a_finding(seed, element):
    found = _findings(seed, element)
    assert len(found) == 1 and "appended to stages" in found[0], found
