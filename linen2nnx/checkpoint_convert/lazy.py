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


async def _read(src: LazySource, how: Any, leaves: list[LazyLeaf]) -> list[Any]:
    """The group's arrays: read with TensorStore where the source says how it stores them
    (:func:`.arrays.read_direct`), else restored by Orbax."""
    import jax

    from linen2nnx.checkpoint_convert import memory

    if how is None:
        wanted = {v.path: jax.ShapeDtypeStruct(v.shape, v.dtype) for v in leaves}
        got = await asyncio.to_thread(arrays.restore_group, src.item_dir, src.tree, wanted, src.names)
        return [got.pop(v.path) for v in leaves]
    memory.give_back()  # what the previous group's reads and writes freed, before this one's peak
    got = await arrays.read_direct(src.item_dir, how, {v.path: (v.shape, v.dtype) for v in leaves}, src.names)
    memory.in_flight.track(got.values())
    return [got.pop(v.path) for v in leaves]


def is_deferred(x: Any) -> bool:
    """Whether ``x`` is a placeholder read only while it is written (host or sharded, :mod:`.lazy_sharded`)."""
    return isinstance(x, LazyArray)


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
            by_source: dict[int, list[int]] = {}
            for i, v in enumerate(values):
                by_source.setdefault(id(v.source), []).append(i)
            for idx in by_source.values():
                src = values[idx[0]].source
                sizes = {i: values[i].nbytes for i in idx}
                cuts = list(arrays.groups(sizes, src.budget))  # type: ignore[arg-type]
                how = arrays.storage(src.item_dir)
                for group in cuts:
                    await self._write_group(
                        src,
                        how,
                        [values[i] for i in group],
                        [infos[i] for i in group],
                        [args[i] for i in group],
                    )
                    src.advance(len(group), sum(sizes[i] for i in group))

        async def _write_group(
            self, src: LazySource, how: Any, leaves: list[LazyLeaf], infos: list[Any], args: list[Any]
        ) -> None:
            """Read one group, checksum it while Orbax writes it; nothing of it outlives the call."""
            chunk = await _read(src, how, leaves)
            sums, _ = await asyncio.gather(
                asyncio.to_thread(lambda: [checksum(a) for a in chunk]),
                self._background_serialize(chunk, infos, args),
            )
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
