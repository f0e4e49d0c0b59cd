"""Variables Linen creates on the first call: decode caches and other non-param collections.

``cached_key = self.variable('cache', 'cached_key', jnp.zeros, key.shape, key.dtype)`` under
``if decode:`` sizes the cache from a call-time value, and Linen only creates it on the call that
initialises the model (``has_variable`` tells the two calls apart). NNX has no init call, but a
module may gain a Variable on any eager call, so the same protocol holds one to one::

    if not hasattr(self, "cached_key"):          # the first decode call creates the cache
        self.cached_key = nnx.Cache(jnp.zeros(key.shape, key.dtype))
    cached_key = self.cached_key

``self.has_variable('cache', 'cached_key')`` becomes ``hasattr(self, 'cached_key')`` and
``self.get_variable(...)`` reads ``self.cached_key[...]``. As docs/nnx_facts.md#variables-created-inside-a-scan notes: under ``nnx.scan`` a
Variable created in the body comes out stacked, like Linen's ``variable_axes={'cache': 0}``.
Parameters are never created this way: an optimizer must see every Param after ``__init__``.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.cst_utils import (
    code,
    parse_statement,
)


@dataclasses.dataclass
class LazyVar:
    collection: str
    name: str  # Linen variable name
    attr: str  # NNX attribute
    var_type: str  # nnx.<var_type>
    statement: cst.SimpleStatementLine  # the statement the creation is hoisted in front of
    when: str = "True"  # the call-time condition it is created under, in terms of the method's parameters


def initial_value(init: cst.BaseExpression, args: list[cst.Arg]) -> str:
    """``jnp.zeros, shape, dtype`` -> ``jnp.zeros(shape, dtype)``; ``lambda: v`` -> ``v``."""
    if isinstance(init, cst.Lambda) and not init.params.params and not args:
        return code(init.body)
    return f"{code(init)}({', '.join(code(a.value) for a in args)})"


def creation(var: LazyVar, init: cst.BaseExpression, args: list[cst.Arg]) -> cst.If:
    """The ``if not hasattr(...)`` block that creates ``var`` on the first call."""
    block = parse_statement(
        f"if not hasattr(self, {var.attr!r}):\n"
        f"    self.{var.attr} = nnx.{var.var_type}({initial_value(init, args)})\n"
    )
    assert isinstance(block, cst.If)
    return block


def either(conditions: list[str]) -> str | None:
    """``a or b`` of conditions ("True" absorbs the rest); None for none."""
    unique = list(dict.fromkeys(conditions))
    if not unique:
        return None
    if "True" in unique:
        return "True"
    return " or ".join(f"({c})" if len(unique) > 1 else c for c in unique)
