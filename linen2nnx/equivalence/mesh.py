"""Parity on a device mesh: both sides sharded the way their partitioning metadata says.

A migration that keeps every value but loses a sharding name still breaks a real training run (a
weight replicated on every chip, or split on the wrong axis). So under ``--mesh`` the check

1. builds a mesh of ``AxisType.Auto`` axes (GSPMD style: Linen's ``nn.with_logical_partitioning``
   unboxing fails on ``Explicit`` axes, docs/nnx_facts.md#auto-not-explicit-mesh-axes) and activates it with ``jax.set_mesh``
   together with the pair's logical axis rules (``nn.logical_axis_rules``, which *is*
   ``nnx.logical_axis_rules``, docs/nnx_facts.md#one-metadata-mechanism), with NNX eager sharding on;
2. places the Linen variables per their ``LogicallyPartitioned`` boxes
   (``nn.get_partition_spec`` -> ``nn.logical_to_mesh_sharding``) and the NNX state per its
   ``out_sharding`` metadata (``nnx.get_named_sharding``), and splits the example batch over the
   data axes, so the forward and gradient computations really run sharded;
3. compares every parameter's *mesh* PartitionSpec on both sides through the converter's own path
   table (:func:`partition_spec_leaves`), the scanned ``layers`` axis included.

Example::

    from linen2nnx.equivalence.mesh import check_on_mesh, parse_mesh
    result = check_on_mesh(pair, parse_mesh("data=2,fsdp=2,tensor=2"))

A process sees only the devices it was started with: on a CPU host, set
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before jax is imported (see
:func:`host_device_env`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from linen2nnx.equivalence.compare import LeafResult, ParityResult, missing
from linen2nnx.equivalence.linen_partitioning import (
    LinenPartition,
    is_array_leaf,
    linen_partitions,
    mesh_spec,
)
from linen2nnx.errors import L2NError
from linen2nnx.trees import plain_dicts

CHECK_NAME = "partition_spec"
_AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


class MeshError(L2NError):
    """A mesh that cannot be built or does not fit the model's logical axis rules."""


# ---- mesh shape ----------------------------------------------------------------------------------
def parse_mesh(text: str) -> dict[str, int]:
    """``"data=2,fsdp=2,tensor=2"`` -> ``{"data": 2, "fsdp": 2, "tensor": 2}`` (order kept: it is the mesh order).

    Every malformed item is a :class:`MeshError` that quotes it, because a mesh typo otherwise
    surfaces much later as an obscure sharding error inside XLA.
    """
    items = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(items):
        raise MeshError(
            f"--mesh {text!r}: expected comma-separated AXIS=SIZE items, e.g. data=2,fsdp=2,tensor=2"
        )
    shape: dict[str, int] = {}
    for item in items:
        name, sep, size = (s.strip() for s in item.partition("="))
        if not sep:
            raise MeshError(f"--mesh {text!r}: item {item!r} has no '=' (expected AXIS=SIZE)")
        if not _AXIS_NAME.match(name):
            raise MeshError(f"--mesh {text!r}: axis name {name!r} is not an identifier")
        if name in shape:
            raise MeshError(f"--mesh {text!r}: axis {name!r} is given twice")
        try:
            n = int(size)
        except ValueError:
            raise MeshError(f"--mesh {text!r}: size {size!r} of axis {name!r} is not an integer") from None
        if n < 1:
            raise MeshError(f"--mesh {text!r}: size of axis {name!r} must be >= 1, got {n}")
        shape[name] = n
    return shape


def format_mesh(shape: Mapping[str, int]) -> str:
    """The inverse of :func:`parse_mesh`."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def device_count_needed(shape: Mapping[str, int]) -> int:
    return math.prod(shape.values())


def host_device_env(n: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default ``os.environ``) set up for a child process that sees ``n`` CPU devices.

    XLA reads the flag once, when jax initialises its CPU backend, so it only helps a process
    started afterwards (or one that has not imported jax yet). ``JAX_PLATFORMS=cpu`` keeps an
    accelerator with fewer devices from being picked as the default backend.
    """
    out = dict(os.environ if env is None else env)
    flags = [f for f in out.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
    out["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICE_FLAG}={n}"])
    out["JAX_PLATFORMS"] = "cpu"
    return out


def make_mesh(shape: Mapping[str, int] | Any) -> Any:
    """A ``jax.sharding.Mesh`` with ``AxisType.Auto`` axes over the first ``prod(shape)`` devices.

    Auto, not jax 0.10's default Explicit: Linen's partitioned params are unboxed with
    ``with_sharding_constraint``, which asserts on Explicit axes (docs/nnx_facts.md#auto-not-explicit-mesh-axes). A ``Mesh``
    passes through unchanged.
    """
    import jax
    from jax.sharding import AxisType, Mesh

    if isinstance(shape, Mesh):
        return shape
    shape = dict(shape)
    if not shape:
        raise MeshError("a mesh needs at least one axis")
    n = device_count_needed(shape)
    devices = jax.devices()
    if len(devices) < n:
        raise MeshError(
            f"mesh {format_mesh(shape)} needs {n} devices, but this process has {len(devices)} "
            f"({devices[0].platform}); on a CPU host set XLA_FLAGS={_DEVICE_FLAG}={n} (and JAX_PLATFORMS=cpu) "
            "in the environment before jax is imported"
        )
    return jax.make_mesh(
        tuple(shape.values()), tuple(shape), axis_types=(AxisType.Auto,) * len(shape), devices=devices[:n]
    )


# ---- rules and scope -----------------------------------------------------------------------------
def _side(pair: Any) -> Any:
    """A ModelPair's Linen side, or the LinenSide itself."""
    return getattr(pair, "linen", pair)


def logical_rules(pair: Any) -> tuple[tuple[str, Any], ...]:
    """The pair's Linen logical axis rules (``()`` if it has none: names are then mesh axes)."""
    return tuple((name, axes) for name, axes in getattr(_side(pair), "logical_axis_rules", ()) or ())


def _rule_mesh_axes(rules: tuple[tuple[str, Any], ...]) -> dict[str, str]:
    """mesh axis -> the first logical name mapped to it."""
    out: dict[str, str] = {}
    for logical, axes in rules:
        for ax in (axes,) if isinstance(axes, str) else (axes or ()):
            out.setdefault(ax, logical)
    return out


def check_rules_fit(pair: Any, mesh: Any) -> None:
    """Raise a :class:`MeshError` if the rules (or ``mesh_axes``) name an axis the mesh lacks."""
    names = set(mesh.axis_names)
    side = _side(pair)
    what = f"the {side.name} model" if getattr(side, "name", "") else "the model"
    declared = tuple(getattr(side, "mesh_axes", ()) or ())
    for ax, logical in _rule_mesh_axes(logical_rules(pair)).items():
        if ax not in names:
            hint = f"; its rules are written for axes {', '.join(declared)}" if declared else ""
            raise MeshError(
                f"the logical axis rules of {what} map {logical!r} to mesh axis {ax!r}, which the mesh "
                f"{format_mesh(dict(mesh.shape))} does not have{hint} (give each a size; 1 is fine)"
            )
    absent = [ax for ax in declared if ax not in names]
    if absent:
        raise MeshError(
            f"{what} is written for mesh axes {', '.join(declared)}; the mesh "
            f"{format_mesh(dict(mesh.shape))} lacks {', '.join(absent)} (give each a size; 1 is fine)"
        )


@contextlib.contextmanager
def mesh_scope(pair: Any, shape: Mapping[str, int] | Any) -> Iterator[Any]:
    """Activate a mesh and the pair's logical axis rules for both Linen and NNX; yields the mesh.

    Inside: ``jax.set_mesh(mesh)`` (Linen unboxing and ``nn.with_logical_constraint`` see it, NNX
    eager sharding places new Variables on it), ``nn.logical_axis_rules(rules)`` (the same context
    object as ``nnx.logical_axis_rules``, so ``nnx.get_partition_spec`` maps names through it too)
    and ``nnx.use_eager_sharding(True)`` (a caller may have switched it off). Everything that traces
    (``jax.jit`` first calls) must happen inside, since rules are read at trace time.
    """
    import flax.linen as nn
    import jax
    from flax import nnx

    mesh = make_mesh(shape)
    check_rules_fit(pair, mesh)
    with jax.set_mesh(mesh), nn.logical_axis_rules(logical_rules(pair)), nnx.use_eager_sharding(True):
        yield mesh


def _active_mesh(mesh: Any) -> Any:
    import jax

    if mesh is not None:
        return mesh
    active = jax.sharding.get_mesh()
    if active.empty:
        raise MeshError("no active mesh: call this inside `with mesh_scope(pair, shape):` or pass mesh=")
    return active


# ---- placing the state ---------------------------------------------------------------------------
def _flat(tree: Any) -> dict[tuple[str, ...], Any]:
    from flax.core import unfreeze
    from flax.traverse_util import flatten_dict

    tree = unfreeze(tree) if hasattr(tree, "unfreeze") else tree
    return {tuple(map(str, k)): v for k, v in flatten_dict(plain_dicts(tree)).items()}


def strip_boxes(tree: Any) -> Any:
    """``tree`` with every Linen partition box replaced by its raw value.

    Not ``nn.unbox``: under an active mesh that applies ``with_sharding_constraint``, which only
    works inside a trace (eagerly it refuses unplaced or abstract arrays).
    """
    import jax
    from flax.core import meta

    return jax.tree.map(
        lambda x: x.value if isinstance(x, meta.AxisMetadata) else x,
        tree,
        is_leaf=lambda x: isinstance(x, meta.AxisMetadata),
    )


def linen_logical_specs(pair: Any) -> dict[tuple[str, ...], tuple[LinenPartition | None, tuple[int, ...]]]:
    """``{(collection, *path): (partition names or None, shape)}`` of the Linen model's variables.

    From an abstract init (``jax.eval_shape``, nothing allocated), because checkpoints and most
    variable trees carry no boxes any more: the names live only in the module code
    (linen_partitioning.py reads each form: logical boxes, mesh boxes, T5X's ``params_axes``).
    """
    import jax

    abstract = jax.eval_shape(_side(pair).init_variables)
    parts = linen_partitions(abstract)
    shapes = _flat(strip_boxes(abstract))
    return {k: (parts.get(k), tuple(v.shape)) for k, v in shapes.items() if is_array_leaf(v)}


def shard_linen_variables(pair: Any, variables: Any, mesh: Any = None) -> dict[str, Any]:
    """``variables`` unboxed and placed per their Linen partitioning metadata on ``mesh``.

    Shardings come from the module's partitioning metadata (linen_partitioning.py) with the pair's
    rules (MaxText's recipe); leaves without names (and leaves the abstract init does not know) are
    replicated.
    """
    from flax.traverse_util import unflatten_dict

    mesh = _active_mesh(mesh)
    rules = logical_rules(pair)
    parts = {k: part for k, (part, _) in linen_logical_specs(pair).items()}
    placed = {}
    for key, leaf in _flat(strip_boxes(variables)).items():
        part = parts.get(key)
        mesh_spec_ = _fit(mesh_spec(part, rules), len(getattr(leaf, "shape", ())))
        placed[key] = _place(leaf, mesh, mesh_spec_, f"Linen {'/'.join(key)} ({_described(part)})")
    return unflatten_dict(placed)


def _described(part: LinenPartition | None) -> str:
    if part is None:
        return "no partition names"
    return f"{'logical' if part.logical else 'mesh'} {_fmt(part.names)}"


def _place(value: Any, mesh: Any, spec: Any, what: str) -> Any:
    """``jax.device_put`` onto ``NamedSharding(mesh, spec)``; a spec that cannot hold is a named error."""
    import jax
    from jax.sharding import NamedSharding

    try:
        return jax.device_put(value, NamedSharding(mesh, spec))
    except Exception as e:
        raise MeshError(
            f"{what}, shape {tuple(getattr(value, 'shape', ()))}, cannot be placed as {_fmt(spec)} on "
            f"the mesh {format_mesh(dict(mesh.shape))}: {type(e).__name__}: {e}"
        ) from e


def shard_nnx_model(model: Any, mesh: Any = None) -> Any:
    """Place every Variable of ``model`` per its sharding metadata on ``mesh``; in place, returns ``model``.

    The spec is what ``nnx.get_named_sharding`` would use: ``out_sharding`` names mapped through the
    active logical axis rules (a Variable without names is replicated). Needed for twins assembled outside eager sharding,
    e.g. by the converter from a checkpoint.
    """
    from flax import nnx

    mesh = _active_mesh(mesh)
    state = nnx.state(model)
    # nnx.get_partition_spec, not nnx.get_named_sharding: the latter builds every NamedSharding at once
    # and a bad name would fail without saying which Variable carries it
    specs = dict(nnx.to_flat_state(nnx.get_partition_spec(state)))
    for path, var in nnx.to_flat_state(state):
        value = var.get_value()
        if hasattr(value, "shape"):
            spec = _fit(specs[path].get_value(), value.ndim)
            names = var.get_metadata().get("out_sharding")
            var.set_value(_place(value, mesh, spec, f"NNX {'/'.join(map(str, path))} (out_sharding {names})"))
    nnx.update(model, state)
    return model


def shard_batch(pair: Any, batch: Any, mesh: Any = None) -> Any:
    """``batch`` with every array's leading dimension split over the pair's ``batch_axes``.

    Axes the mesh lacks are skipped; a leaf whose leading dimension does not divide evenly (or a
    scalar) is replicated rather than refused, since the batch is only an example input.
    """
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = _active_mesh(mesh)
    axes = tuple(ax for ax in getattr(_side(pair), "batch_axes", ()) if ax in mesh.axis_names)
    split = math.prod(mesh.shape[ax] for ax in axes)

    def place(x: Any) -> Any:
        if not isinstance(x, (jax.Array, np.ndarray)):
            return x
        lead = (axes if len(axes) > 1 else axes[0]) if axes and x.ndim and x.shape[0] % split == 0 else None
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec(lead) if lead else PartitionSpec()))

    return jax.tree.map(place, batch)


def with_sharded_batch(pair: Any, mesh: Any = None) -> Any:
    """A copy of ``pair`` whose example batch is placed by :func:`shard_batch` (``pair`` is untouched)."""
    side = _side(pair)
    new_side = dataclasses.replace(side, batch=shard_batch(pair, side.batch, mesh))
    return dataclasses.replace(pair, linen=new_side) if hasattr(pair, "linen") else new_side


# ---- partition specs -----------------------------------------------------------------------------
def _norm_entry(entry: Any) -> Any:
    if isinstance(entry, (tuple, list)):
        entry = tuple(entry)
        return None if not entry else (entry[0] if len(entry) == 1 else entry)
    return entry


def _fit(spec: Any, rank: int) -> Any:
    """A PartitionSpec padded with ``None`` to ``rank`` (``P('a')`` and ``P('a', None)`` mean the same)."""
    from jax.sharding import PartitionSpec

    entries = [_norm_entry(e) for e in tuple(spec)]
    return PartitionSpec(*entries, *([None] * max(0, rank - len(entries))))


def _fmt(spec: Any) -> str:
    return "P(" + ", ".join(repr(e) for e in tuple(spec)) + ")"


def nnx_param_specs(model: Any) -> dict[str, tuple[Any, Any, tuple[int, ...]]]:
    """``{nnx path: (out_sharding names or None, mesh PartitionSpec, shape)}`` for every ``nnx.Param``.

    The mesh spec is ``nnx.get_partition_spec`` under the *active* rules, exactly what
    ``nnx.get_named_sharding`` (and so a sharded restore) would use.
    """
    from flax import nnx

    out = {}
    specs = dict(nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param))))
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        names = var.get_metadata().get("out_sharding")
        out["/".join(map(str, path))] = (
            names,
            specs[path].get_value(),
            tuple(getattr(var.get_value(), "shape", ())),
        )
    return out


def partition_spec_leaves(
    pair: Any, nnx_model: Any, param_table: Mapping[tuple[Any, ...], tuple[Any, ...]]
) -> list[LeafResult]:
    """One ``partition_spec`` :class:`LeafResult` per parameter: Linen vs NNX mesh PartitionSpec.

    ``param_table`` is the converter's Linen ``params`` path -> NNX path table
    (``sides.report.param_table("params")``), so the comparison pairs exactly the leaves whose
    weights were transferred. Specs are mapped through the pair's rules on both sides and padded
    to the array rank; a leaf passes iff they are equal. An NNX ``out_sharding`` whose length is
    not the array rank fails even when the padded specs agree: it is the signature of a stacked
    layer built without ``nnx.transform_metadata(partition=...)`` (the ``layers`` axis missing,
    docs/nnx_facts.md#partition-names-on-a-stack), which breaks restoring under any rules that shard that axis.
    """
    import flax.linen as nn

    rules = logical_rules(pair)
    table = {tuple(map(str, k)): "/".join(map(str, v)) for k, v in param_table.items()}
    linen = {k[1:]: v for k, v in linen_logical_specs(pair).items() if k[0] == "params"}
    with nn.logical_axis_rules(rules):
        nnx_specs = nnx_param_specs(nnx_model)
    results: list[LeafResult] = []
    seen: set[str] = set()
    for lpath, (part, shape) in sorted(linen.items()):
        lname = "/".join(lpath)
        nnx_path = table.get(lpath)
        if nnx_path is None or nnx_path not in nnx_specs:
            results.append(
                missing(
                    CHECK_NAME,
                    nnx_path or f"linen:params/{lname}",
                    shape,
                    f"Linen params/{lname} ({_described(part)}) has no NNX counterpart",
                )
            )
            continue
        seen.add(nnx_path)
        names, nnx_mesh, nnx_shape = nnx_specs[nnx_path]
        lin_mesh = _fit(mesh_spec(part, rules), len(shape))
        got = _fit(nnx_mesh, len(nnx_shape))
        rank_ok = names is None or not names or len(tuple(names)) == len(nnx_shape)
        # the names themselves too: two names these rules happen to map alike split differently under
        # other rules (a pipeline's `layers` -> `stage`), where convert --mesh and train read them
        same_names = _fit(part.names if part else (), len(shape)) == _fit(tuple(names or ()), len(shape))
        passed = lin_mesh == got and rank_ok and same_names
        note = (
            f"Linen {_fmt(lin_mesh)} ({_described(part)}) vs NNX {_fmt(got)} "
            f"(out_sharding {tuple(names) if names else None})"
        )
        if not rank_ok:
            note += f"; out_sharding has {len(tuple(names))} names for a rank-{len(nnx_shape)} array"
        elif not same_names:
            note += "; the partition names differ"
        results.append(
            LeafResult(
                CHECK_NAME,
                nnx_path,
                shape,
                0.0 if passed else math.inf,
                0.0 if passed else math.inf,
                0.0,
                1.0 if passed else 0.0,
                0.0,
                passed,
                note,
            )
        )
    for nnx_path in sorted(set(nnx_specs) - seen):
        names, spec, shape = nnx_specs[nnx_path]
        results.append(missing(CHECK_NAME, nnx_path, shape, f"NNX {_fmt(spec)} has no Linen counterpart"))
    return results


# ---- the whole check on a mesh -------------------------------------------------------------------
def place_sides(pair: Any, sides: Any, mesh: Any = None) -> Any:
    """Shard ``sides.linen_variables`` and ``sides.nnx_model`` on ``mesh`` (in place); returns ``sides``."""
    sides.linen_variables = shard_linen_variables(pair, sides.linen_variables, mesh)
    sides.nnx_model = shard_nnx_model(sides.nnx_model, mesh)
    return sides


def check_on_mesh(
    pair: Any,
    shape: Mapping[str, int] | Any,
    linen_ckpt: Any = None,
    nnx_ckpt: Any = None,
    *,
    name_map: Any = None,
    atol_factor: float = 1e-5,
) -> ParityResult:
    """``check``'s comparisons run sharded on a mesh, plus one ``partition_spec`` leaf per parameter.

    Both sides are built (checkpoints read, weights converted) with no mesh active, as ``check``
    builds them: that step is device-agnostic, and Orbax cannot restore onto the abstract NNX state
    ``nnx.eval_shape`` gives under ``jax.set_mesh`` (its shardings carry an ``AbstractMesh``).
    Placement and everything that traces happen inside :func:`mesh_scope`, with the example batch
    split over ``batch_axes``.
    """
    import time

    from linen2nnx.equivalence.build import build_sides
    from linen2nnx.equivalence.comparisons import run_checks

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    sides = build_sides(pair, linen_ckpt, nnx_ckpt, name_map)
    with mesh_scope(pair, shape) as mesh:
        pair = with_sharded_batch(pair, mesh)
        place_sides(pair, sides, mesh)
        timings["build"] = time.perf_counter() - t0
        leaves = run_checks(pair, sides, atol_factor, timings)
        t0 = time.perf_counter()
        leaves += partition_spec_leaves(pair, sides.nnx_model, sides.report.param_table("params"))
        timings["partition_spec"] = time.perf_counter() - t0
    return ParityResult(
        leaves=leaves,
        passed=all(lf.passed for lf in leaves) and bool(leaves),
        atol_factor=atol_factor,
        model=pair.linen.name or type(pair.linen.model).__name__,
        linen_source=sides.checkpoint.source,
        nnx_source=str(nnx_ckpt) if nnx_ckpt is not None else "converted in memory",
        timings=timings,
    )
