"""``convert --mesh``: write the NNX checkpoint already laid out as the NNX model wants it.

Under the mesh and the pair's logical axis rules, every NNX slot's ``NamedSharding`` comes from its
Variable metadata (``nnx.get_named_sharding`` of the abstract model, as a sharded restore would use).
Each Linen leaf is restored straight onto its slot's sharding (Orbax reads only the shards this
process holds, so every host of a multi-host job reads and then writes its own part), optax
moments take the sharding of the param they mirror, everything else is replicated. ``convert``
does this a bounded group at a time while Orbax's array handler writes the shards with that layout
(:func:`lazy_sharded_arrays`, :mod:`.lazy_sharded`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from linen2nnx.checkpoint_convert import arrays
from linen2nnx.checkpoint_convert.read import LinenCheckpoint
from linen2nnx.checkpoint_convert.stream import OrbaxSource, default_budget, lazy_arrays


def target_shardings(opened: OrbaxSource, plan: Any, mesh: Any) -> dict[arrays.RawPath, Any]:
    """Stored raw path -> the ``NamedSharding`` its array gets on ``mesh``."""
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    named = {
        tuple(p): _value(v)
        for p, v in nnx.to_flat_state(nnx.get_named_sharding(plan.target.abstract_state, mesh))
    }
    boxed = set(opened.checkpoint.unboxed)
    by_linen: dict[tuple[str, ...], Any] = {}
    param_table: dict[tuple[str, ...], Any] = {}
    for m in plan.matches:
        key = (m.leaf.collection, *map(str, m.leaf.path))
        by_linen[key] = named.get(tuple(m.nnx_path))
        if m.leaf.collection == "params":
            param_table[tuple(map(str, m.leaf.path))] = m.nnx_path
    replicated = NamedSharding(mesh, PartitionSpec())
    out: dict[arrays.RawPath, Any] = {}
    for raw, meta in arrays.flat_metadata(opened.tree).items():
        path = tuple(map(str, raw))
        if path and path[-1] == "value" and "/".join(path[:-1]) in boxed:
            path = path[:-1]
        sharding = by_linen.get(path)
        if sharding is None and path[:1] == ("opt_state",):  # a moment mirrors its param's layout
            hit = _mirrored_param(path[1:], param_table)
            sharding = named.get(hit) if hit is not None else None
        if path == ("step",):
            continue  # read to the host: it becomes a Python int
        out[raw] = sharding if sharding is not None and _fits(sharding, meta) else replicated
    return out


def _mirrored_param(path: tuple[str, ...], table: dict[tuple[str, ...], Any]) -> Any:
    """The NNX param path whose Linen path is the longest suffix of an optax leaf's path."""
    for i in range(len(path)):
        hit = table.get(path[i:])
        if hit is not None:
            return tuple(hit)
    return None


def _fits(sharding: Any, meta: Any) -> bool:
    try:
        sharding.shard_shape(tuple(meta.shape))
    except ValueError:
        return False
    return True


def _value(v: Any) -> Any:
    return v.get_value() if hasattr(v, "get_value") else v


def lazy_sharded_arrays(
    opened: OrbaxSource,
    plan: Any,
    mesh: Any,
    budget: int | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
) -> LinenCheckpoint:
    """The checkpoint with :class:`~.lazy_sharded.LazyShardedLeaf` placeholders: every needed leaf
    is restored onto its sharding on ``mesh`` only while it is written, ``budget`` bytes at a time."""
    shardings = target_shardings(opened, plan, mesh)
    return lazy_arrays(opened, budget or default_budget(opened.largest_bytes()), progress, shardings)


def planned_shardings(opened: OrbaxSource, pair: Any, name_map: Any, shape: dict[str, int]) -> dict[str, Any]:
    """Linen path -> the ``NamedSharding`` ``convert --mesh`` would give it, on an abstract mesh of
    ``shape``: the devices need not exist here (a pod's layout is planned on a laptop)."""
    import flax.linen as nn
    from jax.sharding import AbstractMesh, AxisType

    from linen2nnx.checkpoint_convert.api import plan_with_problems
    from linen2nnx.checkpoint_convert.stream import _display
    from linen2nnx.equivalence.mesh import check_rules_fit, logical_rules

    mesh = AbstractMesh(tuple(shape.values()), tuple(shape), axis_types=(AxisType.Auto,) * len(shape))
    check_rules_fit(pair, mesh)  # as convert --mesh refuses it
    with nn.logical_axis_rules(logical_rules(pair)):
        plan, _ = plan_with_problems(opened.checkpoint, pair, name_map)
        raw = target_shardings(opened, plan, mesh)
    return {_display(p, opened.checkpoint): s for p, s in raw.items()}
