"""Small helpers on pytrees and dtypes that the converter and the parity checks share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def plain_dicts(
    tree: Any, *, str_keys: bool = False, sequence_of: Callable[[Any], bool] | None = None
) -> Any:
    """Every mapping in ``tree`` (FrozenDicts, Orbax's dicts, ...) as a plain ``dict``.

    Flax's ``flatten_dict`` and JAX's path flattening treat other mappings as leaves or as other
    node types, so comparisons flatten plain dicts only. ``str_keys`` turns keys into ``str``
    (Orbax restores list indices as ints); lists and tuples are descended into, as lists, only
    where ``sequence_of`` says they are containers (a Linen partition box is a tuple-like leaf).
    """
    if isinstance(tree, Mapping):
        return {
            (str(k) if str_keys else k): plain_dicts(v, str_keys=str_keys, sequence_of=sequence_of)
            for k, v in tree.items()
        }
    if sequence_of is not None and isinstance(tree, (list, tuple)) and sequence_of(tree):
        return [plain_dicts(v, str_keys=str_keys, sequence_of=sequence_of) for v in tree]
    return tree


def dtype_name(dtype: Any, missing: str = "") -> str:
    """``'float32'``, ``'bfloat16'`` ... for numpy / jax dtypes, the jax spelling for the rest
    (``key<fry>``), and ``missing`` for None."""
    if dtype is None:
        return missing
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def key_name(k: Any) -> str:
    """One step of a jax key path as a string: a dict key, a sequence index or an attribute name."""
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)
