"""Trace spec for big_vision ``models/bit.py``: a ResNet-26 BiT (two bottleneck units per stage) at
half width (32 channels at the root, a multiple of GroupNorm's 32 groups) with 5 classes, on two
32x32 images. It shares its folder with ``big_vision_vit.py``: the bench merges both examples' traces
for the folder's one migration. ``big_vision.utils`` is stubbed as for the ViT."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_parity import stub_missing_packages

from linen2nnx.spec import LinenSide

EXAMPLE = "models/bit.py"


def environment():
    return stub_missing_packages()  # tensorflow, ml_collections, ... when absent


def linen_side(example: Path) -> LinenSide:
    bit = importlib.import_module(f"{example.parents[1].name}.models.bit")
    images = np.random.default_rng(0).uniform(size=(2, 32, 32, 3)).astype(np.float32)
    return LinenSide(
        model=bit.Model(num_classes=5, width=0.5, depth=26),
        batch={"x": images},
        loss=lambda out, batch: jnp.mean(out[0] ** 2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        name="big_vision/BiT",
    )
