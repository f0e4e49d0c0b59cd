"""Trace spec for the Flax example ``imagenet/models.py``: the one-stage ``_ResNet1`` (8 filters, 10
classes) on two 32x32 RGB images, in eval mode (its BatchNorm's ``axis_name='batch'`` only means
something inside the example's ``pmap``). The trace shows the ``Dense`` after ``jnp.mean(x, axis=(1,
2))`` reading rank-2 inputs, so the mean of the rank-4 feature map keeps its last axis."""

from pathlib import Path

import numpy as np

from linen2nnx.spec import LinenSide, import_file

EXAMPLE = "imagenet/models.py"


def linen_side(example: Path) -> LinenSide:
    models = import_file(example)
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    return LinenSide(
        model=models._ResNet1(num_classes=10, num_filters=8),
        batch={"x": images},
        loss=lambda out, batch: (out**2).mean(),
        train_kwargs={"train": False},
        eval_kwargs={"train": False},
        mutable=("batch_stats",),
        name="imagenet/ResNet",
    )
