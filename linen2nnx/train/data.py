"""Training data with a position that can be saved: synthetic batches and a ``.npy`` token file.

A resumed run must see exactly the batches the uninterrupted run would have seen, so every source
here is a pure function of ``(seed, batch index)``: its whole iterator state is the index of the next
batch (:meth:`state` / :meth:`restore`), saved with each checkpoint. Each process builds only its own
rows of the global batch (``process_index`` of ``process_count`` equal slices), so a multi-process
run reads no more than its share and still sees the same global batch as a one-process run.

- :class:`SyntheticData` resamples the rows of the spec's example batch (with replacement, a fresh
  draw per batch): the batches keep the task's structure (labels that follow the inputs), so the loss
  really decreases, and any spec works without a data pipeline.
- :class:`TokenFileData` reads windows of ``seq_len + 1`` tokens from a 1-D ``.npy`` token file
  (memory-mapped) and yields ``{"inputs", "targets"}`` shifted by one, language-model style.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.errors import L2NError


class DataError(L2NError):
    """A data source that cannot be read or does not fit the run (batch size, processes)."""


def _rows(batch_size: int, process_index: int, process_count: int) -> slice:
    if batch_size % process_count:
        raise DataError(f"--batch-size {batch_size} does not divide over {process_count} processes")
    per = batch_size // process_count
    return slice(process_index * per, (process_index + 1) * per)


class _Indexed:
    """Shared iterator protocol: ``next(data)`` gives batch ``index`` and advances it."""

    index: int = 0

    def batch_at(self, index: int) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = self.batch_at(self.index)
        self.index += 1
        return batch

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores: enough to continue with the next batch."""
        return {"kind": type(self).__name__, "next_index": int(self.index)}

    def restore(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != type(self).__name__:
            raise DataError(
                f"the checkpoint's data state is for {state.get('kind')!r}, this run reads {type(self).__name__}"
            )
        self.index = int(state["next_index"])


class SyntheticData(_Indexed):
    """Batches of ``batch_size`` rows drawn from ``example`` (a batch dict), seeded per batch index."""

    def __init__(
        self,
        example: Mapping[str, Any],
        batch_size: int,
        seed: int = 0,
        *,
        process_index: int = 0,
        process_count: int = 1,
    ) -> None:
        self.example = {k: np.asarray(v) for k, v in example.items()}
        sizes = {v.shape[0] for v in self.example.values() if v.ndim}
        if len(sizes) != 1:
            raise DataError(f"the example batch's arrays disagree on the batch size: {sorted(sizes)}")
        self.rows_available = sizes.pop()
        self.batch_size, self.seed = batch_size, seed
        self.rows = _rows(batch_size, process_index, process_count)

    def batch_at(self, index: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, index])
        pick = rng.integers(0, self.rows_available, size=self.batch_size)[self.rows]
        return {k: v[pick] if v.ndim else v for k, v in self.example.items()}


class TokenFileData(_Indexed):
    """``{"inputs", "targets"}`` windows from a 1-D integer ``.npy`` file, each batch a seeded draw."""

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        seq_len: int,
        seed: int = 0,
        *,
        process_index: int = 0,
        process_count: int = 1,
    ) -> None:
        self.path = Path(path)
        try:
            self.tokens = np.load(self.path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise DataError(f"{self.path}: cannot read a .npy token file: {e}") from e
        if self.tokens.ndim != 1 or not np.issubdtype(self.tokens.dtype, np.integer):
            raise DataError(
                f"{self.path}: expected a 1-D integer token array, got {self.tokens.dtype} {self.tokens.shape}"
            )
        if len(self.tokens) < seq_len + 2:
            raise DataError(f"{self.path}: {len(self.tokens)} tokens, a window needs {seq_len + 1}")
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self.rows = _rows(batch_size, process_index, process_count)

    def batch_at(self, index: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, index])
        starts = rng.integers(0, len(self.tokens) - self.seq_len - 1, size=self.batch_size)[self.rows]
        windows = np.stack([np.asarray(self.tokens[s : s + self.seq_len + 1]) for s in starts])
        windows = windows.astype(np.int32)
        return {"inputs": windows[:, :-1], "targets": windows[:, 1:]}


def make_data(
    source: str,
    example: Mapping[str, Any],
    batch_size: int,
    seed: int,
    *,
    process_index: int = 0,
    process_count: int = 1,
) -> _Indexed:
    """``"synthetic"`` or the path of a ``.npy`` token file (its sequence length is the example's)."""
    if source == "synthetic":
        return SyntheticData(
            example, batch_size, seed, process_index=process_index, process_count=process_count
        )
    path = Path(source)
    if path.suffix != ".npy" or not path.is_file():
        raise DataError(f"--data {source!r}: expected 'synthetic' or an existing .npy token file")
    if "inputs" not in example or np.ndim(example["inputs"]) != 2:
        raise DataError(
            f"--data {source}: a token file feeds {{'inputs', 'targets'}} (B, T) batches; the spec's "
            f"example batch has keys {sorted(example)}"
        )
    seq_len = int(np.shape(example["inputs"])[1])
    return TokenFileData(
        path, batch_size, seq_len, seed, process_index=process_index, process_count=process_count
    )
