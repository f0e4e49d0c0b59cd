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
  (memory-mapped) through a grain ``MapDataset`` (shuffled, repeated, batched) and yields
  ``{"inputs", "targets"}`` shifted by one, language-model style.
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


class _Windows:
    """Non-overlapping windows of ``seq_len + 1`` tokens of a (memory-mapped) 1-D array: a grain source."""

    def __init__(self, tokens: np.ndarray, seq_len: int) -> None:
        self.tokens, self.seq_len = tokens, seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(i) * self.seq_len
        return np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int32)


class TokenFileData(_Indexed):
    """``{"inputs", "targets"}`` batches from a 1-D integer ``.npy`` file, through a grain pipeline.

    ``grain.MapDataset``: the file's windows, shuffled by ``seed``, repeated, batched. A map dataset is
    random access, so batch ``i`` is ``dataset[i]`` and the iterator's whole state is still ``i``.
    """

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
        import grain

        self.path = Path(path)
        try:
            tokens = np.load(self.path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise DataError(f"{self.path}: cannot read a .npy token file: {e}") from e
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise DataError(
                f"{self.path}: expected a 1-D integer token array, got {tokens.dtype} {tokens.shape}"
            )
        windows = _Windows(tokens, seq_len)
        if len(windows) < batch_size:
            raise DataError(
                f"{self.path}: {len(tokens)} tokens make {len(windows)} windows of {seq_len + 1}, "
                f"fewer than one batch of {batch_size}"
            )
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self.rows = _rows(batch_size, process_index, process_count)
        dataset = grain.MapDataset.source(windows).shuffle(seed=seed).repeat()
        self.dataset = dataset.batch(batch_size, drop_remainder=True)

    def batch_at(self, index: int) -> dict[str, np.ndarray]:
        windows = self.dataset[index][self.rows]
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
