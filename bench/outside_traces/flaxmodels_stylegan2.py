"""Trace spec for flaxmodels 0.1.3 ``stylegan2/generator.py``: ``Generator`` (``pretrained=None``, random
weights from its ``rng`` field) at an 8x8 resolution with 8-wide latents and feature maps, on two latent
vectors, with its default random noise (drawn from the fixed key it falls back to, so a call is
deterministic). The copied tree is imported as the package
``flaxmodels``; its download-only imports (h5py, ...) are stubbed, and ``jnp.reshape(newshape=)``, which JAX has
removed, is accepted while tracing."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_packages import flaxmodels_environment

from linen2nnx.spec import LinenSide

EXAMPLE = "stylegan2/generator.py"


def environment():
    return flaxmodels_environment(newshape=True)


def linen_side(example: Path) -> LinenSide:
    generator = importlib.import_module(f"{example.parents[1].name}.stylegan2.generator")
    z = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    model = generator.Generator(
        resolution=8,
        z_dim=8,
        w_dim=8,
        mapping_layer_features=8,
        num_ws=4,
        num_mapping_layers=2,
        fmap_base=16,
        fmap_max=8,
        pretrained=None,
    )
    return LinenSide(
        model=model,
        batch={"x": z},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        mutable=("moving_stats",),
        name="flaxmodels/StyleGAN2Generator",
    )
