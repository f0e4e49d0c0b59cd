"""Does the pair's optimizer treat each parameter the same on NNX's tree as on Linen's?

The optimizer is Linen's (``LinenSide.optimizer``), run by ``nnx.Optimizer`` on NNX's parameter tree:
an ``nnx.State`` whose names are the NNX attributes (``layer_norm_0``), not Linen's module names
(``LayerNorm_0``). A weight-decay mask or a ``multi_transform`` label function that reads the names
(``'Norm' in str(path)``) runs on both trees and gives another answer on NNX's: the norm layers get
weight decay, the state converts leaf for leaf, and training drifts with exit 0.

``tx.update`` steps on stand-ins of both trees tell: every mapped parameter as ones of its own shape
(of its rank with every axis 2 where the parameters are too many to copy: :data:`REAL_SHAPES_UP_TO`), every
gradient half the parameter, the same on both sides. The probe steps until :data:`MOVING_STEPS` steps have
moved a parameter (at most :data:`MAX_STEPS`: ``MultiSteps`` and ``apply_every`` give zero updates until
their k-th step) and compares each step's updates, not the parameters they leave: under a warmup from 0 a
weight decay applied to the wrong leaves changes the parameters by less than any tolerance, the updates by
as much as the decay is to the step. A transform that treats leaves alike by name, shape or position
gives each the same update on both; one that reads Linen's names gives a parameter another update on
NNX's. Only parameters on both sides take part, so a global-norm clip sees the same leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert.mapping import PathT, Problem, join
from linen2nnx.trees import key_name


def probe_problems(tx: Any, abstract: Any, param_table: Mapping[tuple[str, ...], PathT]) -> list[Problem]:
    """A problem per parameter whose probe update differs between the two trees (at most 5 named);
    ``abstract``: the NNX model's abstract parameter state."""
    from flax import nnx

    shapes = {tuple(map(str, p)): tuple(v.get_value().shape) for p, v in nnx.to_flat_state(abstract)}
    pairs = [(lpath, tuple(map(str, npath))) for lpath, npath in param_table.items()]
    pairs = [(lpath, npath) for lpath, npath in pairs if npath in shapes]
    if not pairs:
        return []
    real = sum(int(np.prod(shapes[npath])) for _, npath in pairs) <= REAL_SHAPES_UP_TO
    ones = {
        npath: np.ones(shapes[npath] if real else (2,) * len(shapes[npath]), np.float32) for _, npath in pairs
    }
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
        l_steps = _updates(tx, linen, variables=False)
        n_steps = _updates(tx, nnx_tree, variables=True)
    except Exception:  # a failure on NNX's tree is reported where the optimizer is built (spec.nnx_optimizer)
        return []
    differ = [(lpath, npath) for lpath, npath in pairs if _differs(l_steps, n_steps, lpath, npath)]
    return [
        Problem(
            "optimizer differs on NNX names",
            join(("params", *lpath)),
            join(npath),
            "probe updates of the pair's optimizer give this parameter another update on NNX's tree "
            "than on Linen's: a mask or label function (adamw(mask=...), optax.masked, multi_transform) reads "
            "the names; it must pick the same parameters on both trees (Linen's LayerNorm_0 is NNX's "
            "layer_norm_0): match both spellings, or the parameters' own names and ranks",
        )
        for lpath, npath in differ[:5]
    ]


def param_sized_vectors(tx: Any, abstract: Any) -> set[tuple[str, ...]]:
    """The paths of ``tx.init``'s 1-D leaves whose length follows the parameters' sizes: optax.flatten's
    vectors (of all parameters or of a masked subset). A fixed-length buffer (``contrib.mechanize``'s
    six betas, L-BFGS's memory weights) keeps its length whatever the parameters are: told apart by
    ``tx.init`` on two stand-in trees of the abstract parameter state, every axis 2 in one and 3 in the
    other (shapes only)."""
    import jax

    def shapes(n: int) -> dict[tuple[str, ...], tuple[int, ...]]:
        tree = jax.tree.map(lambda a: jax.ShapeDtypeStruct((n,) * len(a.shape), a.dtype), abstract)
        out = jax.eval_shape(tx.init, tree)
        return {p: tuple(v.shape) for p, v in _flat(out, variables=True, arrays=False).items()}

    two, three = shapes(2), shapes(3)
    return {p for p, shape in two.items() if len(shape) == 1 and three.get(p) != shape}


REAL_SHAPES_UP_TO = 1 << 22
"""Parameters (elements, all together) up to which the stand-ins have the parameters' own shapes: a mask
that reads a size (``x.size >= 16``) answers as on the real tree."""
MOVING_STEPS = 3
"""Steps that move a parameter, compared (a schedule may give the first a learning rate of 0)."""
MAX_STEPS = 64
"""Steps the probe runs at most, waiting for :data:`MOVING_STEPS` that move a parameter."""


def _updates(tx: Any, params: Any, variables: bool) -> list[dict[tuple[str, ...], np.ndarray]]:
    """Each step's updates (flat), the gradient half the parameters, until :data:`MOVING_STEPS` steps
    have moved a parameter or :data:`MAX_STEPS` have run."""
    import jax
    import optax

    state, steps, moving = tx.init(params), [], 0
    while moving < MOVING_STEPS and len(steps) < MAX_STEPS:
        updates, state = tx.update(jax.tree.map(lambda p: p * 0.5, params), state, params)
        params = optax.apply_updates(params, updates)
        flat = _flat(updates, variables=variables)
        steps.append(flat)
        moving += any(np.any(u != 0) for u in flat.values())
    return steps


def _differs(
    l_steps: list[dict], n_steps: list[dict], lpath: tuple[str, ...], npath: tuple[str, ...]
) -> bool:
    """Whether some step updates the parameter otherwise on the two trees, beyond the rounding that
    another order of the leaves gives a sum over all of them (a global-norm clip)."""
    for l_flat, n_flat in zip(l_steps, n_steps):
        if lpath in l_flat and npath in n_flat:
            a, b = l_flat[lpath], n_flat[npath]
            scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
            if not np.allclose(a, b, rtol=1e-5, atol=1e-5 * scale):
                return True
    return len(l_steps) != len(n_steps)


def _flat(tree: Any, variables: bool, arrays: bool = True) -> dict[tuple[str, ...], Any]:
    """``{path: leaf}`` (as a numpy array unless not ``arrays``); with ``variables``, an NNX Variable's
    own ``value`` step left out of the path."""
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        keys = tuple(map(key_name, path))
        out[keys[:-1] if variables and keys and keys[-1] == "value" else keys] = (
            np.asarray(leaf) if arrays else leaf
        )
    return out


def _nested(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out
