"""PRNG keys stored as their raw data on one side and as a typed key array on the other.

Orbax and msgpack store a key as its ``uint32`` data (shape ``+ (2,)`` for threefry), whatever the
Linen code held: optax ``add_noise`` / ``noisy_sgd`` state, a key kept in a variable collection. The
NNX target may hold a typed key (``jax.random.key``) in that slot, or the reverse. A leaf whose shape
is the slot's shape plus the key data's trailing shape of the slot's own key implementation is the
same key, wrapped (or unwrapped) when filled; any other mismatch stays a problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

WRAPPED = "key data wrapped"
UNWRAPPED = "key data unwrapped"


def is_key(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key dtype (``key<fry>``)."""
    import jax

    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _impl_and_trailing(shape: tuple[int, ...], dtype: Any) -> tuple[Any, tuple[int, ...]]:
    """The key implementation of a key array of ``shape`` / ``dtype`` and its key data's trailing shape."""
    import jax

    abstract = jax.ShapeDtypeStruct(tuple(shape), dtype)
    impl: list[Any] = []
    data = jax.eval_shape(lambda k: impl.append(jax.random.key_impl(k)) or jax.random.key_data(k), abstract)
    return impl[0], tuple(data.shape[len(shape) :])


def key_fit(want_shape: tuple, want_dtype: Any, shape: tuple, dtype: Any) -> str | None:
    """:data:`WRAPPED` when a ``uint32`` leaf of ``shape`` is the data of the typed key slot
    ``want_shape`` / ``want_dtype``, :data:`UNWRAPPED` when a typed key leaf fills a ``uint32`` slot
    holding its data, None otherwise (a real mismatch)."""
    want_shape, shape = tuple(want_shape), tuple(shape)
    if is_key(want_dtype) and not is_key(dtype) and _is_uint32(dtype):
        if shape == want_shape + _impl_and_trailing(want_shape, want_dtype)[1]:
            return WRAPPED
    if is_key(dtype) and not is_key(want_dtype) and _is_uint32(want_dtype):
        if want_shape == shape + _impl_and_trailing(shape, dtype)[1]:
            return UNWRAPPED
    return None


def _is_uint32(dtype: Any) -> bool:
    try:
        return np.dtype(dtype) == np.uint32
    except TypeError:
        return False


def as_slot_value(value: Any, want_shape: tuple, want_dtype: Any) -> Any:
    """``value`` (a read array, or a placeholder read now: key data is a few bytes) as the slot holds it:
    wrapped into the slot's typed key, or its key data, or the array cast to the slot's dtype."""
    import jax
    import jax.numpy as jnp

    from linen2nnx.checkpoint_convert.lazy import is_deferred

    if is_deferred(value):
        value = value.load()
    if is_key(want_dtype):
        if is_key(getattr(value, "dtype", None)):
            return value
        impl, _ = _impl_and_trailing(want_shape, want_dtype)
        return jax.random.wrap_key_data(jnp.asarray(value, dtype=jnp.uint32), impl=impl)
    if is_key(getattr(value, "dtype", None)):
        return jnp.asarray(jax.random.key_data(value), dtype=want_dtype)
    return jnp.asarray(value, dtype=want_dtype)


def same_dtype(a: Any, b: Any) -> bool:
    """Dtype equality that also holds for typed key dtypes (which numpy cannot interpret)."""
    if is_key(a) or is_key(b):
        return a == b
    return np.dtype(a) == np.dtype(b)
