"""The dtype a local of a compact method holds where a variable is created in it (``x.dtype``).

ViT-style code creates a class token in the dtype of the patch embedding it is concatenated with::

    x = nn.Conv(self.hidden_size, ..., dtype=self.dtype)(inputs)
    n, h, w, c = x.shape
    x = jnp.reshape(x, [n, h * w, c])
    cls = self.param('cls', nn.initializers.zeros, (1, 1, c), x.dtype)

NNX creates the variable in ``__init__``, where no ``x`` exists, so the dtype must be read off the code
that made ``x``. Followed, through the one plain assignment that reaches the read each time:

- a built-in layer applied with ``dtype=E`` (``LayerRule.output_dtype``): its output is in ``E``, as
  Flax's ``promote_dtype`` casts inputs and parameters to it. ``E`` a field whose default is None
  (``maybe_none``, Flax's own convention) is that field where it is set and no ``dtype=`` where it is
  not: ``(self.dtype if self.dtype is not None else <the dtype without it>)``;
- such a layer without ``dtype=``: its output is the promotion of its input and its parameters,
  float32 for the float32 inputs Linen's init is given, as the input itself is: the class gets the
  same keyword argument as for a variable in its input's dtype. With the default float32 parameters
  that holds whatever made its input (a bfloat16 input promotes to float32 too; only a float64 one,
  under x64, would not), so the input is not followed; with ``param_dtype=``, or with no parameter (a
  norm given ``use_scale=False, use_bias=False``: its output is in its input's dtype), it is;
- ``jnp.reshape`` / ``transpose`` / ``tile`` / ``squeeze`` / ``expand_dims`` / ``swapaxes`` /
  ``moveaxis``, the same-named array methods, and indexing: the dtype of what they are given;
- the compact method's first input, unchanged: :data:`INPUT` (input_dtypes.py gives the class a
  ``<attr>_dtype`` argument for it).

Anything else (a cast, a call the table does not name, a value bound in a loop or a branch) is not
followed: the variable stays a manual finding.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import NOT_LOCAL, assigned_in, code, names_in, self_attr
from linen2nnx.migrate.dataflow import value_method
from linen2nnx.migrate.unfollowed import bound_otherwise

INPUT = "<input>"  # the compact method's first input's dtype, through promoting layers; in a dtype
# expression (a field that may be None: ``(self.dtype if self.dtype is not None else <input>)``), a
# placeholder for the argument that holds it
_KEEPING_FUNCTIONS = frozenset(
    f"{module}.{name}"
    for module in ("jax.numpy", "numpy")
    for name in ("reshape", "transpose", "tile", "squeeze", "expand_dims", "swapaxes", "moveaxis")
)
_KEEPING_METHODS = frozenset({"reshape", "transpose", "squeeze", "swapaxes"})
_MAX_STEPS = 32


Names = tuple[set[str], set[str]]  # the method's locals, and the class's fields that default to None


def traced_dtype(
    ctx: Any, fn: cst.FunctionDef, at: cst.CSTNode, name: str, local_names: set[str], maybe_none: set[str]
) -> str | None:
    """The dtype the local ``name`` holds where ``at`` runs in ``fn`` (a compact method): :data:`INPUT`,
    the source of a dtype expression that reads no local, or None when the code is not followed.
    ``maybe_none``: the class's fields that default to None."""
    return _name_dtype(ctx, fn, at, name, (local_names, maybe_none), 0)


def _name_dtype(
    ctx: Any, fn: cst.FunctionDef, at: cst.CSTNode, name: str, names: Names, steps: int
) -> str | None:
    if steps > _MAX_STEPS:
        return None
    found, value = _reaching_value(ctx, fn, at, name)
    if not found:
        params = fn.params.params
        return INPUT if len(params) > 1 and params[1].name.value == name and not params[1].star else None
    return None if value is None else _value_dtype(ctx, fn, value, names, steps + 1)


def _value_dtype(
    ctx: Any, fn: cst.FunctionDef, value: cst.BaseExpression, names: Names, steps: int
) -> str | None:
    """The dtype of the expression ``value`` (see the module docstring)."""
    if type(value) is cst.Name:
        return _name_dtype(ctx, fn, value, value.value, names, steps)
    if type(value) is cst.Subscript:
        return _value_dtype(ctx, fn, value.value, names, steps + 1)
    if type(value) is not cst.Call:
        return None
    func = value.func
    positional = [a for a in value.args if a.keyword is None and not a.star]
    if type(func) is cst.Call:
        return _layer_output_dtype(ctx, fn, func, positional, names, steps)
    if ctx.qualnames(func) & _KEEPING_FUNCTIONS and positional:
        return _value_dtype(ctx, fn, positional[0].value, names, steps + 1)
    if (
        type(func) is cst.Attribute
        and func.attr.value in _KEEPING_METHODS
        and value_method(func, ctx.qualnames(func))
    ):
        return _value_dtype(ctx, fn, func.value, names, steps + 1)
    return None


def _layer_output_dtype(
    ctx: Any, fn: cst.FunctionDef, ctor: cst.Call, inputs: list[cst.Arg], names: Names, steps: int
) -> str | None:
    """``Layer(..., dtype=E)(x)``: ``E``; without ``dtype=``, the dtype of ``x`` when that is the input's."""
    rule = ctx.layer_rule_of(ctor.func)
    if rule is None or not rule.output_dtype or rule.callee is not None or any(a.star for a in ctor.args):
        return None
    order = rule.linen_arg_order()
    given = {a.keyword.value: a.value for a in ctor.args if a.keyword is not None}
    given.update((order[i], a.value) for i, a in enumerate(a for a in ctor.args if a.keyword is None))
    local_names, maybe_none = names
    dtype = given.get("dtype")
    field = self_attr(dtype) if dtype is not None else None
    if dtype is not None and not (field in maybe_none or (type(dtype) is cst.Name and dtype.value == "None")):
        reads_local = (names_in(dtype) - NOT_LOCAL) & local_names
        return None if reads_local or bound_otherwise(dtype) else code(dtype)
    unset = _unset_dtype(ctx, fn, rule, given, inputs, names, steps)
    if field in maybe_none and unset is not None:  # the field's dtype when set, else as without dtype=
        return f"(self.{field} if self.{field} is not None else {unset})"
    return unset


def _unset_dtype(
    ctx: Any, fn: cst.FunctionDef, rule: Any, given: dict, inputs: list[cst.Arg], names: Names, steps: int
) -> str | None:
    """The output dtype of a layer built with ``given`` and no ``dtype`` (see :func:`_layer_output_dtype`)."""
    if not inputs:
        return None
    has_params = not rule.param_switches or any(
        switch not in given or code(given[switch]) != "False" for switch in rule.param_switches
    )
    if has_params and "param_dtype" not in given:  # float32 parameters: float32 for any input (but float64)
        return INPUT
    traced = _value_dtype(ctx, fn, inputs[0].value, names, steps + 1)
    return INPUT if traced == INPUT else None


def _reaching_value(
    ctx: Any, fn: cst.FunctionDef, at: cst.CSTNode, name: str
) -> tuple[bool, cst.BaseExpression | None]:
    """The value of the plain ``name = value`` that last binds ``name`` before ``at`` runs, looking back
    through the blocks around ``at`` (only ``if`` / ``else`` blocks: a loop, ``with``, ``try`` or
    ``match`` is not followed). ``(False, None)`` when nothing in ``fn`` binds it first;
    ``(True, None)`` when the binding is any other form."""
    child, cur = at, ctx.parent_of(at)
    while cur is not None and cur is not fn:
        if isinstance(cur, (cst.IndentedBlock, cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            before = cur.body[: next((i for i, s in enumerate(cur.body) if s is child), len(cur.body))]
            for stmt in reversed(before):
                if name in assigned_in(stmt) or name in bound_otherwise(stmt):
                    return True, _plain_value(stmt, name)
        elif isinstance(cur, cst.If):
            if name in bound_otherwise(cur.test):
                return True, None
        elif isinstance(cur, (cst.BaseCompoundStatement, cst.BaseSuite)):
            return True, None
        elif isinstance(cur, cst.BaseSmallStatement) and name in bound_otherwise(cur):
            return True, None
        child, cur = cur, ctx.parent_of(cur)
    return (False, None) if cur is fn else (True, None)


def _plain_value(stmt: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value ``stmt`` assigns ``name``, when it is ``name = value`` (or annotated) as the last binding
    of ``name`` in a simple statement line; None for any other binding."""
    smalls = list(stmt.body) if type(stmt) is cst.SimpleStatementLine else [stmt]
    for small in reversed(smalls):
        if name not in assigned_in(small) and name not in bound_otherwise(small):
            continue
        if type(small) is cst.Assign:  # `x = out["stem"] = value`: other targets bind no name
            targets = [t.target for t in small.targets]
        elif type(small) is cst.AnnAssign and small.value is not None:
            targets = [small.target]
        else:
            return None
        named = [t.value for t in targets if type(t) is cst.Name]
        plain = named == [name] and all(type(t) in (cst.Name, cst.Subscript, cst.Attribute) for t in targets)
        return small.value if plain and name not in bound_otherwise(small.value) else None
    return None
