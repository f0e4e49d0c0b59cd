"""Trace spec for recurrentgemma 1.0.1 ``jax/griffin.py``: ``Griffin`` with a tiny config (width 8, a
recurrent and a local-attention residual block, vocabulary 11) on two sequences of 6 tokens. The
package imports itself by name (``from recurrentgemma.jax import modules``), so the spec imports the
copied tree as the package ``recurrentgemma``; its pure-Python dependencies (einops, jaxtyping,
typeguard) come from ``--build-path``, and ``sentencepiece`` (the tokenizer, never used here) is stubbed."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_parity import stub_missing_packages

from linen2nnx.spec import LinenSide

EXAMPLE = "jax/griffin.py"


def environment():
    return stub_missing_packages(("sentencepiece",))


def linen_side(example: Path) -> LinenSide:
    package = example.parents[1].name
    common = importlib.import_module(f"{package}.common")
    griffin = importlib.import_module(f"{package}.jax.griffin")
    config = common.GriffinConfig(
        vocab_size=11,
        width=8,
        mlp_expanded_width=12,
        num_heads=2,
        block_types=(common.TemporalBlockType.RECURRENT, common.TemporalBlockType.ATTENTION),
        embeddings_scale_by_sqrt_dim=True,
        attention_window_size=4,
        logits_soft_cap=30.0,
        scan_type=common.ScanType.LINEAR_NATIVE,
    )
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, size=(2, 6)), jnp.int32)
    positions = jnp.asarray(np.tile(np.arange(6), (2, 1)), jnp.int32)  # jaxtyping checks for jax arrays
    return LinenSide(
        model=griffin.Griffin(config),
        batch={"x": tokens, "segment_pos": positions},
        inputs=lambda b: ((b["x"], b["segment_pos"]), {}),
        loss=lambda out, batch: jnp.mean(out[0] ** 2),
        train_kwargs={"return_cache": False},
        eval_kwargs={"return_cache": False},
        name="recurrentgemma/Griffin",
    )
