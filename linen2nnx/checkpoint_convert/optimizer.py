"""Convert a Linen ``TrainState.opt_state`` + ``step`` into an ``nnx.Optimizer`` state.

It is the same optax structure on both sides (docs/nnx_facts.md#optimizer-state-layout): Orbax restores the Linen tuple as a
list with ``None`` for ``EmptyState`` (msgpack: a dict with ``'0'``, ``'1'`` … keys), NNX keeps it
as ``opt_state/0/...`` with leafless states gone, and ``mu`` / ``nu`` mirror the param tree, so
their paths get the same rename as the params. ``step`` becomes the NNX ``uint32`` counter.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert.keys import as_slot_value, is_key, key_fit, same_dtype
from linen2nnx.checkpoint_convert.mapping import PathT, Problem, join, map_opt_state_path
from linen2nnx.checkpoint_convert.optimizer_probe import param_sized_vectors, probe_problems
from linen2nnx.checkpoint_convert.report import MappedLeaf
from linen2nnx.checkpoint_convert.validate import dtype_name, fresh_leaves, raise_problems
from linen2nnx.spec import nnx_optimizer

FROM_INIT = object()  # the source of an optimizer slot that tx.init fills


def abstract_optimizer(make_nnx: Any, tx: Any) -> tuple[Any, Any]:
    """``(graphdef, abstract state)`` of ``nnx.Optimizer(make_nnx(), tx, wrt=nnx.Param)``."""
    from flax import nnx

    abstract = nnx.eval_shape(lambda: nnx_optimizer(make_nnx(), tx))
    return nnx.graphdef(abstract), nnx.state(abstract)


def plan_opt_state(
    opt_state: Any,
    step: int | None,
    param_table: Mapping[PathT, PathT],
    make_nnx: Any,
    tx: Any,
    kept_params: frozenset[str] = frozenset(),
) -> tuple[dict[PathT, Any], dict[PathT, Any], list[MappedLeaf], list[Problem]]:
    """Match every Linen optax leaf to a slot of ``tx.init`` on the abstract NNX model.

    Reads only shapes and dtypes, so Orbax metadata leaves plan (and ``--dry-run`` shows) the
    optimizer state without loading it. Returns ``(slots, NNX path -> Linen leaf, mapped, problems)``;
    the step is under the ``("step",)`` key of the second. The state of a parameter kept from init
    because the Linen model never creates it (``kept_params``, linen_unused.py) comes from ``tx.init``:
    its source is :data:`FROM_INIT`.
    """
    from flax import nnx

    _, abstract = abstract_optimizer(make_nnx, tx)
    slots = {tuple(p): v for p, v in nnx.to_flat_state(abstract)}
    by_str = {tuple(map(str, p)): p for p in slots}
    table = {tuple(map(str, k)): v for k, v in param_table.items()}
    sources: dict[PathT, Any] = {}
    mapped: list[MappedLeaf] = []
    problems: list[Problem] = []
    refused: set[PathT] = set()
    # the abstract NNX parameters, traced once for the flatten checks and the probe
    params = nnx.state(nnx.eval_shape(make_nnx), nnx.Param)
    flat = functools.cache(lambda: _flat_vector(params, table))  # asked only of an unmapped vector
    sized = functools.cache(lambda: param_sized_vectors(tx, params))
    for lpath, leaf in _flatten(opt_state):
        npath = ("opt_state", *map_opt_state_path(lpath, table))
        hit = by_str.get(tuple(map(str, npath)))
        lname = join(("opt_state", *lpath))
        if hit is None:
            problems.append(Problem("no NNX home", lname, join(npath), "the NNX optimizer has no such state"))
            continue
        want = slots[hit].get_value()
        shape, dtype = _shape_dtype(leaf)
        refusal = _refusal(want, lpath, shape, dtype, table, flat, sized)
        if refusal is not None:
            problems.append(Problem(refusal[0], lname, join(hit), refusal[1]))
            refused.add(hit)  # its slot is this problem, not also "not filled"
            continue
        how = _fit(want, shape, dtype)
        if how is None:
            problems.append(_mismatch(want, shape, dtype, lname, join(hit)))
            refused.add(hit)
            continue
        sources[hit] = leaf
        vtype = type(slots[hit]).__name__
        mapped.append(
            MappedLeaf("opt_state", lpath, hit, vtype, tuple(want.shape), dtype_name(want.dtype), how)
        )
    step_path = by_str.get(("step",))
    if step_path is not None and step is not None:
        want = slots[step_path].get_value()
        problems += _step_range(step, want.dtype, join(step_path))
        sources[step_path] = np.asarray(step)  # Linen int32 -> NNX uint32, cast when filled
        mapped.append(
            MappedLeaf(
                "step", (), step_path, type(slots[step_path]).__name__, (), dtype_name(want.dtype), "cast"
            )
        )
    problems += _fill_the_rest(slots, sources, refused, kept_params)
    problems += probe_problems(tx, params, table)
    return slots, sources, mapped, problems


def _fit(want: Any, shape: tuple, dtype: Any) -> str | None:
    """How a Linen leaf of ``shape`` / ``dtype`` fills the slot ``want``: ``optax`` as it is, its PRNG key
    data wrapped into a typed key (or the reverse, :mod:`.keys`), or None: a mismatch."""
    if tuple(want.shape) == shape and same_dtype(want.dtype, dtype):
        return "optax"
    return key_fit(want.shape, want.dtype, shape, dtype)


def _mismatch(want: Any, shape: tuple, dtype: Any, lname: str, nnx_name: str) -> Problem:
    expected = f"expected {tuple(want.shape)} {dtype_name(want.dtype)}"
    return Problem("shape/dtype mismatch", lname, nnx_name, f"{expected}, got {shape} {dtype_name(dtype)}")


def _refusal(
    want: Any, lpath: PathT, shape: tuple, dtype: Any, table: Mapping, flat: Any, sized: Any
) -> tuple[str, str] | None:
    """(kind, note) of a Linen leaf its NNX slot cannot take whatever the values: Linen state where
    NNX's optimizer keeps none (a ``MaskedNode``: a mask or label function that reads path keys labels
    NNX's state, whose keys end in ``value``, otherwise than Linen's dicts), or a flattened vector of
    every parameter in Linen's order (see :func:`_reordered_vector`)."""
    if not hasattr(want, "shape"):
        return "optimizer differs", (
            f"Linen holds {shape} {dtype_name(dtype)} state where the NNX optimizer holds none "
            f"({type(want).__name__}): a mask or multi_transform label function that reads the tree's "
            "path keys labels NNX's state (keys end in 'value') otherwise than Linen's dicts"
        )
    if _reordered_vector(lpath, shape, table, flat, sized):
        subset = "" if shape == (flat()[0],) else _SUBSET_NOTE.format(n=flat()[0])
        return "parameter order differs", _FLAT_NOTE.format(n=shape[0]) + subset
    return None


def _fill_the_rest(
    slots: Mapping[PathT, Any], sources: dict[PathT, Any], refused: set[PathT], kept_params: frozenset[str]
) -> list[Problem]:
    """The slots no Linen leaf filled: a masked node's own value, ``tx.init``'s for a parameter Linen
    never creates (:data:`FROM_INIT`), a "not filled" problem for any other (one refused already is
    its own problem)."""
    problems = []
    for path in sorted(slots, key=join):
        if path in sources or path in refused:
            continue
        if not hasattr(slots[path].get_value(), "shape"):  # optax.MaskedNode (masked / multi_transform)
            sources[path] = slots[path].get_value()
        elif any(join(path).endswith("/" + kept) for kept in kept_params):
            sources[path] = FROM_INIT  # the optax state of a parameter Linen never creates
        elif path == ("step",):  # params and opt_state saved without a TrainState's step
            problems.append(Problem("not filled", None, "step", _NO_STEP))
        else:
            problems.append(Problem("not filled", None, join(path), "no Linen optimizer leaf maps to it"))
    return problems


_NO_STEP = (
    "the checkpoint has no top-level 'step' beside its opt_state (a TrainState saves one); save the step "
    "with the state, or convert the parameters alone (a spec without an optimizer)"
)


def _reordered_vector(lpath: PathT, shape: tuple[int, ...], table: Any, flat: Any, sized: Any) -> bool:
    """An optax.flatten vector (:func:`_flat_shape`) where Linen and NNX order the parameters
    differently (``flat()``: ``(number of parameter values, same order)``; ``sized()``: the paths of
    vectors whose length follows the parameters' sizes, asked only of a shorter vector)."""
    if _on_param_path(lpath, table) or not _flat_shape(shape, flat()[0]) or flat()[1]:
        return False
    return shape == (flat()[0],) or tuple(map(str, lpath)) in sized()


def _on_param_path(lpath: PathT, table: Mapping[tuple[str, ...], PathT]) -> bool:
    """Whether an optax leaf's path ends in a Linen parameter's (``0/mu/norm/bias``): per-parameter state."""
    keys = tuple(map(str, lpath))
    return any(keys[i:] in table for i in range(len(keys)))


def _flat_shape(shape: tuple[int, ...], n_params: int) -> bool:
    """A 1-D leaf of all parameter values or fewer: optax.flatten's state, of all parameters or of those
    a mask or a multi_transform label hands it, when it is on no parameter's path and its length follows
    the parameters' sizes (:func:`param_sized_vectors`)."""
    return len(shape) == 1 and 1 < shape[0] <= n_params


_SUBSET_NOTE = (
    " (here of {n} parameter values in all: a flatten under optax.masked / multi_transform, which keeps a "
    "subset in the same order)"
)

_FLAT_NOTE = (
    "one vector of {n} parameter values (optax.flatten), in the order of the parameters' paths, "
    "which Linen and NNX sort differently ('Dense_0' before 'classifier', 'layers_10' before 'layers_2'): "
    "copied as it is, each moment would land on another parameter"
)


def _flat_vector(params: Any, table: Mapping[tuple[str, ...], PathT]) -> tuple[int, bool]:
    """``(n, same)``: the number of values of all NNX parameters, and whether a flat vector of them
    (optax.flatten's state) lists them in the same order on both sides: Linen's params in sorted path
    order, each moved to its NNX path, against the order of the NNX model's own (abstract) parameter
    state ``params``."""
    from flax import nnx

    nnx_params = [(tuple(p), v.get_value()) for p, v in nnx.to_flat_state(params)]
    size = sum(int(np.prod(value.shape)) for _, value in nnx_params)
    linen_order = [tuple(map(str, table[k])) for k in sorted(table)]
    nnx_order = [tuple(map(str, p)) for p, _ in nnx_params]
    return size, linen_order == nnx_order


def _step_range(step: int, dtype: Any, nnx_path: str) -> list[Problem]:
    """A problem when ``step`` does not fit NNX's counter (``-1`` would wrap to 4294967295 in uint32)."""
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    if info is None or info.min <= int(step) <= info.max:
        return []
    return [Problem("step out of range", "step", nnx_path, f"{int(step)} does not fit {dtype}")]


def convert_opt_state(
    opt_state: Any,
    step: int | None,
    param_table: Mapping[PathT, PathT],
    make_nnx: Any,
    tx: Any,
    source: str,
    kept_params: frozenset[str] = frozenset(),
) -> tuple[Any, list[MappedLeaf]]:
    """Fill the abstract NNX optimizer state from the Linen one; ConversionError lists every problem."""
    import jax.numpy as jnp
    from flax import nnx

    slots, sources, mapped, problems = plan_opt_state(opt_state, step, param_table, make_nnx, tx, kept_params)
    raise_problems(problems, f"{source} (opt_state)", "nnx.Optimizer")
    from linen2nnx.checkpoint_convert.lazy import is_deferred

    fresh_paths = {p for p, v in sources.items() if v is FROM_INIT}
    if fresh_paths:
        fresh = fresh_leaves(lambda: nnx_optimizer(make_nnx(), tx), fresh_paths)
        sources.update({p: var.get_value() for p, var in fresh.items()})

    filled = {p: _filled(v, slots[p].get_value(), is_deferred, jnp) for p, v in sources.items()}
    state = nnx.from_flat_state([(p, slots[p].replace(value=filled[p])) for p in slots])
    return state, mapped


def _filled(value: Any, want: Any, is_deferred: Any, jnp: Any) -> Any:
    """One slot's value: a placeholder read while written, a masked node as it is, key data wrapped into
    a typed key slot (or the reverse, :mod:`.keys`), else the array in the slot's dtype."""
    if is_key(getattr(want, "dtype", None)) or is_key(getattr(value, "dtype", None)):
        return as_slot_value(value, tuple(want.shape), want.dtype)
    if is_deferred(value) or not hasattr(value, "shape"):
        return value
    return jnp.asarray(value, dtype=want.dtype)


def _shape_dtype(leaf: Any) -> tuple[tuple[int, ...], Any]:
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return tuple(leaf.shape), leaf.dtype if is_key(leaf.dtype) else np.dtype(leaf.dtype)
    arr = np.asarray(leaf)
    return tuple(arr.shape), arr.dtype


def restore_optimizer(model: Any, tx: Any, state: Any) -> Any:
    """An ``nnx.Optimizer`` over ``model`` carrying a converted (or restored) optimizer state."""
    from flax import nnx

    opt = nnx_optimizer(model, tx)
    nnx.update(opt, state)
    return opt


def _flatten(tree: Any, prefix: PathT = ()) -> list[tuple[PathT, Any]]:
    out: list[tuple[PathT, Any]] = []
    if tree is None:
        return out
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            out += _flatten(v, (*prefix, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out += _flatten(v, (*prefix, i))
    else:
        out.append((prefix, tree))
    return out
