"""Arrays that are read from the source checkpoint only while Orbax writes them: bounded memory.

Orbax saves a tree in one call, so converting by "restore everything, then save" holds the whole
checkpoint in host memory, plus the copy Orbax's numpy handler makes of every host array. Here the
converted NNX state holds :class:`LazyLeaf` placeholders instead of arrays; their type handler
(registered once, a subclass of Orbax's ``NumpyHandler``) restores them from the source a bounded
group at a time, writes each group with the numpy handler's own TensorStore code (no deep copy) and
lets it go before the next. The written checkpoint is a plain ``np.ndarray`` payload, identical
to what saving the restored arrays would give, so the standard NNX restore recipe reads it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert import arrays


@dataclasses.dataclass(eq=False)
class LazySource:
    """One Orbax item being converted: its metadata tree, the group budget and a progress hook."""

    item_dir: Path
    tree: Any
    budget: int
    names: dict[arrays.RawPath, str]
    progress: Callable[[int, int, int, int], None] | None = None
    """Called after each group with ``(leaves done, bytes done, leaves in all, bytes in all)``."""
    total: tuple[int, int] = (0, 0)
    done: list[int] = dataclasses.field(default_factory=lambda: [0, 0])
    checksums: dict[arrays.RawPath, str] = dataclasses.field(default_factory=dict)
    """Source path -> checksum of the array as read and written (for ``--verify`` and the report)."""

    def advance(self, leaves: int, nbytes: int) -> None:
        self.done[0] += leaves
        self.done[1] += nbytes
        if self.progress is not None:
            self.progress(self.done[0], self.done[1], *self.total)


@dataclasses.dataclass(eq=False)
class LazyArray:
    """A not-yet-read array of ``source`` at ``path``, with the shape and dtype Orbax asks about; its
    subclasses say where it goes (host memory, or a sharding). Never registered with Orbax itself,
    so each subclass keeps its own type handler."""

    source: LazySource
    path: arrays.RawPath
    shape: tuple[int, ...]
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        import numpy as np

        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return arrays.nbytes(self)


@dataclasses.dataclass(eq=False)
class LazyLeaf(LazyArray):
    """A not-yet-read array written to host memory (numpy) when Orbax saves it."""

    def load(self) -> Any:
        """Read this one array now (the in-memory path: ``convert_state``, tests)."""
        import jax

        wanted = {self.path: jax.ShapeDtypeStruct(self.shape, self.dtype)}
        return arrays.restore_group(self.source.item_dir, self.source.tree, wanted, self.source.names)[
            self.path
        ]


async def _read(
    src: LazySource, how: Any, leaves: list[LazyLeaf], where: Any = None
) -> tuple[list[Any], list[str | None]]:
    """The unit's arrays: read with TensorStore where the source says how it stores them
    (:func:`.arrays.read_direct`), else restored by Orbax; with the checksum of each one streamed
    whole, taken while it was decoded (None for the others). With ``where`` (the unit's bytes of a
    reused buffer, :func:`.pipeline.run`) the arrays are laid over it: one array is read straight
    into it, a run of small ones is read at once and copied in (no fresh pages held past the read)."""
    import jax

    from linen2nnx.checkpoint_convert import memory

    if how is None:
        wanted = {v.path: jax.ShapeDtypeStruct(v.shape, v.dtype) for v in leaves}
        got = await asyncio.to_thread(arrays.restore_group, src.item_dir, src.tree, wanted, src.names)
        return [got.pop(v.path) for v in leaves], [None] * len(leaves)
    memory.give_back()  # what the previous unit's reads and writes freed, before this one's peak
    sums: dict[arrays.RawPath, int] = {}
    metas = {v.path: (v.shape, v.dtype) for v in leaves}
    if where is not None and len(leaves) == 1:
        got = await arrays.read_direct(src.item_dir, how, metas, src.names, into=where, sums=sums)
    else:
        got = await arrays.read_direct(src.item_dir, how, metas, src.names, sums=sums)
        if where is not None:
            laid = arrays.carve(where, metas)
            for p in metas:
                laid[p][...] = got.pop(p)
            got = laid
    memory.in_flight.track(got.values())
    crcs = [f"crc32:{sums[v.path]:08x}" if v.path in sums else None for v in leaves]
    return [got.pop(v.path) for v in leaves], crcs


def is_deferred(x: Any) -> bool:
    """Whether ``x`` is a placeholder read only while it is written (host or sharded, :mod:`.lazy_sharded`)."""
    return isinstance(x, LazyArray)


def by_source(values: Sequence[Any]) -> list[tuple[LazySource, dict[int, int]]]:
    """The deferred leaves of one write call, by the checkpoint they come from: each source with the
    bytes of its leaves, by their index in ``values`` (in order)."""
    indices: dict[int, list[int]] = {}
    for i, v in enumerate(values):
        indices.setdefault(id(v.source), []).append(i)
    return [(values[idx[0]].source, {i: values[i].nbytes for i in idx}) for idx in indices.values()]


async def _write_sources(
    handler: Any, values: Sequence[Any], infos: Sequence[Any], args: Sequence[Any]
) -> None:
    """Each source's arrays in stored order, the next units read while these are written, within the
    source's budget (:mod:`.pipeline`); ``handler._write_group`` writes a unit."""
    from linen2nnx.checkpoint_convert import pipeline

    for src, sizes in by_source(values):
        how = arrays.storage(src.item_dir)

        async def read(unit: list[Any], where: Any, src: LazySource = src, how: Any = how) -> Any:
            return await _read(src, how, [values[i] for i in unit], where)

        async def write(unit: list[Any], got: Any, src: LazySource = src) -> None:
            leaves = [values[i] for i in unit]
            await handler._write_group(src, leaves, [infos[i] for i in unit], [args[i] for i in unit], got)
            src.advance(len(unit), sum(v.nbytes for v in leaves))

        cuts = pipeline.units(sizes, src.budget)
        await pipeline.run(cuts, sizes, src.budget, read, write, ring=how is not None)


def _handler_class() -> type:
    from orbax.checkpoint._src.serialization.type_handlers import NumpyHandler

    from linen2nnx.checkpoint_convert.verify import checksum

    class LazyHandler(NumpyHandler):
        """Restores :class:`LazyLeaf` values group by group and writes them as numpy arrays."""

        async def serialize(self, values: Sequence[Any], infos: Sequence[Any], args: Any = None) -> Any:
            from orbax.checkpoint._src.futures import future
            from orbax.checkpoint._src.serialization import types

            args = args or [types.SaveArgs()] * len(values)
            return [future.CommitFutureAwaitingContractedSignals(self._write_groups(values, infos, args))]

        async def _open_and_write(self, value: Any, tspec: dict[str, Any], ts_context: Any) -> None:
            """Orbax's own write spec and context, the array written a chunk at a time
            (:func:`.arrays.write_by_chunk`): the stored result is the same."""
            import tensorstore as ts

            store = await ts.open(ts.Spec(tspec), create=True, open=True, context=ts_context)
            await arrays.write_by_chunk(store, value)

        async def _write_groups(
            self, values: Sequence[Any], infos: Sequence[Any], args: Sequence[Any]
        ) -> None:
            await _write_sources(self, values, infos, args)

        async def _write_group(
            self, src: LazySource, leaves: list[LazyLeaf], infos: list[Any], args: list[Any], got: Any
        ) -> None:
            """Write one unit read by :func:`_read`, checksumming the arrays whose checksum was not
            taken while they were decoded; nothing of it outlives the call."""
            chunk, sums = got
            got = None
            todo = [i for i, s in enumerate(sums) if s is None]
            later, _ = await asyncio.gather(
                asyncio.to_thread(lambda: [checksum(chunk[i]) for i in todo]),
                self._background_serialize(chunk, infos, args),
            )
            for i, s in zip(todo, later):
                sums[i] = s
            src.checksums.update({v.path: s for v, s in zip(leaves, sums)})

    return LazyHandler


_REGISTERED = False


def register() -> None:
    """Teach Orbax to save :class:`LazyLeaf` (once per process)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from orbax.checkpoint import type_handlers

    type_handlers.register_type_handler(LazyLeaf, _handler_class()(deepcopy_host_arrays=False), override=True)
    _REGISTERED = True
