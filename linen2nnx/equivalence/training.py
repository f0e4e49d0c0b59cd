"""N-step training parity: both sides trained side by side from the same converted state.

A forward / gradient check at one point does not prove the optimizer wiring: ``wrt=`` filters, a
param that NNX does not treat as ``nnx.Param`` (so never updated), optimizer state that does not
mirror the params, BatchNorm statistics that stop updating. So both sides take ``steps`` optimizer
steps on the same batches, dropout off on both sides (as in the train-mode forward check):

- Linen: a ``TrainState``-like loop: ``value_and_grad`` of the loss (the pair's mutable collections
  updated), ``tx.update`` and ``optax.apply_updates``, jitted;
- NNX: ``nnx.Optimizer(model, tx, wrt=nnx.Param)`` with ``nnx.value_and_grad`` and
  ``opt.update(model, grads)`` in the split / merge + ``jax.jit`` fast path.

``tx`` is ``pair.linen.optimizer`` (default ``optax.adam(1e-3)``); both start from ``tx.init`` of the
converted params. After every step the loss, every param, every other collection (BatchNorm
statistics) and every optimizer-state leaf are compared; Linen optimizer-state paths are moved onto
the NNX ones with the converter's own rule (:func:`~linen2nnx.checkpoint_convert.mapping.map_opt_state_path`:
``mu`` / ``nu`` / accumulated gradients mirror the param tree). Pass ``tx=optax.MultiSteps(...)``
for gradient accumulation. Each leaf's tolerance budget grows with the step (``depth`` = model
depth × (step + 1)), since every step feeds the last one's rounding back in. A leaf is reported once,
at the step where it was worst.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from linen2nnx.equivalence.compare import LeafResult, compare_leaf, compare_trees, json_num
from linen2nnx.equivalence.rounding_grads import RoundingGradients
from linen2nnx.equivalence.tolerances import Tolerances
from linen2nnx.spec import nnx_optimizer


@dataclasses.dataclass
class TrainingResult:
    steps: int
    linen_loss: list[float]
    nnx_loss: list[float]
    max_rel_loss: float
    passed: bool
    param_leaves_failed: int
    opt_state_leaves_failed: int
    leaves: list[LeafResult] = dataclasses.field(default_factory=list)
    """Worst step per leaf: ``train/loss`` (one per step), ``train/params``, ``train/state``, ``train/opt_state``."""
    optimizer: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "linen_loss": [json_num(x) for x in self.linen_loss],
            "nnx_loss": [json_num(x) for x in self.nnx_loss],
            "max_rel_loss": json_num(self.max_rel_loss),
            "passed": bool(self.passed),
            "param_leaves_failed": self.param_leaves_failed,
            "opt_state_leaves_failed": self.opt_state_leaves_failed,
        }

    def summary(self) -> str:
        return (
            f"training parity over {self.steps} steps ({self.optimizer}): "
            f"{'PASS' if self.passed else 'FAIL'}; max rel loss diff {self.max_rel_loss:.3g}; "
            f"{self.param_leaves_failed} param and {self.opt_state_leaves_failed} optimizer-state leaves failed"
        )


def _default_tx() -> Any:
    import optax

    return optax.adam(1e-3)


def _flatten(tree: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            out.update(_flatten(v, (*prefix, str(k))))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_flatten(v, (*prefix, str(i))))
    elif tree is not None:
        out[prefix] = tree
    return out


def linen_opt_state_flat(
    opt_state: Any, param_table: Mapping[tuple[str, ...], tuple[Any, ...]]
) -> dict[str, Any]:
    """A live optax state as ``{'opt_state/0/mu/<nnx param path>': array}`` (NNX's own paths)."""
    from flax import serialization

    from linen2nnx.checkpoint_convert.mapping import map_opt_state_path

    table = {tuple(map(str, k)): v for k, v in param_table.items()}
    out = {}
    for path, leaf in _flatten(serialization.to_state_dict(opt_state)).items():
        out["/".join(map(str, ("opt_state", *map_opt_state_path(path, table))))] = leaf
    return out


class _Worst:
    """Keeps, per (check, path), the comparison with the largest margin over the steps."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], tuple[LeafResult, int]] = {}

    def add(self, leaves: list[LeafResult], step: int) -> None:
        for lf in leaves:
            key = (lf.check, lf.path)
            old = self.by_key.get(key)
            if old is None or (not lf.passed, lf.margin) > (not old[0].passed, old[0].margin):
                self.by_key[key] = (lf, step)

    def leaves(self) -> list[LeafResult]:
        out = []
        for lf, step in self.by_key.values():
            note = f"worst at step {step}" + (f"; {lf.note}" if lf.note else "")
            out.append(dataclasses.replace(lf, note=note))
        return out


def training_parity(
    pair: Any,
    sides: Any,
    steps: int,
    *,
    tx: Any = None,
    tolerances: Any = None,
    batches: Iterable[Mapping[str, Any]] | None = None,
    depth: int = 0,
) -> TrainingResult:
    """Train both sides ``steps`` steps on the same batches and compare after every step.

    ``batches``: one batch per step (default: the pair's example batch every step).
    ``sides``: what :func:`~linen2nnx.equivalence.build.build_sides` returned (neither side is mutated).
    """
    from linen2nnx.equivalence.comparisons import to_nnx_paths

    tols = Tolerances.coerce(tolerances)
    tx, tx_name = _choose_tx(pair, tx)
    ins = _step_inputs(pair, batches, steps)
    variables = dict(sides.linen_variables)
    l_params = variables.pop("params")
    l_rest = variables
    l_opt = tx.init(l_params)
    linen_step = _linen_step(pair, tx, ins[0])
    nnx_step, n_state = _nnx_step(pair, sides, tx, ins[0])
    worst = _Worst()
    table = sides.report.param_table("params")  # Linen param path -> NNX path, for the optimizer state
    linen_loss: list[float] = []
    nnx_loss: list[float] = []
    rounding = RoundingGradients(tols)
    for step in range(steps):
        dyn = ins[step].dynamic
        l_loss, l_params, l_rest, l_opt, l_grads = linen_step(l_params, l_rest, l_opt, dyn)
        n_loss, n_state, n_grads = nnx_step(n_state, dyn)
        rounding.add(to_nnx_paths(sides, "params", l_grads), _flat_values(n_grads))
        linen_loss.append(float(l_loss))
        nnx_loss.append(float(n_loss))
        leaves = [compare_leaf("train/loss", f"step {step}", l_loss, n_loss, tols, depth=depth * (step + 1))]
        leaves += _state_leaves(
            pair, sides, table, (l_params, l_rest, l_opt), n_state, tols, depth * (step + 1)
        )
        worst.add(leaves, step)
    all_leaves = rounding.excuse(worst.leaves())
    rel = [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(linen_loss, nnx_loss)]
    failed = [lf for lf in all_leaves if not lf.passed]
    return TrainingResult(
        steps=steps,
        linen_loss=linen_loss,
        nnx_loss=nnx_loss,
        max_rel_loss=float(np.max(rel)) if rel else 0.0,
        passed=not failed and steps > 0,
        param_leaves_failed=sum(not lf.passed for lf in all_leaves if lf.check == "train/params"),
        opt_state_leaves_failed=sum(not lf.passed for lf in all_leaves if lf.check == "train/opt_state"),
        leaves=all_leaves,
        optimizer=tx_name,
    )


def _choose_tx(pair: Any, tx: Any) -> tuple[Any, str]:
    """The optimizer both sides train with, and how the report names it."""
    if tx is not None:
        return tx, _tx_name(tx)
    if pair.linen.optimizer is not None:
        return pair.linen.optimizer, "the pair's optimizer"
    return _default_tx(), "optax.adam(1e-3)"


def _step_inputs(pair: Any, batches: Iterable[Mapping[str, Any]] | None, steps: int) -> list[Any]:
    """One train-mode :class:`~linen2nnx.equivalence.build.Inputs` per step (batches cycled if short)."""
    from linen2nnx.equivalence.build import Inputs, with_batch

    batch_list = list(batches) if batches is not None else [pair.linen.batch] * steps
    if len(batch_list) < steps:
        batch_list = (batch_list * (steps // max(1, len(batch_list)) + 1))[:steps]
    return [Inputs.of(with_batch(pair, b), True) for b in batch_list[:steps]]


def _linen_step(pair: Any, tx: Any, first: Any) -> Any:
    """The jitted Linen train step ``(params, rest, opt_state, dynamic) -> (loss, params, rest, opt_state)``."""
    import jax
    import optax

    from linen2nnx.equivalence.build import linen_dropout_off
    from linen2nnx.equivalence.jitting import fast_jit
    from linen2nnx.equivalence.randomness import same_keys

    side = pair.linen
    model = side.model
    mutable = list(side.state_collections) or False
    rngs = side.apply_rngs()

    @fast_jit
    def linen_step(params: Any, rest: Any, opt_state: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = first.rebuild(dynamic)  # every batch has the same structure

        def f(p: Any) -> Any:
            with linen_dropout_off(), same_keys():
                res = model.apply({**rest, "params": p}, *args, **kwargs, mutable=mutable, rngs=rngs)
            out, updates = res if mutable else (res, {})
            return side.loss(out, batch), updates

        (loss, updates), grads = jax.value_and_grad(f, has_aux=True)(params)
        upd, opt_state = tx.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, upd), {**rest, **updates}, opt_state, grads

    return linen_step


def _nnx_step(pair: Any, sides: Any, tx: Any, first: Any) -> tuple[Any, Any]:
    """The jitted NNX train step over the split ``(model, optimizer)`` state, and that first state."""
    from flax import nnx

    from linen2nnx.equivalence.build import linen_dropout_off, nnx_dropout_off
    from linen2nnx.equivalence.jitting import fast_jit
    from linen2nnx.equivalence.randomness import same_keys
    from linen2nnx.equivalence.sown import quiet_sow

    side = pair.linen
    n_model = nnx_dropout_off(sides.nnx_model)
    n_opt = nnx_optimizer(n_model, tx)
    gdef, n_state = nnx.split((n_model, n_opt))

    @fast_jit
    def nnx_step(state: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = first.rebuild(dynamic)
        m, o = nnx.merge(gdef, state)
        with quiet_sow(), same_keys(), linen_dropout_off():  # also a ToNNX-bridged class's dropout
            loss, grads = nnx.value_and_grad(lambda mm: side.loss(mm(*args, **kwargs), batch))(m)
        o.update(m, grads)
        # values sown outside nnx.capture become new attributes: keep the state's structure fixed
        return loss, nnx.state((m, o), nnx.Not(nnx.Intermediate)), grads

    return nnx_step, n_state


def _flat_values(state: Any) -> dict[str, Any]:
    """An NNX state as ``{path: array}``."""
    from flax import nnx

    return {
        "/".join(map(str, p)): getattr(v, "get_value", lambda v=v: v)() for p, v in nnx.to_flat_state(state)
    }


def _state_leaves(
    pair: Any, sides: Any, table: Any, linen: tuple[Any, Any, Any], n_state: Any, tols: Tolerances, depth: int
) -> list[LeafResult]:
    """Params, mutable collections and optimizer state of both sides after a step, leaf by leaf."""
    from flax import nnx

    from linen2nnx.equivalence.comparisons import to_nnx_paths

    l_params, l_rest, l_opt = linen
    m_state, o_state = n_state[0], n_state[1]
    flat_model = {"/".join(map(str, p)): v for p, v in nnx.to_flat_state(m_state)}
    flat_params = {p: v.get_value() for p, v in flat_model.items() if isinstance(v, nnx.Param)}
    leaves = compare_trees(
        "train/params", to_nnx_paths(sides, "params", l_params), flat_params, tols, depth=depth
    )
    for coll in sorted(pair.linen.state_collections):
        ref = to_nnx_paths(sides, coll, l_rest.get(coll, {}))
        got = {p: flat_model[p].get_value() for p in ref if p in flat_model}
        leaves += compare_trees("train/state", ref, got, tols, depth=depth)
    import optax

    flat_opt = {  # a slot masked out of a transform (multi_transform, masked) holds no state on disk either
        "/".join(map(str, p)): v.get_value()
        for p, v in nnx.to_flat_state(o_state)
        if p and p[0] == "opt_state" and not isinstance(v.get_value(), optax.MaskedNode)
    }
    table = sides.report.param_table("params")
    leaves += compare_trees(
        "train/opt_state", linen_opt_state_flat(l_opt, table), flat_opt, tols, depth=depth
    )
    return leaves


def _tx_name(tx: Any) -> str:
    import optax

    if isinstance(tx, optax.MultiSteps):
        return "optax.MultiSteps"
    return "the given optimizer"
