"""Orbax item I/O for conversion: the tree from metadata alone, then arrays in bounded groups.

Restoring a whole checkpoint in one ``restore()`` without a target has two costs at scale: every
array is in host memory at once, and Orbax refuses a checkpoint saved sharded on another topology
("Topology mismatch ... provide a target tree"). Here the tree structure, shapes and dtypes come
from Orbax's metadata (no array read), and arrays are restored *with a target*: a
``ShapeDtypeStruct`` carrying the sharding we choose, every other leaf an ``ocp.PLACEHOLDER``, so
that any saved topology restores onto any device set, a group of leaves at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert import memory, zstd_chunk
from linen2nnx.errors import L2NError

RawPath = tuple[Any, ...]
"""A leaf's key path in the stored tree (dict keys as str, list indices as int, boxes end in ``value``)."""

#: Called with the number of leaves about to be restored; tests hook it to count array reads.
restore_hooks: list[Callable[[int], None]] = []
_DATA_FILE = re.compile(r"(?:/[\w.-]+)*/(?:ocdbt\.process_\d+/)?d/[0-9a-f]{16,}")
_CHUNK = re.compile(r'reading "([^"]+)" in OCDBT database at local file "([^"]+)"')


def has_plain_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a numpy dtype. RNG key arrays are not: they are kept from the NNX model's
    init (never taken from Linen), so they have no bytes to convert, checksum or write back."""
    import numpy as np

    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def read_metadata(item_dir: Path) -> Any:
    """The item's tree with Orbax ``ArrayMetadata`` leaves (shape, dtype, sharding); nothing restored."""
    import orbax.checkpoint as ocp

    try:
        with ocp.StandardCheckpointer() as ckptr:
            meta = ckptr.metadata(item_dir)
        item = getattr(meta, "item_metadata", meta)
        tree = item.tree if item is not None and hasattr(meta, "item_metadata") else item
    except Exception as e:
        raise L2NError(f"{item_dir}: unreadable Orbax metadata: {type(e).__name__}: {_short(e)}") from e
    if item is None:  # _METADATA read, the array database under it not: a manifest missing or damaged
        found = ", ".join(sorted(p.name for p in Path(item_dir).iterdir())) or "nothing"
        raise L2NError(
            f"{item_dir}: unreadable Orbax metadata: the array database (manifest.ocdbt and the d/ and "
            f"ocdbt.process_*/ folders) is missing or damaged; the folder holds {found}"
        )
    if tree is None:
        raise L2NError(f"{item_dir}: unreadable Orbax metadata (_METADATA holds no tree)")
    return tree


def is_meta_leaf(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def flat_metadata(tree: Any) -> dict[RawPath, Any]:
    """``{raw path: ArrayMetadata}`` for every leaf of a metadata tree."""
    import jax

    out: dict[RawPath, Any] = {}
    for kp, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_meta_leaf)[0]:
        out[tuple(_key(k) for k in kp)] = leaf
    return out


def nbytes(meta: Any) -> int:
    import numpy as np

    return int(np.prod(meta.shape, dtype=np.int64)) * np.dtype(meta.dtype).itemsize


def shard_box(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The ``(start, stop)`` per axis that a shard's index covers: one key for shards that hold the same
    part of an array (replicas)."""
    return tuple(sl.indices(n)[:2] for sl, n in zip(index, shape))


def groups(sizes: dict[RawPath, int], budget: int) -> Iterator[list[RawPath]]:
    """Leaves in stored order, cut into groups of at most ``budget`` bytes (a bigger leaf goes alone)."""
    group: list[RawPath] = []
    used = 0
    for path, size in sizes.items():
        if group and used + size > budget:
            yield group
            group, used = [], 0
        group.append(path)
        used += size
    if group:
        yield group


def restore_group(
    item_dir: Path, tree: Any, wanted: dict[RawPath, Any], names: dict[RawPath, str]
) -> dict[RawPath, Any]:
    """Restore the ``wanted`` leaves only: raw path -> ``ShapeDtypeStruct`` (with a sharding: a
    ``jax.Array`` laid out so; without: a host ``np.ndarray``).

    On failure the group is retried leaf by leaf, so the error names the one bad leaf (``names``
    gives its Linen path) and, when Orbax's message has it, the data file.
    """
    for hook in restore_hooks:
        hook(len(wanted))
    memory.give_back()  # what the previous group's reads and writes freed, before this one's peak
    try:
        got = _restore(item_dir, tree, wanted)
    except Exception as e:
        if len(wanted) > 1:
            for path in wanted:
                restore_group(item_dir, tree, {path: wanted[path]}, names)
        raise _leaf_error(item_dir, next(iter(wanted)), names, e) from e
    memory.in_flight.track(got.values())
    return got


def storage(item_dir: Path) -> tuple[str, bool] | None:
    """How the item stores its arrays, from its ``_METADATA``: (TensorStore driver, OCDBT or not);
    None when it does not say (an older Orbax), and then only Orbax's own restore reads it."""
    import json

    try:
        meta = json.loads((item_dir / "_METADATA").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("use_ocdbt"), bool):
        return None
    return ("zarr3" if meta.get("use_zarr3") else "zarr"), meta["use_ocdbt"]


def carve(buffer: Any, metas: dict[RawPath, tuple[tuple[int, ...], Any]]) -> dict[RawPath, Any]:
    """Arrays of the given (shape, dtype) laid one after another over ``buffer`` (bytes, reused)."""
    import numpy as np

    out: dict[RawPath, Any] = {}
    offset = 0
    for path, (shape, dtype) in metas.items():
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        out[path] = buffer[offset : offset + size].view(np.dtype(dtype)).reshape(shape)
        offset += size
    return out


async def read_direct(
    item_dir: Path,
    how: tuple[str, bool],
    metas: dict[RawPath, tuple[tuple[int, ...], Any]],
    names: dict[RawPath, str],
    into: Any = None,
    filled: Callable[[RawPath, Any], None] | None = None,
    sums: dict[RawPath, int] | None = None,
    depth: int | None = None,
) -> dict[RawPath, Any]:
    """The arrays of ``metas`` (raw path -> (shape, dtype)) read from the item's storage (``how``,
    see :func:`storage`) with TensorStore, all at once, as host numpy arrays.

    Orbax's per-call tree work is skipped. With ``into`` (a byte buffer) the arrays are laid over
    it (:func:`carve`) and filled one after the other, a stored chunk at a time: nothing is
    allocated per array, and one chunk's decoded bytes are held beside the buffer, which is cheap
    only for small chunks (what this package writes). Without, TensorStore decodes each chunk
    straight into a fresh array (a source array stored whole needs no second copy). ``filled``
    is called with each array of ``into`` as soon as it is complete, while the next one is read.
    ``sums`` gets the ``crc32`` of each array streamed through :mod:`.zstd_chunk`, taken as it was
    decoded; the others' are left to the caller. ``depth``: the stored chunks of one array decoded
    at once into ``into`` (:data:`.zstd_chunk.FILL_DEPTH` if not given). A failure names the leaf (``names``) and, when TensorStore's message has it, the data file."""
    import asyncio

    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    for hook in restore_hooks:
        hook(len(metas))
    ocdbt = how[1]
    # into a buffer, one chunk is read at a time: one thread for the file, one to decode, so the
    # buffers they free stay in two malloc arenas (see memory.heap_reused), not one per thread
    one_by_one = 1 if into is not None else None
    context = ts_utils.get_ts_context(
        use_ocdbt=ocdbt, file_io_concurrency_limit=one_by_one, data_copy_concurrency_limit=one_by_one
    )
    out = carve(into, metas) if into is not None else {}

    async def one(path: RawPath, shape: tuple[int, ...], dtype: Any) -> None:
        try:
            if how[0] == "zarr" and await _streamed(
                item_dir, how, path, shape, dtype, context, out, sums, depth
            ):
                return
            src = await open_stored(item_dir, how, path, shape, dtype, context)
            if path in out:
                await _fill_by_chunk(src, out[path])
            else:
                out[path] = await src.read()
        except Exception as e:
            raise _leaf_error(item_dir, path, names, e) from e

    if into is None:
        await asyncio.gather(*(one(p, shape, dtype) for p, (shape, dtype) in metas.items()))
    else:  # one decoded chunk at a time in all, not one per array of the group
        for p, (shape, dtype) in metas.items():
            await one(p, shape, dtype)
            if filled is not None:
                filled(p, out[p])
    return {p: out[p] for p in metas}


async def _streamed(
    item_dir: Path,
    how: tuple[str, bool],
    path: RawPath,
    shape: tuple[int, ...],
    dtype: Any,
    context: Any,
    out: dict[RawPath, Any],
    sums: dict[RawPath, int] | None = None,
    depth: int | None = None,
) -> bool:
    """Read a zarr v2 array with zstd chunks through :mod:`.zstd_chunk` (into ``out[path]`` when it is
    there, else into a new array there, its checksum into ``sums``): never a chunk's stored bytes
    whole beside its decoded ones. False when it is stored otherwise; TensorStore reads it then."""
    if path in out:
        return await stream_into(item_dir, how, path, out[path], context, sums, depth)
    spec = zstd_chunk.kvstore_spec(item_dir, ".".join(str(k) for k in path), how[1])
    streamed = await zstd_chunk.read(spec, shape, dtype, context)
    if streamed is not None:
        out[path] = streamed[0]
        if sums is not None:
            sums[path] = streamed[1]
    return streamed is not None


async def stream_into(
    item_dir: Path,
    how: tuple[str, bool],
    path: RawPath,
    dest: Any,
    context: Any,
    sums: dict[RawPath, int] | None = None,
    depth: int | None = None,
) -> bool:
    """Fill ``dest`` (the whole array) with the stored array's zstd chunks, each streamed
    (:func:`.zstd_chunk.fill`; an array stored as one chunk gets its checksum into ``sums``);
    False, with nothing read, when it is stored otherwise."""
    if how[0] != "zarr":
        return False
    spec = zstd_chunk.kvstore_spec(item_dir, ".".join(str(k) for k in path), how[1])
    crc: list[int] = []
    done = await zstd_chunk.fill(spec, dest, context, summed=crc if sums is not None else None, depth=depth)
    if done and crc and sums is not None:
        sums[path] = crc[0]
    return done


async def open_stored(
    item_dir: Path, how: tuple[str, bool], path: RawPath, shape: tuple[int, ...], dtype: Any, context: Any
) -> Any:
    """The TensorStore of one stored array (``how``: see :func:`storage`), opened with Orbax's own
    read spec (a missing chunk is an error, never read as zeros) and checked against the metadata."""
    import numpy as np
    import tensorstore as ts
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    driver, ocdbt = how
    name = ".".join(str(k) for k in path)
    spec = ts_utils.ArrayReadSpec(str(item_dir), name, driver == "zarr3", use_ocdbt=ocdbt).json
    src = await ts.open(ts.Spec(spec), open=True, read=True, context=context)
    if tuple(src.shape) != tuple(shape) or src.dtype.numpy_dtype != np.dtype(dtype):
        raise ValueError(
            f"stored as {tuple(src.shape)} {src.dtype.numpy_dtype}, metadata says {shape} {dtype}"
        )
    return src


async def _fill_by_chunk(src: Any, dest: Any) -> None:
    """Copy ``src`` into ``dest`` one stored chunk at a time: one chunk's decoded bytes at once."""
    import tensorstore as ts

    view = ts.array(dest, copy=False, write=True)
    for box in chunk_boxes(dest.shape, src.chunk_layout.read_chunk.shape):
        await view[box].write(src[box])


def chunk_boxes(shape: tuple[int, ...], chunk: Any) -> Iterator[tuple[slice, ...]]:
    """The boxes of a chunk grid over ``shape`` (a missing or zero chunk size: the whole axis)."""
    import itertools

    chunk = tuple(chunk or shape)
    ranges = [range(0, n, max(1, c or n)) for n, c in zip(shape, chunk)]
    for start in itertools.product(*ranges):
        yield tuple(slice(a, min(a + max(1, c or n), n)) for a, c, n in zip(start, chunk, shape))


#: Stored chunks being encoded and written at once by :func:`write_by_chunk`: two keep two cores
#: encoding (zstd is the slowest step of a conversion) for one more chunk's bytes held.
WRITE_DEPTH = 2


async def write_by_chunk(store: Any, value: Any, depth: int | None = None) -> None:
    """Write ``value`` into ``store`` a stored chunk after another, at most ``depth`` of them
    (:data:`WRITE_DEPTH`) being encoded and written at once, each next one started when one is
    committed. One ``write`` of a whole array encodes every chunk at once and holds all their
    compressed bytes until the last is stored (up to the array's size again, on float weights);
    here ``depth`` chunks' are held. ``value`` is referenced, never copied."""
    import asyncio

    boxes = list(chunk_boxes(value.shape, store.chunk_layout.write_chunk.shape))
    if len(boxes) <= 1:
        await store.write(value, can_reference_source_data_indefinitely=True)
        return

    async def one(box: tuple[slice, ...]) -> None:
        await store[box].write(value[box], can_reference_source_data_indefinitely=True)

    pending: set[Any] = set()
    try:
        for box in boxes:
            if len(pending) >= (depth or WRITE_DEPTH):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a failed chunk stops the array here
            pending.add(asyncio.ensure_future(one(box)))
        await asyncio.gather(*pending)
        pending = set()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _restore(item_dir: Path, tree: Any, wanted: dict[RawPath, Any]) -> dict[RawPath, Any]:
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    def item_of(kp: Any, leaf: Any) -> Any:
        return wanted.get(tuple(_key(k) for k in kp), ocp.PLACEHOLDER)

    item = jax.tree_util.tree_map_with_path(item_of, tree, is_leaf=is_meta_leaf)

    def args_of(x: Any) -> Any:
        if x is ocp.PLACEHOLDER:
            return x
        if getattr(x, "sharding", None) is None:  # host numpy: no device copy at all
            return ocp.RestoreArgs(restore_type=np.ndarray)  # stored dtype: a cast would copy
        return ocp.ArrayRestoreArgs(sharding=x.sharding, global_shape=x.shape, dtype=x.dtype)

    restore_args = jax.tree.map(args_of, item, is_leaf=_is_item_leaf)
    with ocp.PyTreeCheckpointer() as ckptr:
        out = ckptr.restore(item_dir, args=ocp.args.PyTreeRestore(item=item, restore_args=restore_args))
    return {path: _get(out, path) for path in wanted}


def _is_item_leaf(x: Any) -> bool:
    import orbax.checkpoint as ocp

    return x is ocp.PLACEHOLDER or is_meta_leaf(x)


def _leaf_error(item_dir: Path, path: RawPath, names: dict[RawPath, str], e: Exception) -> L2NError:
    text = str(e)
    where = ""
    if m := _DATA_FILE.search(text):
        where = f" (data file {m.group(0)})"
    elif m := _CHUNK.search(text):
        where = f" (chunk {m.group(1)} of the OCDBT database in {m.group(2)})"
    leaf = names.get(path, "/".join(map(str, path)))
    return L2NError(f"{item_dir}: cannot read array {leaf}{where}: {type(e).__name__}: {_short(e)}")


def _short(e: Exception, limit: int = 300) -> str:
    """The first line of an Orbax / TensorStore message, without its JSON spec."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    first = re.sub(r"\{.*\}", "{...}", first)
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _get(tree: Any, path: Iterable[Any]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _key(k: Any) -> Any:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return k
