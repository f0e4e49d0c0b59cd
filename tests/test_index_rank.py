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


POOLING = """import flax.linen as nn
import jax.numpy as jnp


def mean_pool(t):
    return jnp.mean(t, axis=-2)


class Pool(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(x.shape[-1])(x)
        return jnp.mean(x, axis=-2)


class Head(nn.Module):
    dim: int = 8
    n: int = 0

    def setup(self):
        self.pool = mean_pool
        self.pool_block = Pool()
        self.mid = nn.Dense(self.dim)
        self.out = nn.Dense(4)

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1, self.dim)
{body}
        return self.out(y)
"""


@pytest.mark.parametrize(
    "body",
    [
        "y = mean_pool(x)[:, 0]",  # a module-level helper may pool: its result's rank is unknown
        "y = self.pool(x)[:, 0]",  # the same helper held as an activation-like attribute
        "y = self.pool_block(x)[:, 0]",  # a class of the run whose output size is its input's
        "w = jnp.ones((self.dim, self.dim))\ny = w[jnp.triu_indices(self.dim)]",  # a tuple of index arrays
        "x = x.reshape(x.shape[0], self.dim)\nfor _ in range(self.n):\n    x = self.mid(x).reshape(x.shape[0], -1, self.dim)\ny = x[:, 0]",
        "lead = ()\ny = x.reshape(*lead, -1, self.dim)[:, 0]",  # a starred part may be empty
        "y = x[:, 0:1:2, 0]",
    ],
)
def test_a_rank_that_may_have_changed_is_not_trusted(body):
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    result = migrate_source(POOLING.format(body=lines), "m.py", module_name="m")
    assert "L2N-SHAPE-003" in {f.rule for f in result.findings}
    assert "nnx.Linear(self.dim, 4" not in (result.output or "")


def test_paths_that_agree_on_the_size_but_not_the_rank_keep_the_size():
    source = HEAD.replace("    def __call__(self, x):", "    def __call__(self, x, flat=False):").format(
        body="        if flat:\n            h = h.reshape(-1, 4)\n        y = h"
    )
    result = migrate_source(source, "m.py", module_name="m")
    assert "L2N-SHAPE-003" not in {f.rule for f in result.findings}
    assert "nnx.Linear(4, 3" in (result.output or "")
