"""The comparisons ``check`` runs on two built sides, and the path helpers they share.

This layer sits below :mod:`.check` (which orchestrates building, meshes, training and
localisation) so that :mod:`.mesh` and :mod:`.training` can use it without importing ``check``:

- :func:`run_checks`: forward / loss (eval, train, long batch), gradients, mutable collections,
  sown values, matmul precision (:mod:`.precision`) and the static settings of dropout, norm and
  attention layers (:mod:`.layer_config`), jitted and / or eager;
- :func:`to_nnx_paths`: a Linen collection moved to NNX paths through the converter's mapping;
- :func:`make_module_map`, :func:`model_depth`: what the comparisons need to know about the model.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from linen2nnx.equivalence.build import Sides, linen_fns, model_state, nnx_fns, with_batch
from linen2nnx.equivalence.compare import (
    GRAD,
    LeafResult,
    compare_leaf,
    compare_outputs,
    compare_trees,
    missing,
)
from linen2nnx.equivalence.dropout_on import dropout_leaves
from linen2nnx.equivalence.layer_config import config_leaves
from linen2nnx.equivalence.modmap import ModuleMap, nnx_module_paths
from linen2nnx.equivalence.tolerances import Tolerances
from linen2nnx.errors import L2NError, ModelBuildError
from linen2nnx.namemap import NameMap
from linen2nnx.trees import plain_dicts

JitMode = bool | str


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
def run_checks(
    pair: Any,
    sides: Sides,
    tolerances: Tolerances | float | None = None,
    timings: dict[str, float] | None = None,
    *,
    jit: JitMode = True,
    module_map: ModuleMap | None = None,
    long_batch: Mapping[str, Any] | bool | None = None,
) -> list[LeafResult]:
    """Run both sides (jitted and / or eagerly) and compare everything; see the module docstring."""
    tols = Tolerances.coerce(tolerances)
    timings = {} if timings is None else timings
    module_map = module_map or make_module_map(pair, sides)
    depth = model_depth(sides.nnx_model)
    results: list[LeafResult] = []
    modes = {True: [("", True)], False: [("@eager", False)], "both": [("", True), ("@eager", False)]}[jit]
    for suffix, jitted in modes:
        results += _run_pair(pair, sides, tols, timings, jitted, suffix, depth, module_map)
    t0 = time.perf_counter()
    results += dropout_leaves(pair, sides, tols, depth)  # a dropout moved in the dataflow
    timings["dropout"] = time.perf_counter() - t0
    results += _uncompared(pair, sides)
    if long_batch is None or long_batch is True:
        long_batch = getattr(pair.linen, "long_batch", None)
    if long_batch is not None and long_batch is not False:
        results += _run_eval_only(with_batch(pair, long_batch), sides, tols, timings, depth, "long")
    t0 = time.perf_counter()
    try:
        from linen2nnx.equivalence.precision import precision_leaves

        results += precision_leaves(pair, sides, module_map)
    except Exception as e:  # tracing the NNX side failed: the forward checks already report it
        results.append(
            missing("precision", "", (), f"could not trace for precision: {type(e).__name__}: {e}")
        )
    timings["precision"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        results += config_leaves(pair, sides, module_map)
    except Exception as e:  # tracing failed: the forward checks already report why
        results.append(
            missing("config", "", (), f"could not trace for layer settings: {type(e).__name__}: {e}")
        )
    timings["config"] = time.perf_counter() - t0
    return results


def _uncompared(pair: Any, sides: Sides) -> list[LeafResult]:
    """A failing ``intermediates`` leaf per collection Linen's forward sows into that nothing compares
    (:func:`.sown.uncompared_collections`); none where the program cannot be traced abstractly (the
    forwards report why)."""
    from linen2nnx.equivalence.sown import uncompared_collections

    try:
        sown = uncompared_collections(pair, sides.linen_variables)
    except Exception:
        return []
    return [
        missing(
            "intermediates",
            f"linen:{collection}",
            (),
            f"Linen's forward sows into the collection {collection!r}, which no check compares: no "
            f"NNX type is registered for it as an nnx.Intermediate subclass (migrate writes one for a "
            f"sow it converts; a class kept as Linen behind the bridge keeps its values to itself)",
        )
        for collection in sown
    ]


def _linen(pair: Any, fn: Any, *args: Any) -> Any:
    try:
        return jax.block_until_ready(fn(*args))
    except L2NError:
        raise
    except Exception as e:
        raise ModelBuildError(
            f"the Linen model {pair.linen.name or type(pair.linen.model).__name__} fails on "
            f"its example batch: {type(e).__name__}: {e}"
        ) from e


def _run_pair(
    pair: Any,
    sides: Sides,
    tols: Tolerances,
    timings: dict[str, float],
    jitted: bool,
    suffix: str,
    depth: int,
    module_map: ModuleMap,
) -> list[LeafResult]:
    from linen2nnx.equivalence.sown import linen_sown_to_nnx

    t0 = time.perf_counter()
    l_eval, l_train = linen_fns(pair, jit=jitted)
    l_out_e, l_loss_e, l_sown = _linen(pair, l_eval, sides.linen_variables)
    l_out_t, l_loss_t, l_grads, l_updates = _linen(pair, l_train, sides.linen_variables)
    timings["linen" + suffix] = time.perf_counter() - t0

    t0 = time.perf_counter()
    results: list[LeafResult] = []
    n_eval, n_train = nnx_fns(pair, sides.nnx_model, jit=jitted)
    before = model_state(sides.nnx_model)
    try:
        n_out_e, n_loss_e, n_sown, n_after_e = jax.block_until_ready(n_eval())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        results += [
            missing("forward/eval" + suffix, "out", (), note),
            missing("loss/eval" + suffix, "loss", (), note),
        ]
    else:
        results += compare_outputs("forward/eval" + suffix, l_out_e, n_out_e, tols, depth)
        results.append(compare_leaf("loss/eval" + suffix, "loss", l_loss_e, n_loss_e, tols, depth=depth))
        ref_sown = linen_sown_to_nnx(l_sown, module_map)
        if ref_sown or n_sown:
            results += compare_trees("intermediates" + suffix, ref_sown, n_sown, tols, depth=depth)
        # Linen's eval apply may change nothing but sown values: neither may NNX's eval forward
        results += _unchanged("state/eval" + suffix, before, n_after_e, set(), tols, depth)
    try:
        n_out_t, n_loss_t, n_grads, n_after, n_sown_t = jax.block_until_ready(n_train())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        results += [
            missing("forward/train" + suffix, "out", (), note),
            missing("loss/train" + suffix, "loss", (), note),
            missing("grad" + suffix, "", (), note),
        ]
    else:
        results += compare_outputs("forward/train" + suffix, l_out_t, n_out_t, tols, depth)
        results.append(compare_leaf("loss/train" + suffix, "loss", l_loss_t, n_loss_t, tols, depth=depth))
        results += compare_trees(
            "grad" + suffix, _grad_reference(sides, l_grads, n_grads), n_grads, tols, depth=depth, kind=GRAD
        )
        results += _train_state(
            pair, sides, l_updates, (before, n_after, n_sown_t), tols, suffix, depth, module_map
        )
    timings["nnx" + suffix] = time.perf_counter() - t0
    return results


def _train_state(
    pair: Any,
    sides: Sides,
    l_updates: dict[str, Any],
    nnx_side: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    tols: Tolerances,
    suffix: str,
    depth: int,
    module_map: ModuleMap,
) -> list[LeafResult]:
    """The state the train forward leaves: each collection of ``pair.linen.mutable`` against Linen's
    update, every other NNX variable unchanged, and the values sown in train mode (an aux loss under
    ``if train:``). ``nnx_side``: the NNX state before, after, and its sown values."""
    from linen2nnx.equivalence.sown import linen_sown_to_nnx, sown_tree

    before, n_after, n_sown_t = nnx_side
    results: list[LeafResult] = []
    updated: set[str] = set()
    for coll in sorted(pair.linen.state_collections):  # sown values: compared below
        ref = to_nnx_paths(sides, coll, l_updates.get(coll, {}))
        wanted = _paths_of_type(sides, _variable_type(coll))
        wanted |= {n for linen, n in sides.checkpoint.first_call.items() if linen.startswith(f"{coll}/")}
        updated |= wanted
        got = {p: v for p, v in n_after.items() if p in wanted}
        results += compare_trees(coll + suffix, ref, got, tols, depth=depth)
    # a collection the Linen train apply may not change (not in pair.linen.mutable) stays too
    results += _unchanged("state/train" + suffix, before, n_after, updated, tols, depth)
    ref_sown_t = linen_sown_to_nnx(sown_tree(l_updates), module_map)
    if ref_sown_t or n_sown_t:
        results += compare_trees("intermediates/train" + suffix, ref_sown_t, n_sown_t, tols, depth=depth)
    return results


def _unchanged(
    check_name: str,
    before: dict[str, Any],
    after: dict[str, Any],
    updated: set[str],
    tols: Tolerances,
    depth: int,
) -> list[LeafResult]:
    """Leaves of ``check_name`` for the NNX variables a forward changed where Linen's may not (every one
    but ``updated``): a running statistic updated in eval mode corrupts every later call, though the
    call itself still returns what Linen's does. Variables the forward creates (a lazy cache) are not
    compared; unchanged ones give no leaf."""
    import numpy as np

    changed = {
        path
        for path, value in after.items()
        if path in before
        and path not in updated
        and (
            np.shape(value) != np.shape(before[path])
            or not np.array_equal(np.asarray(value), np.asarray(before[path]))
        )
    }
    if not changed:
        return []
    ref = {p: before[p] for p in sorted(changed)}
    return [
        dataclasses.replace(leaf, note=leaf.note or "changed by the NNX forward; Linen's may not change it")
        for leaf in compare_trees(check_name, ref, {p: after[p] for p in ref}, tols, depth=depth)
    ]


def _run_eval_only(
    pair: Any, sides: Sides, tols: Tolerances, timings: dict[str, float], depth: int, name: str
) -> list[LeafResult]:
    """Eval-mode forward and loss on another batch (the long one): ``forward/<name>``, ``loss/<name>``."""
    t0 = time.perf_counter()
    l_out, l_loss, _ = _linen(pair, linen_fns(pair)[0], sides.linen_variables)
    try:
        n_out, n_loss, _, _ = jax.block_until_ready(nnx_fns(pair, sides.nnx_model)[0]())
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        return [missing(f"forward/{name}", "out", (), note), missing(f"loss/{name}", "loss", (), note)]
    finally:
        timings[name] = time.perf_counter() - t0
    return [
        *compare_outputs(f"forward/{name}", l_out, n_out, tols, depth),
        compare_leaf(f"loss/{name}", "loss", l_loss, n_loss, tols, depth=depth),
    ]


def _grad_reference(sides: Sides, l_grads: Any, n_grads: Mapping[str, Any]) -> dict[str, Any]:
    """Linen's gradients at NNX paths; a parameter the Linen model never creates (kept from init by
    the conversion, linen_unused.py) is one Linen never reads: its NNX gradient must be exactly 0."""
    ref = to_nnx_paths(sides, "params", l_grads)
    for kept in sides.report.kept_from_init:
        if kept.why and kept.nnx in n_grads and kept.nnx not in ref:
            ref[kept.nnx] = np.zeros_like(np.asarray(n_grads[kept.nnx]))
    return ref


def to_nnx_paths(sides: Sides, collection: str, tree: Any) -> dict[str, Any]:
    """A Linen collection tree -> ``{nnx path: array}`` via the converter's mapping.

    A Linen leaf the conversion did not map keeps its Linen path prefixed with ``linen:`` so it
    shows up as "missing on the NNX side" instead of disappearing.
    """
    from flax.traverse_util import flatten_dict

    table = {tuple(map(str, k)): v for k, v in sides.report.param_table(collection).items()}
    out: dict[str, Any] = {}
    for path, leaf in flatten_dict(plain_dicts(tree)).items():
        key = tuple(map(str, path))
        nnx_path = table.get(key)
        if nnx_path is None and key[-1:] == ("value",):
            nnx_path = table.get(key[:-1])  # a parameter named value, read as a box (_linen_variables)
        linen_name = "/".join((collection, *key))
        name = (
            "/".join(map(str, nnx_path))
            if nnx_path is not None
            else sides.checkpoint.first_call.get(linen_name, "linen:" + linen_name)  # made by a first call
        )
        out[name] = leaf
    return out


def _variable_type(collection: str) -> type:
    from flax.nnx import variablelib

    return variablelib.variable_type_from_name(collection)


def _paths_of_type(sides: Sides, var_type: type) -> set[str]:
    from flax import nnx

    return {
        "/".join(map(str, p))
        for p, v in nnx.to_flat_state(nnx.state(sides.nnx_model))
        if isinstance(v, var_type)
    }
