"""Elementwise functions of several arrays in the size flow (last_axis_ops.broadcast_call): read as
the operator form only with exactly their number of arrays, all positional. Numeric parity: the
L2N-SHAPE-002 fixture broadcast_functions in test_module_forms_parity.py."""

import pytest

from linen2nnx.migrate import migrate_source


def _out_in_features(expr: str) -> str | None:
    """The in_features the migrated ``out`` layer gets when it is applied to ``expr`` (of ``h``, 8
    wide, and ``m``, the input); None when it is a size finding."""
    src = (
        "import flax.linen as nn\nimport jax\nimport jax.numpy as jnp\n\n\nclass Head(nn.Module):\n"
        "    @nn.compact\n    def __call__(self, x, m):\n        h = nn.Dense(8, name='h')(x)\n"
        f"        return nn.Dense(2, name='out')({expr})\n"
    )
    result = migrate_source(src, "head.py", module_name="head")
    line = next(line for line in result.output.splitlines() if "self.out = " in line)
    if any(f.rule == "L2N-SHAPE-003" and "Head.out " in f.message for f in result.findings):
        return None
    return line.split("nnx.Linear(")[1].split(",")[0]


@pytest.mark.parametrize(
    ("expr", "size"),
    [
        ("jnp.maximum(0.0, h)", "8"),  # a literal first: the array's axis
        ("jnp.where(m, h, 0.0)", "8"),  # the values' axis, not the test's
        ("jnp.where(m > 0, 1.0, h)", "8"),
        ("jax.lax.max(h, m)", "8"),  # two arrays: the first sized one, as h + m
        ("jnp.minimum(h, 6.0)", "8"),
        ("jnp.where(m)[0]", None),  # one argument: indices
        ("jnp.where(m, h, 0.0, out=None)", None),  # a keyword: not the operator form
        ("jnp.where(m, *h)", None),
    ],
)
def test_a_broadcasting_function_reads_as_its_operator(expr, size):
    assert _out_in_features(expr) == size
