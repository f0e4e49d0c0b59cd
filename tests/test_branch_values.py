"""What the size flow knows after an ``if`` about a local one branch leaves unbound, and what a call
of a function looked up in a dict display reads (dataflow._merge, unfollowed.absence_unsure,
function_aliases._looked_up_qualnames). Numeric parity: the L2N-SHAPE-002 fixtures branch_unbound_local
and reduction_table in test_module_forms_parity.py."""

import pytest

from linen2nnx.migrate import migrate_source

HEADER = "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Head(nn.Module):\n    flag: bool = True\n    kind: str = 'a'\n\n    @nn.compact\n    def __call__(self, x):\n"


def _sized(body: str) -> bool:
    """Whether the layer named ``out`` in ``body`` is sized with no finding; else it must be a located
    size finding on that layer."""
    src = HEADER + "".join(f"        {line}\n" for line in body.strip("\n").splitlines())
    result = migrate_source(src, "head.py", module_name="head")
    manual = [f for f in result.findings if f.severity.value == "manual"]
    assert migrate_source(result.output, "head.py", module_name="head").output == result.output
    if not manual:
        assert "nnx.Linear(8, 2" in result.output
        return True
    assert any(f.rule == "L2N-SHAPE-003" and "Head.out " in f.message for f in manual), manual
    return False


def test_a_local_bound_under_a_test_is_sized_where_it_is_read():
    assert _sized(
        """
x = nn.Dense(8, name='a')(x)
if self.flag:
    y = nn.LayerNorm(name='n')(x)
out = nn.Dense(2, name='out')(y)
return out
"""
    )


@pytest.mark.parametrize(
    "other_binding",
    [
        "try:\n    pass\nexcept ValueError:\n    y = nn.Dense(3, name='e')(x)",  # a block the flow does not walk
        "def y(v):\n    return v",  # a nested def
        "import y",  # an import
        "with open('f') as y:\n    pass",  # an `as`
        "if (y := x[..., :3]) is None:\n    pass",  # a walrus
        "def setter():\n    nonlocal y\n    y = x[..., :3]\nsetter()",  # a nested def's nonlocal
    ],
)
def test_a_local_also_bound_where_the_flow_does_not_see_stays_unknown(other_binding):
    assert not _sized(
        f"""
x = nn.Dense(8, name='a')(x)
{other_binding}
if self.flag:
    y = nn.LayerNorm(name='n')(x)
out = nn.Dense(2, name='out')(y)
return out
"""
    )


@pytest.mark.parametrize(
    ("table", "sized"),
    [
        ("{'gap': jnp.mean, 'gmp': jnp.max, 'gsp': jnp.sum}", True),  # every entry reduces
        ("{'a': jnp.mean, 'b': jnp.mean}", True),  # one function twice
        ("{'gap': jnp.mean, 'cat': jnp.concatenate}", False),  # entries of different kinds
        ("{'gap': jnp.mean, 'own': lambda v, axis: v[:, 0]}", False),  # not a dotted name
        ("{'gap': jnp.mean, **extra}", False),  # entries it cannot see
    ],
)
def test_a_function_looked_up_in_a_dict_display_reads_as_its_entries(table, sized):
    body = f"""
extra = {{}}
x = nn.Dense(8, name='a')(x)
x = x.reshape(x.shape[0], -1, 8)
fn = {table}[self.kind]
x = fn(x, axis=1)
out = nn.Dense(2, name='out')(x)
return out
"""
    assert _sized(body) is sized


@pytest.mark.parametrize(
    "src",
    [
        # a keyword-only argument of a helper the flow inlines: bound by the caller, not unbound
        "class Head(nn.Module):\n    def setup(self):\n        self.q = nn.Dense(8)\n        self.out = nn.Dense(2)\n\n"
        "    def attend(self, x, *, kv=None):\n        if kv is None:\n            kv = self.q(x)\n"
        "        return self.out(kv)\n\n    def __call__(self, x, kv):\n        return self.attend(x, kv=kv)\n",
        # a *args parameter of the method
        "class Head(nn.Module):\n    flag: bool = False\n\n    @nn.compact\n    def __call__(self, x, *skip):\n"
        "        x = nn.Dense(8, name='a')(x)\n        if self.flag:\n            skip = (nn.LayerNorm(name='n')(x),)\n"
        "        return nn.Dense(2, name='out')(skip[0])\n",
    ],
)
def test_a_parameter_bound_in_one_branch_is_not_unbound_in_the_other(src):
    result = migrate_source("import flax.linen as nn\n\n\n" + src, "head.py", module_name="head")
    assert any(f.rule == "L2N-SHAPE-003" and "Head.out " in f.message for f in result.findings)
    assert "nnx.Linear(8, 2" not in result.output
