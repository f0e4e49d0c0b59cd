"""``convert --to linen``: an NNX checkpoint written by ``convert`` back into a Linen checkpoint.

A migration is only safe to start if it can be undone: a team that finds a problem after moving
to NNX needs its Linen checkpoint back, bit for bit. The conversion report stored in the NNX
checkpoint says which NNX path every Linen leaf went to (params, batch stats, optax state, step and
its dtype), so the way back needs no guessing. The Linen tree is rebuilt from the pair's Linen side
under ``jax.eval_shape`` (``model.init`` for the variables, ``tx.init`` for the optax state): the
partitioning boxes come back with their logical names, scanned stacks keep their layer axis, and
the optax state gets its exact structure (empty states included). Then every leaf is filled from
the NNX checkpoint and saved with ``StandardCheckpointer``, the way Linen training loops save.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert import arrays
from linen2nnx.checkpoint_convert.commit import partial_dir, publish, recover
from linen2nnx.checkpoint_convert.read import sown_collections
from linen2nnx.checkpoint_convert.write import OPTIMIZER_DIR, read_report
from linen2nnx.errors import ConversionError, L2NError


def convert_to_linen(
    src: str | Path,
    dst: str | Path,
    pair: Any,
    *,
    force: bool = False,
    mesh: Any = None,
    budget: int | None = None,
) -> dict[str, Any]:
    """Write the Linen checkpoint ``dst`` from the NNX checkpoint ``src``; returns a summary.

    Arrays are read from ``src`` only while they are written, ``budget`` bytes at a time (default:
    the largest array); with ``mesh``, onto the shardings the Linen boxes' logical names give under
    the pair's rules, and written so."""
    from linen2nnx.checkpoint_convert.api import _mesh_scope

    src, dst = Path(src).expanduser().absolute(), Path(dst).expanduser().absolute()
    recover(dst)
    if dst.exists() and not force:
        raise L2NError(f"{dst}: already exists (pass --force to replace it)")
    report = read_report(src)
    leaves = _nnx_leaves(src, budget)
    if report.get("optimizer") and (src / OPTIMIZER_DIR).exists():
        leaves.update({("opt", *k): v for k, v in _nnx_leaves(src / OPTIMIZER_DIR, budget).items()})
    by_linen = _linen_sources(report)
    with _mesh_scope(pair, mesh) as active:
        target = _linen_target(pair, with_optimizer=bool(report.get("optimizer")))
        shardings = _shardings(target, pair, active)  # from the boxes' logical names, before unboxing
        boxed = report.get("unboxed")
        tree, missing = _fill(_boxed_as_saved(target, boxed), by_linen, leaves, shardings, set(boxed or ()))
        if missing:
            raise ConversionError(
                f"cannot write {dst}: {len(missing)} Linen leaf(s) have no value in {src}\n"
                + "\n".join(f"  - {m}" for m in missing[:50])
            )
        for key, why in report.get("ignored", {}).items():
            if why == "empty" and key not in tree:
                tree[key] = {}
        _save(tree, dst)
    return {"source": str(src), "destination": str(dst), "leaves": len(by_linen), "step": report.get("step")}


def _nnx_leaves(item_dir: Path, budget: int | None) -> dict[tuple[str, ...], tuple[Any, arrays.RawPath, Any]]:
    """Every array of an NNX payload, unread: NNX path (str elements, no ``value``) -> (its
    :class:`~.lazy.LazySource`, stored path, metadata)."""
    from linen2nnx.checkpoint_convert.lazy import LazySource
    from linen2nnx.checkpoint_convert.stream import default_budget

    tree = arrays.read_metadata(item_dir)
    flat = {p: m for p, m in arrays.flat_metadata(tree).items() if arrays.has_plain_dtype(m.dtype)}
    sizes = [arrays.nbytes(m) for m in flat.values()]
    names = {p: "/".join(map(str, p)) for p in flat}
    source = LazySource(item_dir, tree, budget or default_budget(max(sizes, default=0)), names)
    out = {}
    for path, meta in flat.items():
        key = tuple(map(str, path))
        out[key[:-1] if key and key[-1] == "value" else key] = (source, path, meta)
    return out


def _boxed_as_saved(target: Any, boxed: list[str] | None) -> Any:
    """``target`` with only the leaves the source checkpoint held boxed (the report's ``unboxed``) left
    in their partitioning boxes: a training loop that unboxed its params before ``TrainState.create``
    restores its own tree. An older report without the list: every box kept."""
    import jax
    from flax.core.meta import AxisMetadata

    if boxed is None:
        return target
    keep = set(boxed)

    def unbox(kp: Any, leaf: Any) -> Any:
        if isinstance(leaf, AxisMetadata) and "/".join(_linen_path(kp)) not in keep:
            return leaf.unbox(apply_constraint=False)  # a constraint on abstract values fails under a mesh
        return leaf

    return jax.tree_util.tree_map_with_path(unbox, target, is_leaf=lambda x: isinstance(x, AxisMetadata))


def _shardings(target: Any, pair: Any, mesh: Any) -> dict[tuple[str, ...], Any]:
    """Linen path -> where its array goes: one device, or on ``mesh`` the sharding its partitioning
    metadata gives (equivalence/linen_partitioning.py: logical names through the pair's rules or
    the box's own, mesh names as they are, T5X's params_axes); leaves without any are replicated."""
    import jax
    from jax.sharding import NamedSharding

    if mesh is None:
        return {}
    from linen2nnx.equivalence.linen_partitioning import is_array_leaf, is_box, linen_partitions, mesh_spec
    from linen2nnx.equivalence.mesh import logical_rules

    rules = logical_rules(pair)
    parts = linen_partitions(target, path_of=_linen_path)
    out = {}
    for kp, leaf in jax.tree_util.tree_flatten_with_path(target, is_leaf=is_box)[0]:
        if is_array_leaf(getattr(leaf, "value", leaf)):  # a box's value, or the array itself
            key = _linen_path(kp)
            out[key] = NamedSharding(mesh, mesh_spec(parts.get(key), rules))
    return out


def _linen_sources(report: dict[str, Any]) -> dict[tuple[str, ...], tuple[tuple[str, ...], str | None]]:
    """Linen path -> (NNX value key, dtype to cast to or None), from the conversion report."""
    out: dict[tuple[str, ...], tuple[tuple[str, ...], str | None]] = {}
    for m in report["mapped"]:
        out[tuple(m["linen"].split("/"))] = (tuple(m["nnx"].split("/")), None)
    for m in report.get("optimizer") or []:
        nnx_key = ("opt", *m["nnx"].split("/"))
        if m["linen"] == "step":
            out[("step",)] = (nnx_key, report.get("step_dtype") or "int32")
        else:
            out[tuple(m["linen"].split("/"))] = (nnx_key, None)
    return out


def _linen_target(pair: Any, *, with_optimizer: bool) -> dict[str, Any]:
    """The abstract Linen checkpoint: ``model.init`` variables (boxes kept) and ``tx.init`` state."""
    import jax

    sown = set(sown_collections())  # values a call makes (Linen's init sows into `losses` too): no state

    def build() -> dict[str, Any]:
        variables = {k: v for k, v in pair.linen.init_variables().items() if k not in sown}
        if with_optimizer:
            variables["opt_state"] = pair.linen.optimizer.init(variables["params"])
        return variables

    try:
        target = jax.eval_shape(build)
    except Exception as e:
        raise L2NError(f"cannot build the Linen model of the pair: {type(e).__name__}: {e}") from e
    if with_optimizer:
        target["step"] = jax.ShapeDtypeStruct((), np.int32)
    return target


def _fill(
    target: Any, by_linen: dict, leaves: dict, shardings: dict, unboxed: set[str]
) -> tuple[dict[str, Any], list[str]]:
    """Every abstract leaf replaced by a placeholder of its NNX array (read while it is written,
    saved as ``jax.Array`` like the original); the Linen paths that have none are returned.

    ``unboxed``: the Linen paths convert read as restored partitioning boxes; a parameter named
    ``value`` (``Scale_0/value``) looks like one on disk and went under its module's path, which is
    where it is looked up when the Linen init has it as a plain leaf."""
    import jax

    from linen2nnx.checkpoint_convert import lazy_sharded

    lazy_sharded.register()
    one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    missing: list[str] = []

    visited: set[tuple[str, ...]] = set()

    def fill(kp: Any, abstract: Any) -> Any:
        path = _linen_path(kp)
        if path not in by_linen and path[-1:] == ("value",) and "/".join(path[:-1]) in unboxed:
            path = path[:-1]
        visited.add(path)
        hit = by_linen.get(path)
        found = None if hit is None else leaves.get(hit[0])
        if found is None:
            missing.append("/".join(path))
            return abstract
        source, raw, meta = found
        sharding = shardings.get(path, one_device)
        leaf = lazy_sharded.LazyShardedLeaf(source, raw, tuple(meta.shape), np.dtype(meta.dtype), sharding)
        dtype = np.dtype(hit[1] or abstract.dtype)
        if leaf.dtype != dtype:  # the step (NNX uint32, Linen int32): a scalar, read now
            value = np.asarray(leaf.load(), dtype=dtype)
            if dtype.itemsize == 8 and not jax.config.jax_enable_x64:
                return value  # a Python int's int64 step: a device array would be int32 without x64
            return jax.device_put(value, sharding)
        return leaf

    tree = jax.tree_util.tree_map_with_path(fill, target)
    unplaced = sorted("/".join(p) for p in set(by_linen) - visited)
    if unplaced:  # a weight the Linen init of the pair does not create (a train-only layer): never dropped
        raise L2NError(
            f"{len(unplaced)} converted leaves have no place in the Linen model's init tree, which "
            f"`--to linen` writes (build the pair's Linen side so that init creates them): {', '.join(unplaced[:8])}"
        )
    return tree, missing


def _linen_path(kp: Any) -> tuple[str, ...]:
    """A jax key path as the report spells Linen paths: box ``value`` fields dropped."""
    parts = [str(arrays._key(k)) for k in kp]
    if parts and parts[-1] == "value" and type(kp[-1]).__name__ == "GetAttrKey":
        parts = parts[:-1]
    return tuple(parts)


def _save(tree: Any, dst: Path) -> None:
    import orbax.checkpoint as ocp

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(dst)
    try:  # the PyTree handler (StandardCheckpointer's own format) also takes lazy leaves
        with ocp.PyTreeCheckpointer() as ckptr:
            ckptr.save(tmp, args=ocp.args.PyTreeSave(tree))
    except BaseException:
        recover(dst)
        raise
    publish(tmp, dst)
