"""Norms given a narrower ``dtype`` compute as Linen's: bit-identical outputs and batch statistics.

NNX's norms cast the input, scale, bias and running statistics to ``dtype`` before they compute the
statistics; Linen's compute them from the input as it is (in float32 at least) and cast only the output.
A bfloat16 LayerNorm of inputs near 300 differed by 1.5 (and a float16 one of inputs near 1e5 gave NaN),
while ``check`` passed on unit-scale batches. The migration hands each such norm ``promote_dtype=`` that
keeps the values as they are (``linen2nnx.layers.KEEP_DTYPES``)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linen2nnx.checkpoint_convert.api import convert_state
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

SRC = """
import flax.linen as nn
import jax.numpy as jnp


class Norms(nn.Module):
    dtype: jnp.dtype = jnp.bfloat16
    training: bool = False

    @nn.compact
    def __call__(self, x):
        outs = [
            nn.LayerNorm(dtype=self.dtype)(x),
            nn.RMSNorm(dtype=self.dtype)(x),
            nn.GroupNorm(num_groups=2, dtype=self.dtype)(x),
            nn.BatchNorm(use_running_average=not self.training, dtype=self.dtype)(x),
        ]
        return [o.astype(jnp.float32) for o in outs]
"""


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("norms")
    result = migrate_source(SRC, "norms.py", module_name="norms")
    assert not [f for f in result.findings if f.severity is not Severity.CONVERTED]
    assert result.output.count("promote_dtype=") == 4
    (tmp / "linen_norms.py").write_text(SRC)
    (tmp / "nnx_norms.py").write_text(result.output)
    result.name_map.save(tmp / "map.json")
    return import_file(tmp / "linen_norms.py"), import_file(tmp / "nnx_norms.py"), tmp / "map.json"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("train", [False, True])
def test_narrow_norms_compute_as_linen(sides, dtype, train):
    linen_mod, nnx_mod, map_path = sides
    dt = jnp.dtype(dtype)
    x = (300.0 + np.random.default_rng(0).normal(size=(4, 8))).astype(np.float32)
    model = linen_mod.Norms(dtype=dt, training=train)
    variables = model.init(jax.random.key(0), x)
    params = jax.tree.map(lambda p: p * 1.5 + 0.25, variables["params"])  # scale and bias that matter
    stats = jax.tree.map(lambda s: s + 299.0, variables["batch_stats"])  # running mean near the input's
    side = LinenSide(model=model, batch={"x": x}, loss=lambda out, b: sum(jnp.mean(o) for o in out))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Norms(dtype=dt, training=train, in_features=8, rngs=rngs),
        name_map=map_path,
    )
    nnx_model, _ = convert_state({"params": params, "batch_stats": stats}, pair, map_path)
    want, updated = model.apply({"params": params, "batch_stats": stats}, x, mutable=["batch_stats"])
    got = nnx_model(x)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if train:
        bn = nnx_model.batch_norm_0
        np.testing.assert_array_equal(bn.mean[...], updated["batch_stats"]["BatchNorm_0"]["mean"])
        np.testing.assert_array_equal(bn.var[...], updated["batch_stats"]["BatchNorm_0"]["var"])


def test_a_norm_without_dtype_gets_no_promote_argument():
    out = migrate_source(SRC.replace("dtype=self.dtype", "dtype=None"), "norms.py").output
    assert "promote_dtype" not in out and nn.LayerNorm  # dtype=None: NNX promotes as Linen computes


HANDED = """
import functools
from typing import Any

import flax.linen as nn
import jax.numpy as jnp


class Block(nn.Module):
    norm: Any = functools.partial(nn.LayerNorm, dtype=jnp.bfloat16)  # a field default, built here

    @nn.compact
    def __call__(self, x):
        return self.norm()(x).astype(jnp.float32)


class Net(nn.Module):
    dtype: Any = jnp.bfloat16

    @nn.compact
    def __call__(self, x):
        norm = functools.partial(nn.LayerNorm, epsilon=1e-5, dtype=self.dtype)  # the ResNet idiom
        return Block(norm=norm)(x) + Block()(x) + norm()(x).astype(jnp.float32)
"""


def test_a_norm_built_through_a_partial_handed_to_a_field_computes_as_linen(tmp_path):
    """``partial(nn.LayerNorm, dtype=...)`` handed to a block's factory field (and a field's default
    partial): the block builds the norm NNX-side from the partial, which needs the same promote as a
    directly built norm (bfloat16 near 300: 1.43 off without it, no finding)."""
    result = migrate_source(HANDED, "handed.py", module_name="handed")
    assert not [f for f in result.findings if f.severity is not Severity.CONVERTED]
    assert result.output.count("promote_dtype=") == 3  # the two partials and the direct build
    (tmp_path / "linen_handed.py").write_text(HANDED)
    (tmp_path / "nnx_handed.py").write_text(result.output)
    result.name_map.save(tmp_path / "map.json")
    linen_mod, nnx_mod = import_file(tmp_path / "linen_handed.py"), import_file(tmp_path / "nnx_handed.py")
    x = (300.0 + np.random.default_rng(0).normal(size=(4, 8))).astype(np.float32)
    model = linen_mod.Net()
    params = jax.tree.map(lambda p: p * 1.5 + 0.25, model.init(jax.random.key(0), x)["params"])
    side = LinenSide(model=model, batch={"x": x}, loss=lambda out, b: jnp.mean(out))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Net(in_features=8, rngs=rngs),
        name_map=tmp_path / "map.json",
    )
    nnx_model, _ = convert_state({"params": params}, pair, tmp_path / "map.json")
    np.testing.assert_array_equal(np.asarray(nnx_model(x)), np.asarray(model.apply({"params": params}, x)))


BATCH_NORMS = """
from typing import Any

import flax.linen as nn
import jax.numpy as jnp


class Stats(nn.Module):
    param_dtype: Any = jnp.float32
    use_scale: bool = True
    use_bias: bool = True
    training: bool = False

    @nn.compact
    def __call__(self, x):
        mode = not self.training
        return [
            nn.BatchNorm(
                use_running_average=mode, param_dtype=self.param_dtype, use_scale=self.use_scale, use_bias=self.use_bias
            )(x),
            nn.BatchNorm(use_running_average=mode, param_dtype=jnp.bfloat16)(x),
            nn.BatchNorm(use_running_average=mode, use_scale=False, use_bias=False)(x),
            nn.BatchNorm(use_running_average=mode)(x),  # float32 parameters: float32 on both sides
        ]
"""


@pytest.fixture(scope="module")
def batch_norms(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch_norms")
    result = migrate_source(BATCH_NORMS, "stats.py", module_name="stats")
    assert not [f for f in result.findings if f.severity is not Severity.CONVERTED]
    assert result.output.count("promote_dtype=") == 3  # all but the one with float32 parameters
    (tmp / "linen_stats.py").write_text(BATCH_NORMS)
    (tmp / "nnx_stats.py").write_text(result.output)
    result.name_map.save(tmp / "map.json")
    return import_file(tmp / "linen_stats.py"), import_file(tmp / "nnx_stats.py"), tmp / "map.json"


@pytest.mark.parametrize("x_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("param_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("switches", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_without_dtype_computes_as_linen(batch_norms, x_dtype, param_dtype, switches, train):
    """Without ``dtype`` NNX's BatchNorm promotes the input with its float32 running statistics, so a
    bfloat16 input with bfloat16 parameters (or none) gave float32, 0.0033 off in train mode, where Linen
    gives bfloat16: the kept values are exact for every input, parameter dtype, switch and mode."""
    linen_mod, nnx_mod, map_path = batch_norms
    config = dict(
        param_dtype=jnp.dtype(param_dtype), use_scale=switches[0], use_bias=switches[1], training=train
    )
    x = (5.0 + 3.0 * np.random.default_rng(0).normal(size=(4, 8))).astype(x_dtype)
    model = linen_mod.Stats(**config)
    variables = model.init(jax.random.key(0), x)
    params = jax.tree.map(lambda p: p * 1.5 + 0.25, variables.get("params", {}))
    stats = jax.tree.map(lambda s: s + 4.0, variables["batch_stats"])
    side = LinenSide(model=model, batch={"x": x}, loss=lambda out, b: sum(jnp.mean(o) for o in out))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Stats(**config, in_features=8, rngs=rngs),
        name_map=map_path,
    )
    nnx_model, _ = convert_state({"params": params, "batch_stats": stats}, pair, map_path)
    want, updated = model.apply({"params": params, "batch_stats": stats}, x, mutable=["batch_stats"])
    got = nnx_model(x)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
    for i in range(4) if train else ():
        bn = getattr(nnx_model, f"batch_norm_{i}")
        np.testing.assert_array_equal(bn.mean[...], updated["batch_stats"][f"BatchNorm_{i}"]["mean"])
        np.testing.assert_array_equal(bn.var[...], updated["batch_stats"][f"BatchNorm_{i}"]["var"])
