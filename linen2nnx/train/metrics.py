"""Where a run's numbers go: ``OUT/metrics.jsonl``, TensorBoard event files, and a rich progress line.

``metrics.jsonl`` holds one JSON object per step (``step``, ``loss``, ``grad_norm``, ``step_time_s``,
``examples_per_s``, plus ``tokens_per_s`` for token batches). A resumed run first drops the lines of
steps at or after the step it resumes from (a killed run may have logged steps whose checkpoint
never landed), so the file always reads as one uninterrupted run.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tensorboard"


class MetricsLog:
    """Append per-step records to ``metrics.jsonl`` (flushed each step) and to TensorBoard."""

    def __init__(
        self, out: Path, *, resume_from: int | None = None, tensorboard: bool = True, enabled: bool = True
    ) -> None:
        self.path = Path(out) / METRICS_FILE
        self.enabled = enabled
        self.file, self.tb = None, None
        if not enabled:
            return
        if resume_from is not None and self.path.exists():
            keep = [line for line in self._lines() if _step_of(line, resume_from) < resume_from]
            self.path.write_text("".join(keep), encoding="utf-8")
        elif self.path.exists():
            self.path.unlink()
        self.file = self.path.open("a", encoding="utf-8")
        self.tb = _tensorboard(Path(out) / TB_DIR) if tensorboard else None

    def _lines(self) -> list[str]:
        return [
            line for line in self.path.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()
        ]

    def write(self, record: dict[str, Any]) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(f"train/{key}", value, record["step"])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.tb is not None:
            self.tb.close()


def _step_of(line: str, resume_from: int) -> int:
    """The step a ``metrics.jsonl`` line records; ``resume_from`` (dropped) for a line a killed run
    left torn or without a step: it belongs to no step the resumed run keeps."""
    try:
        step = json.loads(line).get("step")
    except (json.JSONDecodeError, AttributeError):
        return resume_from
    return step if isinstance(step, int) else resume_from


def _tensorboard(folder: Path) -> Any:
    """A tensorboardX ``SummaryWriter``, or None when tensorboardX is not installed."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:  # pragma: no cover - an optional extra
        return None
    return SummaryWriter(str(folder))


def read_metrics(out: str | Path) -> list[dict[str, Any]]:
    """The records of ``OUT/metrics.jsonl``, in order."""
    text = (Path(out) / METRICS_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def step_record(
    step: int, metrics: dict[str, Any], seconds: float, batch: dict[str, Any], global_batch: int
) -> dict[str, Any]:
    """One ``metrics.jsonl`` record; ``tokens_per_s`` when the batch holds (B, T) integer tokens."""
    import numpy as np

    record = {"step": int(step), **{k: float(v) for k, v in metrics.items()}, "step_time_s": seconds}
    record["examples_per_s"] = global_batch / seconds if seconds > 0 else math.inf
    tokens = batch.get("inputs")
    if tokens is not None and np.ndim(tokens) == 2 and np.issubdtype(np.asarray(tokens).dtype, np.integer):
        record["tokens_per_s"] = record["examples_per_s"] * np.shape(tokens)[1]
    return record


class Progress:
    """A rich progress bar with the loss, step time, throughput and ETA (quiet off a terminal)."""

    def __init__(self, total: int, first: int, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task = self.bar.add_task("train", total=total, completed=first, info="")
        self.started = time.perf_counter()

    def __enter__(self) -> Progress:
        self.bar.start()
        return self

    def update(self, record: dict[str, Any]) -> None:
        rate = record.get("tokens_per_s", record["examples_per_s"])
        unit = "tok/s" if "tokens_per_s" in record else "ex/s"
        info = (
            f"step {record['step']} loss {record['loss']:.4f} "
            f"{record['step_time_s'] * 1e3:.1f} ms {rate:,.0f} {unit}"
        )
        self.bar.update(self.task, advance=1, info=info)

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()
