"""What the size dataflow follows through names bound once (a shape local, an alias of a sharding
annotation, a local function), and where a second binding or a name of the method leaves the size
unknown: a located finding, never a guessed size."""

import pytest

from linen2nnx.migrate import migrate_source

HEAD = """import flax.linen as nn
import jax
import jax.numpy as jnp


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, flag=False):
{body}
        return nn.Dense(3)(y)
"""


def _manual(body: str) -> tuple[list[str], str]:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    result = migrate_source(HEAD.format(body=lines), "m.py", module_name="m")
    return [f.rule for f in result.findings if f.severity.value == "manual"], result.output or ""


@pytest.mark.parametrize(
    "body",
    [
        "wlc = nn.with_logical_constraint\ny = wlc(x, ('batch', 'embed'))",
        "def keep(v):\n    return jax.lax.stop_gradient(v)\ny = keep(x)",
        "n, c = x.shape\ny = x.reshape(n, 1, c)",
        "c = x.shape[-1]\ny = jax.image.resize(x, (4, c), 'nearest')",
        "y = jnp.tile(x, (2, 1))",
        "pad = ((1, 1), (0, 0))\ny = jnp.pad(x, pad)",
    ],
)
def test_a_size_through_a_name_bound_once_is_the_input_size(body):
    manual, output = _manual(body)
    assert manual == [] and "nnx.Linear(in_features, 3" in output


@pytest.mark.parametrize(
    "body",
    [
        # bound twice: the call may see either value
        "wlc = nn.with_logical_constraint\nif flag:\n    wlc = jnp.transpose\ny = wlc(x)",
        "n, c = x.shape\nif flag:\n    c = 2 * c\ny = x.reshape(n, c)",
        # a local function that reads a name of the method, or takes its argument by keyword
        "w = x[..., :2]\ndef pick(v):\n    return w\ny = pick(x)",
        "def keep(v):\n    return v\ny = keep(v=x)",
        # a padding or a tile of the last axis, or one that is no literal
        "y = jnp.pad(x, ((0, 0), (0, 1)))",
        "y = jnp.pad(x, 1)",
        "y = jnp.tile(x, 2)",
        "n = 2\ny = jnp.tile(x, (1, n))",
    ],
)
def test_a_size_that_may_differ_stays_a_finding(body):
    manual, _ = _manual(body)
    assert "L2N-SHAPE-003" in manual
