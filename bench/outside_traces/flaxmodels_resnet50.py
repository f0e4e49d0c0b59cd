"""Second trace spec for flaxmodels 0.1.3 ``resnet/resnet.py``: ``ResNet`` as its ``ResNet50`` builds it
(``architecture='resnet50'``, ``block=Bottleneck``; random init, 5 classes) on two 16x16 images. It
traces the ``Bottleneck`` blocks the ResNet18 spec (``flaxmodels_resnet.py``) never builds; the two
traces are merged for the example's migration. The copied tree is imported as the package
``flaxmodels``; its download-only import (h5py, ...) is stubbed."""

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
        model=resnet.ResNet(
            output="logits", pretrained=None, architecture="resnet50", block=resnet.Bottleneck, num_classes=5
        ),
        batch={"x": images},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        mutable=("batch_stats",),
        name="flaxmodels/ResNet50",
    )
