"""Static configuration of stochastic and mode-dependent layers, module by module.

A dropout rate changed by a migration (0.1 -> 0.5) changes no number ``check`` compares: dropout
is off on both sides in every forward it runs. The same holds for a BatchNorm ``momentum`` seen
only after many steps, an attention ``decode`` flag, or a ``deterministic`` default that only
matters when the caller omits it. So this check reads the settings themselves: both eval and
train forwards are traced (shapes only, nothing runs) with every module call recorded, and each
Linen layer's dataclass fields are compared with the instance attributes of the NNX module the
module map pairs it with, through the name table :data:`FIELDS`, call by call: a partner the NNX
forward never calls, a call that sees other settings, the layers' calls in another order
(their first calls, by NNX module), or a Linen layer the module map places nowhere in a model with no
bridged Linen part fails too, since the numbers never see a dropout that is off.

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
from linen2nnx.equivalence.randomness import same_keys
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
        ("axis", "axis"),
        ("axis_name", "axis_name"),
        ("axis_index_groups", "axis_index_groups"),
        ("use_fast_variance", "use_fast_variance"),  # E[x²]-E[x]² cancels on inputs far from zero
    ),
    "LayerNorm": (
        ("epsilon", "epsilon"),
        ("use_bias", "use_bias"),
        ("use_scale", "use_scale"),
        ("reduction_axes", "reduction_axes"),
        ("feature_axes", "feature_axes"),
        ("axis_index_groups", "axis_index_groups"),
        ("use_fast_variance", "use_fast_variance"),
    ),
    "RMSNorm": (
        ("epsilon", "epsilon"),
        ("use_scale", "use_scale"),
        ("reduction_axes", "reduction_axes"),
        ("feature_axes", "feature_axes"),
        ("axis_index_groups", "axis_index_groups"),
    ),
    "GroupNorm": (
        ("epsilon", "epsilon"),
        ("num_groups", "num_groups"),
        ("group_size", "group_size"),
        ("axis_index_groups", "axis_index_groups"),
        ("use_fast_variance", "use_fast_variance"),
    ),
    "MultiHeadDotProductAttention": _ATTENTION,
    "SelfAttention": _ATTENTION,
    "MultiHeadAttention": _ATTENTION,
}
#: Settings a call argument of the same name overrides when given.
CALL_TIME = frozenset({"deterministic", "use_running_average", "decode"})
#: Settings Linen may leave as ``None`` for the module to derive: compared only when Linen sets them.
DERIVED = frozenset({"num_groups", "group_size"})

#: ``[(path, class name, name pairs, {setting: value as the call sees it})]``, every call in order.
Call = tuple[PathT, str, tuple[tuple[str, str], ...], dict[str, Any]]
Seen = list[Call]
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
    if pairs:
        names = tuple(p[side] for p in pairs)
        seen.append((path, type(module).__name__, pairs, settings(module, names, args, kwargs)))


# ---- one traced forward per side and mode ----------------------------------------------------------
def linen_settings(pair: Any, variables: Any, train: bool) -> Seen:
    """Settings of every tabled Linen layer called in one forward (traced with ``eval_shape``)."""
    import flax.linen as nn

    side = pair.linen
    args, kwargs = side.call_args(train)
    rngs = side.apply_rngs()
    mutable = list(side.mutable) if train and side.mutable else False
    seen: Seen = []

    def interceptor(next_fun: Callable[..., Any], a: tuple, kw: dict, context: Any) -> Any:
        module = context.module
        if context.method_name == "__call__":
            _record(seen, tuple(map(str, module.path)), module, _table(type(module)), 0, a, kw)
        return next_fun(*a, **kw)

    with nn.intercept_methods(interceptor), same_keys():
        jax.eval_shape(lambda v: side.model.apply(v, *args, **kwargs, rngs=rngs, mutable=mutable), variables)
    return seen


def nnx_settings(pair: Any, model: Any, train: bool) -> Seen:
    """Settings of every tabled NNX module called in one forward (on a tagged clone, shapes only)."""
    from flax import nnx

    clone = nnx.clone(model)
    tag_modules(clone)
    modules = {tuple(map(str, p)): m for p, m in nnx.iter_modules(clone)}
    args, kwargs = pair.linen.call_args(train)
    seen: Seen = []

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
    """One ``config`` leaf per NNX module paired with a tabled Linen layer; a differing setting fails it
    (on any call: one module called twice, deterministic the second time), and so does a tabled Linen
    layer whose partner the NNX forward never calls (a dropout call left out, or another module called
    in its place), the layers' calls in another order (a dropout moved before the norm it followed), or
    a Linen layer the module map cannot place in an NNX model with no bridged Linen part (a renamed
    module: otherwise no setting of it would be compared).

    The leaf's path is the NNX module path; its note names the Linen path and both values.
    """
    by_module: dict[str, tuple[str, list[str], list[str]]] = {}
    bridged = _has_bridge(sides.nnx_model)
    for mode, train in (("eval", False), ("train", True)):
        linen = linen_settings(pair, sides.linen_variables, train)
        nnx_calls = nnx_settings(pair, sides.nnx_model, train)
        by_target: dict[PathT, list[Call]] = {}
        for call in nnx_calls:
            by_target.setdefault(call[0], []).append(call)
        linen_by_path: dict[PathT, list[Call]] = {}
        for call in linen:
            linen_by_path.setdefault(call[0], []).append(call)
        for lpath, calls in sorted(linen_by_path.items()):
            cls, pairs = calls[0][1], calls[0][2]
            target = module_map(lpath)
            if target is None:
                if not bridged:  # placed nowhere: a renamed or dropped module would go unchecked
                    where = f"{cls} Linen {join(lpath) or '(root)'}"
                    note = f"no NNX module the module map pairs it with ({mode} forward)"
                    by_module.setdefault(f"(unplaced) {join(lpath)}", (where, [], []))[2].append(note)
                continue
            npath = join(target)
            where, ok, bad = by_module.setdefault(
                npath, (f"{cls} Linen {join(lpath) or '(root)'} / NNX {npath or '(root)'}", [], [])
            )
            theirs = by_target.get(target, [])
            if not theirs:
                bad.append(f"called in Linen's {mode} forward, never in NNX's")
                continue
            mine, other = _distinct(pairs, calls, 0), _distinct(pairs, theirs, 1)
            lonely_l = [c for c in mine if not any(_agree(pairs, c, o) for o in other)]
            lonely_n = [o for o in other if not any(_agree(pairs, c, o) for c in mine)]
            agree, differ = compare_settings(pairs, (lonely_l or mine)[0], (lonely_n or other)[0], mode)
            ok += [a for a in agree if a not in ok]
            bad += [d for d in differ if d not in bad]
            if (lonely_l or lonely_n) and not differ:  # the settings of some calls differ (another call's)
                bad.append(f"{mode} calls see settings {mine} in Linen, {other} in NNX")
        order = _order_difference(linen, nnx_calls, module_map)
        if order:
            by_module.setdefault("(call order)", ("stochastic and mode-dependent layers", [], []))[2].append(
                f"{mode} forward: {order}"
            )
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


def _distinct(pairs: tuple[tuple[str, str], ...], calls: list[Call], side: int) -> list[dict[str, Any]]:
    """The settings a module's calls see, each distinct combination once, in the order first seen (a
    transform may trace a call twice, a subclass's ``__call__`` reach its base's: the count says
    nothing, what each call sees does)."""
    out: list[dict[str, Any]] = []
    for call in calls:
        values = call[3]
        names = [p[side] for p in pairs if p[side] in values]
        if not any(all(n in seen and _same(seen[n], values[n]) for n in names) for seen in out):
            out.append(values)
    return out


def _agree(pairs: tuple[tuple[str, str], ...], linen: dict[str, Any], nnx_: dict[str, Any]) -> bool:
    return not compare_settings(pairs, linen, nnx_)[1]


def _order_difference(linen: Seen, nnx_calls: Seen, module_map: ModuleMap) -> str:
    """How the order of the tabled layers' calls differs between the sides ('' when it does not), over
    the NNX modules both sides call: Linen's calls by their NNX partner, each module at its first call."""
    linen_order = _first_calls(tuple(module_map(c[0]) or ()) for c in linen)
    called = set(linen_order)
    nnx_order = [p for p in _first_calls(c[0] for c in nnx_calls) if p in called]
    linen_order = [p for p in linen_order if p in set(nnx_order)]
    if linen_order == nnx_order:
        return ""
    first = next(i for i, (a, b) in enumerate(zip(linen_order, nnx_order)) if a != b)
    return f"call {first + 1} is {join(linen_order[first])} in Linen, {join(nnx_order[first])} in NNX"


def _first_calls(paths: Any) -> list[PathT]:
    seen: dict[PathT, None] = {}
    for path in paths:
        if path:
            seen.setdefault(path, None)
    return list(seen)


def _has_bridge(model: Any) -> bool:
    """Whether the NNX model runs a Linen part through ``nnx.bridge`` (its layers have no NNX path)."""
    from flax import nnx

    return any(isinstance(m, nnx.bridge.ToNNX) for _, m in nnx.iter_modules(model))
