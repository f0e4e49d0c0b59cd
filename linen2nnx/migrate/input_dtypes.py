"""``self.param(name, init, shape, x.dtype)``: a variable created in the dtype of its class's input.

Linen creates the variable on the init call, in the dtype of the input it is given there, and keeps
that dtype at every later apply whatever the inputs then are (a float32 init and a bfloat16 apply
keep a float32 variable: nothing casts it). NNX creates variables in ``__init__``, before any input,
so the class gains a keyword constructor argument ``<attr>_dtype`` (default ``jax.numpy.float32``,
the dtype of the dummy inputs Linen's init is given in almost all code) and creates the variable in
it. A checkpoint whose variable has another dtype fails conversion with a dtype mismatch that names
the leaf until the argument is given: nothing differs silently.

Followed: the compact method's first input, not rebound before the statement that creates the
variable, read only as ``x.dtype`` in the argument. Any other call-time value stays a manual finding
(variable_planning.py).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import NOT_LOCAL, assigned_in, code, names_in
from linen2nnx.migrate.rules import VAR_007
from linen2nnx.migrate.sites import ClassPlan, Field, Site

DTYPE_ANNOTATION = "jax.typing.DTypeLike"
DTYPE_DEFAULT = "jax.numpy.float32"


def input_dtype_args(
    ctx: Any, plan: ClassPlan, call: cst.Call, args: list[cst.Arg], local_names: set[str]
) -> dict[int, str]:
    """The indices of ``args`` (a variable call's canonical arguments) that read a call-time value only
    as the compact method's first input's ``.dtype``, that input unchanged until ``call``, each with
    the input's name; empty when there is none or any other use stops it."""
    fn = ctx.enclosing_function(call)
    if fn is None or fn is not plan.compact or len(fn.params.params) < 2:
        return {}
    first = fn.params.params[1].name.value
    found = {}
    for i, arg in enumerate(args):
        uses = (names_in(arg.value) - NOT_LOCAL) & local_names
        if uses == {first} and _only_dtype_uses(arg.value, first):
            found[i] = first
    if found and not _unchanged_until(ctx, fn, call, first):
        return {}
    return found


def give_dtype_argument(
    ctx: Any, plan: ClassPlan, site: Site, dtype_args: dict[int, str], args: list[cst.Arg], what: str
) -> None:
    """Give the class the keyword argument ``<attr>_dtype`` (a field with a float32 default), make
    ``site``'s arguments read it where they read the input's dtype, and report it (``what``: the
    variable call, as the finding names it)."""
    taken = set(plan.field_names) | {s.attr for s in plan.sites.values()}
    name = f"{site.attr}_dtype"
    while name in taken:
        name += "_"
    plan.fields.append(Field(name, DTYPE_ANNOTATION, DTYPE_DEFAULT, kw_only=True))
    for index, first in dtype_args.items():
        replaced = args[index].value.visit(_DtypeRead(first, f"self.{name}"))
        site.arg_sources[str(index)] = code(replaced)  # type: ignore[arg-type]
    ctx.state.needs_jax_import = True  # the default and the annotation read jax
    ctx.report(
        VAR_007,
        site.ctor,
        f"{what} is created in {next(iter(dtype_args.values()))}.dtype at Linen's init: in NNX in {name}, "
        f"a keyword argument of {plan.name} defaulting to float32",
    )


def _only_dtype_uses(node: cst.CSTNode, name: str) -> bool:
    """``name`` appears under ``node`` only as ``name.dtype``."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.Attribute) and isinstance(cur.value, cst.Name) and cur.value.value == name:
            if cur.attr.value != "dtype":
                return False
            continue
        if isinstance(cur, cst.Name) and cur.value == name:
            return False
        stack.extend(syntax_children(cur))
    return True


def _unchanged_until(ctx: Any, fn: cst.FunctionDef, call: cst.Call, name: str) -> bool:
    """No statement of ``fn`` before the one holding ``call`` binds ``name`` (an ``x = x.astype(...)``
    would change its dtype), nor does that statement inside a block."""
    top: Any = call
    while top is not None and ctx.parent_of(top) is not fn.body:
        top = ctx.parent_of(top)
    if top is None:
        return False
    for stmt in fn.body.body:
        if stmt is top:
            block_binds = not isinstance(stmt, cst.SimpleStatementLine) and name in assigned_in(stmt)
            return not block_binds and not _walrus_binds(stmt, name)
        if name in assigned_in(stmt) or _walrus_binds(stmt, name):
            return False
    return False


def _walrus_binds(node: cst.CSTNode, name: str) -> bool:
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, (cst.NamedExpr, cst.AsName)) and name in names_in(
            cur.target if isinstance(cur, cst.NamedExpr) else cur.name
        ):
            return True
        stack.extend(syntax_children(cur))
    return False


class _DtypeRead(cst.CSTTransformer):
    """``x.dtype`` -> the expression ``replacement``."""

    def __init__(self, name: str, replacement: str) -> None:
        super().__init__()
        self.name, self.replacement = name, replacement

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if isinstance(original.value, cst.Name) and original.value.value == self.name:
            return cst.parse_expression(self.replacement)
        return updated
