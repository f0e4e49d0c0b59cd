"""The read-back's chunked fill (``zstd_chunk.fill``): each chunk decoded either straight into its
box (a box that is one run of the array's bytes) or into a chunk buffer copied into place, one or
two chunks at a time; every layout reads back bit for bit, and a damaged chunk is an error."""

from __future__ import annotations

import asyncio
import zlib

import numpy as np
import pytest
import tensorstore as ts

from linen2nnx.checkpoint_convert import zstd_chunk

SHAPE = (6, 10, 12)


def _write(tmp_path, chunks: tuple[int, ...]) -> tuple[dict, np.ndarray]:
    """A zarr v2 array with zstd chunks of ``chunks`` (edge chunks included) on plain files."""
    kvstore = {"driver": "file", "path": str(tmp_path / "arr")}
    value = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) * 0.5
    spec = {
        "driver": "zarr",
        "kvstore": kvstore,
        "metadata": {
            "shape": list(SHAPE),
            "chunks": list(chunks),
            "dtype": "<f4",
            "compressor": {"id": "zstd", "level": 1},
            "order": "C",
        },
        "create": True,
    }
    ts.open(spec).result().write(value).result()
    return kvstore, value


def _fill(kvstore: dict, dest: np.ndarray, summed: list[int] | None = None) -> bool:
    async def go() -> bool:
        return await zstd_chunk.fill(kvstore, dest, ts.Context(), summed=summed)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("chunks", "copied"),
    [
        ((2, 10, 12), 0),  # whole trailing axes: every box one run of bytes, decoded in place
        ((4, 10, 12), 1),  # the same, but the edge chunk (stored padded) goes via a chunk buffer
        ((6, 4, 5), 9),  # split inner axes: every chunk via a chunk buffer, copied into its box
        ((1, 1, 12), 0),  # many small chunks, more than the decoding depth
    ],
)
@pytest.mark.parametrize("depth", [1, 2])
def test_every_chunk_layout_reads_back_bit_for_bit(tmp_path, chunks, copied, depth, monkeypatch):
    monkeypatch.setattr(zstd_chunk, "PIECE_BYTES", 64)  # several pieces per chunk
    monkeypatch.setattr(zstd_chunk, "FILL_DEPTH", depth)
    copies: list[tuple[slice, ...]] = []
    real_place = zstd_chunk._place
    monkeypatch.setattr(zstd_chunk, "_place", lambda d, box, s: (copies.append(box), real_place(d, box, s)))
    kvstore, value = _write(tmp_path, chunks)
    dest = np.full(SHAPE, np.nan, np.float32)
    summed: list[int] = []
    assert _fill(kvstore, dest, summed)
    np.testing.assert_array_equal(dest, value)
    assert len(copies) == copied
    assert summed == [zlib.crc32(value.tobytes())]  # runs checksummed as their chunks land, combined


@pytest.mark.parametrize("max_runs", [1, 64])
@pytest.mark.parametrize("chunks", [(6, 4, 5), (6, 10, 5), (3, 10, 12), (4, 3, 12), (7, 11, 13)])
def test_the_checksum_of_a_chunked_array_is_its_crc32(tmp_path, chunks, max_runs, monkeypatch):
    """Chunks that split only inner axes (a run per outer index and band), the first axis (one run
    per band), with edge chunks, or nothing (a chunk bigger than the array); with more runs per band
    than allowed, the whole array is one run, checksummed after its last chunk."""
    monkeypatch.setattr(zstd_chunk._Bands, "MAX_RUNS", max_runs)
    monkeypatch.setattr(zstd_chunk, "FILL_DEPTH", 2)
    kvstore, value = _write(tmp_path, chunks)
    dest = np.empty(SHAPE, np.float32)
    summed: list[int] = []
    assert _fill(kvstore, dest, summed)
    np.testing.assert_array_equal(dest, value)
    assert summed == [zlib.crc32(value.tobytes())]
    view = np.empty((SHAPE[0], SHAPE[1], SHAPE[2] + 1), np.float32)[:, :, : SHAPE[2]]
    none: list[int] = []
    assert _fill(kvstore, view, none) and none == []  # not one run of bytes: left to the caller
    np.testing.assert_array_equal(view, value)


def test_a_single_chunk_is_streamed_whole_with_its_checksum(tmp_path):
    kvstore, value = _write(tmp_path, SHAPE)
    dest = np.empty(SHAPE, np.float32)
    summed: list[int] = []
    assert _fill(kvstore, dest, summed)
    np.testing.assert_array_equal(dest, value)
    assert summed == [zlib.crc32(value.tobytes())]


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("chunks", [(2, 10, 12), (6, 4, 5)])
def test_a_damaged_or_missing_chunk_is_an_error(tmp_path, chunks, depth, monkeypatch):
    monkeypatch.setattr(zstd_chunk, "FILL_DEPTH", depth)
    kvstore, _ = _write(tmp_path, chunks)
    stored = sorted(p for p in (tmp_path / "arr").iterdir() if p.name != ".zarray")
    raw = bytearray(stored[1].read_bytes())
    stored[1].write_bytes(bytes(raw[: len(raw) // 2]))  # cut short
    with pytest.raises(ValueError, match="chunk"):
        _fill(kvstore, np.empty(SHAPE, np.float32))
    stored[2].unlink()
    stored[1].write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="is missing"):
        _fill(kvstore, np.empty(SHAPE, np.float32))
