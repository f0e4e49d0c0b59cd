"""The Linen model zoo: reference Linen models (the migration tool's inputs) and their training loops.

Each model is a subpackage ``linen2nnx.zoo.<name>`` with

- ``model.py``: only the Linen model code (what ``migrate`` rewrites), and
- ``train.py``: ``CONFIGS`` (``"tiny"``, ``"bench"``), ``make_model``, ``example_batch``, ``batches``,
  ``loss_fn``, ``spec`` (a :class:`linen2nnx.spec.LinenSide`), and a Linen training loop
  (``create_train_state``, ``train_step``, ``train``, ``save_checkpoint``, ``load_checkpoint``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from linen2nnx.errors import L2NError

ZOO_MODELS = ("mlp", "cnn", "decoder", "rnn", "encoder", "pipeline")

_ZOO_DIR = Path(__file__).resolve().parent


def _check(name: str) -> str:
    if name not in ZOO_MODELS:
        raise L2NError(f"unknown zoo model {name!r}; valid names: {', '.join(ZOO_MODELS)}")
    return name


def model_source(name: str) -> Path:
    """The path of the zoo model's Linen source (``linen2nnx/zoo/<name>/model.py``)."""
    return _ZOO_DIR / _check(name) / "model.py"


def spec_ref(name: str) -> str:
    """The spec reference of the zoo model, e.g. ``"linen2nnx.zoo.cnn.train:spec"``."""
    return f"{__name__}.{_check(name)}.train:spec"


def load_train_module(name: str) -> ModuleType:
    """Import ``linen2nnx.zoo.<name>.train``."""
    return importlib.import_module(f"{__name__}.{_check(name)}.train")
