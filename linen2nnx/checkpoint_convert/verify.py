"""``--verify`` (on by default): read the written checkpoint back before it is published.

A checksum of every array is taken while it is written (lazy leaves: right after they are read
from the source, see :mod:`.lazy`) and stored in the conversion report. Before the staged folder is
renamed into place, its Orbax metadata is read again (every array present, with its shape and
dtype) and every array is read back, a bounded group at a time, and checksummed; a difference
names the array and nothing is published. Anyone can re-check a converted checkpoint later against
the ``checksums`` of its report.

The read-back costs what decoding the written chunks costs, little more, spread over two cores:
every group is read into one reused buffer, :data:`READ_BACK_DEPTH` stored chunks decoding at once,
with the decoded chunks' buffers kept on the heap and reused (:func:`.memory.heap_reused`). Each
array's checksum is taken while it is decoded: a run of its bytes as soon as the chunks covering
it are in place, on a worker thread, the runs combined at the end (:mod:`.zstd_chunk`,
:mod:`.crc`); an array of another layout is checksummed on a thread while the next is read.
"""

from __future__ import annotations

import zlib
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert import arrays, memory
from linen2nnx.errors import L2NError

#: Stored chunks of an array decoded at once by the read-back (each on a worker thread; the source
#: reads keep :data:`.zstd_chunk.FILL_DEPTH`): its decoding is not one core's chain.
READ_BACK_DEPTH = 2


def checksum(value: Any) -> str:
    """``crc32:<hex>`` of the array's bytes (C order)."""
    data = np.ascontiguousarray(np.asarray(value))
    return f"crc32:{zlib.crc32(data.reshape(-1).view(np.uint8)):08x}"


def sharded_checksum(value: Any, slab: int = 16 << 20) -> str | None:
    """:func:`checksum` of a ``jax.Array`` from its shards, with no whole host copy: the C-order
    bytes are assembled ``slab`` bytes at a time. None when another process holds some shards."""
    if not value.is_fully_addressable:
        return None
    shards: dict[tuple[tuple[int, int], ...], Any] = {}
    for s in value.addressable_shards:
        box = arrays.shard_box(s.index, value.shape)
        shards.setdefault(box, s.data)
    if len(shards) == 1:
        return checksum(next(iter(shards.values())))  # a host view of a CPU buffer: no copy
    crc = 0
    for box in _c_order_boxes(tuple(value.shape), np.dtype(value.dtype).itemsize, slab):
        buf = np.empty(tuple(b - a for a, b in box), value.dtype)
        for where, data in shards.items():
            cut = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, where)]
            if all(a < b for a, b in cut):
                host = np.asarray(data)
                buf[tuple(slice(a - c, b - c) for (a, b), (c, _) in zip(cut, box))] = host[
                    tuple(slice(a - c, b - c) for (a, b), (c, _) in zip(cut, where))
                ]
        crc = zlib.crc32(buf.reshape(-1).view(np.uint8), crc)
    return f"crc32:{crc:08x}"


def _c_order_boxes(
    shape: tuple[int, ...], itemsize: int, limit: int
) -> Any:  # Iterator[tuple[tuple[int, int], ...]]
    """Boxes covering ``shape`` whose bytes, one box after another, are its C-order bytes; each at
    most ``limit`` bytes unless a single element row of the last axis is bigger."""
    if not shape:
        yield ()
        return
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
    rest = tuple((0, n) for n in shape[1:])
    if row <= limit or len(shape) == 1:
        step = max(1, limit // max(row, 1))
        for i in range(0, shape[0], step):
            yield ((i, min(i + step, shape[0])), *rest)
        return
    for i in range(shape[0]):
        for sub in _c_order_boxes(shape[1:], itemsize, limit):
            yield ((i, i + 1), *sub)


def _key_str(path: arrays.RawPath) -> str:
    return "/".join(map(str, path))


def state_checksums(state: Any) -> dict[str, str]:
    """Checksums of a saved tree's arrays by stored path; lazy leaves give those taken while written."""
    import jax

    from linen2nnx.checkpoint_convert.lazy import is_deferred

    out: dict[str, str] = {}
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=is_deferred)[0]
    for kp, leaf in leaves:
        path = tuple(arrays._key(k) for k in kp)
        if is_deferred(leaf):
            if leaf.path in leaf.source.checksums:  # not when another host holds some of its shards
                out[_key_str(path)] = leaf.source.checksums[leaf.path]
        elif isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            continue  # another host's shards: that host checks them
        elif arrays.has_plain_dtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype):
            out[_key_str(path)] = checksum(leaf)
    return out


def verify_payload(item_dir: Path, expected: dict[str, str], budget: int) -> None:
    """Re-read ``item_dir`` (metadata, then arrays by group) and compare with ``expected``."""
    tree = arrays.read_metadata(item_dir)
    flat = {p: m for p, m in arrays.flat_metadata(tree).items() if arrays.has_plain_dtype(m.dtype)}
    stored = {_key_str(p) for p in flat}
    missing = sorted(set(expected) - stored)
    if missing:
        raise L2NError(f"{item_dir}: verify: written checkpoint lacks {', '.join(missing[:10])}")
    sizes = {p: arrays.nbytes(m) for p, m in flat.items() if _key_str(p) in expected}
    how = arrays.storage(item_dir)
    if how is None:  # not how this package writes: Orbax reads it back, a group per call
        for group in arrays.groups(sizes, budget):
            _check_group(item_dir, tree, {p: flat[p] for p in group}, expected)  # the next read gives back
        return
    from orbax.checkpoint._src import asyncio_utils

    cuts = list(arrays.groups(sizes, budget))
    buffer = np.empty(max((sum(sizes[p] for p in g) for g in cuts), default=0), np.uint8)
    memory.in_flight.track([buffer])  # counted as the group it holds, for as long as it lives
    metas = {p: (tuple(flat[p].shape), flat[p].dtype) for p in sizes}
    with memory.heap_reused(), ThreadPoolExecutor(1) as summer:
        asyncio_utils.run_sync(_read_back(item_dir, how, metas, cuts, buffer, expected, summer))


async def _read_back(
    item_dir: Path,
    how: tuple[str, bool],
    metas: dict[arrays.RawPath, Any],
    cuts: list[list[arrays.RawPath]],
    buffer: Any,
    expected: dict[str, str],
    summer: Executor,
) -> None:
    """Every group read into the one ``buffer`` (nothing allocated per array), a stored chunk at a
    time; each array's checksum is taken on ``summer``'s thread while the next array is read
    (zlib lets go of the GIL), all of a group's before the buffer is filled again."""
    import asyncio

    loop = asyncio.get_running_loop()
    sums: dict[arrays.RawPath, int] = {}  # taken while the arrays were decoded, where they could be
    for group in cuts:
        checks: list[Any] = []

        def check(path: arrays.RawPath, value: Any, checks: list[Any] = checks) -> None:
            crc = sums.pop(path, None)
            checks.append(loop.run_in_executor(summer, _compare, item_dir, path, value, expected, crc))

        memory.give_back()  # the decoded chunks' buffers a group left on the heap, at most
        try:
            metas_of = {p: metas[p] for p in group}
            await arrays.read_direct(item_dir, how, metas_of, {}, buffer, check, sums, READ_BACK_DEPTH)
        finally:
            results = await asyncio.gather(*checks, return_exceptions=True)
        for failed in results:
            if isinstance(failed, BaseException):
                raise failed


def _compare(
    item_dir: Path, path: arrays.RawPath, value: Any, expected: dict[str, str], crc: int | None = None
) -> None:
    """Raise when ``value`` (or ``crc``, its checksum taken as it was decoded) is not as written."""
    want = expected.get(_key_str(path))
    if want is None:
        found = None
    else:
        found = f"crc32:{crc:08x}" if crc is not None else checksum(value)
    if found != want:
        raise L2NError(f"{item_dir}: verify: {_key_str(path)} reads back as {found}, was written as {want}")


def _check_group(
    item_dir: Path, tree: Any, metas: dict[arrays.RawPath, Any], expected: dict[str, str]
) -> None:
    """Read one group back with Orbax and compare each array's checksum; nothing of it outlives the call."""
    import jax

    wanted = {p: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype) for p, m in metas.items()}
    got = arrays.restore_group(item_dir, tree, wanted, {})
    for p in list(got):
        value = got.pop(p)
        _compare(item_dir, p, value, expected)
        del value
