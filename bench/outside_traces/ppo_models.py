"""Trace spec for the Flax example ``ppo/models.py``: the ``ActorCritic`` on one stack of four
84x84 Atari frames, what its training loop feeds it. The Dense after the flatten reads
7 * 7 * 64 features, which only the input resolution decides."""

from pathlib import Path

import numpy as np

from linen2nnx.spec import LinenSide, import_file

EXAMPLE = "ppo/models.py"


def linen_side(example: Path) -> LinenSide:
    models = import_file(example)
    frames = np.random.default_rng(0).integers(0, 255, size=(2, 84, 84, 4)).astype(np.float32)
    return LinenSide(
        model=models.ActorCritic(num_outputs=6),
        batch={"x": frames},
        loss=lambda out, batch: out[1].sum(),
        train_kwargs={},
        eval_kwargs={},
        name="ppo/ActorCritic",
    )
