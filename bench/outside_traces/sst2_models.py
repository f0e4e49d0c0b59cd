"""Trace spec for the Flax example ``sst2/models.py``: a small ``TextClassifier`` (embedding 6,
hidden 5, vocabulary 11, 3 classes) on two padded token sequences."""

from pathlib import Path

import numpy as np

from linen2nnx.spec import LinenSide, import_file

EXAMPLE = "sst2/models.py"


def linen_side(example: Path) -> LinenSide:
    models = import_file(example)
    model = models.TextClassifier(
        embedding_size=6, hidden_size=5, vocab_size=11, output_size=3, dropout_rate=0.0, word_dropout_rate=0.0
    )
    batch = {
        "ids": np.array([[2, 3, 4, 5, 6, 7, 8], [2, 9, 10, 3, 0, 0, 0]], np.int32),
        "lengths": np.array([7, 4], np.int32),
    }
    return LinenSide(
        model=model,
        batch=batch,
        loss=lambda out, batch: out.sum(),
        inputs=lambda b: ((b["ids"], b["lengths"]), {}),
        train_kwargs={"deterministic": False},
        eval_kwargs={"deterministic": True},
        name="sst2/TextClassifier",
    )
