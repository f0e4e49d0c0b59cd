"""Trace spec for the Flax example ``seq2seq/models.py``: ``Seq2seq`` (teacher forcing, hidden 6,
vocabulary 5) on one-hot encoder inputs of length 4 and decoder inputs of length 3, the layout its
input pipeline produces ([batch, length, vocabulary])."""

from pathlib import Path

import numpy as np

from linen2nnx.spec import LinenSide, import_file

EXAMPLE = "seq2seq/models.py"


def linen_side(example: Path) -> LinenSide:
    models = import_file(example)
    rng = np.random.default_rng(0)
    one_hot = np.eye(5, dtype=np.float32)
    batch = {
        "encoder": one_hot[rng.integers(0, 5, size=(2, 4))],
        "decoder": one_hot[rng.integers(0, 5, size=(2, 3))],
    }
    return LinenSide(
        model=models.Seq2seq(teacher_force=True, hidden_size=6, vocab_size=5),
        batch=batch,
        loss=lambda out, batch: (out[0] ** 2).mean(),
        inputs=lambda b: ((b["encoder"], b["decoder"]), {}),
        train_kwargs={},
        eval_kwargs={},
        rng_streams=("params", "lstm"),
        name="seq2seq/Seq2seq",
    )
