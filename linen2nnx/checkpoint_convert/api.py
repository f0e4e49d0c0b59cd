"""The conversion pipeline: read -> map -> validate -> assemble -> write.

``convert`` is the CLI's entry point (disk to disk); ``convert_state`` does the same in memory and
is how the equivalence stage gets its NNX twin, so the weights ``check`` compares are exactly the
weights ``convert`` would write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert import keys, memory
from linen2nnx.checkpoint_convert.commit import recover_all
from linen2nnx.checkpoint_convert.first_call import FIRST_CALL, created_on_first_call
from linen2nnx.checkpoint_convert.linen_unused import (
    LinenInit,
    dropped_collections,
    name_unregistered,
    never_created,
    why_never_created,
)
from linen2nnx.checkpoint_convert.mapping import (
    Leaf,
    Match,
    PathT,
    Problem,
    join,
    map_structurally,
    map_with_name_map,
)
from linen2nnx.checkpoint_convert.read import LinenCheckpoint, read_linen_checkpoint
from linen2nnx.checkpoint_convert.report import ConversionReport, KeptLeaf, MappedLeaf
from linen2nnx.checkpoint_convert.validate import (
    Target,
    abstract_target,
    dtype_name,
    fresh_leaves,
    raise_problems,
    validate,
)
from linen2nnx.checkpoint_convert.write import write_nnx_checkpoint
from linen2nnx.errors import L2NError
from linen2nnx.namemap import NameMap


@dataclasses.dataclass
class Plan:
    """A validated mapping: every target slot is either filled by one Linen leaf or kept from init."""

    target: Target
    matches: list[Match]
    kept: list[Any]  # list[Slot]
    strategy: str
    checkpoint: LinenCheckpoint
    never_in_linen: dict[str, str] = dataclasses.field(default_factory=dict)
    """Kept slots the Linen model never creates (linen_unused.py) -> the reason, for the report."""


@dataclasses.dataclass
class Converted:
    """The converted NNX state (plus optimizer state when asked for) and its report."""

    graphdef: Any
    state: Any
    report: ConversionReport
    optimizer_state: Any = None

    def model(self) -> Any:
        from flax import nnx

        return nnx.merge(self.graphdef, self.state)


def resolve_name_map(pair: Any, name_map: NameMap | str | Path | None) -> NameMap | None:
    """An explicit map wins; else the pair's ``name_map`` file if it names one."""
    if isinstance(name_map, NameMap):
        return name_map
    if name_map is not None:
        return NameMap.load(name_map)
    if getattr(pair, "name_map", None):
        return NameMap.load(pair.name_map)
    return None


def root_class(pair: Any, name_map: NameMap | None) -> str | None:
    """The name-map key of the pair's Linen root class, if the map knows it."""
    if name_map is None:
        return None
    cls = type(pair.linen.model)
    return name_map.find_class(cls.__qualname__, cls.__module__)


def plan_conversion(ckpt: LinenCheckpoint, pair: Any, name_map: NameMap | str | Path | None = None) -> Plan:
    """Map and validate without touching weights; raises ConversionError naming every problem."""
    plan, problems = plan_with_problems(ckpt, pair, name_map)
    raise_problems(problems, ckpt.source, plan.target.name)
    return plan


def plan_with_problems(
    ckpt: LinenCheckpoint, pair: Any, name_map: NameMap | str | Path | None = None
) -> tuple[Plan, list[Problem]]:
    """The plan and every problem found, nothing raised: what ``--dry-run`` prints.

    Only shapes and dtypes of ``ckpt``'s leaves are read, so a checkpoint planned from Orbax
    metadata (:func:`.stream.open_orbax`) is validated with no array loaded.
    """
    nmap = resolve_name_map(pair, name_map)
    target = abstract_target(pair.make_nnx)
    ckpt.adopt_registered()  # a collection the model registers as it is built (a bridged Linen part's)
    leaves = [
        Leaf(coll, path, tuple(getattr(a, "shape", ())), getattr(a, "dtype", None))
        for coll, path, a in ckpt.leaves()
    ]
    root = root_class(pair, nmap)
    problems: list[Problem]
    if root is not None:
        matches, problems = map_with_name_map(leaves, nmap, root, target.slots)  # type: ignore[arg-type]
        strategy = f"name map (root {root})"
    else:
        matches, problems = map_structurally(leaves, target.slots)
        strategy = (
            "structural"
            if nmap is None
            else (f"structural ({type(pair.linen.model).__qualname__} not in the name map)")
        )
    good, kept, problems = validate(leaves, matches, problems, target, ckpt.collections)
    first_call, problems = created_on_first_call(problems, pair)
    ckpt.first_call.update(first_call)
    ckpt.ignored.update(dict.fromkeys(first_call, FIRST_CALL))
    init = LinenInit(pair)
    unused, problems = never_created(problems, init, nmap, root, target.aliases)
    problems = name_unregistered(problems, ckpt.unregistered, nmap, root, target.aliases)
    problems += dropped_collections(problems, ckpt, init)
    kept += [slot for path, slot in target.slots.items() if join(path) in unused]
    reasons = {path: why_never_created(nmap, root, path) for path in {join(s.path) for s in kept} & unused}
    return Plan(target, good, kept, strategy, ckpt, reasons), problems


def convert_tree(
    linen_tree: Any, pair: Any, name_map: NameMap | str | Path | None = None, *, optimizer: bool | None = None
) -> Converted:
    """Convert a Linen checkpoint (path or tree) into an NNX state, validated, in memory.

    ``optimizer``: convert ``opt_state`` + ``step`` into an ``nnx.Optimizer`` state too. ``None``
    means "when the pair has an optimizer and the checkpoint has an opt_state".
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ckpt = read_linen_checkpoint(linen_tree)
    timings["read"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    plan = plan_conversion(ckpt, pair, name_map)
    timings["plan"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    state, mapped = _assemble(plan, ckpt, pair)
    timings["assemble"] = time.perf_counter() - t0

    report = ConversionReport(
        source=ckpt.source,
        target=plan.target.name,
        strategy=plan.strategy,
        mapped=sorted(mapped, key=lambda m: m.linen),
        kept_from_init=[
            KeptLeaf(
                s.path,
                s.type_name,
                tuple(s.shape),
                dtype_name(s.dtype),
                plan.never_in_linen.get(join(s.path), ""),
            )
            for s in plan.kept
        ],
        ignored=dict(ckpt.ignored),
        unboxed=list(ckpt.unboxed),
        source_format=ckpt.format,
        step=ckpt.step,
        step_dtype=ckpt.step_dtype,
        timings=timings,
    )
    opt_state = _optimizer_state(ckpt, pair, report, optimizer, timings)
    return Converted(plan.target.graphdef, state, report, opt_state)


def _assemble(plan: Plan, ckpt: Any, pair: Any) -> tuple[Any, list[MappedLeaf]]:
    """The NNX state: every matched slot from the checkpoint, every kept slot from a fresh init."""
    import jax.numpy as jnp
    from flax import nnx

    arrays = {(coll, path): a for coll, path, a in ckpt.leaves()}
    flat_abstract = dict(nnx.to_flat_state(plan.target.abstract_state))
    filled: dict[PathT, Any] = {}
    mapped: list[MappedLeaf] = []
    for m in plan.matches:
        var = flat_abstract[m.nnx_path]
        slot = plan.target.slots[m.nnx_path]
        value = arrays[(m.leaf.collection, m.leaf.path)]
        if m.how in (keys.WRAPPED, keys.UNWRAPPED):
            value = keys.as_slot_value(value, tuple(slot.shape), slot.dtype)
        filled[m.nnx_path] = var.replace(value=_as_value(value, jnp))
        mapped.append(
            MappedLeaf(
                m.leaf.collection,
                m.leaf.path,
                m.nnx_path,
                slot.type_name,
                tuple(slot.shape),
                dtype_name(slot.dtype),
                m.how,
            )
        )
    kept_paths = {s.path for s in plan.kept}
    if kept_paths:
        filled.update(fresh_leaves(pair.make_nnx, kept_paths))
    return nnx.from_flat_state([(p, filled[p]) for p in plan.target.slots]), mapped


def _as_value(x: Any, jnp: Any) -> Any:
    """A device array, except a lazy leaf: that is read only while it is written (:mod:`.lazy`)."""
    from linen2nnx.checkpoint_convert.lazy import is_deferred

    return x if is_deferred(x) else jnp.asarray(x)


def _optimizer_state(
    ckpt: Any, pair: Any, report: ConversionReport, optimizer: bool | None, timings: dict[str, float]
) -> Any:
    """The ``nnx.Optimizer`` state from ``opt_state`` + ``step`` when asked (or, for None, when both exist)."""
    tx = getattr(pair.linen, "optimizer", None)
    if optimizer is None:
        optimizer = tx is not None and ckpt.opt_state is not None
    if not optimizer:
        if ckpt.opt_state is not None:  # never silent: what the checkpoint holds and the output lacks
            why = "the pair has no optimizer (LinenSide.optimizer)" if tx is None else "not asked for"
            report.ignored["opt_state"] = f"not converted: {why}"
        if ckpt.step is not None:
            report.ignored["step"] = (
                "not converted: the NNX checkpoint keeps the step in nnx.Optimizer's state"
            )
        return None
    if tx is None or ckpt.opt_state is None:
        missing = "the pair has no optimizer" if tx is None else f"{ckpt.source} has no opt_state"
        raise L2NError(f"cannot convert the optimizer state: {missing}")
    from linen2nnx.checkpoint_convert.optimizer import convert_opt_state

    t0 = time.perf_counter()
    kept = frozenset(k.nnx for k in report.kept_from_init if k.why)
    opt_state, report.optimizer = convert_opt_state(
        ckpt.opt_state, ckpt.step, report.param_table(), pair.make_nnx, tx, ckpt.source, kept
    )
    timings["optimizer"] = time.perf_counter() - t0
    return opt_state


def convert_state(
    linen_tree: Any, pair: Any, name_map: NameMap | str | Path | None = None
) -> tuple[Any, ConversionReport]:
    """In-memory conversion: ``(NNX model with the Linen weights loaded, report)``.

    The equivalence stage uses this so that parity is checked on converter output, never on a
    re-initialised model.
    """
    converted = convert_tree(linen_tree, pair, name_map, optimizer=False)
    return converted.model(), converted.report


def convert(
    src: Any,
    dst: str | Path,
    pair: Any,
    name_map: NameMap | str | Path | None = None,
    *,
    force: bool = False,
    optimizer: bool | None = None,
    step: int | None = None,
    budget: int | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
    verify: bool = True,
    mesh: Any = None,
) -> ConversionReport:
    """Convert the Linen checkpoint ``src`` into an NNX checkpoint directory ``dst``.

    ``src`` may be an Orbax item, a CheckpointManager step or root (``step`` picks one; default the
    newest finished), a msgpack file or an in-memory tree. An Orbax source is planned and validated
    against ``pair.make_nnx()`` from metadata before any array is read, then restored in groups of
    at most ``budget`` bytes while the NNX checkpoint is written (``progress(leaves done, bytes
    done, leaves, bytes)`` after each group); with ``mesh`` (``{"data": 2, ...}`` or a Mesh) onto
    the NNX model's shardings under the pair's logical axis rules, and written so. On any problem a
    ConversionError lists every bad path and ``dst`` is left untouched; ``dst`` is replaced only
    with ``force``, and never left missing by an interrupted run. ``verify``: read the written
    arrays back and compare their checksums (stored in the report) before publishing ``dst``.
    """
    dst = _destination(src, dst, force)
    with memory.heap_returned(), _mesh_scope(pair, mesh) as active:
        t0 = time.perf_counter()
        if isinstance(src, (str, Path)) and Path(src).expanduser().is_dir():
            src, budget = _orbax_source(src, pair, name_map, step, budget, progress, active)
        elif step is not None:
            raise L2NError(f"{src}: --step needs an Orbax CheckpointManager root")
        read_s = time.perf_counter() - t0
        converted = convert_tree(src, pair, name_map, optimizer=optimizer)
        report = converted.report
        report.destination = str(dst)
        report.timings["read"] = read_s + report.timings.get("read", 0.0)
        t0 = time.perf_counter()
        write_nnx_checkpoint(
            dst,
            converted.state,
            report.to_json(),
            optimizer_state=converted.optimizer_state,
            force=force,
            verify=verify,
            budget=budget or 256 << 20,
        )
    report.timings["write"] = time.perf_counter() - t0
    return report


def _mesh_scope(pair: Any, mesh: Any) -> Any:
    """The pair's mesh and logical axis rules, active (or nothing when ``mesh`` is None)."""
    if mesh is None:
        return contextlib.nullcontext(None)
    from linen2nnx.equivalence.mesh import mesh_scope

    return mesh_scope(pair, mesh)


def _orbax_source(
    src: Any, pair: Any, name_map: Any, step: int | None, budget: int | None, progress: Any, mesh: Any
) -> tuple[LinenCheckpoint, int]:
    """Plan from metadata (refusing before any array is read), then lazy leaves, read a bounded
    group at a time while they are written: host arrays, or, on a mesh, onto the NNX shardings."""
    from linen2nnx.checkpoint_convert.stream import default_budget, lazy_arrays, open_orbax

    opened = open_orbax(src, step)
    plan = plan_conversion(opened.checkpoint, pair, name_map)
    budget = budget or default_budget(opened.largest_bytes())
    if mesh is None:
        return lazy_arrays(opened, budget, progress), budget
    from linen2nnx.checkpoint_convert.sharded import lazy_sharded_arrays

    return lazy_sharded_arrays(opened, plan, mesh, budget, progress), budget


def _destination(src: Any, dst: str | Path, force: bool) -> Path:
    """``dst`` as an absolute path, after undoing an interrupted run; refused when it would clobber."""
    dst = Path(dst).expanduser().absolute()
    if dst.is_symlink():  # replacing it would publish over the link and leave the link's target behind
        raise L2NError(f"{dst}: is a symbolic link; give the folder it points to, or remove the link")
    recover_all(dst)
    if dst.exists() and not force:
        raise L2NError(f"{dst}: already exists (pass --force to replace it)")
    if isinstance(src, (str, Path)):
        s, real = Path(src).expanduser().resolve(), dst.parent.resolve() / dst.name
        if s == real or real in s.parents or s in real.parents:
            raise L2NError(f"{dst}: the destination must not contain or be inside the source {s}")
    return dst
