"""A reshape whose last axis is written as a size (``x.shape[:2] + (self.d,)``) gives that size only
when ``__init__`` can read it before building the layer that needs it: a dataclass field (or an
attribute chain of one), or an attribute ``setup()`` binds once, call-free, before it builds anything.
Anything else (a later setup attribute, a submodule's attribute, one bound twice) stays a finding."""

import pytest

from linen2nnx.migrate import migrate_source

HEAD = """import flax.linen as nn


class Attn(nn.Module):
    heads: int = 2
    dim: int = 3

    def setup(self):
{setup}

    def __call__(self, x):
        h = self.qkv(x)
        return self.out(h.reshape(h.shape[:2] + ({last},)))
"""


def _findings(setup: str, last: str) -> tuple[list[str], str]:
    body = "\n".join("        " + line for line in setup.strip().splitlines())
    result = migrate_source(HEAD.format(setup=body, last=last), "m.py", module_name="m")
    return [f.rule for f in result.findings if f.severity.value == "manual"], result.output or ""


@pytest.mark.parametrize(
    "setup, last, expected",
    [
        ("self.qkv = nn.Dense(6)\nself.out = nn.Dense(4)", "self.dim", "nnx.Linear(self.dim, 4"),
        (
            "self.inner = self.heads * self.dim\nself.qkv = nn.Dense(6)\nself.out = nn.Dense(4)",
            "self.inner",
            "nnx.Linear(self.inner, 4",
        ),
    ],
)
def test_a_written_size_init_can_read_sizes_the_next_layer(setup, last, expected):
    manual, output = _findings(setup, last)
    assert manual == [] and expected in output


@pytest.mark.parametrize(
    "setup, last",
    [
        # set in setup() after the layer that would read it: __init__ would read it unset
        ("self.qkv = nn.Dense(6)\nself.out = nn.Dense(4)\nself.inner = self.heads * self.dim", "self.inner"),
        # a submodule's attribute: an NNX layer has other attributes than the Linen one
        ("self.qkv = nn.Dense(6)\nself.out = nn.Dense(4)", "self.qkv.features"),
        # bound again later in setup(): the call reads the last value
        ("self.inner = 3\nself.qkv = nn.Dense(6)\nself.out = nn.Dense(4)\nself.inner += 3", "self.inner"),
    ],
)
def test_a_written_size_init_cannot_read_stays_a_finding(setup, last):
    manual, _ = _findings(setup, last)
    assert "L2N-SHAPE-003" in manual
