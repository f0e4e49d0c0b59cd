"""``run_training``: the train loop that the ``train`` command (and a user's script) runs.

One path for every option: build (or restore) the state, make the data source, jit the step once,
then ``for step: batch -> step -> metrics -> maybe save``. Everything that can be refused (a spec
that does not build, a checkpoint that does not fit, a mesh or batch size that does not divide) is
checked before ``OUT`` is touched, so a usage error writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError
from linen2nnx.train.checkpointing import (
    RunCheckpoints,
    finished_entries,
    has_finished_step,
    nothing_to_resume,
)
from linen2nnx.train.determinism import draws_note, stream_counts
from linen2nnx.train.metrics import MetricsLog, Progress, step_record
from linen2nnx.train.run_settings import recorded, resumed
from linen2nnx.train.state import TrainState

CHECKPOINT_DIR = "checkpoints"


@dataclasses.dataclass
class TrainConfig:
    """Options of one run (the ``train`` command's flags)."""

    out: Path
    steps: int = 10
    batch_size: int | None = None  # default: the spec's example batch size
    mesh: Mapping[str, int] | None = None
    grad_accum: int = 1
    remat: str | None = None  # None: only what the model does itself
    save_every: int = 0  # 0: save the final step only
    keep: int = 3
    resume: bool = False
    data: str = "synthetic"
    seed: int = 0
    init_from: Path | None = None
    deterministic: bool = False  # dropout off: step-by-step comparable with a Linen run
    tensorboard: bool = True
    profile: bool = False  # a jax.profiler trace of the steps in OUT/profile
    given: frozenset[str] | None = None  # the run_settings fields the command set (None: all, see there)


@dataclasses.dataclass
class TrainResult:
    """What a run did: the steps it trained and their losses (also in ``OUT/metrics.jsonl``)."""

    start_step: int
    end_step: int
    losses: list[float]
    records: list[dict[str, Any]]
    resumed_from: int | None = None
    state: Any = None  # the final nnx.State of (model, optimizer), placed as trained
    notes: list[str] = dataclasses.field(default_factory=list)  # what the person running it should hear


def _mesh_context(pair: Any, mesh: Mapping[str, int] | None) -> contextlib.AbstractContextManager:
    if not mesh:
        return contextlib.nullcontext()
    from linen2nnx.equivalence.mesh import mesh_scope

    return mesh_scope(pair, mesh)


def _batch_axes(pair: Any) -> tuple[str, ...]:
    import jax

    mesh = jax.sharding.get_mesh()
    return tuple(a for a in pair.linen.batch_axes if not mesh.empty and a in mesh.axis_names)


def batch_sharding(pair: Any) -> Any:
    """The global batch split on its leading axis over the spec's ``batch_axes`` (data, fsdp)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.sharding.get_mesh()
    if mesh.empty:
        return None
    axes = _batch_axes(pair)
    return NamedSharding(mesh, PartitionSpec(axes if axes else None))


def check_batch_size(pair: Any, batch_size: int, grad_accum: int) -> None:
    """Refuse a batch that cannot split into ``grad_accum`` micro-batches over the batch axes."""
    import math

    import jax

    mesh = jax.sharding.get_mesh()
    split = 1 if mesh.empty else math.prod(mesh.shape[a] for a in _batch_axes(pair))
    if batch_size < 1 or batch_size % grad_accum or (batch_size // grad_accum) % split:
        raise L2NError(
            f"--batch-size {batch_size}: must split into --grad-accum {grad_accum} micro-batches, each "
            f"divisible by the {split} devices of the batch axes"
        )


def build_state(pair: Any, tx: Any, cfg: TrainConfig) -> TrainState:
    """From ``--init-from`` (convert's output) or a fresh init of the spec's NNX model."""
    from linen2nnx.train.state import init_state, state_from_converted

    if cfg.init_from is not None:
        return state_from_converted(pair, tx, cfg.init_from, seed=cfg.seed, deterministic=cfg.deterministic)
    return init_state(pair, tx, seed=cfg.seed, deterministic=cfg.deterministic)


def place_batch(batch: Mapping[str, Any], sharding: Any) -> Any:
    """This process's rows as (part of) one global array per leaf, placed per ``sharding``."""
    import jax

    if sharding is None:
        return jax.tree.map(jax.numpy.asarray, dict(batch))
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), dict(batch))


def _prepare(pair: Any, cfg: TrainConfig) -> tuple[Any, Any, Any, Any]:
    """State, data, jitted step and batch sharding; raises before anything is written."""
    import jax

    from linen2nnx.train.data import make_data
    from linen2nnx.train.state import choose_tx
    from linen2nnx.train.step import JittedStep, make_train_step

    example = pair.linen.batch
    batch_size = cfg.batch_size or len(next(iter(jax.tree.leaves(example))))
    check_batch_size(pair, batch_size, cfg.grad_accum)
    data = make_data(
        cfg.data,
        example,
        batch_size,
        cfg.seed,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    tx = choose_tx(pair)
    ts = build_state(pair, tx, cfg)
    sharding = batch_sharding(pair)
    step = make_train_step(ts.graphdef, pair.linen, grad_accum=cfg.grad_accum, remat=cfg.remat)
    return ts, data, JittedStep(step, ts.state, ts.shardings, sharding), sharding


def _resumed_config(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the settings the run in ``cfg.out`` was trained with (run_settings.py)."""
    ckpt_root = Path(cfg.out) / CHECKPOINT_DIR
    if not has_finished_step(ckpt_root):
        return cfg  # _open_run says there is nothing to resume
    ckpts = RunCheckpoints(ckpt_root, save_every=cfg.save_every, keep=cfg.keep)
    try:
        step = ckpts.latest_step()
        return cfg if step is None else resumed(cfg, ckpts.read_meta(step), str(ckpt_root / str(step)))
    finally:
        ckpts.close()


def _open_run(cfg: TrainConfig, ts: TrainState, data: Any) -> tuple[RunCheckpoints, Any, int, int | None]:
    """The checkpoint manager; on ``resume`` the restored state, the run's start step and the step."""
    out = Path(cfg.out)
    ckpt_root = out / CHECKPOINT_DIR
    if not cfg.resume and ckpt_root.exists() and finished_entries(ckpt_root):
        raise L2NError(f"{ckpt_root}: holds checkpoints of an earlier run; pass --resume or another --out")
    if cfg.resume and not ckpt_root.exists():
        raise L2NError(f"{ckpt_root}: no checkpoints to --resume from")
    if cfg.resume and not has_finished_step(ckpt_root):  # refused before a manager starts its threads
        raise nothing_to_resume(ckpt_root)
    out.mkdir(parents=True, exist_ok=True)
    ckpts = RunCheckpoints(ckpt_root, save_every=cfg.save_every, keep=cfg.keep)
    if not cfg.resume:
        return ckpts, ts.state, ts.step, None
    from linen2nnx.train.state import canonical

    try:
        state, meta = ckpts.restore(ts)
        state = canonical(ts.graphdef, state)
        data.restore(meta["data"])
        return ckpts, state, int(meta["start_step"]), int(ckpts.latest_step())
    except BaseException:  # closed, or its background thread prints a traceback under the real error
        ckpts.close()
        raise


def run_training(
    pair: Any,
    cfg: TrainConfig,
    *,
    console: Any = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train ``pair``'s NNX model per ``cfg``; ``on_step(step, record)`` after each step."""
    if cfg.resume:
        cfg = _resumed_config(cfg)
    with _mesh_context(pair, cfg.mesh):
        ts, data, step_fn, sharding = _prepare(pair, cfg)
        ckpts, state, start, resumed = _open_run(cfg, ts, data)
        profiling = _profiler(Path(cfg.out) / "profile") if cfg.profile else contextlib.nullcontext()
        try:
            with profiling, _bridged_dropout_off(cfg.deterministic):
                return _loop(cfg, ts, data, step_fn, sharding, ckpts, state, start, resumed, console, on_step)
        finally:
            ckpts.close()


def _bridged_dropout_off(deterministic: bool) -> contextlib.AbstractContextManager:
    """With ``--deterministic``, the ``nn.Dropout`` of a class kept as Linen behind the bridge is off too
    (at trace time, as ``check`` does): its rate is no attribute of the NNX model to set to 0."""
    if not deterministic:
        return contextlib.nullcontext()
    from linen2nnx.equivalence.build import linen_dropout_off

    return linen_dropout_off()


def _profiler(folder: Path) -> contextlib.AbstractContextManager:
    import jax

    return jax.profiler.trace(str(folder))


def _steps(first: int, end: int, console: Any) -> Iterator[tuple[int, Any]]:
    if console is None:
        for step in range(first, end):
            yield step, None
        return
    with Progress(end - first, 0, console) as progress:
        for step in range(first, end):
            yield step, progress


def _loop(
    cfg: TrainConfig,
    ts: TrainState,
    data: Any,
    step_fn: Any,
    sharding: Any,
    ckpts: RunCheckpoints,
    state: Any,
    start: int,
    resumed: int | None,
    console: Any,
    on_step: Callable[[int, dict[str, Any]], None] | None,
) -> TrainResult:
    import jax

    first = start if resumed is None else resumed
    end = start + cfg.steps
    if first >= end:  # a resumed run ends where the original would have: start + steps
        raise L2NError(
            f"{cfg.out}: the run is at step {first}, the end of --steps {cfg.steps} from its start step "
            f"{start} or past it: nothing to train (pass --steps over {first - start} to go on)"
        )
    log = MetricsLog(
        Path(cfg.out),
        resume_from=first if resumed is not None else None,
        tensorboard=cfg.tensorboard,
        enabled=jax.process_index() == 0,  # one writer in a multi-process run
    )
    records: list[dict[str, Any]] = []
    global_batch = data.batch_size
    settings = recorded(cfg, global_batch)  # what a --resume of this run must repeat (run_settings.py)
    leaves = step_fn.flatten(state)
    counts_before = stream_counts(state) if cfg.deterministic else {}
    try:
        for step, progress in _steps(first, end, console):
            batch = next(data)
            t0 = time.perf_counter()
            leaves, metrics = step_fn(leaves, place_batch(batch, sharding))
            metrics = jax.device_get(metrics)
            record = step_record(step, metrics, time.perf_counter() - t0, batch, global_batch)
            records.append(record)
            log.write(record)
            if progress is not None:
                progress.update(record)
            if ckpts.due(step + 1, final=step + 1 == end):
                meta = {"data": data.state(), "start_step": start, "seed": cfg.seed, "settings": settings}
                ckpts.save(step + 1, step_fn.unflatten(leaves), meta)
            if on_step is not None:
                on_step(step + 1, record)
    finally:
        log.close()
    final = step_fn.unflatten(leaves)
    note = draws_note(counts_before, stream_counts(final), len(records)) if cfg.deterministic else None
    notes = [note] if note else []
    return TrainResult(start, end, [r["loss"] for r in records], records, resumed, final, notes)


def compile_only(pair: Any, cfg: TrainConfig) -> Any:
    """Lower and compile the train step for ``cfg``'s mesh on abstract inputs; a
    :class:`~linen2nnx.train.compile_report.CompileReport` (nothing allocated, nothing run)."""
    import jax

    from linen2nnx.train.compile_report import compile_step
    from linen2nnx.train.state import abstract_state, choose_tx
    from linen2nnx.train.step import JittedStep, make_train_step

    with _mesh_context(pair, cfg.mesh):
        batch_size = cfg.batch_size or len(next(iter(jax.tree.leaves(pair.linen.batch))))
        check_batch_size(pair, batch_size, cfg.grad_accum)
        ts = abstract_state(pair, choose_tx(pair), seed=cfg.seed, deterministic=cfg.deterministic)
        sharding = batch_sharding(pair)
        step = make_train_step(ts.graphdef, pair.linen, grad_accum=cfg.grad_accum, remat=cfg.remat)
        jitted = JittedStep(step, ts.state, ts.shardings, sharding)
        return compile_step(jitted, ts, pair.linen.batch, batch_size, sharding)
