"""Which axis reorderings keep the last axis (einsum, transpose, swapaxes, moveaxis, expand_dims;
axis_order.py; and the ``*_like`` constructors), and which
leave the size unknown: a located finding, never a guessed size."""

import pytest

from linen2nnx.migrate import migrate_source

HEAD = """import einops
import flax.linen as nn
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
        'y = jnp.einsum("...hqk,...khd->...qhd", x[..., None], x)',
        'y = jnp.einsum("ijk, ij -> ijk", x, x[..., 0]).sum(1)',
        'y = einops.einsum(x, x, "b n t s, b s n h -> b t n h")',
        "y = jnp.transpose(x, (1, 0, 2))",
        "y = jnp.transpose(x, axes=[2, 0, 1, -1])",
        "y = x.transpose(0, 2, 1, 3)",
        "y = x.transpose((0, 1, 2))",
        "y = jnp.swapaxes(x, -3, -2)",
        "y = jnp.transpose(x, (1, 0, 2)).swapaxes(0, 1)",
        "y = jnp.moveaxis(x, -3, -2)",
        "y = jnp.moveaxis(jnp.transpose(x, (1, 0, 2)), 0, 1)",
        "y = jnp.expand_dims(x, -2)",
        "y = jnp.expand_dims(x, axis=-3)",
        "y = jnp.expand_dims(jnp.transpose(x, (1, 0, 2)), 2)",  # below the rank (3): not the last
        "y = jnp.ones_like(x) + jnp.zeros_like(x, dtype=jnp.float32)",
        "y = jnp.full_like(x, 2.0)",
        "y = jax.lax.convert_element_type(x, jnp.bfloat16)",
    ],
)
def test_a_reordering_that_keeps_the_last_axis_keeps_the_input_size(body):
    manual, output = _manual(body)
    assert manual == [] and "nnx.Linear(in_features, 3" in output


@pytest.mark.parametrize(
    "body",
    [
        "y = jnp.transpose(x, (0, 2, 1))",
        "y = jnp.transpose(x)",
        "y = x.transpose()",
        "p = (0, 1)\ny = x.transpose(p)",
        "y = x.swapaxes(0, 1)",  # on a value of rank 2, axis 1 is the last
        "y = jnp.swapaxes(x, -2, -1)",
        "y = jnp.transpose(x, (1, 0, 2)).swapaxes(0, 2)",
        'y = jnp.einsum("ijk,ijk->ijk", x, x)',  # two operands hold k: one may be of size 1
        'y = jnp.einsum("ijk,ikj->ij", x, x)',
        'y = jnp.einsum("ijk->ikj", x)',
        'y = jnp.einsum("ij...->...", x)',
        'y = jnp.einsum("ijk", x)',  # implicit output: its order is alphabetical
        'y = jnp.einsum("ijk,ij->ijk", x, x[..., 0]).sum(2)',
        'y = jnp.einsum("ij...,ij->ij...", x, x[..., 0]).sum(1)',
        'y = einops.einsum(x, x, "b n t h, b s n h -> b t n h")',
        'y = einops.einsum(x, "b (n h) -> b n h")',
        "y = jnp.moveaxis(x, -2, -1)",
        "y = jnp.moveaxis(x, 0, 1)",  # on a value of rank 2, axis 1 is the last
        "y = jnp.moveaxis(x, source=-3, destination=-2)",  # keywords: not read
        "y = jnp.expand_dims(x, -1)",
        "y = jnp.expand_dims(x, 1)",  # on a value of rank 1, a new last axis
        "y = jnp.expand_dims(jnp.transpose(x, (1, 0, 2)), 3)",
        "y = jnp.expand_dims(x, (0, 1))",
        "y = jnp.ones_like(x, shape=(2, 3))",
        "y = jnp.zeros_like(x, jnp.float32, (2, 3))",  # a shape given positionally
        "y = jnp.full_like(x, 2.0, jnp.float32, (2, 3))",
    ],
)
def test_a_reordering_that_may_move_the_last_axis_stays_a_finding(body):
    manual, output = _manual(body)
    assert manual == ["L2N-SHAPE-003"] and "nnx.Linear(in_features, 3" not in output


SETUP = """import flax.linen as nn


class Attention(nn.Module):
    hidden: int = 8
    heads: int = 2

    def setup(self):
{setup}
        self.out = nn.Dense(3)

    def grow(self):
        self.wide = 2 * self.hidden

    def __call__(self, x):
        return self.out(x.reshape(x.shape[:2] + ({size},)))
"""


@pytest.mark.parametrize(
    ("setup", "size", "sized"),
    [
        ("hidden = self.hidden\nself.dim = hidden", "self.dim", True),
        ("self.dim = self.hidden // self.heads", "self.heads * self.dim", True),
        ("self.dim = self.hidden\nself.dim2 = self.dim * 2", "self.dim2 - self.heads", True),
        # a call before it: it may build (or read) anything, so __init__ may not have it yet
        ("hidden = int(self.hidden)\nself.dim = hidden", "self.dim", False),
        ("self.proj = nn.Dense(4)\nself.dim = self.hidden", "self.dim", False),
        # bound twice, or under a condition
        ("self.dim = self.hidden\nself.dim += 1", "self.dim", False),
        ("if self.heads:\n    self.dim = self.hidden", "self.dim", False),
        ("self.wide = self.hidden\nself.grow()", "self.wide", False),  # grow() binds it again
        # a size that is no integer arithmetic of sizes
        ("self.dim = self.hidden", "self.dim / 2", False),
    ],
)
def test_a_reshape_to_a_size_setup_binds_first_has_that_size(setup, size, sized):
    body = "\n".join("        " + line for line in setup.splitlines())
    result = migrate_source(SETUP.format(setup=body, size=size), "m.py", module_name="m")
    manual = [f.rule for f in result.findings if f.severity.value == "manual"]
    assert (f"nnx.Linear({size}, 3" in (result.output or "")) is sized
    assert manual == [] if sized else "L2N-SHAPE-003" in manual
