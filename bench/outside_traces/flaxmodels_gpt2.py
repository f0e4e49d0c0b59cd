"""Trace spec for flaxmodels 0.1.3 ``gpt2/gpt2.py``: ``GPT2Model`` with a tiny config (2 layers, width
12, 2 heads, vocabulary 11) on two sequences of 5 token ids. The copied tree is imported as the package
``flaxmodels`` (its files import each other through it); download-only imports (h5py, requests, ...)
are stubbed, and ``jnp.reshape(newshape=)``, which JAX has removed, is accepted while tracing."""

import importlib
from pathlib import Path
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
from outside_packages import flaxmodels_environment

from linen2nnx.spec import LinenSide

EXAMPLE = "gpt2/gpt2.py"


def environment():
    return flaxmodels_environment(newshape=True)


def linen_side(example: Path) -> LinenSide:
    gpt2 = importlib.import_module(f"{example.parents[1].name}.gpt2.gpt2")
    config = SimpleNamespace(
        vocab_size=11, n_positions=7, n_embd=12, n_head=2, n_layer=2, n_inner=None, embd_pdrop=0.0,
        attn_pdrop=0.0, resid_pdrop=0.0, layer_norm_epsilon=1e-5, scale_attn_weights=True,
        activation_function="gelu_new",
    )  # fmt: skip
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 5))
    return LinenSide(
        model=gpt2.GPT2Model(config=config),
        batch={"x": ids},
        loss=lambda out, batch: jnp.mean(out["last_hidden_state"] ** 2),
        train_kwargs={"training": True},
        eval_kwargs={"training": False},
        name="flaxmodels/GPT2Model",
    )
