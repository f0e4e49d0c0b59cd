"""Trains a spec with ``linen2nnx.train`` and SIGKILLs its own process right after step ``KILL_AT``.

    python tests/train_kill_worker.py SPEC OUT KILL_AT [train options as JSON]

The kill lands mid-run: asynchronous checkpoint saves may still be in flight, metrics of steps
whose checkpoint never landed are already logged. ``tests/test_train.py`` then resumes the run with
``linen2nnx train --resume`` and compares the loss curve with an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main(spec: str, out: str, kill_at: int, options: dict) -> None:
    from linen2nnx.spec import load_pair
    from linen2nnx.train import TrainConfig, run_training

    def on_step(step: int, record: dict) -> None:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    run_training(load_pair(spec), TrainConfig(out=Path(out), **options), on_step=on_step)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]) if len(sys.argv) > 4 else {})
