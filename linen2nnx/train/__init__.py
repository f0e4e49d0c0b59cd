"""Train the NNX model of a model pair: from a fresh init or from ``convert``'s output, on a mesh,
checkpointed and resumable.

The pieces are usable on their own from a script::

    from linen2nnx.spec import load_pair
    from linen2nnx.train import TrainConfig, run_training

    pair = load_pair("nnx/linen2nnx_spec.py")
    result = run_training(pair, TrainConfig(out=Path("run"), steps=100, init_from=Path("nnx_ckpt")))

- :mod:`~linen2nnx.train.state`: the split ``(model, optimizer)`` state, fresh or from ``convert``;
- :mod:`~linen2nnx.train.step`: the jitted, donated train step (grad accumulation, remat);
- :mod:`~linen2nnx.train.data`: synthetic and token-file batches with a saveable position;
- :mod:`~linen2nnx.train.checkpointing`: the Orbax ``CheckpointManager`` of a run;
- :mod:`~linen2nnx.train.metrics`: ``metrics.jsonl``, TensorBoard, progress;
- :mod:`~linen2nnx.train.compile_report`: lower and compile only, memory and FLOPs.
"""

from __future__ import annotations

from linen2nnx.train.loop import TrainConfig, TrainResult, run_training
from linen2nnx.train.metrics import read_metrics

__all__ = ["TrainConfig", "TrainResult", "read_metrics", "run_training"]
