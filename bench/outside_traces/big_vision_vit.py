"""Trace spec for big_vision ``models/vit.py``: the ``mu/8`` ViT variant (width 32, one block, two
heads) with a ``MAPHead`` pool, a ``pre_logits`` layer and 5 classes, on two 16x16 images. The copied
tree is imported as the package ``big_vision``; ``big_vision.utils`` imports tensorflow's gfile and
ml_collections, which the models never use to compute, so both are stubbed when absent."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_parity import stub_missing_packages

from linen2nnx.spec import LinenSide

EXAMPLE = "models/vit.py"


def environment():
    return stub_missing_packages()  # tensorflow, ml_collections, ... when absent


def linen_side(example: Path) -> LinenSide:
    vit = importlib.import_module(f"{example.parents[1].name}.models.vit")
    images = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype(np.float32)
    return LinenSide(
        model=vit.Model(num_classes=5, variant="mu/8", pool_type="map", rep_size=True),
        batch={"x": images},
        loss=lambda out, batch: jnp.mean(out[0] ** 2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        name="big_vision/ViT",
    )
