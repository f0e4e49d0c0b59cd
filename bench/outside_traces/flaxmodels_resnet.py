"""Trace spec for flaxmodels 0.1.3 ``resnet/resnet.py``: ``ResNet`` (``architecture='resnet18'``, random
init, 5 classes) on two 16x16 images, in train and eval mode (BatchNorm statistics). The copied tree is
imported as the package ``flaxmodels``; its download-only import (h5py, ...) is stubbed. The
``Bottleneck`` blocks, which resnet18 does not build, are traced by ``flaxmodels_resnet50.py``."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from outside_packages import flaxmodels_environment

from linen2nnx.spec import LinenSide

EXAMPLE = "resnet/resnet.py"


def environment():
    return flaxmodels_environment()


def linen_side(example: Path) -> LinenSide:
    resnet = importlib.import_module(f"{example.parents[1].name}.resnet.resnet")
    images = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype(np.float32)
    return LinenSide(
        model=resnet.ResNet(output="logits", pretrained=None, architecture="resnet18", num_classes=5),
        batch={"x": images},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        mutable=("batch_stats",),
        name="flaxmodels/ResNet18",
    )
