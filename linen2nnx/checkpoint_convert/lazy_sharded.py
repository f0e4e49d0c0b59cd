"""``convert --mesh`` (and ``--to linen``) in bounded memory: arrays read onto their shardings only
while Orbax writes them.

The sharded twin of :mod:`.lazy`. The state to save holds :class:`LazyShardedLeaf` placeholders
(shape, dtype and the sharding the target model wants); their type handler, a subclass of Orbax's
``ArrayHandler``, reads them from the source a bounded group at a time: every shard this process
holds (so on a multi-host job every process reads and writes its own part) read with TensorStore
into an aligned host buffer its CPU device adopts without a copy. It writes each group with the
array handler's own code (its host slices are views of those buffers) and lets it go before the
next. The sharding files are written up front from the placeholders, the per-process array
metadata once at the end, so the written checkpoint is what saving the arrays in one call gives.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from linen2nnx.checkpoint_convert import arrays
from linen2nnx.checkpoint_convert.lazy import LazyArray, LazySource, by_source


@dataclasses.dataclass(eq=False)
class LazyShardedLeaf(LazyArray):
    """A not-yet-read array, to be laid out as ``sharding`` says."""

    sharding: Any

    def target(self) -> Any:
        import jax

        return jax.ShapeDtypeStruct(self.shape, self.dtype, sharding=self.sharding)

    def load(self) -> Any:
        """Read this one array now, onto its sharding."""
        src = self.source
        return arrays.restore_group(src.item_dir, src.tree, {self.path: self.target()}, src.names)[self.path]


def _handler_class() -> type:
    from orbax.checkpoint._src.serialization import jax_array_handlers as jah

    class LazyShardedHandler(jah.ArrayHandler):
        """Restores :class:`LazyShardedLeaf` values group by group onto their shardings and writes them."""

        async def serialize(self, values: Sequence[Any], infos: Sequence[Any], args: Any = None) -> Any:
            from orbax.checkpoint._src.futures import future
            from orbax.checkpoint._src.serialization import types

            args = args or [types.SaveArgs()] * len(values)
            jah.check_array_values(values, infos)  # as the array handler refuses them, before any read
            out = []
            if self._enable_write_sharding_file:  # what the array handler writes first, from shardings alone
                shardings = jah._async_serialize_shardings(
                    shardings=[v.sharding for v in values], infos=infos, primary_host=self._primary_host
                )
                out.append(future.CommitFutureAwaitingContractedSignals(shardings, name="lazy_shardings"))
            out.append(future.CommitFutureAwaitingContractedSignals(_write_groups(self, values, infos, args)))
            return out

    return LazyShardedHandler


async def _write_groups(
    handler: Any, values: Sequence[Any], infos: Sequence[Any], args: Sequence[Any]
) -> None:
    """Every source's leaves, a group of at most its budget at a time; then the array metadata of
    this process, once (the array handler writes it per call, and a call per group would leave only
    the last group's)."""
    from orbax.checkpoint._src.multihost import multihost

    written: list[Any] = []
    for src, sizes in by_source(values):
        for group in arrays.groups(sizes, src.budget):  # type: ignore[arg-type]
            written += await _write_group(
                handler, src, [values[i] for i in group], [infos[i] for i in group], [args[i] for i in group]
            )
            src.advance(len(group), sum(sizes[i] for i in group))
    store = handler._array_metadata_store
    if store is not None and written:
        await store.write(
            checkpoint_dir=infos[0].parent_dir,
            array_metadatas=written,
            process_index=multihost.process_index(),
        )


async def _write_group(
    handler: Any, src: LazySource, leaves: list[LazyShardedLeaf], infos: list[Any], args: list[Any]
) -> list[Any]:
    """Restore one group onto its shardings, checksum it while the array handler's code writes it;
    nothing of it outlives the call."""
    from orbax.checkpoint._src.serialization import jax_array_handlers as jah
    from orbax.checkpoint._src.serialization import replica_slices

    from linen2nnx.checkpoint_convert.verify import sharded_checksum

    chunk = await read_group(src, leaves)
    host = replica_slices.transfer_arrays_to_host(  # on CPU devices: views of the shards, no copy
        chunk,
        handler._replica_id,
        handler._use_replica_parallel,
        handler._min_slice_bytes_for_replica_parallel,
        handler._max_replicas_for_replica_parallel,
        enable_pinned_host_transfer=infos[0].enable_pinned_host_transfer,
    )
    sums, metas = await asyncio.gather(
        asyncio.to_thread(lambda: [sharded_checksum(a) for a in chunk]),
        jah._async_serialize_replica_slices(
            host,
            infos,
            args,
            primary_host=handler._primary_host,
            metadata_key=handler._metadata_key,
            array_metadata_store=None,  # written once for all groups, see _write_groups
            enable_replica_parallel_separate_folder=handler._enable_replica_parallel_separate_folder,
            use_replica_parallel=handler._use_replica_parallel,
            ext_metadata={},
        ),
    )
    src.checksums.update({v.path: s for v, s in zip(leaves, sums) if s is not None})
    return list(metas)


async def read_group(src: LazySource, leaves: list[LazyShardedLeaf]) -> list[Any]:
    """The group's arrays on their shardings: every shard this process holds read from the source's
    storage (:func:`.arrays.storage`) into a host buffer its CPU device takes over without a copy;
    restored by Orbax where the source does not say how it stores its arrays."""
    how = arrays.storage(src.item_dir)
    if how is None:
        wanted = {v.path: v.target() for v in leaves}
        got = await asyncio.to_thread(arrays.restore_group, src.item_dir, src.tree, wanted, src.names)
        return [got.pop(v.path) for v in leaves]
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    from linen2nnx.checkpoint_convert import memory

    for hook in arrays.restore_hooks:
        hook(len(leaves))
    memory.give_back()  # what the previous group's reads and writes freed, before this one's peak
    context = ts_utils.get_ts_context(use_ocdbt=how[1])
    out = await asyncio.gather(*(_read_sharded(src, how, v, context) for v in leaves))
    memory.in_flight.track(out)
    return list(out)


async def _read_sharded(src: LazySource, how: tuple[str, bool], leaf: LazyShardedLeaf, context: Any) -> Any:
    """One array: each distinct shard read once (a stored chunk at a time), placed on its devices."""
    import jax

    try:
        store = await arrays.open_stored(src.item_dir, how, leaf.path, leaf.shape, leaf.dtype, context)
        host: dict[Any, Any] = {}
        shards = []
        whole = tuple((0, n) for n in leaf.shape)
        for device, index in leaf.sharding.addressable_devices_indices_map(leaf.shape).items():
            box = arrays.shard_box(index, leaf.shape)
            if box not in host:
                host[box] = _aligned_empty(tuple(b - a for a, b in box), leaf.dtype)
                await _fill_shard(src, how, leaf, store, index, host[box], box == whole, context)
            shards.append(jax.device_put(host[box], device, may_alias=True))
    except Exception as e:
        raise arrays._leaf_error(src.item_dir, leaf.path, src.names, e) from e
    return jax.make_array_from_single_device_arrays(leaf.shape, leaf.sharding, shards)


async def _fill_shard(
    src: LazySource,
    how: tuple[str, bool],
    leaf: LazyShardedLeaf,
    store: Any,
    index: Any,
    dest: Any,
    whole: bool,
    context: Any,
) -> None:
    """One shard's part of the stored array into ``dest``: a whole array's zstd chunks streamed
    (:func:`.arrays.stream_into`, never a chunk's stored bytes whole beside its decoded ones), else
    TensorStore's read a stored chunk at a time."""
    import tensorstore as ts

    if whole and await arrays.stream_into(src.item_dir, how, leaf.path, dest, context):
        return
    part = store[index] if index else store
    await arrays._fill_by_chunk(part[ts.d[:].translate_to[0]] if index else part, dest)


def _aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = 64) -> Any:
    """An uninitialised array on an ``align``-byte boundary: what a CPU device adopts as its buffer
    (``device_put(..., may_alias=True)``) instead of copying it."""
    import numpy as np

    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + size].view(np.dtype(dtype)).reshape(shape)


_REGISTERED = False


def register() -> None:
    """Teach Orbax to save :class:`LazyShardedLeaf` (once per process), written as ``jax.Array``."""
    global _REGISTERED
    if _REGISTERED:
        return
    from orbax.checkpoint import type_handlers
    from orbax.checkpoint._src.metadata import array_metadata_store

    # configured as Orbax's default jax.Array handler, whose typestr it shares (and so its restores)
    handler = _handler_class()(array_metadata_store=array_metadata_store.Store())
    type_handlers.register_type_handler(LazyShardedLeaf, handler, override=True)
    _REGISTERED = True
