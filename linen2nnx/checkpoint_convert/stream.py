"""Plan from Orbax metadata, then fetch only the arrays the plan needs, a bounded group at a time.

:func:`open_orbax` gives a :class:`~.read.LinenCheckpoint` whose leaves are Orbax ``ArrayMetadata``
(shape, dtype and saved sharding, no data), enough for mapping, validation and ``--dry-run``.
:func:`load_arrays` then restores the variable collections, the optax state and the step with a
target (host ``np.ndarray``: any saved topology restores on any machine), in groups of at most
``budget`` bytes, and returns the same checkpoint with arrays in place of the metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert import arrays
from linen2nnx.checkpoint_convert.read import LinenCheckpoint, parse_tree, step_number
from linen2nnx.checkpoint_convert.source import Source, resolve_source

#: Restore groups are at least this big, so tiny leaves are not fetched one call each.
MIN_GROUP_BYTES = 16 << 20
_WANTED_TOP = ("opt_state", "step")


@dataclasses.dataclass
class OrbaxSource:
    """A resolved Orbax item: where it is, its metadata tree and the checkpoint planned from it."""

    source: Source
    tree: Any
    checkpoint: LinenCheckpoint

    @property
    def item_dir(self) -> Path:
        return self.source.item_dir

    def largest_bytes(self) -> int:
        sizes = [arrays.nbytes(m) for m in arrays.flat_metadata(self.tree).values()]
        return max(sizes, default=0)


def open_orbax(src: str | Path, step: int | None = None) -> OrbaxSource:
    """Resolve ``src`` (root / step / item) and read its metadata; no array is read."""
    source = resolve_source(src, step)
    tree = arrays.read_metadata(source.item_dir)
    ckpt = parse_tree(tree, source=str(source.item_dir), fmt="orbax")
    ckpt.step = source.step if ckpt.step is None else ckpt.step
    ckpt.ignored.update(source.ignored_items)
    return OrbaxSource(source, tree, ckpt)


def default_budget(largest: int) -> int:
    """Bytes of arrays held at once: the largest array (it has to be held whole anyway), never
    less than :data:`MIN_GROUP_BYTES`. Reading a group costs up to twice its bytes for a moment
    (TensorStore holds a chunk's stored bytes while it decodes them), so a bigger default would
    raise the peak above what the largest array alone needs; a smaller one only adds calls."""
    return max(largest, MIN_GROUP_BYTES)


def load_arrays(
    opened: OrbaxSource,
    budget: int | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
) -> LinenCheckpoint:
    """The checkpoint with every needed leaf restored as host numpy, ``progress(leaves done, bytes
    done, leaves, bytes)`` after each group."""
    import jax

    flat = arrays.flat_metadata(opened.tree)
    needed = {p: m for p, m in flat.items() if _needed(p, opened.checkpoint)}
    sizes = {p: arrays.nbytes(m) for p, m in needed.items()}
    budget = budget or default_budget(max(sizes.values(), default=0))
    names = {p: _display(p, opened.checkpoint) for p in needed}
    restored: dict[arrays.RawPath, Any] = {}
    for group in arrays.groups(sizes, budget):
        wanted = {p: jax.ShapeDtypeStruct(needed[p].shape, needed[p].dtype) for p in group}
        restored.update(arrays.restore_group(opened.item_dir, opened.tree, wanted, names))
        if progress is not None:
            progress(len(restored), sum(sizes[p] for p in restored), len(sizes), sum(sizes.values()))

    def value(kp: Any, meta: Any) -> Any:
        return restored.get(tuple(arrays._key(k) for k in kp), meta)

    tree = jax.tree_util.tree_map_with_path(value, opened.tree, is_leaf=arrays.is_meta_leaf)
    ckpt = parse_tree(tree, source=opened.checkpoint.source, fmt="orbax")
    ckpt.step = opened.checkpoint.step if ckpt.step is None else ckpt.step
    ckpt.ignored = dict(opened.checkpoint.ignored)
    return ckpt


def lazy_arrays(
    opened: OrbaxSource,
    budget: int | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
    shardings: dict[arrays.RawPath, Any] | None = None,
) -> LinenCheckpoint:
    """The checkpoint with :class:`~.lazy.LazyLeaf` placeholders: arrays are read while Orbax
    writes the converted checkpoint, ``budget`` bytes at a time (only the step is read now). With
    ``shardings``, :class:`~.lazy_sharded.LazyShardedLeaf` ones: read onto those shardings."""
    import jax
    import numpy as np

    from linen2nnx.checkpoint_convert import lazy, lazy_sharded
    from linen2nnx.checkpoint_convert.lazy import LazyLeaf, LazySource

    lazy.register()
    lazy_sharded.register()
    flat = arrays.flat_metadata(opened.tree)
    needed = {p: m for p, m in flat.items() if _needed(p, opened.checkpoint)}
    sizes = [arrays.nbytes(m) for p, m in needed.items() if p != ("step",)]
    names = {p: _display(p, opened.checkpoint) for p in needed}
    budget = budget or default_budget(max(sizes, default=0))
    src = LazySource(opened.item_dir, opened.tree, budget, names, progress, (len(sizes), sum(sizes)))
    step = None
    if ("step",) in needed:
        meta = needed[("step",)]
        wanted = {("step",): jax.ShapeDtypeStruct(tuple(meta.shape), meta.dtype)}
        stored = arrays.restore_group(opened.item_dir, opened.tree, wanted, names)[("step",)]
        step = step_number(stored, opened.checkpoint.source)

    def value(kp: Any, meta: Any) -> Any:
        path = tuple(arrays._key(k) for k in kp)
        if path not in needed or path == ("step",):
            return meta
        if shardings is not None:
            return lazy_sharded.LazyShardedLeaf(
                src, path, tuple(meta.shape), np.dtype(meta.dtype), shardings[path]
            )
        return LazyLeaf(src, path, tuple(meta.shape), np.dtype(meta.dtype))

    tree = jax.tree_util.tree_map_with_path(value, opened.tree, is_leaf=arrays.is_meta_leaf)
    ckpt = parse_tree(tree, source=opened.checkpoint.source, fmt="orbax")
    ckpt.step = step if step is not None else opened.checkpoint.step
    ckpt.step_dtype = opened.checkpoint.step_dtype
    ckpt.ignored = dict(opened.checkpoint.ignored)
    return ckpt


def _needed(path: arrays.RawPath, ckpt: LinenCheckpoint) -> bool:
    return bool(path) and (str(path[0]) in ckpt.collections or str(path[0]) in _WANTED_TOP)


def _display(path: arrays.RawPath, ckpt: LinenCheckpoint) -> str:
    """The Linen path a person recognises: the stored path without a box's trailing ``value``."""
    shown = "/".join(map(str, path))
    if path and path[-1] == "value" and "/".join(map(str, path[:-1])) in set(ckpt.unboxed):
        shown = "/".join(map(str, path[:-1]))
    return shown
