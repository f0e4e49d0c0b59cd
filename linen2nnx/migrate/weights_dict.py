"""The syntax of a Linen module applied with weights given as a literal: ``X.apply({'params': {'kernel':
w}}, *inputs)`` with none of ``apply``'s own options. Shared by the size dataflow (the layer reads
``inputs``) and the rewrite (weights_apply.py), so both accept exactly the same calls."""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.lifted import LiftError, literal_dict

APPLY_OPTIONS = frozenset({"rngs", "method", "mutable", "capture_intermediates"})


def applied_weights(call: cst.Call) -> dict[str, str] | None:
    """``{'kernel': 'w', ...}`` of ``X.apply({'params': {'kernel': w, ...}}, ...)``; None otherwise."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "apply") or not call.args:
        return None
    first, rest = call.args[0], call.args[1:]
    if first.keyword is not None or first.star:
        return None
    if any(a.star or (a.keyword is not None and a.keyword.value in APPLY_OPTIONS) for a in rest):
        return None
    try:
        outer = literal_dict(first.value)
        inner = literal_dict(outer["params"]) if set(outer) == {"params"} else {}
    except LiftError:  # not a dict literal of literal keys
        return None
    if not inner or not all(isinstance(name, str) for name in inner):
        return None
    return {name: code(value) for name, value in inner.items()}
