"""``x[:, 0]`` keeps ``x``'s last axis when ``x`` provably has more axes than the index names: a rank
the dataflow knows from a reshape or a parameter of literal shape, kept by shape-keeping layers and
lowered by what drops axes. Where the rank is not known for certain -- after a reduction, another index,
a class of the run -- the size stays a located finding, never a guess."""

import pytest

from linen2nnx.migrate import migrate_source

HEAD = """import flax.linen as nn
import jax.numpy as jnp


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x)
        h = h.reshape(h.shape[0], -1, 4)
{body}
        return nn.Dense(3)(y)
"""


def _sized(body: str) -> tuple[list[str], str]:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    result = migrate_source(HEAD.format(body=lines), "m.py", module_name="m")
    return [f.rule for f in result.findings if f.severity.value == "manual"], result.output or ""


@pytest.mark.parametrize(
    "body",
    [
        "y = h[:, 0]",  # rank 3: the index names two axes
        "h = nn.LayerNorm()(h)\ny = h[:, 0]",  # a norm keeps the shape
        "h = nn.Dropout(0.1, deterministic=True)(h)\ny = nn.relu(h)[:, 0]",
        "h = jnp.mean(h, axis=1, keepdims=True)\ny = h[:, 0]",  # keepdims keeps the rank
        "h = jnp.concatenate([h, h], axis=1)\ny = h[:, -1]",
    ],
)
def test_an_index_short_of_a_known_rank_keeps_the_last_axis(body):
    manual, output = _sized(body)
    assert manual == [] and "nnx.Linear(4, 3" in output


@pytest.mark.parametrize(
    "body",
    [
        "h = jnp.mean(h, axis=1)\ny = h[:, 0]",  # rank 2 after the reduction: the index may hit the last axis
        "h = h[:, 0]\ny = h[:, 0]",  # each integer index drops an axis
        "h = h[:, 0, :]\ny = h[:, 0]",
        "y = h[:, 0, 1]",  # as many indices as axes
        "y = h[..., 0]",
        "y = h[:, None, 0]",
        "h = jnp.sum(h, axis=-2)\ny = h[:, 0]",
    ],
)
def test_an_index_that_may_reach_the_last_axis_leaves_the_size_unknown(body):
    manual, output = _sized(body)
    assert "L2N-SHAPE-003" in manual and "nnx.Linear(4, 3" not in output


def test_a_class_of_the_run_gives_its_output_without_a_rank():
    source = HEAD.replace(
        "class Block",
        "class Pool(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n        return jnp.sum(x, axis=-2)\n\n\nclass Block",
    ).format(body="        h = Pool()(h)\n        y = h[:, 0]")
    result = migrate_source(source, "m.py", module_name="m")
    assert "L2N-SHAPE-003" in {f.rule for f in result.findings}
