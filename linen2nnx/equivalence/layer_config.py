"""Static configuration of stochastic and mode-dependent layers, module by module.

A dropout rate changed by a migration (0.1 -> 0.5) changes no number ``check`` compares: dropout
is off on both sides in every forward it runs. The same holds for a BatchNorm ``momentum`` seen
only after many steps, an attention ``decode`` flag, or a ``deterministic`` default that only
matters when the caller omits it. So this check reads the settings themselves: both eval and
train forwards are traced (shapes only, nothing runs) with every module call recorded, and each
Linen layer's dataclass fields are compared with the instance attributes of the NNX module the
module map pairs it with, through the name table :data:`FIELDS`.

A setting a call may override (``deterministic=``, ``use_running_average=``, ``decode=``, as
``nn.merge_param`` does) is compared as the call sees it, mode by mode: Linen's
``nn.Dropout(rate)(x, deterministic=not train)`` and NNX's ``self.dropout(x, deterministic=not
train)`` agree although their defaults (``None`` / ``False``) do not. A setting Linen leaves
unset (``None``) for the module to derive (GroupNorm ``group_size``) is compared only when set.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import jax

from linen2nnx.equivalence.capture import PathT, bound_module, nnx_hooked, tag_modules
from linen2nnx.equivalence.compare import LeafResult, missing
from linen2nnx.equivalence.modmap import ModuleMap, join
from linen2nnx.equivalence.sown import quiet_sow

CHECK = "config"

_ATTENTION = (
    ("num_heads", "num_heads"),
    ("dropout_rate", "dropout_rate"),
    ("broadcast_dropout", "broadcast_dropout"),
    ("deterministic", "deterministic"),
    ("decode", "decode"),
    ("normalize_qk", "normalize_qk"),
)
#: Linen class (or a base class) name -> ``(Linen field, NNX attribute)`` pairs to compare.
FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "Dropout": (
        ("rate", "rate"),
        ("broadcast_dims", "broadcast_dims"),
        ("deterministic", "deterministic"),
        ("rng_collection", "rng_collection"),
    ),
    "BatchNorm": (
        ("momentum", "momentum"),
        ("epsilon", "epsilon"),
        ("use_running_average", "use_running_average"),
        ("axis_name", "axis_name"),
    ),
    "LayerNorm": (("epsilon", "epsilon"), ("use_bias", "use_bias"), ("use_scale", "use_scale")),
    "RMSNorm": (("epsilon", "epsilon"), ("use_scale", "use_scale")),
    "GroupNorm": (("epsilon", "epsilon"), ("num_groups", "num_groups"), ("group_size", "group_size")),
    "MultiHeadDotProductAttention": _ATTENTION,
    "SelfAttention": _ATTENTION,
    "MultiHeadAttention": _ATTENTION,
}
#: Settings a call argument of the same name overrides when given.
CALL_TIME = frozenset({"deterministic", "use_running_average", "decode"})
#: Settings Linen may leave as ``None`` for the module to derive: compared only when Linen sets them.
DERIVED = frozenset({"num_groups", "group_size"})

#: ``{path: (class name, name pairs, {setting: value as the call sees it})}``, first call of each path.
Seen = dict[PathT, tuple[str, tuple[tuple[str, str], ...], dict[str, Any]]]
_MISSING = object()


def _table(cls: type) -> tuple[tuple[str, str], ...]:
    """The name pairs for a class, found through its bases (a subclass of ``nn.Dropout`` counts)."""
    return next((FIELDS[c.__name__] for c in cls.__mro__ if c.__name__ in FIELDS), ())


def _bound(module: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name (a positional ``deterministic`` included); the keyword
    arguments alone when the signature cannot bind them."""
    try:
        return dict(inspect.signature(type(module).__call__).bind(module, *args, **kwargs).arguments)
    except (TypeError, ValueError):
        return dict(kwargs)


def settings(module: Any, names: tuple[str, ...], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The value of each named setting for this call: the attribute, or the call's override."""
    call = _bound(module, args, kwargs)
    out = {}
    for name in names:
        value = getattr(module, name, _MISSING)
        if name in CALL_TIME and call.get(name) is not None:
            value = call[name]
        if value is not _MISSING:
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    """Tuples for sequences, Python scalars for numpy / jax scalars (a traced flag stays as is)."""
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if (
        hasattr(value, "item")
        and getattr(value, "shape", None) == ()
        and not isinstance(value, jax.core.Tracer)
    ):
        return value.item()
    return value


def _record(
    seen: Seen,
    path: PathT,
    module: Any,
    pairs: tuple[tuple[str, str], ...],
    side: int,
    args: tuple,
    kwargs: dict,
) -> None:
    if pairs and path not in seen:
        seen[path] = (
            type(module).__name__,
            pairs,
            settings(module, tuple(p[side] for p in pairs), args, kwargs),
        )


# ---- one traced forward per side and mode ----------------------------------------------------------
def linen_settings(pair: Any, variables: Any, train: bool) -> Seen:
    """Settings of every tabled Linen layer called in one forward (traced with ``eval_shape``)."""
    import flax.linen as nn

    side = pair.linen
    args, kwargs = side.call_args(train)
    rngs = {k: v for k, v in side.init_rngs().items() if k != "params"}
    mutable = list(side.mutable) if train and side.mutable else False
    seen: Seen = {}

    def interceptor(next_fun: Callable[..., Any], a: tuple, kw: dict, context: Any) -> Any:
        module = context.module
        if context.method_name == "__call__":
            _record(seen, tuple(map(str, module.path)), module, _table(type(module)), 0, a, kw)
        return next_fun(*a, **kw)

    with nn.intercept_methods(interceptor):
        jax.eval_shape(lambda v: side.model.apply(v, *args, **kwargs, rngs=rngs, mutable=mutable), variables)
    return seen


def nnx_settings(pair: Any, model: Any, train: bool) -> Seen:
    """Settings of every tabled NNX module called in one forward (on a tagged clone, shapes only)."""
    from flax import nnx

    clone = nnx.clone(model)
    tag_modules(clone)
    modules = {tuple(map(str, p)): m for p, m in nnx.iter_modules(clone)}
    args, kwargs = pair.linen.call_args(train)
    seen: Seen = {}

    def hook(path: PathT, kind: str, has_params: bool, fn: Callable[..., Any], a: tuple, kw: dict) -> Any:
        module = bound_module(fn)
        module = modules.get(path) if module is None else module
        if module is not None:
            _record(seen, path, module, _table(type(module)), 1, a, kw)
        return fn(*a, **kw)

    gdef, state = nnx.split(clone)
    with nnx_hooked(clone, hook), quiet_sow():
        jax.eval_shape(lambda s: nnx.merge(gdef, s)(*args, **kwargs), state)
    return seen


# ---- the comparison --------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return True  # a flag computed inside the trace: the numbers judge it
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    try:
        return bool(a == b)
    except Exception:  # an array-valued setting: compare it as a sequence
        return _plain(list(a)) == _plain(list(b))


def compare_settings(
    pairs: tuple[tuple[str, str], ...], linen: dict[str, Any], nnx_: dict[str, Any], mode: str = ""
) -> tuple[list[str], list[str]]:
    """``(agreeing, differing)`` descriptions of one module's settings in one mode (named for the
    settings a call may override)."""
    agree, differ = [], []
    for l_name, n_name in pairs:
        if l_name not in linen or n_name not in nnx_ or (l_name in DERIVED and linen[l_name] is None):
            continue
        lv, nv = linen[l_name], nnx_[n_name]
        label = l_name if l_name == n_name else f"{l_name} (NNX {n_name})"
        label += f" in {mode}" if mode and l_name in CALL_TIME else ""
        (agree if _same(lv, nv) else differ).append(f"{label}: Linen {lv!r}, NNX {nv!r}")
    return agree, differ


def config_leaves(pair: Any, sides: Any, module_map: ModuleMap) -> list[LeafResult]:
    """One ``config`` leaf per NNX module paired with a tabled Linen layer; a differing setting fails it.

    The leaf's path is the NNX module path; its note names the Linen path and both values.
    """
    by_module: dict[str, tuple[str, list[str], list[str]]] = {}
    for mode, train in (("eval", False), ("train", True)):
        linen = linen_settings(pair, sides.linen_variables, train)
        nnx_seen = nnx_settings(pair, sides.nnx_model, train)
        for lpath, (cls, pairs, values) in sorted(linen.items()):
            target = module_map(lpath)
            if target is None or target not in nnx_seen:
                continue  # not placed, or not called on the NNX side: the numbers judge it
            agree, differ = compare_settings(pairs, values, nnx_seen[target][2], mode)
            npath = join(target)
            where, ok, bad = by_module.setdefault(
                npath, (f"{cls} Linen {join(lpath) or '(root)'} / NNX {npath or '(root)'}", [], [])
            )
            ok += [a for a in agree if a not in ok]
            bad += [d for d in differ if d not in bad]
    out = []
    for npath, (where, ok, bad) in sorted(by_module.items()):
        if bad:
            out.append(missing(CHECK, npath, (), f"{where}: " + "; ".join(bad)))
        elif ok:
            out.append(
                LeafResult(
                    CHECK, npath, (len(ok),), 0.0, 0.0, 0.0, 1.0, 0.0, True, f"{where}: " + "; ".join(ok)
                )
            )
    return out
