"""``check``: does the NNX twin, carrying converted weights, compute what the Linen model computes?

Compared, each leaf against the tolerance table of :mod:`.tolerances`:

- ``forward/eval``, ``forward/train``: every output leaf (train mode with dropout off on both
  sides), with KL / top-k agreement of the softmax over the last axis (the logits' class axis);
- ``loss/eval``, ``loss/train``: ``pair.linen.loss(outputs, batch)``;
- ``grad``: every loss gradient w.r.t. params in train mode, Linen grads moved to NNX paths through
  the converter's own mapping (a param missing on either side fails), with the norm ratio;
- ``batch_stats`` (any collection in ``pair.linen.mutable``): the Linen updated collections vs the NNX
  state after the same train-mode forward;
- ``intermediates``: sown values (Linen ``mutable=['intermediates']`` vs ``nnx.capture``);
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
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax

from linen2nnx.equivalence.build import Sides, build_sides, linen_fns, nnx_fns, with_batch
from linen2nnx.equivalence.compare import (
    GRAD,
    LOGITS,
    LeafResult,
    ParityResult,
    compare_leaf,
    compare_trees,
    missing,
)
from linen2nnx.equivalence.modmap import ModuleMap, nnx_module_paths
from linen2nnx.equivalence.tolerances import Tolerances
from linen2nnx.errors import L2NError, ModelBuildError, SpecError
from linen2nnx.namemap import NameMap

JitMode = bool | str


def check(pair: Any, linen_ckpt: Any = None, nnx_ckpt: str | Path | None = None, *,
          name_map: NameMap | str | Path | None = None, steps: int = 0,
          tolerances: Tolerances | float | Mapping[str, Any] | None = None, mesh: Mapping[str, int] | None = None,
          divergence: bool = True, jit: JitMode = True, batches: Iterable[Mapping[str, Any]] | None = None,
          train_tx: Any = None, long_batch: Mapping[str, Any] | bool | None = None,
          atol_factor: float | None = None) -> ParityResult:
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
        t0 = time.perf_counter()
        sides = build_sides(pair, linen_ckpt, nnx_ckpt, name_map)
        if mesh_mod is not None and hasattr(mesh_mod, "place_sides"):
            sides = mesh_mod.place_sides(pair, sides, active)
        timings["build"] = time.perf_counter() - t0
        module_map = make_module_map(pair, sides, name_map)
        leaves = run_checks(pair, sides, tols, timings, jit=jit, module_map=module_map, long_batch=long_batch)
        if mesh_mod is not None:
            t0 = time.perf_counter()
            leaves += mesh_mod.partition_spec_leaves(pair, sides.nnx_model, sides.report.param_table("params"))
            timings["partition_spec"] = time.perf_counter() - t0
        training = None
        if steps > 0:
            from linen2nnx.equivalence.training import training_parity

            t0 = time.perf_counter()
            training = training_parity(pair, sides, steps, tx=train_tx, tolerances=tols, batches=batches,
                                       depth=model_depth(sides.nnx_model))
            leaves += training.leaves
            timings["training"] = time.perf_counter() - t0
        passed = bool(leaves) and all(lf.passed for lf in leaves) and (training is None or training.passed)
        div = None
        if divergence and not passed:
            t0 = time.perf_counter()
            div = _localise(pair, sides, [lf for lf in leaves if not lf.passed], module_map, tols)
            timings["divergence"] = time.perf_counter() - t0
    return ParityResult(
        leaves=leaves, passed=passed, atol_factor=tols.fp32, tolerances=tols,
        model=pair.linen.name or type(pair.linen.model).__name__, linen_source=sides.checkpoint.source,
        nnx_source=str(nnx_ckpt) if nnx_ckpt is not None else "converted in memory", timings=timings,
        divergence=div, training=training,
    )


def assert_parity(pair: Any, linen_ckpt: Any = None, nnx_ckpt: str | Path | None = None, **kwargs: Any
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
        raise SpecError(f"check: expected a ModelPair (Linen side + NNX factory) or a spec reference, "
                        f"got {type(pair).__name__}")
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
        raise L2NError(f"check(mesh=...): sharded parity needs linen2nnx.equivalence.mesh, which cannot be "
                       f"imported ({e})") from e
    lacking = [name for name in ("mesh_scope", "partition_spec_leaves") if not hasattr(mesh_mod, name)]
    if lacking:
        raise L2NError(f"check(mesh=...): linen2nnx.equivalence.mesh lacks {', '.join(lacking)}")
    return mesh_mod


def make_module_map(pair: Any, sides: Sides, name_map: NameMap | str | Path | None = None) -> ModuleMap:
    """The Linen -> NNX module path map of this pair (name map, converter table, normal forms)."""
    from linen2nnx.checkpoint_convert.api import resolve_name_map, root_class

    nmap = resolve_name_map(pair, name_map)
    table = {m.linen_path: m.nnx_path for m in sides.report.mapped}
    return ModuleMap(table, nnx_module_paths(sides.nnx_model), nmap, root_class(pair, nmap))


def model_depth(model: Any) -> int:
    """How many layers a value passes through, for the depth-aware tolerance: the number of NNX
    modules that own a ``Param`` directly (a layer stacked for ``nnx.scan`` counts once)."""
    from flax import nnx

    return sum(any(isinstance(v, nnx.Param) for v in vars(m).values()) for _, m in nnx.iter_modules(model))


# ---- the comparisons -----------------------------------------------------------------------------
def run_checks(pair: Any, sides: Sides, tolerances: Tolerances | float | None = None,
               timings: dict[str, float] | None = None, *, jit: JitMode = True,
               module_map: ModuleMap | None = None,
               long_batch: Mapping[str, Any] | bool | None = None) -> list[LeafResult]:
    """Run both sides (jitted and / or eagerly) and compare everything; see the module docstring."""
    tols = Tolerances.coerce(tolerances)
    timings = {} if timings is None else timings
    module_map = module_map or make_module_map(pair, sides)
    depth = model_depth(sides.nnx_model)
    results: list[LeafResult] = []
    modes = {True: [("", True)], False: [("@eager", False)], "both": [("", True), ("@eager", False)]}[jit]
    for suffix, jitted in modes:
        results += _run_pair(pair, sides, tols, timings, jitted, suffix, depth, module_map)
    if long_batch is None or long_batch is True:
        long_batch = getattr(pair.linen, "long_batch", None)
    if long_batch is not None and long_batch is not False:
        results += _run_eval_only(with_batch(pair, long_batch), sides, tols, timings, depth, "long")
    t0 = time.perf_counter()
    try:
        from linen2nnx.equivalence.precision import precision_leaves

        results += precision_leaves(pair, sides, module_map)
    except Exception as e:  # tracing the NNX side failed: the forward checks already report it
        results.append(missing("precision", "", (), f"could not trace for precision: {type(e).__name__}: {e}"))
    timings["precision"] = time.perf_counter() - t0
    return results


def _linen(pair: Any, fn: Any, *args: Any) -> Any:
    try:
        return jax.block_until_ready(fn(*args))
    except L2NError:
        raise
    except Exception as e:
        raise ModelBuildError(f"the Linen model {pair.linen.name or type(pair.linen.model).__name__} fails on "
                              f"its example batch: {type(e).__name__}: {e}") from e


def _run_pair(pair: Any, sides: Sides, tols: Tolerances, timings: dict[str, float], jitted: bool, suffix: str,
              depth: int, module_map: ModuleMap) -> list[LeafResult]:
    from linen2nnx.equivalence.sown import linen_sown_to_nnx

    t0 = time.perf_counter()
    l_eval, l_train = linen_fns(pair, jit=jitted)
    l_out_e, l_loss_e, l_sown = _linen(pair, l_eval, sides.linen_variables)
    l_out_t, l_loss_t, l_grads, l_updates = _linen(pair, l_train, sides.linen_variables)
    timings["linen" + suffix] = time.perf_counter() - t0

    t0 = time.perf_counter()
    results: list[LeafResult] = []
    n_eval, n_train = nnx_fns(pair, sides.nnx_model, jit=jitted)
    try:
        n_out_e, n_loss_e, n_sown = jax.block_until_ready(n_eval())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        results += [missing("forward/eval" + suffix, "out", (), note), missing("loss/eval" + suffix, "loss", (), note)]
    else:
        results += compare_outputs("forward/eval" + suffix, l_out_e, n_out_e, tols, depth)
        results.append(compare_leaf("loss/eval" + suffix, "loss", l_loss_e, n_loss_e, tols, depth=depth))
        ref_sown = linen_sown_to_nnx(l_sown, module_map)
        if ref_sown or n_sown:
            results += compare_trees("intermediates" + suffix, ref_sown, n_sown, tols, depth=depth)
    try:
        n_out_t, n_loss_t, n_grads, n_after = jax.block_until_ready(n_train())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        results += [missing("forward/train" + suffix, "out", (), note), missing("loss/train" + suffix, "loss", (), note),
                    missing("grad" + suffix, "", (), note)]
    else:
        results += compare_outputs("forward/train" + suffix, l_out_t, n_out_t, tols, depth)
        results.append(compare_leaf("loss/train" + suffix, "loss", l_loss_t, n_loss_t, tols, depth=depth))
        results += compare_trees("grad" + suffix, to_nnx_paths(sides, "params", l_grads), n_grads, tols,
                                 depth=depth, kind=GRAD)
        for coll in sorted(pair.linen.mutable):
            ref = to_nnx_paths(sides, coll, l_updates.get(coll, {}))
            wanted = _paths_of_type(sides, _variable_type(coll))
            got = {p: v for p, v in n_after.items() if p in wanted}
            results += compare_trees(coll + suffix, ref, got, tols, depth=depth)
    timings["nnx" + suffix] = time.perf_counter() - t0
    return results


def _run_eval_only(pair: Any, sides: Sides, tols: Tolerances, timings: dict[str, float], depth: int,
                   name: str) -> list[LeafResult]:
    """Eval-mode forward and loss on another batch (the long one): ``forward/<name>``, ``loss/<name>``."""
    t0 = time.perf_counter()
    l_out, l_loss, _ = _linen(pair, linen_fns(pair)[0], sides.linen_variables)
    try:
        n_out, n_loss, _ = jax.block_until_ready(nnx_fns(pair, sides.nnx_model)[0]())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        return [missing(f"forward/{name}", "out", (), note), missing(f"loss/{name}", "loss", (), note)]
    finally:
        timings[name] = time.perf_counter() - t0
    return [*compare_outputs(f"forward/{name}", l_out, n_out, tols, depth),
            compare_leaf(f"loss/{name}", "loss", l_loss, n_loss, tols, depth=depth)]


def _localise(pair: Any, sides: Sides, failed: list[LeafResult], module_map: ModuleMap, tols: Tolerances) -> Any:
    """:func:`.divergence.localise`, never letting a localisation problem hide the verdict."""
    from linen2nnx.equivalence.divergence import Divergence, localise

    try:
        return localise(pair, sides, failed, module_map, tols)
    except Exception as e:
        return Divergence(mode="", modules=[], culprit=None, note=f"localisation failed: {type(e).__name__}: {e}")


def compare_outputs(check_name: str, ref: Any, got: Any, tolerances: Tolerances | float | None = None,
                    depth: int = 0) -> list[LeafResult]:
    """Compare two output pytrees leaf by leaf (paths like ``out[0]['logits']``), as logits."""
    ref_leaves = jax.tree_util.tree_flatten_with_path(ref)[0]
    got_leaves, got_def = jax.tree_util.tree_flatten_with_path(got)
    ref_def = jax.tree_util.tree_structure(ref)
    if ref_def != got_def:
        return [missing(check_name, "out", (), f"output structure differs: Linen {ref_def}, NNX {got_def}")]
    return [compare_leaf(check_name, "out" + jax.tree_util.keystr(rp), r, g, tolerances, depth=depth, kind=LOGITS)
            for (rp, r), (_, g) in zip(ref_leaves, got_leaves)]


def to_nnx_paths(sides: Sides, collection: str, tree: Any) -> dict[str, Any]:
    """A Linen collection tree -> ``{nnx path: array}`` via the converter's mapping.

    A Linen leaf the conversion did not map keeps its Linen path prefixed with ``linen:`` so it
    shows up as "missing on the NNX side" instead of disappearing.
    """
    from flax.traverse_util import flatten_dict

    table = {tuple(map(str, k)): v for k, v in sides.report.param_table(collection).items()}
    out: dict[str, Any] = {}
    for path, leaf in flatten_dict(_plain(tree)).items():
        key = tuple(map(str, path))
        nnx_path = table.get(key)
        name = "/".join(map(str, nnx_path)) if nnx_path is not None else "linen:" + "/".join((collection, *key))
        out[name] = leaf
    return out


def _plain(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _plain(v) for k, v in tree.items()}
    return tree


def _variable_type(collection: str) -> type:
    from flax.nnx import variablelib

    return variablelib.variable_type_from_name(collection)


def _paths_of_type(sides: Sides, var_type: type) -> set[str]:
    from flax import nnx

    return {"/".join(map(str, p)) for p, v in nnx.to_flat_state(nnx.state(sides.nnx_model))
            if isinstance(v, var_type)}

