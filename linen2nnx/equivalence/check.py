"""``check``: does the NNX twin, carrying converted weights, compute what the Linen model computes?

Compared, each with the per-leaf tolerance of :mod:`.compare`:

- ``forward/eval``, ``forward/train``: every output leaf (train mode with dropout off on both sides);
- ``loss/eval``, ``loss/train``: ``pair.linen.loss(outputs, batch)``;
- ``grad``: every loss gradient w.r.t. params in train mode, Linen grads moved to NNX paths through
  the converter's own mapping (a param missing on either side fails);
- ``batch_stats`` (any collection in ``pair.linen.mutable``): the Linen updated collections vs the NNX
  state after the same train-mode forward.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jax

from linen2nnx.equivalence.build import Sides, build_sides, linen_fns, nnx_fns
from linen2nnx.equivalence.compare import LeafResult, ParityResult, compare_leaf, compare_trees, missing
from linen2nnx.namemap import NameMap


def check(pair: Any, linen_ckpt: Any = None, nnx_ckpt: str | Path | None = None, *,
          name_map: NameMap | str | Path | None = None, atol_factor: float = 1e-5) -> ParityResult:
    """Run every parity check for ``pair``; see the module docstring for what is compared.

    ``linen_ckpt``: a Linen checkpoint (path or tree); default ``pair.linen.init_variables()``.
    ``nnx_ckpt``: a converted NNX checkpoint to test instead of converting in memory.
    Conversion problems raise :class:`~linen2nnx.errors.ConversionError` (a twin whose state does
    not fit the Linen weights cannot be compared at all); numeric differences give a failed result.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    sides = build_sides(pair, linen_ckpt, nnx_ckpt, name_map)
    timings["build"] = time.perf_counter() - t0
    leaves = run_checks(pair, sides, atol_factor, timings)
    return ParityResult(
        leaves=leaves, passed=all(lf.passed for lf in leaves) and bool(leaves), atol_factor=atol_factor,
        model=pair.linen.name or type(pair.linen.model).__name__, linen_source=sides.checkpoint.source,
        nnx_source=str(nnx_ckpt) if nnx_ckpt is not None else "converted in memory", timings=timings,
    )


def run_checks(pair: Any, sides: Sides, atol_factor: float, timings: dict[str, float]) -> list[LeafResult]:
    """Run both sides in eval and train mode (jitted) and compare everything."""
    t0 = time.perf_counter()
    l_eval, l_train = linen_fns(pair)
    l_out_e, l_loss_e = jax.block_until_ready(l_eval(sides.linen_variables))
    l_out_t, l_loss_t, l_grads, l_updates = jax.block_until_ready(l_train(sides.linen_variables))
    timings["linen"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_eval, n_train = nnx_fns(pair, sides.nnx_model)
    n_out_e, n_loss_e = jax.block_until_ready(n_eval())
    n_out_t, n_loss_t, n_grads, n_after = jax.block_until_ready(n_train())
    timings["nnx"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    results: list[LeafResult] = []
    results += compare_outputs("forward/eval", l_out_e, n_out_e, atol_factor)
    results += compare_outputs("forward/train", l_out_t, n_out_t, atol_factor)
    results.append(compare_leaf("loss/eval", "loss", l_loss_e, n_loss_e, atol_factor))
    results.append(compare_leaf("loss/train", "loss", l_loss_t, n_loss_t, atol_factor))
    results += compare_trees("grad", to_nnx_paths(sides, "params", l_grads), n_grads, atol_factor)
    for coll in sorted(pair.linen.mutable):
        ref = to_nnx_paths(sides, coll, l_updates.get(coll, {}))
        wanted = _paths_of_type(sides, _variable_type(coll))
        got = {p: v for p, v in n_after.items() if p in wanted}
        results += compare_trees(coll, ref, got, atol_factor)
    timings["compare"] = time.perf_counter() - t0
    return results


def compare_outputs(check_name: str, ref: Any, got: Any, atol_factor: float) -> list[LeafResult]:
    """Compare two output pytrees leaf by leaf (paths like ``out[0]['logits']``)."""
    ref_leaves = jax.tree_util.tree_flatten_with_path(ref)[0]
    got_leaves, got_def = jax.tree_util.tree_flatten_with_path(got)
    ref_def = jax.tree_util.tree_structure(ref)
    if ref_def != got_def:
        return [missing(check_name, "out", (), f"output structure differs: Linen {ref_def}, NNX {got_def}")]
    return [compare_leaf(check_name, "out" + jax.tree_util.keystr(rp), r, g, atol_factor)
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
    from collections.abc import Mapping

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
