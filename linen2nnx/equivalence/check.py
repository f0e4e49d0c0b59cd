"""``check``: does the NNX twin, carrying converted weights, compute what the Linen model computes?

Compared, each leaf against the tolerance table of :mod:`.tolerances`:

- ``forward/eval``, ``forward/train``: every output leaf (train mode with dropout off on both
  sides), with KL / top-k agreement of the softmax over the last axis (the logits' class axis);
- ``forward/dropout``, ``loss/dropout``: train mode with dropout on, the same masks on both sides
  (:mod:`.dropout_on`: a dropout moved in the dataflow), for a model with an active dropout;
- ``loss/eval``, ``loss/train``: ``pair.linen.loss(outputs, batch)``;
- ``grad``: every loss gradient w.r.t. params in train mode, Linen grads moved to NNX paths through
  the converter's own mapping (a param missing on either side fails), with the norm ratio;
- ``batch_stats`` (any collection in ``pair.linen.mutable``): the Linen updated collections vs the NNX
  state after the same train-mode forward;
- ``intermediates`` (eval) and ``intermediates/train``: sown values (Linen ``mutable=['intermediates']`` vs ``nnx.capture``);
- ``forward/long``, ``loss/long``: eval mode on ``pair.linen.long_batch`` when the spec gives one
  (a longer sequence: position-dependent slips such as a RoPE base grow with the position);
- ``precision``: matmul precision / accumulation dtype per module (:mod:`.precision`);
- with ``jit="both"`` also the eager runs (``forward/eval@eager`` …); with ``jit=False`` only those;
- with ``steps > 0``: ``train/*``, the N-step training parity of :mod:`.training`;
- with ``mesh=``: everything runs sharded and ``partition_spec`` compares the shardings
  (:mod:`linen2nnx.equivalence.mesh`).

When anything fails (and ``divergence=True``), :mod:`.divergence` names the first submodule whose
output differs while its inputs agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from linen2nnx.equivalence.build import Sides, build_sides
from linen2nnx.equivalence.compare import LeafResult, ParityResult
from linen2nnx.equivalence.comparisons import (
    JitMode,
    compare_outputs,
    make_module_map,
    model_depth,
    run_checks,
    to_nnx_paths,
)
from linen2nnx.equivalence.divergence import Divergence, localise
from linen2nnx.equivalence.modmap import ModuleMap
from linen2nnx.equivalence.tolerances import Tolerances
from linen2nnx.equivalence.training import training_parity
from linen2nnx.errors import L2NError, SpecError
from linen2nnx.namemap import NameMap

#: Re-exported: the comparisons live in :mod:`.comparisons`, below this module.
__all__ = [
    "JitMode",
    "assert_parity",
    "check",
    "compare_outputs",
    "make_module_map",
    "mesh_module",
    "model_depth",
    "resolve_pair",
    "run_checks",
    "to_nnx_paths",
]


def check(
    pair: Any,
    linen_ckpt: Any = None,
    nnx_ckpt: str | Path | None = None,
    *,
    name_map: NameMap | str | Path | None = None,
    steps: int = 0,
    tolerances: Tolerances | float | Mapping[str, Any] | None = None,
    mesh: Mapping[str, int] | None = None,
    divergence: bool = True,
    jit: JitMode = True,
    batches: Iterable[Mapping[str, Any]] | None = None,
    train_tx: Any = None,
    long_batch: Mapping[str, Any] | bool | None = None,
    atol_factor: float | None = None,
) -> ParityResult:
    """Run every parity check for ``pair``; see the module docstring for what is compared.

    ``pair``: a :class:`~linen2nnx.spec.ModelPair` or a spec reference (``"pkg.mod:pair"``).
    ``linen_ckpt``: a Linen checkpoint (path or tree); default ``pair.linen.init_variables()``.
    ``nnx_ckpt``: a converted NNX checkpoint to test instead of converting in memory.
    ``steps``: train both sides side by side for that many steps (``train_tx`` overrides the
    pair's optimizer, e.g. ``optax.MultiSteps`` for gradient accumulation; ``batches`` gives one
    batch per step). ``tolerances``: a :class:`Tolerances`, a dict of its fields, or a float (the
    fp32 base; ``atol_factor`` is its old name). ``mesh``: ``{"data": 2, "fsdp": 2, ...}``.
    ``jit``: ``True`` (jitted), ``False`` (eager) or ``"both"``. ``long_batch``: the batch for
    ``forward/long`` (default: ``pair.linen.long_batch``; ``False`` skips it).

    Raises :class:`~linen2nnx.errors.SpecError` for something that is not a pair,
    :class:`~linen2nnx.errors.ModelBuildError` when a model cannot be built or the Linen model
    cannot run its example batch, :class:`~linen2nnx.errors.ConversionError` when the weights do not
    fit the twin, and :class:`~linen2nnx.errors.L2NError` for a missing checkpoint; numeric
    differences (and an NNX twin that raises while running) give a failed result.
    """
    pair = resolve_pair(pair)
    tols = Tolerances.coerce(tolerances if tolerances is not None else atol_factor)
    if jit not in (True, False, "both"):
        raise L2NError(f"check(jit={jit!r}): expected True, False or 'both'")
    timings: dict[str, float] = {}
    with _mesh_context(pair, mesh) as (mesh_mod, active):
        if mesh_mod is not None and hasattr(mesh_mod, "with_sharded_batch"):
            pair = mesh_mod.with_sharded_batch(pair, active)
        with _timed(timings, "build"):
            sides = build_sides(pair, linen_ckpt, nnx_ckpt, name_map)
            if mesh_mod is not None and hasattr(mesh_mod, "place_sides"):
                sides = mesh_mod.place_sides(pair, sides, active)
        module_map = make_module_map(pair, sides, name_map)
        tols = _with_compute_dtype(tols, pair, sides, module_map)
        leaves = run_checks(pair, sides, tols, timings, jit=jit, module_map=module_map, long_batch=long_batch)
        if mesh_mod is not None:
            with _timed(timings, "partition_spec"):
                table = sides.report.param_table("params")
                leaves += mesh_mod.partition_spec_leaves(pair, sides.nnx_model, table)
        training = None
        if steps > 0:
            with _timed(timings, "training"):
                depth = model_depth(sides.nnx_model)
                training = training_parity(
                    pair, sides, steps, tx=train_tx, tolerances=tols, batches=batches, depth=depth
                )
                leaves += training.leaves
        passed = bool(leaves) and all(lf.passed for lf in leaves) and (training is None or training.passed)
        div = None
        if divergence and not passed:
            with _timed(timings, "divergence"):
                div = _localise(pair, sides, [lf for lf in leaves if not lf.passed], module_map, tols)
    return ParityResult(
        leaves=leaves,
        passed=passed,
        atol_factor=tols.fp32,
        tolerances=tols,
        model=pair.linen.name or type(pair.linen.model).__name__,
        linen_source=sides.checkpoint.source,
        nnx_source=str(nnx_ckpt) if nnx_ckpt is not None else "converted in memory",
        timings=timings,
        divergence=div,
        training=training,
    )


@contextlib.contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """``timings[name]``: the seconds the block took."""
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0


def assert_parity(
    pair: Any, linen_ckpt: Any = None, nnx_ckpt: str | Path | None = None, **kwargs: Any
) -> ParityResult:
    """``check(...)``, raising ``AssertionError`` with a table of the failing leaves (and the culprit
    module) when parity does not hold; returns the result otherwise. For test suites."""
    result = check(pair, linen_ckpt, nnx_ckpt, **kwargs)
    if not result.passed:
        raise AssertionError(result.failure_table())
    return result


# ---- inputs --------------------------------------------------------------------------------------
def resolve_pair(pair: Any) -> Any:
    """A ModelPair from a pair or a spec reference; anything else is a :class:`SpecError`."""
    from linen2nnx.spec import LinenSide, load_pair

    if isinstance(pair, (str, Path)):
        return load_pair(str(pair))
    linen = getattr(pair, "linen", None)
    if not isinstance(linen, LinenSide) or not callable(getattr(pair, "nnx_factory", None)):
        raise SpecError(
            f"check: expected a ModelPair (Linen side + NNX factory) or a spec reference, "
            f"got {type(pair).__name__}"
        )
    return pair


@contextlib.contextmanager
def _mesh_context(pair: Any, mesh: Mapping[str, int] | None) -> Any:
    """``(mesh module, active mesh)`` inside the mesh scope, or ``(None, None)`` without a mesh."""
    if mesh is None:
        yield None, None
        return
    mesh_mod = mesh_module()
    with mesh_mod.mesh_scope(pair, mesh) as active:
        yield mesh_mod, active


def mesh_module() -> Any:
    """``linen2nnx.equivalence.mesh``, checked for what ``check(mesh=...)`` calls."""
    try:
        from linen2nnx.equivalence import mesh as mesh_mod
    except ImportError as e:
        raise L2NError(
            f"check(mesh=...): sharded parity needs linen2nnx.equivalence.mesh, which cannot be "
            f"imported ({e})"
        ) from e
    lacking = [name for name in ("mesh_scope", "partition_spec_leaves") if not hasattr(mesh_mod, name)]
    if lacking:
        raise L2NError(f"check(mesh=...): linen2nnx.equivalence.mesh lacks {', '.join(lacking)}")
    return mesh_mod


def _localise(
    pair: Any, sides: Sides, failed: list[LeafResult], module_map: ModuleMap, tols: Tolerances
) -> Any:
    """:func:`.divergence.localise`, never letting a localisation problem hide the verdict."""
    try:
        return localise(pair, sides, failed, module_map, tols)
    except Exception as e:
        return Divergence(
            mode="", modules=[], culprit=None, note=f"localisation failed: {type(e).__name__}: {e}"
        )


def _with_compute_dtype(tols: Tolerances, pair: Any, sides: Any, module_map: ModuleMap) -> Tolerances:
    """``tols`` with the compute dtype of :func:`.precision.linen_compute_dtype` unless it names one (a
    bfloat16 layer makes every value downstream of it that coarse), and the output leaves no coarse
    operation feeds, and the sown values none feeds (read off the same trace); as they are where the program cannot be traced
    abstractly (the checks that run it say why)."""
    from linen2nnx.equivalence.precision import linen_compute_dtype

    if tols.compute_dtype:
        return tols
    try:
        found, exact = linen_compute_dtype(pair, sides.linen_variables, module_map)
    except Exception:
        return tols
    return dataclasses.replace(tols, compute_dtype=found, exact_outputs=exact)
