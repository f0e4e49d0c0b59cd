"""Trace spec for flaxmodels 0.1.3 ``vgg/vgg.py``: ``VGG16`` (random weights, no head: the head needs
224x224 inputs) on two 32x32 images. The copied tree is imported as the package ``flaxmodels``; its
download-only import (h5py, ...) is stubbed."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_packages import flaxmodels_environment

from linen2nnx.spec import LinenSide

EXAMPLE = "vgg/vgg.py"


def environment():
    return flaxmodels_environment()


def linen_side(example: Path) -> LinenSide:
    vgg = importlib.import_module(f"{example.parents[1].name}.vgg.vgg")
    images = np.random.default_rng(0).uniform(size=(2, 32, 32, 3)).astype(np.float32)
    return LinenSide(
        model=vgg.VGG16(output="logits", pretrained=None, include_head=False),
        batch={"x": images},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        name="flaxmodels/VGG16",
    )
