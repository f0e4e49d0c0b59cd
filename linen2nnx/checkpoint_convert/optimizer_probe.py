"""Does the pair's optimizer treat each parameter the same on NNX's tree as on Linen's?

The optimizer is Linen's (``LinenSide.optimizer``), run by ``nnx.Optimizer`` on NNX's parameter tree:
an ``nnx.State`` whose names are the NNX attributes (``layer_norm_0``), not Linen's module names
(``LayerNorm_0``). A weight-decay mask or a ``multi_transform`` label function that reads the names
(``'Norm' in str(path)``) runs on both trees and gives another answer on NNX's: the norm layers get
weight decay, the state converts leaf for leaf, and training drifts with exit 0.

One ``tx.init`` + ``tx.update`` on tiny stand-ins of both trees tells: every mapped parameter as ones
of its rank with every axis 2, every gradient a half, the same on both sides. A transform that treats
leaves alike by name, rank or position gives each the same update on both; one that reads Linen's
names gives a parameter another update on NNX's. Only parameters on both sides take part, so a
global-norm clip sees the same leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert.mapping import PathT, Problem, join


def probe_problems(tx: Any, make_nnx: Any, param_table: Mapping[tuple[str, ...], PathT]) -> list[Problem]:
    """A problem per parameter whose probe update differs between the two trees (at most 5 named)."""
    from flax import nnx

    abstract = nnx.state(nnx.eval_shape(make_nnx), nnx.Param)
    ranks = {tuple(map(str, p)): len(v.get_value().shape) for p, v in nnx.to_flat_state(abstract)}
    pairs = [(lpath, tuple(map(str, npath))) for lpath, npath in param_table.items()]
    pairs = [(lpath, npath) for lpath, npath in pairs if npath in ranks]
    if not pairs:
        return []
    ones = {npath: np.ones((2,) * ranks[npath], np.float32) for _, npath in pairs}
    linen = _nested({lpath: ones[npath] for lpath, npath in pairs})
    by_path = {tuple(p): v for p, v in nnx.to_flat_state(abstract)}
    nnx_tree = nnx.from_flat_state(
        [
            (p, by_path[p].replace(value=ones[tuple(map(str, p))]))
            for p in by_path
            if tuple(map(str, p)) in ones
        ]
    )
    try:
        l_upd = _one_update(tx, linen)
        n_upd = _one_update(tx, nnx_tree)
    except Exception:  # a failure on NNX's tree is reported where the optimizer is built (spec.nnx_optimizer)
        return []
    l_flat, n_flat = _flat(l_upd, variables=False), _flat(n_upd, variables=True)
    differ = [
        (lpath, npath)
        for lpath, npath in pairs
        if lpath in l_flat
        and npath in n_flat
        and not np.allclose(l_flat[lpath], n_flat[npath], rtol=1e-5, atol=0)
    ]
    return [
        Problem(
            "optimizer differs on NNX names",
            join(("params", *lpath)),
            join(npath),
            "one probe update of the pair's optimizer gives this parameter another value on NNX's tree than "
            "on Linen's: a mask or label function (adamw(mask=...), optax.masked, multi_transform) reads "
            "Linen's names; write it for NNX's",
        )
        for lpath, npath in differ[:5]
    ]


def _one_update(tx: Any, params: Any) -> Any:
    import jax

    grads = jax.tree.map(lambda p: p * 0.5, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return updates


def _flat(tree: Any, variables: bool) -> dict[tuple[str, ...], np.ndarray]:
    """``{path: array}``; with ``variables``, an NNX Variable's own ``value`` step left out of the path."""
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        keys = tuple(map(_key, path))
        out[keys[:-1] if variables and keys and keys[-1] == "value" else keys] = np.asarray(leaf)
    return out


def _nested(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _key(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)
