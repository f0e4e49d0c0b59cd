"""Compiling the check's own programs: XLA options, and reuse across checks.

A parity check runs each of its programs once (or once per training step) on a small batch, so its
cost is compiling, not running. Two things keep that down:

- on CPU the programs are compiled with the backend's (LLVM) optimisations off
  (:func:`compile_options`); both sides get the same options, so the comparison is unaffected;
- the Linen side of a model is the same whatever NNX twin it is checked against, so its compiled
  functions are memoised (:func:`memoized`) by module, loss and input structure: a second check of
  the same Linen model (a fixed twin, a mutation) compiles only the NNX side.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any


def compile_options() -> dict[str, Any] | None:
    """XLA options for the check's own programs: on CPU, skip the backend's (LLVM) optimisations.

    A parity check runs each program once or a few times on a small batch, so compiling dominates
    its cost; optimisation level 0 halves the CPU compile time of the zoo decoder's train step.
    Both sides get the same options, so the comparison is unaffected (results may differ from a
    default-compiled run in the last bits, on both sides alike). Other backends keep their defaults.
    """
    import jax

    return {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None


def fast_jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``jax.jit`` with :func:`compile_options`."""
    import jax

    return jax.jit(fn, compiler_options=compile_options())


def maybe_jit(fn: Callable[..., Any], jit: bool) -> Callable[..., Any]:
    """:func:`fast_jit` for the jitted checks, ``fn`` itself for the eager ones."""
    return fast_jit(fn) if jit else fn


#: Built (compiled) functions by key; see :func:`memoized`.
_CACHE: collections.OrderedDict[Any, Any] = collections.OrderedDict()
_CACHE_SIZE = 16


def memoized(key: Any, build: Callable[[], Any]) -> Any:
    """``build()``, memoised under ``key`` plus the trace-time context (mesh, logical axis rules).

    An unhashable key (a static input that cannot be hashed) just builds anew.
    """
    import flax.linen as nn
    import jax

    try:
        key = (key, jax.sharding.get_abstract_mesh(), tuple(map(tuple, nn.get_logical_axis_rules())))
        hash(key)
    except TypeError:  # an unhashable static input: no reuse, still correct
        return build()
    if key not in _CACHE:
        _CACHE[key] = build()
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return _CACHE[key]
