"""The training state: one ``nnx.split`` of ``(model, nnx.Optimizer)``, built from a spec or from
what ``convert`` wrote, placed on the mesh by the model's own sharding metadata.

The graph is split once; the train step is then a pure function of the returned ``nnx.State``
(``state[0]`` the model, ``state[1]`` the optimizer: ``step`` and ``opt_state``). With a mesh active
(:func:`linen2nnx.equivalence.mesh.mesh_scope`), every leaf's sharding is ``nnx.get_named_sharding``
of its ``out_sharding`` names under the spec's logical axis rules; optimizer-state leaves inherit the
names of the parameter they mirror, so ``mu`` / ``nu`` are split like their weight.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError
from linen2nnx.spec import nnx_optimizer


class CheckpointError(L2NError):
    """A checkpoint that is missing, unreadable or does not fit the model (named by its path)."""


@dataclasses.dataclass
class TrainState:
    """``graphdef`` + ``state`` of ``(model, optimizer)``, and the sharding of every state leaf."""

    graphdef: Any
    state: Any
    shardings: Any = None  # a pytree like ``state`` of NamedSharding, or None without a mesh

    @property
    def step(self) -> int:
        """The optimizer's step counter (the Linen step after ``--init-from`` a converted run)."""
        return int(self.state[1]["step"].get_value())


def choose_tx(pair: Any) -> Any:
    """The spec's optimizer, else ``optax.adam(1e-3)`` (what ``check --steps`` uses too)."""
    from linen2nnx.equivalence.training import _choose_tx

    return _choose_tx(pair, None)[0]


def _model(pair: Any, seed: int, deterministic: bool) -> Any:
    """The spec's NNX model; with ``deterministic`` its dropout rates set to 0 (the equivalence
    stage's own switch), so the run can be compared step by step with a Linen run."""
    model = pair.make_nnx(seed)
    if deterministic:
        from linen2nnx.equivalence.build import nnx_dropout_off

        model = nnx_dropout_off(model)
    return model


def abstract_state(pair: Any, tx: Any, *, seed: int = 0, deterministic: bool = False) -> TrainState:
    """Shapes, dtypes and (under a mesh) shardings of the train state; nothing allocated."""
    import jax
    from flax import nnx

    def build() -> Any:
        model = _model(pair, seed, deterministic)
        return model, nnx_optimizer(model, tx)

    graphdef, abstract = nnx.split(nnx.eval_shape(build))
    mesh = jax.sharding.get_mesh()
    shardings = None if mesh.empty else nnx.get_named_sharding(abstract, mesh)
    return TrainState(graphdef, abstract, shardings)


def init_state(pair: Any, tx: Any, *, seed: int = 0, deterministic: bool = False) -> TrainState:
    """A fresh train state (the spec's NNX init), created directly with its shardings."""
    import jax
    from flax import nnx

    target = abstract_state(pair, tx, seed=seed, deterministic=deterministic)

    def build() -> Any:
        model = _model(pair, seed, deterministic)
        return nnx.state((model, nnx_optimizer(model, tx)))

    state = jax.jit(build, out_shardings=target.shardings)()
    return dataclasses.replace(target, state=canonical(target.graphdef, state))


def canonical(graphdef: Any, state: Any) -> Any:
    """``state`` in the exact pytree structure the train step returns (``nnx.state`` of the merged
    graph), so the jitted step is traced and compiled once, not again on its second call."""
    from flax import nnx

    return nnx.state(nnx.merge(graphdef, state), nnx.Not(nnx.Intermediate))


def _this_device() -> Any:
    """The sharding of a run without a mesh: this process's first device."""
    import jax

    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _with_shardings(abstract: Any, shardings: Any) -> Any:
    """Abstract leaves carrying their target sharding: what a sharded Orbax restore needs. Without a
    mesh, this process's first device: restored without one, Orbax gives host numpy arrays, which the
    jitted step then compiled for once, and again for the device arrays of its own output."""
    import jax

    if shardings is None:
        device = _this_device()
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device), abstract)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def restore_tree(path: Path, abstract: Any, what: str) -> Any:
    """Orbax-restore ``path`` onto ``abstract``, after checking every leaf's path and shape fits."""
    import orbax.checkpoint as ocp

    if not (path / "_METADATA").exists():
        why = "not found" if not path.exists() else "not an Orbax checkpoint (no _METADATA)"
        raise CheckpointError(f"{path}: {what} {why}")
    with ocp.StandardCheckpointer() as ckptr:
        try:
            meta = ckptr.metadata(path).item_metadata
        except Exception as e:
            raise CheckpointError(f"{path}: {what} unreadable: {type(e).__name__}: {e}") from e
        fit_problems(meta, abstract, path, what)
        try:
            return ckptr.restore(path, abstract)
        except Exception as e:
            raise CheckpointError(f"{path}: cannot restore the {what}: {type(e).__name__}: {e}") from e


def _meta_shapes(tree: Any, prefix: tuple[str, ...] = ()) -> dict[str, tuple[int, ...]]:
    """Orbax item metadata as ``{path: shape}``; a Variable's trailing ``value`` level dropped."""
    out: dict[str, tuple[int, ...]] = {}
    if isinstance(tree, dict):
        if set(tree) == {"value"} and not isinstance(tree["value"], dict):
            return {"/".join(prefix): tuple(getattr(tree["value"], "shape", ()))}
        for k, v in tree.items():
            out.update(_meta_shapes(v, (*prefix, str(k))))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_meta_shapes(v, (*prefix, str(i))))
    elif tree is not None:
        out["/".join(prefix)] = tuple(getattr(tree, "shape", ()))
    return out


def fit_problems(meta: Any, abstract: Any, path: Path, what: str) -> None:
    """Raise a :class:`CheckpointError` listing every leaf missing, extra or of the wrong shape.

    Orbax would restore some mismatches silently or fail deep inside tensorstore; a named list is
    what a user can act on. PRNG keys are stored as raw ``uint32`` data, so only their presence counts.
    """
    import jax
    from flax import nnx

    have = _meta_shapes(getattr(meta, "tree", meta))
    want = {}
    keys, masked = set(), set()
    for p, var in nnx.to_flat_state(abstract):
        name = "/".join(map(str, p))
        value = var.get_value() if hasattr(var, "get_value") else var
        if not hasattr(value, "shape"):  # optax.MaskedNode (masked / multi_transform): no data
            masked.add(name)
            continue
        want[name] = tuple(value.shape)
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            keys.add(name)
    problems = [f"missing {p} {s}" for p, s in want.items() if p not in have]
    problems += [f"unexpected {p} {s}" for p, s in have.items() if p not in want and p not in masked]
    problems += [
        f"{p}: checkpoint {have[p]} vs model {s}"
        for p, s in want.items()
        if p in have and p not in keys and have[p] != s
    ]
    if problems:
        shown = "; ".join(problems[:8]) + (f"; ... ({len(problems)} in all)" if len(problems) > 8 else "")
        tops = {p.split("/", 1)[0] for p in have}
        linen = (
            " (it looks like a Linen checkpoint: run `linen2nnx convert` on it first)"
            if "params" in tops
            else ""
        )
        raise CheckpointError(f"{path}: the {what} does not fit the model{linen}: {shown}")


def state_from_converted(
    pair: Any, tx: Any, path: str | Path, *, seed: int = 0, deterministic: bool = False
) -> TrainState:
    """The train state from ``convert``'s output: its model state, and its optimizer state and step
    when ``convert`` wrote them (``DIR/optimizer``), else a fresh ``tx.init`` at step 0."""
    import jax
    from flax import nnx

    from linen2nnx.checkpoint_convert.write import OPTIMIZER_DIR

    path = Path(path).expanduser().absolute()
    target = abstract_state(pair, tx, seed=seed, deterministic=deterministic)
    shards = target.shardings if target.shardings is not None else (None, None)
    model_state = restore_tree(path, _with_shardings(target.state[0], shards[0]), "converted NNX checkpoint")
    model_state = _seeded_streams(pair, model_state, seed, deterministic)
    if (path / OPTIMIZER_DIR).exists():
        opt_abstract = _with_shardings(target.state[1], shards[1])
        opt_state = restore_tree(path / OPTIMIZER_DIR, opt_abstract, "converted optimizer state")
    else:  # params only: the optimizer starts fresh at step 0
        model_gdef = nnx.graphdef(nnx.eval_shape(lambda: pair.make_nnx(seed)))

        def fresh(ms: Any) -> Any:
            return nnx.state(nnx_optimizer(nnx.merge(model_gdef, ms), tx))

        opt_state = jax.jit(fresh, out_shardings=shards[1])(model_state)
    state = canonical(target.graphdef, nnx.State({0: model_state, 1: opt_state}))
    if target.shardings is None:  # every leaf committed to the device, as the step's outputs are: one compile
        state = jax.device_put(state, _this_device())
    return dataclasses.replace(target, state=state)


def fresh_optimizer_note(path: str | Path) -> str | None:
    """What a person resuming a Linen run should hear about ``convert``'s output at ``path``: it records a
    Linen step past 0 but holds no optimizer state (converted with a spec naming no optimizer, or its
    ``optimizer/`` left behind), so training starts a fresh optimizer at step 0 -- new moments, and a
    learning-rate schedule from its start. Right for fine-tuning from converted weights; silently wrong
    for continuing the Linen run. None when there is nothing to say."""
    import json

    from linen2nnx.checkpoint_convert.write import OPTIMIZER_DIR, REPORT_FILENAME

    path = Path(path).expanduser()
    if (path / OPTIMIZER_DIR).exists():
        return None
    try:
        step = json.loads((path / REPORT_FILENAME).read_text()).get("step")
    except (OSError, ValueError):
        return None
    if not isinstance(step, int) or step <= 0:
        return None
    return (
        f"{path} holds the weights of Linen step {step} but no optimizer state: training starts a fresh "
        "optimizer at step 0 (new moments, the learning-rate schedule from its start); to continue the "
        "Linen run, convert with a spec that names the optimizer (LinenSide.optimizer)"
    )


def _seeded_streams(pair: Any, model_state: Any, seed: int, deterministic: bool) -> Any:
    """``model_state`` with its RNG streams those of ``--seed``: a Linen checkpoint holds no RNG state,
    so the converted one carries the streams of convert's own init, which every run from it would
    share (the same dropout masks whatever ``--seed``). Only the streams are built (jit drops the
    weights' initializers, whose results nothing returns)."""
    import jax
    from flax import nnx

    streams = jax.jit(lambda: nnx.state(_model(pair, seed, deterministic), nnx.RngState))()
    flat = dict(nnx.to_flat_state(model_state))  # restored into the same model's structure: same paths
    flat.update(nnx.to_flat_state(streams))
    return nnx.from_flat_state(flat)
