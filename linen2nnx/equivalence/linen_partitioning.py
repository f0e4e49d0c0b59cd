"""What a Linen variable's partitioning metadata says, in the three forms real code writes it.

- ``nn.with_logical_partitioning`` boxes (``LogicallyPartitioned``) carry *logical* names, mapped to
  mesh axes through the logical axis rules -- the box's own ``rules`` when it has them (Linen then
  ignores the context's), else the active ones;
- ``nn.with_partitioning`` boxes (``Partitioned``) carry *mesh* axis names: no rules apply;
- T5X's ``param_with_axes`` keeps the logical names apart, in the ``params_axes`` collection
  (``<name>_axes``: ``AxisMetadata(names=...)``) beside an unboxed parameter.

Mapping a mesh name through logical rules, or ignoring a box's rules, places a weight on the wrong
axes -- the same mistake on both sides of a check would pass it -- so every reader of Linen
partitioning goes through :func:`linen_partitions` and :func:`mesh_spec`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class LinenPartition(NamedTuple):
    """A Linen variable's partition names and how they reach the mesh."""

    names: tuple[Any, ...]  # one entry per axis (None: not split)
    logical: bool  # names are logical (mapped through rules), else mesh axes
    rules: tuple[tuple[str, Any], ...] | None = None  # the box's own rules, which replace the context's


def _plain_path(path: Any) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def is_box(leaf: Any) -> bool:
    """A partitioning record a variable tree holds in place of (or beside) an array."""
    from flax.core import meta
    from flax.linen import partitioning

    return isinstance(leaf, (meta.AxisMetadata, partitioning.AxisMetadata))  # the latter has no leaves


def linen_partitions(
    variables: Any, path_of: Callable[[Any], tuple[str, ...]] = _plain_path
) -> dict[tuple[str, ...], LinenPartition]:
    """``{(collection, *path): LinenPartition}`` for every boxed leaf of ``variables`` (an abstract or
    real Linen variable tree, boxes kept; ``path_of`` spells a jax key path) and every parameter a
    ``params_axes`` entry names."""
    import flax.linen as nn
    import jax
    from flax.core import unfreeze
    from flax.linen import partitioning

    tree = unfreeze(variables) if hasattr(variables, "unfreeze") else variables
    out: dict[tuple[str, ...], LinenPartition] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_box)[0]:
        key = path_of(path)
        if isinstance(leaf, partitioning.AxisMetadata):
            if key[0] == "params_axes" and key[-1].endswith("_axes"):
                out[("params", *key[1:-1], key[-1][: -len("_axes")])] = LinenPartition(
                    tuple(leaf.names), True
                )
        elif isinstance(leaf, nn.LogicallyPartitioned):
            rules = tuple(tuple(r) for r in leaf.rules) if leaf.rules else None
            out[key] = LinenPartition(tuple(leaf.names), True, rules)
        elif isinstance(leaf, nn.Partitioned):
            out[key] = LinenPartition(tuple(leaf.names), False)
    return out


def mesh_spec(part: LinenPartition | None, rules: Any) -> Any:
    """The mesh PartitionSpec Linen places a variable with (``P()`` for none): mesh names as they are,
    logical names through the box's rules, else ``rules`` (the pair's)."""
    import flax.linen as nn
    from jax.sharding import PartitionSpec

    if part is None:
        return PartitionSpec()
    if not part.logical:
        return PartitionSpec(*part.names)
    use = part.rules if part.rules is not None else rules
    return nn.logical_to_mesh_axes(part.names, use) if use else PartitionSpec(*part.names)


def is_array_leaf(leaf: Any) -> bool:
    """A variable's value (or its abstract shape), not a metadata record such as a ``params_axes`` entry."""
    return hasattr(leaf, "shape")
