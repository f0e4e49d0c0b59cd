"""Sown values: Linen ``intermediates`` (``mutable=['intermediates']``) vs NNX ``nnx.Intermediate``.

flax 0.12 collects NNX sown values with ``nnx.capture(model, nnx.Intermediate)(...)`` (``sow``
outside ``capture`` is deprecated); both sides store the default-reduced value as a tuple, so a
Linen leaf ``layers/self_attention/attention_entropy/0`` (the module path, the sow name, the tuple
index) meets the NNX leaf at the module's NNX path with the same name and index. Sown values are
what auxiliary losses and metrics are built from, so a sow lost in migration is a real bug even
though no output changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from linen2nnx.checkpoint_convert.read import sown_collections
from linen2nnx.equivalence.modmap import ModuleMap, join
from linen2nnx.trees import key_name, plain_dicts

CHECK = "intermediates"


def linen_sown_to_nnx(tree: Mapping[str, Any], module_map: ModuleMap) -> dict[str, Any]:
    """Flatten a Linen ``intermediates`` tree and move each leaf under its module's NNX path.

    The module is the longest prefix of the leaf path (without the sow name) that the module map
    places; a leaf whose module cannot be placed keeps its Linen path prefixed with ``linen:`` so
    it shows up as missing on the NNX side instead of disappearing.
    """
    import jax

    out: dict[str, Any] = {}
    for key_path, leaf in jax.tree_util.tree_flatten_with_path(plain_dicts(tree, str_keys=True))[0]:
        path = tuple(key_name(k) for k in key_path)
        # the sow name and anything after it (tuple index) stay as they are
        owner = None
        for cut in range(len(path) - 1, -1, -1):
            owner = module_map(path[:cut])
            if owner is not None:
                out[join((*owner, *path[cut:]))] = leaf
                break
        if owner is None:
            out["linen:" + join((CHECK, *path))] = leaf
    return out


def uncompared_collections(pair: Any, variables: Mapping[str, Any]) -> list[str]:
    """The collections Linen's eval or train forward sows into (``Module.sow`` watched while both are
    traced abstractly: nothing runs) that no check compares: neither a state collection of
    ``pair.linen.mutable`` nor a sown collection. A sow into a collection of its own no NNX type is
    registered for (a class kept as Linen behind the bridge sowing an auxiliary loss) is one: its
    values would be compared with nothing, so the check must say so. A sow only a branch on
    ``is_mutable_collection`` makes is not seen: the forwards as check runs them never take it."""
    import jax

    from linen2nnx.equivalence.randomness import same_keys

    side = pair.linen
    mutable = [*side.state_collections, *sown_collections()]
    compared = {"params", *mutable}
    rngs = side.apply_rngs()
    _watch_sow()
    sown: set[str] = set()
    token = _SOWN.set(sown)  # this thread's traces only: another check running beside it records its own
    try:
        for train in (False, True):
            args, kwargs = side.call_args(train)
            with same_keys():
                jax.eval_shape(
                    lambda v, a=args, k=kwargs: side.model.apply(v, *a, **k, rngs=rngs, mutable=mutable),
                    variables,
                )
    finally:
        _SOWN.reset(token)
    # `params_axes` & co.: the axis names partitioning.param_with_axes sows, metadata NNX keeps on the
    # Variables themselves (checked by the partition_spec leaves under a mesh), not values
    return sorted(c for c in sown - compared if not c.endswith("_axes"))


_SOWN: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("linen2nnx_sown", default=None)
_WATCHING = threading.Lock()


def _watch_sow() -> None:
    """Wrap ``flax.linen.Module.sow`` once, for good: it records the collection of every call made
    while :data:`_SOWN` holds a set (in that context only), and is the plain ``sow`` otherwise."""
    import flax.linen as nn

    with _WATCHING:
        if getattr(nn.Module.sow, "_linen2nnx_watched", False):
            return
        original = nn.Module.sow

        @functools.wraps(original)
        def sow(module: Any, col: str, *args: Any, **kwargs: Any) -> Any:
            found = _SOWN.get()
            if found is not None:
                found.add(col)
            return original(module, col, *args, **kwargs)

        sow._linen2nnx_watched = True  # type: ignore[attr-defined]
        nn.Module.sow = sow  # type: ignore[method-assign]


def sown_types() -> tuple[type, ...]:
    """``nnx.Intermediate`` and every subclass of it defined (but flax's ``Perturbation``): what
    ``capture``, which takes each type as such, needs to find every sown value. Registered or not: two
    migrated files each define their ``Losses`` for one collection, the registry names the last."""
    from flax import nnx

    found, todo = [nnx.Intermediate], [nnx.Intermediate]
    while todo:
        for sub in todo.pop().__subclasses__():
            if not issubclass(sub, nnx.Perturbation) and sub not in found:
                found.append(sub)
                todo.append(sub)
    return tuple(found)


def sown_tree(updates: Mapping[str, Any]) -> dict[str, Any]:
    """The sown values of Linen's ``updates`` (a mutable apply's second result): those of every
    collection of :func:`sown_collections` in one tree, by module path and sow name."""
    merged: dict[str, Any] = {}
    for collection in sown_collections():
        _merge_into(merged, plain_dicts(updates.get(collection, {})))
    return merged


def _merge_into(into: dict[str, Any], tree: Mapping[str, Any]) -> None:
    for key, value in tree.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge_into(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


@contextlib.contextmanager
def quiet_sow() -> Iterator[None]:
    """Silence flax's warning for ``sow`` outside ``nnx.capture``: a model ``capture`` cannot wrap
    (:func:`call_capturing`'s second try) and the forwards that compare no sown value call it plainly."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*sow\(\)' outside of 'nnx.capture", category=DeprecationWarning
        )
        yield


def flat_sown(state: Any) -> dict[str, Any]:
    """``nnx.capture``'s Intermediate state as ``{'a/b/name/0': array}`` (tuple entries indexed)."""
    import jax
    from flax import nnx

    pure = nnx.to_pure_dict(state)
    leaves = jax.tree_util.tree_flatten_with_path(pure)[0]
    return {"/".join(key_name(k) for k in path): v for path, v in leaves}


_CARRY_CHANGED = "carry input and carry output must have the same pytree structure"
"""jax's error for a scan whose step changes its carry: under ``nnx.capture`` a sow inside the step does."""


def call_capturing(fresh: Callable[[], Any], args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """``(outputs, sown nnx.Intermediate values, the model called)`` of ``fresh()(*args, **kwargs)``.

    ``nnx.capture`` is the flax 0.12 API, but it stores a ``__captures__`` attribute on every module,
    which ``nnx.view`` of an ``nnx.Sequential`` cannot clone (its int and str keys do not sort).
    Nor can it name the collections of an ``nnx.bridge.ToNNX`` (a class the codemod kept as Linen).
    Then the call is repeated on another ``fresh()`` model without it: ``sow`` outside ``capture``
    (deprecated, silenced here) stores the same tuples as ``Intermediate`` attributes, read back with
    ``nnx.state``. The model returned is the one whose call counted, for the state it left.
    A ``sow`` inside a scanned step (the module broadcast into ``nnx.scan``) is no such limit: under
    ``capture`` it changes the scan's carry, which fails for the model's users too, so that error is
    raised, not hidden behind a plain call that works.
    """
    from flax import nnx

    model = fresh()
    try:  # capture takes each type as such (a sown collection's own subclass is named too), one
        out, *states = nnx.capture(model, *sown_types())(*args, **kwargs)  # state each
        sown = nnx.merge_state(*states) if len(states) > 1 else states[0]
        return out, sown, model
    except (TypeError, ValueError) as err:  # also nnx.bridge.ToNNX (a class kept as Linen), whose
        # collections capture cannot name; a genuine error of the model raises again from the plain call below
        if _CARRY_CHANGED in str(err):
            raise
        model = fresh()
        with quiet_sow():
            out = model(*args, **kwargs)
        return out, nnx.state(model, nnx.Intermediate), model
