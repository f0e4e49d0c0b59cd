"""Build both sides of a parity check: Linen variables, the NNX twin with transferred weights, and
jitted forward / loss / gradient functions for each.

Weights always travel through the converter (``checkpoint_convert``), never through a fresh init:
a parity check that re-initialised the NNX side would prove nothing about the conversion.

Dropout is disabled in train mode on *both* sides so that BatchNorm still uses batch statistics
but nothing is random (Linen and NNX derive dropout masks differently, reference §1.1):

- Linen: an ``nn.intercept_methods`` interceptor returns the input of every ``nn.Dropout`` call and
  forces ``deterministic=True`` on attention modules (their dropout is internal);
- NNX: a clone of the model whose ``nnx.Dropout`` modules have ``rate=0.0`` (``Dropout.__call__``
  returns its input when ``rate == 0`` whatever ``deterministic`` says) and whose attention
  modules have ``dropout_rate=0.0``.

Eval mode is run as is: a twin that forgets ``deterministic=not train`` must fail the check.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


def build_sides(pair: Any, linen_ckpt: Any = None, nnx_ckpt: str | Path | None = None,
                name_map: NameMap | str | Path | None = None) -> Sides:
    """Linen variables (checkpoint or ``init_variables``) and the NNX twin holding converted weights.

    With ``nnx_ckpt`` the twin is loaded from that converted checkpoint (checking what ``convert``
    wrote); the in-memory conversion still runs to validate the mapping and to give the path table
    used for gradients and batch statistics.
    """
    ckpt = read_linen_checkpoint(pair.linen.init_variables() if linen_ckpt is None else linen_ckpt)
    if linen_ckpt is None:
        ckpt.source = "init_variables()"
    converted = convert_tree(ckpt, pair, name_map, optimizer=False)
    model = load_nnx_checkpoint(nnx_ckpt, pair) if nnx_ckpt is not None else converted.model()
    return Sides(ckpt.variables(), model, converted.report, ckpt)


# ---- dropout off -------------------------------------------------------------------------------
def _linen_no_dropout(next_fun: Callable[..., Any], args: tuple, kwargs: dict, context: Any) -> Any:
    import flax.linen as nn

    module = context.module
    if context.method_name == "__call__":
        if isinstance(module, nn.Dropout):
            return args[0] if args else kwargs["inputs"]
        if isinstance(module, nn.MultiHeadDotProductAttention):
            kwargs = {**kwargs, "deterministic": True}
    return next_fun(*args, **kwargs)


@contextlib.contextmanager
def linen_dropout_off() -> Iterator[None]:
    """Inside this context (at trace time), Linen ``nn.Dropout`` is the identity."""
    import flax.linen as nn

    with nn.intercept_methods(_linen_no_dropout):
        yield


def nnx_dropout_off(model: Any) -> Any:
    """A clone of ``model`` with every NNX dropout rate set to 0 (the original is untouched)."""
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
        import jax
        import numpy as np

        args, kwargs = pair.linen.call_args(train)
        leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs), pair.linen.batch))
        is_array = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
        return cls([x for x, a in zip(leaves, is_array) if a], [None if a else x for x, a in zip(leaves, is_array)],
                   is_array, treedef)

    def rebuild(self, dynamic: list[Any]) -> tuple[tuple, dict, Any]:
        """``(args, kwargs, batch)`` from the (traced) dynamic leaves."""
        it = iter(dynamic)
        return self._treedef.unflatten([next(it) if a else s for a, s in zip(self._is_array, self._static)])


def linen_fns(pair: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``(eval_fn, train_fn)`` for the Linen side, jitted, inputs bound.

    ``eval_fn(variables) -> (outputs, loss)``;
    ``train_fn(variables) -> (outputs, loss, grads, updated collections)`` (dropout off).
    """
    import jax

    side = pair.linen
    model = side.model
    mutable = list(side.mutable) if side.mutable else False
    rngs = {k: v for k, v in side.init_rngs().items() if k != "params"}
    ins_e, ins_t = Inputs.of(pair, False), Inputs.of(pair, True)

    @jax.jit
    def eval_jit(variables: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_e.rebuild(dynamic)
        out = model.apply(variables, *args, **kwargs, rngs=rngs)
        return out, side.loss(out, batch)

    @jax.jit
    def train_jit(variables: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_t.rebuild(dynamic)

        def f(params: Any) -> Any:
            with linen_dropout_off():
                res = model.apply({**variables, "params": params}, *args, **kwargs, mutable=mutable, rngs=rngs)
            out, updates = res if mutable else (res, {})
            return side.loss(out, batch), (out, updates)

        (loss, (out, updates)), grads = jax.value_and_grad(f, has_aux=True)(variables["params"])
        return out, loss, grads, updates

    return (lambda variables: eval_jit(variables, ins_e.dynamic),
            lambda variables: train_jit(variables, ins_t.dynamic))


def nnx_fns(pair: Any, model: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``(eval_fn, train_fn)`` for the NNX side (split/merge + ``jax.jit``), model and inputs bound.

    ``eval_fn() -> (outputs, loss)`` runs ``model`` as is;
    ``train_fn() -> (outputs, loss, grads, non-param state after the call)`` runs the dropout-free
    clone; grads and state come back as ``{'a/b': array}`` dicts. ``model`` is never mutated.
    """
    import jax
    from flax import nnx

    side = pair.linen
    ins_e, ins_t = Inputs.of(pair, False), Inputs.of(pair, True)
    gdef_eval, state_eval = nnx.split(model)
    gdef_train, params, rest = nnx.split(nnx_dropout_off(model), nnx.Param, ...)

    @jax.jit
    def eval_jit(state: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_e.rebuild(dynamic)
        out = nnx.merge(gdef_eval, state)(*args, **kwargs)
        return out, side.loss(out, batch)

    @jax.jit
    def train_jit(p0: Any, r0: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins_t.rebuild(dynamic)

        def f(p: Any) -> Any:
            # copy=True: fresh Variables at this trace level, so BatchNorm may update its stats
            m = nnx.merge(gdef_train, p, r0, copy=True)
            out = m(*args, **kwargs)
            after = {_flat_key(k): v.get_value() for k, v in nnx.to_flat_state(nnx.state(m, nnx.Not(nnx.Param)))
                     if not isinstance(v, nnx.RngState)}
            return side.loss(out, batch), (out, after)

        (loss, (out, after)), grads = jax.value_and_grad(f, has_aux=True)(p0)
        flat_grads = {_flat_key(k): v.get_value() for k, v in nnx.to_flat_state(grads)}
        return out, loss, flat_grads, after

    return (lambda: eval_jit(state_eval, ins_e.dynamic),
            lambda: train_jit(params, rest, ins_t.dynamic))
