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
