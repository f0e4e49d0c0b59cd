"""A Linen module decorated ``@gin.configurable`` (fixture ``gin_configurable``) keeps the decorator on
its NNX class with no finding, and the bindings of a gin config reach the NNX class as they reach the
Linen one: the NNX ``__init__`` takes the Linen fields as parameters of the same names. Both sides are
built under the same config (bound values that change the output and the parameter shapes) and compared
through the name map."""

import gin
import numpy as np
import pytest
from fixture_parity import assert_parity, build

CONFIG = """
{side}.Block.scale = 2.0
{side}.gin_model.hidden = 7
{side}.gin_model.out_features = 5
"""


@pytest.fixture
def sides(tmp_path):
    gin.clear_config(clear_constants=True)
    linen_mod, nnx_mod, result, map_path = build("gin_configurable", tmp_path)
    yield linen_mod, nnx_mod, result, map_path
    gin.clear_config(clear_constants=True)


def test_bound_values_reach_the_nnx_class(sides):
    linen_mod, nnx_mod, result, map_path = sides
    assert "L2N-MOD-017" not in {f.rule for f in result.findings}
    gin.parse_config(CONFIG.format(side=linen_mod.__name__) + CONFIG.format(side=nnx_mod.__name__))
    nnx_model = nnx_mod.Model(in_features=3, rngs=__import__("flax").nnx.Rngs(0))
    assert (nnx_model.hidden, nnx_model.out_features, nnx_model.block[0].scale) == (7, 5, 2.0)
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    assert_parity(linen_mod.Model(), lambda rngs: nnx_mod.Model(in_features=3, rngs=rngs), x, map_path)


def test_a_configured_default_is_not_spelled_out_by_a_caller(sides):
    """``Head`` builds ``Block()`` with the default ``features`` a config may bind: its size after the
    block is a constructor argument (L2N-SHAPE-003), right for the bound value (here 8, not the default 4)."""
    linen_mod, nnx_mod, result, map_path = sides
    assert [f.rule for f in result.findings if f.severity.name == "MANUAL"] == ["L2N-SHAPE-003"]
    gin.parse_config(f"{linen_mod.__name__}.Block.features = 8\n{nnx_mod.__name__}.Block.features = 8")
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    assert_parity(
        linen_mod.Head(),
        lambda rngs: nnx_mod.Head(in_features=3, dense_0_in_features=8, rngs=rngs),
        x,
        map_path,
    )
