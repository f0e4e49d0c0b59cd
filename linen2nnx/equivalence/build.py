"""Build both sides of a parity check: Linen variables, the NNX twin with transferred weights, and
jitted forward / loss / gradient functions for each.

Weights always travel through the converter (``checkpoint_convert``), never through a fresh init:
a parity check that re-initialised the NNX side would prove nothing about the conversion.

Dropout is disabled in train mode on *both* sides so that BatchNorm still uses batch statistics
but nothing is random (Linen and NNX derive dropout masks differently, docs/nnx_facts.md#seeds-dropout-and-rng-state):

- Linen: an ``nn.intercept_methods`` interceptor returns the input of every ``nn.Dropout`` call and
  runs attention modules with ``dropout_rate=0`` (their dropout is internal);
- NNX: a clone of the model whose ``nnx.Dropout`` modules have ``rate=0.0`` (``Dropout.__call__``
  returns its input when ``rate == 0`` whatever ``deterministic`` says) and whose attention
  modules have ``dropout_rate=0.0``.

Eval mode is run as is: a twin that forgets ``deterministic=not train`` must fail the check. Random
numbers a model draws itself (stochastic depth, sampling) come from one fixed key on both sides in
either mode (:mod:`.randomness`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert import (
    ConversionReport,
    LinenCheckpoint,
    convert_tree,
    load_nnx_checkpoint,
    read_linen_checkpoint,
)
from linen2nnx.equivalence.jitting import fast_jit, maybe_jit, memoized
from linen2nnx.equivalence.noise import perturbed
from linen2nnx.equivalence.randomness import same_keys
from linen2nnx.equivalence.sown import call_capturing, flat_sown, sown_collections, sown_tree
from linen2nnx.errors import L2NError, ModelBuildError
from linen2nnx.namemap import NameMap


def _flat_key(path: tuple[Any, ...]) -> str:
    return "/".join(map(str, path))


@dataclasses.dataclass
class Sides:
    """Everything ``check`` compares: the Linen variables, the NNX twin and the path mapping."""

    linen_variables: dict[str, Any]
    nnx_model: Any
    report: ConversionReport
    checkpoint: LinenCheckpoint


def build_sides(
    pair: Any,
    linen_ckpt: Any = None,
    nnx_ckpt: str | Path | None = None,
    name_map: NameMap | str | Path | None = None,
) -> Sides:
    """Linen variables (checkpoint or ``init_variables``) and the NNX twin holding converted weights.

    With ``nnx_ckpt`` the twin is loaded from that converted checkpoint (checking what ``convert``
    wrote); the in-memory conversion still runs to validate the mapping and to give the path table
    used for gradients and batch statistics.
    """
    if linen_ckpt is None:
        try:
            init = linen_init_variables(pair.linen)
        except Exception as e:
            raise ModelBuildError(
                f"cannot build the Linen model {_name(pair)} on its example batch: {type(e).__name__}: {e}"
            ) from e
        # init's zero biases and unit scales hide a dropped bias or a swapped scale: with no checkpoint
        # the weights are init plus noise (perturb.py), fixed by its seed
        init = perturbed(init)
        ckpt = read_linen_checkpoint(init, live=True)  # its boxes are objects: {'value': x} is a param
        ckpt.source = "perturbed init_variables()"
    else:
        if isinstance(linen_ckpt, (str, Path)):  # its arrays are read now: of every collection the model
            _register_collections(pair)  # registers too (a bridged Linen part's own), not only flax's
        ckpt = read_linen_checkpoint(linen_ckpt)
    try:
        converted = convert_tree(ckpt, pair, name_map, optimizer=False)
    except L2NError as e:
        if isinstance(e.__cause__, Exception) and str(e).startswith("cannot build the target NNX model"):
            raise ModelBuildError(str(e)) from e.__cause__
        raise
    model = load_nnx_checkpoint(nnx_ckpt, pair) if nnx_ckpt is not None else converted.model()
    return Sides(_linen_variables(pair, ckpt), model, converted.report, ckpt)


def _register_collections(pair: Any) -> None:
    """Build the NNX model abstractly once, so the Variable types it registers as it is built (a Linen
    class kept behind ``nnx.bridge.ToNNX`` with a collection of its own, ``stats``) are known when the
    checkpoint is read: its collection is then read as one, not ignored. A model that fails to build
    is reported by the conversion."""
    from flax import nnx

    try:
        nnx.eval_shape(lambda: pair.make_nnx(0))
    except Exception:
        pass


def _linen_variables(pair: Any, ckpt: Any) -> dict[str, Any]:
    """What the Linen model is applied with: the checkpoint's variables, where a ``{'value': array}``
    read as a restored partitioning box is put back as it was when the Linen model's own init has a
    parameter named ``value`` there (``self.param('value', ...)``: unboxed, the model found an array
    where its submodule's parameters should be)."""
    import jax

    from linen2nnx.checkpoint_convert.read import parse_tree

    variables = ckpt.variables()
    if not ckpt.unboxed:
        return variables
    try:
        abstract = jax.eval_shape(pair.linen.init_variables)
    except Exception:  # the Linen model's own failure is reported where it is applied
        return variables
    named_value = {
        "/".join((coll, *map(str, path)))
        for coll, path, _ in parse_tree(abstract, source="<Linen init>", live=True).leaves()
        if path and path[-1] == "value"
    }
    for unboxed in ckpt.unboxed:
        if f"{unboxed}/value" in named_value:
            *parents, last = unboxed.split("/")
            node = variables = {**variables}
            for key in parents:
                node[key] = {**node[key]}
                node = node[key]
            node[last] = {"value": node[last]}
    return variables


def _name(pair: Any) -> str:
    return pair.linen.name or type(pair.linen.model).__name__


# ---- dropout off -------------------------------------------------------------------------------
def _linen_no_dropout(next_fun: Callable[..., Any], args: tuple, kwargs: dict, context: Any) -> Any:
    import flax.linen as nn

    module = context.module
    if context.method_name == "__call__":
        if isinstance(module, nn.Dropout):
            return args[0] if args else kwargs["inputs"]
        if isinstance(module, nn.MultiHeadDotProductAttention):
            # its rate set to 0 for this call, as the NNX clone's: a `deterministic=True` keyword would
            # clash with one the constructor was given ("passed ... at call time")
            saved = module.dropout_rate
            object.__setattr__(module, "dropout_rate", 0.0)
            try:
                return next_fun(*args, **kwargs)
            finally:
                object.__setattr__(module, "dropout_rate", saved)
    return next_fun(*args, **kwargs)


@contextlib.contextmanager
def linen_dropout_off() -> Iterator[None]:
    """Inside this context (at trace time), Linen ``nn.Dropout`` is the identity."""
    import flax.linen as nn

    with nn.intercept_methods(_linen_no_dropout):
        yield


def nnx_dropout_off(model: Any) -> Any:
    """A clone of ``model`` with every NNX dropout rate set to 0 (the original is untouched). A Linen
    module inside it (``nnx.bridge.ToNNX``) builds its dropout at call time: call the clone inside
    :func:`linen_dropout_off` too."""
    from flax import nnx

    clone = nnx.clone(model)
    for _, module in nnx.iter_modules(clone):
        if isinstance(module, nnx.Dropout):
            module.rate = 0.0
        elif isinstance(module, nnx.MultiHeadAttention):
            module.dropout_rate = 0.0
    return clone


# ---- jitted side functions ---------------------------------------------------------------------
@dataclasses.dataclass
class Inputs:
    """One mode's call inputs split for ``jax.jit``: arrays are traced, Python values are baked in.

    ``train=True`` must stay a Python bool (the model branches on it), while the batch must be a
    traced argument (closing over it would embed it as a constant in the executable).
    """

    dynamic: list[Any]
    _static: list[Any]
    _is_array: list[bool]
    _treedef: Any

    @classmethod
    def of(cls, pair: Any, train: bool) -> Inputs:
        """From a ModelPair (or a LinenSide) and a mode."""
        import jax
        import numpy as np

        side = getattr(pair, "linen", pair)
        args, kwargs = side.call_args(train)
        leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs), side.batch))
        is_array = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
        return cls(
            [x for x, a in zip(leaves, is_array) if a],
            [None if a else x for x, a in zip(leaves, is_array)],
            is_array,
            treedef,
        )

    @property
    def key(self) -> tuple[Any, ...]:
        """What a traced function depends on besides the array shapes (hashable if the statics are)."""
        return (self._treedef, tuple(self._static), tuple(self._is_array))

    def rebuild(self, dynamic: list[Any]) -> tuple[tuple, dict, Any]:
        """``(args, kwargs, batch)`` from the (traced) dynamic leaves."""
        it = iter(dynamic)
        return self._treedef.unflatten([next(it) if a else s for a, s in zip(self._is_array, self._static)])


def with_batch(pair: Any, batch: Any) -> Any:
    """A copy of ``pair`` whose Linen side uses ``batch`` as its example batch (``pair`` is untouched)."""
    return dataclasses.replace(pair, linen=dataclasses.replace(pair.linen, batch=batch))


def linen_init_variables(side: Any) -> Any:
    """``side.init_variables()`` (eval-mode ``model.init`` on the example batch), jitted and reused."""
    ins = Inputs.of(side, False)
    model = side.model

    def build() -> Any:
        def init(rngs: Any, dynamic: list[Any]) -> Any:
            args, kwargs, _ = ins.rebuild(dynamic)
            return model.init(rngs, *args, **kwargs)

        return fast_jit(init)

    return memoized(("init", model, ins.key), build)(side.init_rngs(), ins.dynamic)


def linen_fns(pair: Any, jit: bool = True) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``(eval_fn, train_fn)`` for the Linen side, inputs bound; jitted unless ``jit=False``.

    ``eval_fn(variables) -> (outputs, loss, sown intermediates)``;
    ``train_fn(variables) -> (outputs, loss, grads, updated collections)`` (dropout off; the values
    sown in train mode under ``intermediates``).
    The jitted pair is reused by later checks of the same Linen model on inputs of the same structure.
    """
    side = pair.linen
    rngs = side.apply_rngs()
    ins_e, ins_t = Inputs.of(pair, False), Inputs.of(pair, True)
    build = functools.partial(_linen_compile, side.model, side.loss, tuple(side.mutable), ins_e, ins_t, jit)
    if jit:
        eval_c, train_c = memoized(
            ("fns", side.model, side.loss, tuple(side.mutable), ins_e.key, ins_t.key), build
        )
    else:
        eval_c, train_c = build()
    return (
        lambda variables: eval_c(variables, rngs, ins_e.dynamic),
        lambda variables: train_c(variables, rngs, ins_t.dynamic),
    )


def _linen_compile(
    model: Any, loss: Any, mutable_colls: tuple[str, ...], ins_e: Inputs, ins_t: Inputs, jit: bool
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    import jax

    # train mode sows too (an MoE's load-balancing loss under `if train:`): its values come back with
    # the updated collections, under "intermediates" (or a sown collection of its own, sown.py)
    sown_colls = list(sown_collections())
    mutable = [*mutable_colls, *(c for c in sown_colls if c not in mutable_colls)]

    def eval_fn(variables: Any, rngs: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_e.rebuild(dynamic)
        with same_keys():
            out, sown = model.apply(variables, *args, **kwargs, rngs=rngs, mutable=sown_colls)
        return out, loss(out, batch), sown_tree(sown)

    def train_fn(variables: Any, rngs: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_t.rebuild(dynamic)

        def f(params: Any) -> Any:
            with linen_dropout_off(), same_keys():
                res = model.apply(
                    {**variables, "params": params}, *args, **kwargs, mutable=mutable, rngs=rngs
                )
            out, updates = res
            return loss(out, batch), (out, updates)

        (value, (out, updates)), grads = jax.value_and_grad(f, has_aux=True)(variables.get("params", {}))
        return out, value, grads, updates

    return maybe_jit(eval_fn, jit), maybe_jit(train_fn, jit)


def model_state(model: Any) -> dict[str, Any]:
    """``{'a/b/name': value}`` of every variable of ``model`` but its params, sown values and RNG
    state (a plain array attribute is no variable): what a forward may update."""
    from flax import nnx

    kinds = nnx.Not(nnx.Any(nnx.Param, nnx.Intermediate, nnx.RngState))
    return {
        _flat_key(k): v.get_value()
        for k, v in nnx.to_flat_state(nnx.state(model, kinds))
        if isinstance(v, nnx.Variable)
    }


def nnx_fns(pair: Any, model: Any, jit: bool = True) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``(eval_fn, train_fn)`` for the NNX side (split/merge + ``jax.jit``), model and inputs bound.

    ``eval_fn() -> (outputs, loss, sown values, state after the call)`` runs ``model`` as is under
    ``nnx.capture``;
    ``train_fn() -> (outputs, loss, grads, non-param state after the call, sown values)`` runs the
    dropout-free clone; grads, state and sown values come back as ``{'a/b': array}`` dicts. ``model`` is never
    mutated.
    """
    import jax
    from flax import nnx

    side = pair.linen
    ins_e, ins_t = Inputs.of(pair, False), Inputs.of(pair, True)
    gdef_eval, state_eval = nnx.split(model)
    gdef_train, params, rest = nnx.split(nnx_dropout_off(model), nnx.Param, ...)

    def eval_fn(state: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_e.rebuild(dynamic)
        with same_keys():
            out, sown, called = call_capturing(lambda: nnx.merge(gdef_eval, state, copy=True), args, kwargs)
        return out, side.loss(out, batch), flat_sown(sown), model_state(called)

    def train_fn(p0: Any, r0: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_t.rebuild(dynamic)

        def f(p: Any) -> Any:
            # copy=True: fresh Variables at this trace level, so BatchNorm may update its stats
            # under nnx.capture, as in eval: a sow inside a transform with graph_updates off still counts;
            # a class kept as Linen behind nnx.bridge.ToNNX runs its own nn.Dropout: off as Linen's
            with same_keys(), linen_dropout_off():
                out, sown, called = call_capturing(
                    lambda: nnx.merge(gdef_train, p, r0, copy=True), args, kwargs
                )
            return side.loss(out, batch), (out, model_state(called), flat_sown(sown))

        (loss, (out, after, sown)), grads = jax.value_and_grad(f, has_aux=True)(p0)
        flat_grads = {_flat_key(k): v.get_value() for k, v in nnx.to_flat_state(grads)}
        return out, loss, flat_grads, after, sown

    eval_c, train_c = maybe_jit(eval_fn, jit), maybe_jit(train_fn, jit)
    return (lambda: eval_c(state_eval, ins_e.dynamic), lambda: train_c(params, rest, ins_t.dynamic))
