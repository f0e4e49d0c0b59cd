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
Parameters are never created this way: an optimizer must see every Param after ``__init__``. Nor
is a running statistic sized by the input and created on every call (``self.variable('batch_stats',
'mean', jnp.zeros, (x.shape[-1],))``): ``__init__`` sizes it as it does a parameter, so a converted
checkpoint has its home before the model ever ran.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import code, names_in, parse_statement, strip_commas


@dataclasses.dataclass
class LazyVar:
    collection: str
    name: str  # Linen variable name
    attr: str  # NNX attribute
    var_type: str  # the Variable type's expression: nnx.Cache, or the file's own subclass (custom_vars.py)
    statement: cst.SimpleStatementLine  # the statement the creation is hoisted in front of
    when: str | None = "True"  # the call-time condition it is created under, in terms of __call__'s
    # parameters; None: not by __call__ (a put_variable in another method)
    put: bool = False  # created by its first self.put_variable write (named_variables.py)


def init_call(init: cst.BaseExpression, args: list[cst.Arg]) -> cst.BaseExpression:
    """The value Linen's ``init_fn(*init_args)`` computes, as an expression: ``jnp.zeros, shape`` ->
    ``jnp.zeros(shape)``. A lambda that ignores its arguments (``lambda: v``, ``lambda *_: v``, the
    idiom for a precomputed value) is its body; any other callee that is not a plain name, attribute,
    call or subscript is parenthesised (``lambda k, s: ...`` called as is would be another lambda)."""
    if isinstance(init, cst.Lambda):
        p = init.params
        star = p.star_arg.name.value if isinstance(p.star_arg, cst.Param) else None
        ignores = not p.params and not p.kwonly_params and p.star_kwarg is None
        if ignores and (not args if star is None else star not in names_in(init.body)):
            return init.body
    if not isinstance(init, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not init.lpar:
        init = init.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    flat = [a.with_changes(whitespace_after_arg=cst.SimpleWhitespace("")) for a in args]  # no line breaks
    return cst.Call(init, strip_commas(flat))


def initial_value(
    init: cst.BaseExpression, args: list[cst.Arg], numbers: frozenset[str] = frozenset()
) -> str:
    """``jnp.zeros, shape, dtype`` -> ``jnp.zeros(shape, dtype)``; ``lambda: v`` -> ``v``."""
    return code(as_array(init, init_call(init, args), numbers))


def as_array(
    init: cst.BaseExpression, value: cst.BaseExpression, numbers: frozenset[str] = frozenset()
) -> cst.BaseExpression:
    """``value``, the variable's initial value, as an array where it is a Python number: a lambda init
    that gives a literal, a field ``numbers`` names (annotated ``float`` / ``int``: ``lambda key:
    self.init_value``), or arithmetic of those, gives one, which Linen stores as it is and NNX's
    ``v[...]`` cannot read (TypeError: 'float' object is not subscriptable): ``jax.numpy.asarray`` of
    it (the file imports ``jax``). Any other init (``jnp.zeros``, an initializer, a field that may hold
    ``None`` or an array) is left as it is."""
    if needs_jax(init, numbers):
        return cst.Call(cst.parse_expression("jax.numpy.asarray"), [cst.Arg(value)])
    return value


def needs_jax(init: cst.BaseExpression, numbers: frozenset[str] = frozenset()) -> bool:
    """Whether :func:`as_array` wraps what ``init`` gives (the file must import ``jax``)."""
    return isinstance(init, cst.Lambda) and _is_number(init.body, numbers)


def number_fields(fields: Any) -> frozenset[str]:
    """The fields annotated as a plain number (``float``, ``int``): never None, never an array."""
    return frozenset(f.name for f in fields if f.annotation in ("float", "int"))


def _is_number(node: cst.BaseExpression, numbers: frozenset[str]) -> bool:
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Attribute):  # a field annotated as a number: self.init_value
        return isinstance(node.value, cst.Name) and node.value.value == "self" and node.attr.value in numbers
    if isinstance(node, cst.UnaryOperation):
        return _is_number(node.expression, numbers)
    if isinstance(node, cst.BinaryOperation):
        return _is_number(node.left, numbers) and _is_number(node.right, numbers)
    return False


def creation(
    var: LazyVar, init: cst.BaseExpression, args: list[cst.Arg], numbers: frozenset[str] = frozenset()
) -> cst.If:
    """The ``if not hasattr(...)`` block that creates ``var`` on the first call."""
    block = parse_statement(
        f"if not hasattr(self, {var.attr!r}):\n"
        f"    self.{var.attr} = {var.var_type}({initial_value(init, args, numbers)})\n"
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
