"""Run one forward pass and record every submodule call's inputs and outputs, on either side.

- Linen: an ``nn.intercept_methods`` interceptor sees every ``__call__`` with the module's scope
  path (``layers/self_attention/query``), lifted transforms included.
- NNX: every module class in the model gets a temporary ``__call__`` wrapper; each module instance
  is tagged with its path (found with ``nnx.iter_modules``) as a plain static attribute, so the tag
  survives the split / merge that ``nnx.scan`` / ``nnx.vmap`` / ``nnx.remat`` do to the module.

The forward runs eagerly, but a module called inside a lifted transform (a scan over layers or
time, ``remat``) only sees tracers: its values leave the trace through ``jax.debug.callback``, once
per iteration, so a scanned module records one invocation per layer / time step. A body that is
traced more than once leaves records without values, which are dropped. ``order`` is the order in
which calls *finish* (post-order): a child always comes before its parent, which is what "the
first module whose output differs while its inputs agree" needs to name the innermost culprit.

The parameters a call reads (the module's own, not its children's) are recorded with its inputs:
inside a scan over layers they are the slice of this iteration, so a stack run in another order
than Linen's shows as a call reading another layer's weights, not as a module computing wrongly.
They are kept as a sorted vector of all their values, which does not depend on how either side
names, shapes or lays them out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

PathT = tuple[str, ...]
TAG = "_linen2nnx_path"
#: hook(path, kind, has_params, fn, args, kwargs) -> fn(*args, **kwargs), with whatever it records.
Hook = Callable[[PathT, str, bool, Callable[..., Any], tuple, dict], Any]


@dataclasses.dataclass
class Call:
    """One module call site; ``inputs`` / ``outputs`` hold one list of arrays per invocation."""

    path: PathT
    kind: str
    order: int
    has_params: bool = False
    inputs: list[list[np.ndarray]] = dataclasses.field(default_factory=list)
    outputs: list[list[np.ndarray]] = dataclasses.field(default_factory=list)
    error: str = ""
    weights: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    """Per invocation, the sorted values of the parameters the module itself reads (``None``: none)."""

    def add(self, ins: Any, outs: Any, weights: Any = ()) -> None:
        self.inputs.append([np.asarray(v) for v in ins])
        self.outputs.append([np.asarray(v) for v in outs])
        self.weights.append(fingerprint(weights))

    @property
    def recorded(self) -> bool:
        return bool(self.outputs) or bool(self.error)


def fingerprint(weights: Any) -> np.ndarray | None:
    """All values of a call's parameters, sorted (float32): equal for the same weights however
    they are named, shaped or transposed; ``None`` for a module without parameters of its own."""
    flat = [np.asarray(w, dtype=np.float32).ravel() for w in weights]
    return np.sort(np.concatenate(flat)) if flat else None


def own_weights(module: Any) -> list[Any]:
    """The parameter arrays a module holds itself (children's excluded), on either side, by name.

    Linen: the direct leaves of the bound module's ``params``; NNX: its ``nnx.Param`` attributes.
    Inside a lifted transform these are the traced slices of the current iteration."""
    if module is None:
        return []
    from flax import nnx

    if isinstance(module, nnx.Module):
        items = [(k, v.get_value()) for k, v in vars(module).items() if isinstance(v, nnx.Param)]
    else:
        from flax.core import meta

        try:
            params = module.variables.get("params", {})
        except Exception:  # an unbound module: nothing to read
            return []
        items = [(k, meta.unbox(v)) for k, v in params.items() if not hasattr(v, "items")]
    return [v for _, v in sorted(items, key=lambda kv: str(kv[0])) if isinstance(v, (jax.Array, np.ndarray))]


def array_leaves(tree: Any) -> list[Any]:
    """The array leaves of call arguments / outputs (NNX modules and RNG streams are skipped)."""
    from flax import nnx

    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, (nnx.Module, nnx.Rngs)))
    return [x for x in leaves if isinstance(x, (jax.Array, np.ndarray))]


class Recorder:
    """Collects :class:`Call` records; ``hook`` is what the Linen / NNX patches call."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._pending: list[Call] = []

    def hook(
        self, path: PathT, kind: str, has_params: bool, fn: Callable[..., Any], args: tuple, kwargs: dict
    ) -> Any:
        ins = array_leaves((args, kwargs))
        ws = own_weights(bound_module(fn))
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            call = Call(path, kind, len(self.calls), has_params, error=f"{type(e).__name__}: {e}")
            call.inputs.append([np.asarray(v) for v in ins if not isinstance(v, jax.core.Tracer)])
            self.calls.append(call)
            raise
        call = Call(path, kind, len(self.calls), has_params)
        self.calls.append(call)
        outs = array_leaves(out)
        values = [*ins, *outs, *ws]
        if any(isinstance(v, jax.core.Tracer) for v in values):
            n_in, n_out = len(ins), len(ins) + len(outs)
            jax.debug.callback(lambda *v: call.add(v[:n_in], v[n_in:n_out], v[n_out:]), *values)
        else:
            call.add(ins, outs, ws)
        return out

    def finished(self) -> list[Call]:
        """The calls that recorded values (waits for pending callbacks)."""
        jax.effects_barrier()
        return [c for c in self.calls if c.recorded]


# ---- Linen ---------------------------------------------------------------------------------------
class _LinenCall:
    """``next_fun`` of a Linen interceptor, with the bound module it runs on (for :func:`bound_module`)."""

    def __init__(self, fn: Callable[..., Any], module: Any) -> None:
        self.fn, self.module = fn, module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@contextlib.contextmanager
def linen_hooked(hook: Hook) -> Iterator[None]:
    """Route every Linen ``__call__`` through ``hook`` (at trace time, lifted transforms included)."""
    import flax.linen as nn

    def interceptor(next_fun: Callable[..., Any], args: tuple, kwargs: dict, context: Any) -> Any:
        if context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        module = context.module
        return hook(
            tuple(map(str, module.path)),
            type(module).__name__,
            False,
            _LinenCall(next_fun, module),
            args,
            kwargs,
        )

    with nn.intercept_methods(interceptor):
        yield


# ---- NNX -----------------------------------------------------------------------------------------
def tag_modules(model: Any) -> None:
    """Write each module's path onto it (a static attribute, kept through split / merge).

    A ``nnx.bridge.ToNNX`` module is left untagged: it hands every attribute of its own to the
    Linen module as a variable, and a string there stops the call. Its Linen submodules are not
    NNX modules anyway, so its work is counted under the nearest tagged module above it."""
    from flax import nnx

    for path, module in nnx.iter_modules(model):
        if not isinstance(module, nnx.bridge.ToNNX):
            setattr(module, TAG, "/".join(map(str, path)))


def _has_params(module: Any) -> bool:
    from flax import nnx

    return any(isinstance(v, nnx.Param) for v in vars(module).values())


@contextlib.contextmanager
def nnx_hooked(model: Any, hook: Hook) -> Iterator[None]:
    """Route ``__call__`` of every module class in ``model`` through ``hook``; restored on exit.

    ``model`` must have been tagged with :func:`tag_modules` (untagged instances, e.g. modules of
    another model called meanwhile, run unhooked). A ``super().__call__`` chain on one instance
    is recorded once.
    """
    from flax import nnx

    classes = {type(m) for _, m in nnx.iter_modules(model)}
    active: list[Any] = []
    saved: list[tuple[type, Any]] = []

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            tag = getattr(self, TAG, None)
            if tag is None or (active and active[-1] is self):
                return orig(self, *args, **kwargs)
            active.append(self)
            try:
                path = tuple(tag.split("/")) if tag else ()
                return hook(
                    path, type(self).__name__, _has_params(self), functools.partial(orig, self), args, kwargs
                )
            finally:
                active.pop()

        return wrapper

    try:
        for cls in classes:
            saved.append((cls, cls.__dict__.get("__call__")))
            cls.__call__ = wrap(cls.__call__)
        yield
    finally:
        for cls, orig in reversed(saved):
            if orig is None:
                del cls.__call__
            else:
                cls.__call__ = orig


def bound_module(fn: Callable[..., Any]) -> Any:
    """The module instance a hooked call runs on, else ``None``: the bound Linen module, or the NNX
    instance (``fn`` is ``partial(orig, self)``).

    This is the instance really called: an ``nnx.view`` of a module, with its attributes changed
    for this call, is not the instance ``nnx.iter_modules`` lists; inside a scan it holds the slice."""
    if isinstance(fn, _LinenCall):
        return fn.module
    return fn.args[0] if isinstance(fn, functools.partial) and fn.args else None


# ---- one forward pass per side -------------------------------------------------------------------
def capture_linen(pair: Any, variables: Any, train: bool, dropout: bool = False) -> tuple[list[Call], str]:
    """Eager Linen forward on ``pair.linen.batch`` with every call recorded; ``(calls, error)``.

    Train mode runs with dropout off (unless ``dropout``: the fixed key's masks, :mod:`.dropout_on`) and
    the pair's mutable collections, like :mod:`.build`.
    """
    from linen2nnx.equivalence.build import linen_dropout_off
    from linen2nnx.equivalence.randomness import same_keys

    side = pair.linen
    args, kwargs = side.call_args(train)
    rngs = side.apply_rngs()
    mutable = list(side.mutable) if train and side.mutable else False
    rec = Recorder()
    error = ""
    no_dropout = linen_dropout_off() if train and not dropout else contextlib.nullcontext()
    with linen_hooked(rec.hook), no_dropout, same_keys():
        try:
            side.model.apply(variables, *args, **kwargs, rngs=rngs, mutable=mutable)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    return rec.finished(), error


def capture_nnx(pair: Any, model: Any, train: bool, dropout: bool = False) -> tuple[list[Call], str]:
    """Eager NNX forward (on a clone; dropout off in train mode unless ``dropout``) with every call
    recorded."""
    from flax import nnx

    from linen2nnx.equivalence.build import linen_dropout_off, nnx_dropout_off
    from linen2nnx.equivalence.randomness import same_keys
    from linen2nnx.equivalence.sown import quiet_sow

    clone = nnx_dropout_off(model) if train and not dropout else nnx.clone(model)
    tag_modules(clone)
    args, kwargs = pair.linen.call_args(train)
    rec = Recorder()
    error = ""
    no_linen_dropout = linen_dropout_off() if train and not dropout else contextlib.nullcontext()
    with nnx_hooked(clone, rec.hook), quiet_sow(), same_keys(), no_linen_dropout:
        try:
            clone(*args, **kwargs)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    return rec.finished(), error
