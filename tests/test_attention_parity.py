"""Migrated attention layers against Linen's: step-by-step decoding from a cache the first call creates
(the init-call protocol of ``LayerRule.init_call_cache``), a layer built by a class held in a field,
and the query / key norms of a reduced-precision attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_parity import assert_parity, build
from flax import nnx

from linen2nnx.checkpoint_convert.api import convert_state
from linen2nnx.equivalence import perturbed
from linen2nnx.spec import LinenSide, ModelPair


def _decode_steps(linen_cls, nnx_cls, map_path, tokens):
    """The Linen model's outputs and cache step by step (after its init call), and the NNX model's
    (after its first, cache-creating call), the weights converted through the name map."""
    linen_model = linen_cls(decode=True)
    variables = linen_model.init(jax.random.key(0), jnp.zeros_like(tokens))
    params = perturbed({"params": variables["params"]})["params"]
    side = LinenSide(model=linen_model, batch={"x": tokens}, loss=lambda out, batch: jnp.mean(out**2))
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_cls(decode=True, rngs=rngs), name_map=map_path)
    model, _ = convert_state({"params": params}, pair, map_path)
    model(jnp.zeros_like(tokens))  # Linen's init call: creates the cache, does not decode
    cache = variables["cache"]
    for t in range(tokens.shape[1]):
        want, mutated = linen_model.apply(
            {"params": params, "cache": cache}, tokens[:, t : t + 1], mutable=["cache"]
        )
        cache = mutated["cache"]
        got = model(tokens[:, t : t + 1])
        assert got.dtype == want.dtype
        np.testing.assert_allclose(
            np.asarray(got, np.float32),
            np.asarray(want, np.float32),
            rtol=1e-5,
            atol=1e-6,
            err_msg=f"step {t}",
        )
    return cache, nnx.to_pure_dict(nnx.state(model, nnx.Cache))


@pytest.mark.parametrize("cls", ["PosDecoder", "MaskDecoder", "HalfDecoder"])
def test_decode_cache_sized_from_the_call_decodes_as_linen(cls, tmp_path):
    """``PosDecoder``: the attention's input is a position embedding with its own cache index, run
    once on the first call (it ran three times: every step 0.87 off). ``MaskDecoder``:
    ``nn.SelfAttention(x, mask)`` sizes the cache from ``x`` (from the mask: AttributeError). ``HalfDecoder``:
    ``dtype=self.dtype`` is None, the cache in bfloat16 as Linen's (float32: TypeError at step 0)."""
    linen_mod, nnx_mod, _, map_path = build("attention_decode_inputs", tmp_path)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 13, (2, 5)), jnp.int32)
    linen_cache, nnx_cache = _decode_steps(getattr(linen_mod, cls), getattr(nnx_mod, cls), map_path, tokens)
    want = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(linen_cache)}
    got = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(nnx_cache)}
    assert want.keys() == got.keys()
    for path, value in want.items():
        assert got[path].dtype == value.dtype, path
        np.testing.assert_allclose(
            np.asarray(got[path], np.float32),
            np.asarray(value, np.float32),
            rtol=1e-5,
            atol=1e-6,
            err_msg=path,
        )


def test_attention_built_by_a_field_has_linen_default_decode(tmp_path):
    """``self.attn_cls(num_heads=2)`` with the field defaulting to ``nn.MultiHeadDotProductAttention``:
    built with ``decode=False`` as the layer written there (every call raised "No `decode` argument")."""
    linen_mod, nnx_mod, _, map_path = build("attention_field_default", tmp_path)
    x = np.random.default_rng(1).normal(size=(2, 5, 6)).astype(np.float32)
    assert_parity(linen_mod.Stack(), lambda rngs: nnx_mod.Stack(in_features=6, rngs=rngs), x, map_path)


def test_normalized_qk_in_bfloat16_is_bit_identical(tmp_path):
    """``normalize_qk=True, dtype=bfloat16``: the query / key norms keep their values' dtypes, as Linen's
    LayerNorm: the outputs are bit-identical (1560 of 2048 differed, by up to 0.039)."""
    linen_mod, nnx_mod, _, map_path = build("attention_qk_norm_dtype", tmp_path)
    x = (np.random.default_rng(0).normal(size=(4, 16, 32)) * 2).astype(np.float32)
    linen_model = linen_mod.QKNorm()
    variables = linen_model.init(jax.random.key(0), x)
    key = jax.random.key(1)  # scales that are not bfloat16 numbers
    variables = jax.tree.map(lambda a: a * (1 + 0.3 * jax.random.uniform(key, a.shape)), variables)
    side = LinenSide(model=linen_model, batch={"x": x}, loss=lambda out, batch: jnp.mean(out**2))
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_mod.QKNorm(in_features=32, rngs=rngs), name_map=map_path
    )
    model, _ = convert_state(variables, pair, map_path)
    np.testing.assert_array_equal(
        np.asarray(model(x), np.float32), np.asarray(linen_model.apply(variables, x), np.float32)
    )


NARROW = """
from typing import Any

import flax.linen as nn
import jax.numpy as jnp


class Attn(nn.Module):
    dtype: Any = None
    param_dtype: Any = jnp.float32
    normalize_qk: bool = False

    @nn.compact
    def __call__(self, x, mask):
        return [
            nn.MultiHeadDotProductAttention(
                num_heads=2, dtype=self.dtype, param_dtype=self.param_dtype, normalize_qk=self.normalize_qk
            )(x, mask=mask),
            nn.SelfAttention(num_heads=2, dtype=jnp.bfloat16)(x),
            nn.MultiHeadDotProductAttention(
                num_heads=2, param_dtype=jnp.bfloat16, attention_fn=nn.dot_product_attention
            )(x.astype(jnp.bfloat16)),
            nn.MultiHeadDotProductAttention(num_heads=2)(x),  # float32: the NNX default computes as Linen
        ]
"""


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    from linen2nnx.migrate import Severity, migrate_source
    from linen2nnx.spec import import_file

    tmp = tmp_path_factory.mktemp("narrow")
    result = migrate_source(NARROW, "narrow.py", module_name="narrow")
    assert not [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    assert result.output.count("attention_fn=") == 3  # not the float32 one
    (tmp / "linen_narrow.py").write_text(NARROW)
    (tmp / "nnx_narrow.py").write_text(result.output)
    result.name_map.save(tmp / "map.json")
    return import_file(tmp / "linen_narrow.py"), import_file(tmp / "nnx_narrow.py"), tmp / "map.json"


@pytest.mark.parametrize("dtype", [None, "bfloat16", "float16", "float32"])
@pytest.mark.parametrize("param_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("normalize_qk", [False, True])
@pytest.mark.parametrize("x_dtype", ["float32", "bfloat16"])
def test_narrow_attention_is_bit_identical(narrow, dtype, param_dtype, normalize_qk, x_dtype):
    """With a dropout rate of 0 ``nnx.dot_product_attention`` goes through ``jax.nn.dot_product_attention``
    (float32 logits and softmax), where Linen computes in the layer's dtype: a bfloat16 attention differed
    in 1439 of 2048 outputs (by up to 0.0625). Where ``dtype`` or ``param_dtype`` may be narrower than
    float32 the migrated layer takes NNX's einsum path, Linen's computation: bit-identical."""
    linen_mod, nnx_mod, map_path = narrow
    config = {
        "dtype": dtype and jnp.dtype(dtype),
        "param_dtype": jnp.dtype(param_dtype),
        "normalize_qk": normalize_qk,
    }
    x = (2.0 * np.random.default_rng(0).normal(size=(2, 7, 8))).astype(x_dtype)
    mask = np.tril(np.ones((1, 1, 7, 7), bool))
    model = linen_mod.Attn(**config)
    variables = perturbed(model.init(jax.random.key(0), x, mask))
    side = LinenSide(model=model, batch={"x": x, "mask": mask}, loss=lambda out, batch: jnp.mean(out[0]))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Attn(**config, in_features=8, rngs=rngs),
        name_map=map_path,
    )
    nnx_model, _ = convert_state(variables, pair, map_path)
    for want, got in zip(model.apply(variables, x, mask), nnx_model(x, mask), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
