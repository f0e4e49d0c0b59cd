"""Read a zarr v2 array's zstd chunks without holding a chunk's stored bytes whole.

Orbax saves an array of one device (and every shard) in zarr chunks compressed with zstd: one chunk
for the whole array in the checkpoints training writes (unless a chunk byte size is asked for), chunks
of at most 8 MB in those ``convert`` writes. TensorStore reads a chunk whole, then decodes it: for a moment the process holds the stored
bytes (zstd saves little on float weights) and the decoded array, about twice the array, which is
what set ``convert``'s peak memory (its largest array read). Here a stored chunk is read in
:data:`PIECE_BYTES` byte ranges through the same TensorStore key-value store (OCDBT or files, with
Orbax's context) and streamed through ``libzstd`` straight into its destination: the array plus
two pieces at once, and no second copy of the decoded bytes. :func:`read` does so for a source
array stored as one chunk; :func:`fill` for the read-back of ``--verify``, a chunk at a time
into the group's buffer.

Only the layout this is sure of is read so (zarr v2, compressor ``zstd``, no filters, C order, the
array's own dtype and shape); anything else, or a system without ``libzstd.so.1``, returns
None / False and TensorStore reads the array. A chunk that is missing, cut short, does not decode,
or decodes to another size is an error, as in TensorStore's read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert.crc import Parts

#: Bytes of a stored chunk read at once (two are held: one decoding, the next being read); 4 MB
#: held 10-30 MB more at the peak for no measured gain.
PIECE_BYTES = 2 << 20
#: Arrays smaller than this are left to TensorStore (their memory does not matter, its
#: concurrency does).
MIN_BYTES = 8 << 20
#: Bytes libzstd writes per call: a window small enough to be checksummed while in the cache.
WINDOW_BYTES = 1 << 20
#: Stored chunks :func:`fill` decodes at once, each into a chunk buffer of its own. Two let one
#: chunk decode while the one before is copied into place, but at 1.1 GB on 2 busy cores they
#: took 4% more CPU and 8-10 MB more at the peak for no wall time measured, so one at a time.
FILL_DEPTH = 1
_LIB: list[Any] = []
_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


class _Buffer(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


def _libzstd() -> Any:
    """The system's ``libzstd`` (streaming decompression), or None."""
    if not _LIB:
        try:
            lib = ctypes.CDLL("libzstd.so.1")
            lib.ZSTD_createDStream.restype = ctypes.c_void_p
            lib.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
            lib.ZSTD_decompressStream.restype = ctypes.c_size_t
            lib.ZSTD_decompressStream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
            lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
            lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        except (OSError, AttributeError):
            lib = None
        _LIB.append(lib)
    return _LIB[0]


def _layout(meta: dict[str, Any], shape: tuple[int, ...], dtype: Any) -> tuple[tuple[int, ...], str] | None:
    """``(chunk shape, key separator)`` when a ``.zarray`` is the layout decoded here, else None."""
    native = np.dtype(dtype).newbyteorder("=")
    chunks = tuple(meta.get("chunks") or ())
    if (
        meta.get("zarr_format") != 2
        or (meta.get("compressor") or {}).get("id") != "zstd"
        or meta.get("filters")
        or meta.get("order") != "C"
        or tuple(meta.get("shape") or ()) != shape
        or len(chunks) != len(shape)
        or not all(isinstance(c, int) and c > 0 for c in chunks)
        or np.dtype(meta.get("dtype", "V")) != native
        or not native.isnative
    ):
        return None
    return chunks, meta.get("dimension_separator", ".")


async def _open(kvstore_spec: dict[str, Any], shape: tuple[int, ...], dtype: Any, context: Any) -> Any:
    """The array's key-value store and its layout, or None (not this layout, or no ``libzstd``)."""
    import tensorstore as ts

    if _libzstd() is None:
        return None
    spec = {**kvstore_spec, "path": kvstore_spec["path"].rstrip("/") + "/"}
    kv = await ts.KvStore.open(spec, context=context)
    found = await kv.read(".zarray")
    if found.state != "value":
        return None
    layout = _layout(json.loads(found.value), tuple(shape), dtype)
    return None if layout is None else (kv, *layout)


async def read(
    kvstore_spec: dict[str, Any], shape: tuple[int, ...], dtype: Any, context: Any
) -> tuple[Any, int] | None:
    """The array stored under ``kvstore_spec`` (Orbax's read spec's ``kvstore``) as one chunk,
    streamed into a new array, with the ``crc32`` of its bytes (C order, what
    :func:`.verify.checksum` takes) computed as they are decoded, while they are in the cache;
    None when it is stored otherwise (or is small: :data:`MIN_BYTES`)."""
    if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize < MIN_BYTES:
        return None
    opened = await _open(kvstore_spec, shape, dtype, context)
    if opened is None or opened[1] != tuple(shape):
        return None
    kv, _, sep = opened
    out = np.empty(shape, dtype)
    crc = await _decode(_libzstd(), kv, sep.join("0" for _ in shape) or "0", out, summed=True)
    return out, crc


async def fill(
    kvstore_spec: dict[str, Any],
    dest: Any,
    context: Any,
    summed: list[int] | None = None,
    depth: int | None = None,
) -> bool:
    """Fill ``dest`` with the stored array: a single chunk is streamed straight into ``dest``, its
    ``crc32`` taken as it decodes; several are decoded ``depth`` (:data:`FILL_DEPTH`) at a time
    (:func:`_fill_chunks`), each run of ``dest``'s bytes checksummed on a worker thread once the
    chunks covering it are in place (:class:`.crc.Parts`). With ``summed``, the array's ``crc32``
    is appended to it (a ``dest`` that is not C-contiguous: nothing appended). False when the array
    is stored otherwise (then nothing is read)."""
    opened = await _open(kvstore_spec, dest.shape, dest.dtype, context)
    if opened is None:
        return False
    kv, chunks, sep = opened
    if chunks == tuple(dest.shape) and dest.flags.c_contiguous:
        crc = await _decode(_libzstd(), kv, sep.join("0" for _ in chunks) or "0", dest, summed is not None)
        if summed is not None:
            summed.append(crc)
        return True
    parts = Parts(dest) if summed is not None and dest.flags.c_contiguous else None
    await _fill_chunks(kv, chunks, sep, dest, parts, depth or FILL_DEPTH)
    if parts is not None:
        summed.append(parts.total())
    return True


async def _fill_chunks(
    kv: Any, chunks: tuple[int, ...], sep: str, dest: Any, parts: Parts | None, depth: int
) -> None:
    """Each stored chunk streamed into a chunk buffer and copied into its box (zarr v2 stores edge
    chunks whole) on a worker thread, ``depth`` chunks at once, each with a buffer of its
    own. A chunk whose box is one run of ``dest``'s bytes (the chunk spans every axis after the
    first it splits) is streamed straight into it: no buffer, no copy. With ``parts``, the runs of
    ``dest``'s bytes a band of chunks completes are checksummed on the worker threads meanwhile
    (:class:`_Bands`). A failed chunk stops the others before the error is raised."""
    from linen2nnx.checkpoint_convert.arrays import chunk_boxes

    bands = _Bands(dest.shape, chunks, dest.dtype.itemsize) if parts is not None else None
    summing: list[Any] = []

    async def one(box: tuple[slice, ...], scratch: Any) -> None:
        key = sep.join(str(b.start // c) for b, c in zip(box, chunks)) or "0"
        if scratch is None:  # the box is a whole chunk and one run of dest's bytes: decoded in place
            await _decode(_libzstd(), kv, key, dest[box])
        else:
            await _decode(_libzstd(), kv, key, scratch)
            await _on_pool(_place, dest, box, scratch)
        for start, stop in bands.done(box) if bands is not None else ():
            summing.append(_pool().submit(parts.add, start, stop))  # type: ignore[union-attr]

    free: list[Any] = []
    pending: dict[Any, Any] = {}  # task -> the chunk buffer it fills (None: none)
    try:
        for box in chunk_boxes(dest.shape, chunks):
            if len(pending) >= depth:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a failed chunk stops the array here
                    if (held := pending.pop(task)) is not None:
                        free.append(held)
            in_place = dest[box].flags.c_contiguous and dest[box].shape == chunks
            scratch = None if in_place else free.pop() if free else np.empty(chunks, dest.dtype)
            pending[asyncio.ensure_future(one(box, scratch))] = scratch
        await asyncio.gather(*pending)
        pending = {}
        for job in summing:
            await asyncio.wrap_future(job)
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        concurrent.futures.wait(summing)  # the checksums read dest: they end before the caller goes on


class _Bands:
    """Which runs of an array's bytes are complete as its chunks land. The first axis the chunks
    split (``axis``; every chunk spans the axes before it whole) cuts the array into bands; once
    every chunk of a band has landed, its runs (one per index of the axes before ``axis``) are
    complete. An array not split, or with more than :data:`MAX_RUNS` runs per band, is one run,
    complete when its last chunk lands."""

    MAX_RUNS = 64

    def __init__(self, shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> None:
        split = [i for i, (n, c) in enumerate(zip(shape, chunks)) if c < n]
        grid = [-(-n // c) for n, c in zip(shape, chunks)]
        self.axis: int | None = split[0] if split else None
        self.outer = int(np.prod(shape[: self.axis], dtype=np.int64)) if split else 1
        if self.outer > self.MAX_RUNS:
            self.axis, self.outer = None, 1
        after = self.axis + 1 if self.axis is not None else 0
        self.per_band = int(np.prod(grid[after:], dtype=np.int64))
        self.row = int(np.prod(shape[after:], dtype=np.int64)) * itemsize  # bytes of one index of axis
        self.n = shape[self.axis] if self.axis is not None else 1
        self.landed: dict[int, int] = {}

    def done(self, box: tuple[slice, ...]) -> list[tuple[int, int]]:
        """The byte ranges the chunk at ``box`` completes (none until its band's last chunk)."""
        lo, hi = (box[self.axis].start, box[self.axis].stop) if self.axis is not None else (0, 1)
        self.landed[lo] = self.landed.get(lo, 0) + 1
        if self.landed[lo] < self.per_band:
            return []
        return [((i * self.n + lo) * self.row, (i * self.n + hi) * self.row) for i in range(self.outer)]


def _place(dest: Any, box: tuple[slice, ...], scratch: Any) -> None:
    """Copy a decoded chunk into its box of ``dest`` (numpy lets go of the GIL while it copies)."""
    dest[box] = scratch[tuple(slice(0, b.stop - b.start) for b in box)]


async def _on_pool(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on the decoding threads; when the caller is cancelled, the call still ends
    before this returns (it writes into buffers the caller may free)."""
    work = _pool().submit(fn, *args)
    try:
        return await asyncio.wrap_future(work)
    except BaseException:
        concurrent.futures.wait([work])
        raise


async def _decode(lib: Any, kv: Any, key: str, out: Any, summed: bool = False) -> int:
    """Stream ``key``'s bytes through zstd into ``out``: the next piece is read while one decodes
    (libzstd runs on a worker thread, without the GIL). With ``summed``, the ``crc32`` of what was
    decoded (else 0), taken on that thread a window at a time (zlib lets go of the GIL too)."""
    dest = _Sink(out, summed)
    label = f"{kv.path}{key}"  # as TensorStore names a chunk: params.dense.kernel/0.0
    stream = lib.ZSTD_createDStream()
    if not stream:
        raise MemoryError(f'chunk "{label}": libzstd could not create a decoding stream')
    try:
        pos, last = 0, 1
        piece = await _piece(kv, key, pos)
        if piece is None:
            raise ValueError(f'chunk "{label}" is missing')
        while piece:
            pos += len(piece)
            following = asyncio.ensure_future(_piece(kv, key, pos)) if len(piece) == PIECE_BYTES else None
            work = _pool().submit(_feed, lib, stream, dest, piece, label)
            try:
                last = await asyncio.wrap_future(work)
            except BaseException:  # an error, or this read cancelled because another leaf failed
                if following is not None:
                    following.cancel()
                concurrent.futures.wait([work])  # the thread uses the stream and `out`: it ends first
                raise
            piece = (await following) if following is not None else b""
        if last != 0 or dest.buf.pos != dest.total:
            raise ValueError(f'chunk "{label}" is cut short: {dest.buf.pos} of {dest.total} bytes decoded')
    finally:
        lib.ZSTD_freeDStream(stream)
    return dest.crc


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads libzstd decodes on (created on first use, as asyncio's default executor is)."""
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(thread_name_prefix="l2n-zstd"))
    return _POOL[0]


async def _piece(kv: Any, key: str, pos: int) -> bytes | None:
    """Bytes ``pos`` to ``pos + PIECE_BYTES`` of the value (fewer at its end; None: no such key)."""
    try:
        try:
            got = await kv.read(key, byte_range=slice(pos, pos + PIECE_BYTES))
        except ValueError as e:  # the range passes the value's end: read what is left
            if "OUT_OF_RANGE" not in str(e):
                raise
            got = await kv.read(key, byte_range=slice(pos, None))
    except ValueError as e:
        raise ValueError(f'reading chunk "{kv.path}{key}" at byte {pos}: {e}') from e
    if got.state != "value":
        return None
    return bytes(got.value)


class _Sink:
    """Where a chunk decodes to: ``out``'s bytes, offered to libzstd :data:`WINDOW_BYTES` at a time
    so that each window can be checksummed while it is still in the cache."""

    def __init__(self, out: Any, summed: bool) -> None:
        self.bytes = out.reshape(-1).view(np.uint8)
        self.total = out.nbytes
        self.buf = _Buffer(out.ctypes.data, 0, 0)
        self.summed = summed
        self.crc = 0

    def window(self) -> None:
        self.buf.size = min(self.buf.pos + WINDOW_BYTES, self.total)

    def took(self, start: int) -> None:
        if self.summed and self.buf.pos > start:
            self.crc = zlib.crc32(self.bytes[start : self.buf.pos], self.crc)


def _feed(lib: Any, stream: Any, dest: _Sink, piece: bytes, key: str) -> int:
    """Decode all of ``piece`` into ``dest`` and flush what libzstd holds of it; libzstd's hint
    (0: a frame ended, all of it written out)."""
    src = _Buffer(ctypes.cast(ctypes.c_char_p(piece), ctypes.c_void_p), len(piece), 0)  # no copy
    out = dest.buf
    hint = 1
    while True:
        dest.window()
        before = (src.pos, out.pos)
        ret = lib.ZSTD_decompressStream(stream, ctypes.byref(out), ctypes.byref(src))
        if lib.ZSTD_isError(ret):
            raise ValueError(f'chunk "{key}" does not decode: zstd: {lib.ZSTD_getErrorName(ret).decode()}')
        dest.took(before[1])
        if (src.pos, out.pos) == before:
            if src.pos < src.size:  # no room left and the data goes on
                raise ValueError(f'chunk "{key}" decodes to more than {dest.total} bytes')
            return hint  # what the last call that did something said
        hint = int(ret)
        if src.pos == src.size and out.pos < out.size:  # all taken, all written out
            return hint


def kvstore_spec(item_dir: Path, name: str, ocdbt: bool) -> dict[str, Any]:
    """The key-value store of a zarr v2 array as Orbax's read spec has it."""
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    return ts_utils.ArrayReadSpec(str(item_dir), name, False, use_ocdbt=ocdbt).json["kvstore"]
