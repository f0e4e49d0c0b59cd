"""``self.param(name, init, shape, x.dtype)``: a variable created in the dtype of its class's input.

Linen creates the variable on the init call, in the dtype of the input it is given there, and keeps
that dtype at every later apply whatever the inputs then are (a float32 init and a bfloat16 apply
keep a float32 variable: nothing casts it). NNX creates variables in ``__init__``, before any input,
so the class gains a keyword constructor argument ``<attr>_dtype`` (default ``jax.numpy.float32``,
the dtype of the dummy inputs Linen's init is given in almost all code) and creates the variable in
it. A checkpoint whose variable has another dtype fails conversion with a dtype mismatch that names
the leaf until the argument is given: nothing differs silently.

Where a class of the file applies such a class to a value it casts (``Head()(x.astype(t))``, or a
local bound to a cast), Linen's init creates the variables in the cast dtype: that application is a
manual finding naming the argument to pass (:func:`check_cast_input`).

Followed: the compact method's first input, not rebound before the statement that creates the
variable, read only as ``x.dtype`` in the argument. Any other call-time value stays a manual finding
(variable_planning.py).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import NOT_LOCAL, assigned_in, code, names_in
from linen2nnx.migrate.rules import VAR_007, VAR_008
from linen2nnx.migrate.sites import ClassPlan, Field, Site, one_line
from linen2nnx.migrate.value_dtypes import INPUT, traced_dtype

DTYPE_ANNOTATION = "jax.typing.DTypeLike"
DTYPE_DEFAULT = "jax.numpy.float32"


def input_dtype_args(
    ctx: Any, plan: ClassPlan, call: cst.Call, args: list[cst.Arg], local_names: set[str]
) -> dict[int, tuple[str, str | None]]:
    """The indices of ``args`` (a variable call's canonical arguments) that read a call-time value only
    as ``y.dtype`` of one local ``y`` whose dtype the code says (value_dtypes.py), each with ``y`` and
    the dtype expression, or None where it is the compact method's first input's; empty when there
    is none or any other use stops it."""
    fn = ctx.enclosing_function(call)
    if fn is None or fn is not plan.compact or len(fn.params.params) < 2:
        return {}
    found: dict[int, tuple[str, str | None]] = {}
    maybe_none = {f.name for f in plan.fields if f.default == "None"}
    for i, arg in enumerate(args):
        uses = (names_in(arg.value) - NOT_LOCAL) & local_names
        if len(uses) != 1 or not _only_dtype_uses(arg.value, next(iter(uses))):
            continue
        name = next(iter(uses))
        dtype = traced_dtype(ctx, fn, call, name, local_names, maybe_none)
        if dtype is not None:
            found[i] = (name, None if dtype == INPUT else dtype)
    return found


def _needs_input_dtype(dtype: str | None) -> bool:
    """The dtype is (or, where a field may be None, falls back to) the input's: read from the argument."""
    return dtype is None or INPUT in dtype


def give_dtype_argument(
    ctx: Any,
    plan: ClassPlan,
    site: Site,
    dtype_args: dict[int, tuple[str, str | None]],
    args: list[cst.Arg],
    what: str,
) -> None:
    """Make ``site``'s arguments read the dtype where they read a local's: the expression the code casts
    it to, or the keyword argument ``<attr>_dtype`` the class gains (a field with a float32 default)
    for the input's; and report it (``what``: the variable call, as the finding names it)."""
    field = None
    if any(_needs_input_dtype(dtype) for _, dtype in dtype_args.values()):
        taken = set(plan.field_names) | {s.attr for s in plan.sites.values()} | _class_names(ctx, site.ctor)
        field = f"{site.attr}_dtype"
        while field in taken:
            field += "_"
        plan.fields.append(Field(field, DTYPE_ANNOTATION, DTYPE_DEFAULT, kw_only=True, added=True))
        ctx.state.needs_jax_import = True  # the default and the annotation read jax
    for index, (name, dtype) in dtype_args.items():
        read = f"self.{field}" if dtype is None else dtype.replace(INPUT, f"self.{field}")
        replaced = args[index].value.visit(_DtypeRead(name, read))
        site.arg_sources[str(index)] = code(replaced)  # type: ignore[arg-type]
    name, dtype = next(iter(dtype_args.values()))
    if field is not None:
        where = f"in NNX in {field}, a keyword argument of {plan.name} defaulting to float32"
        if dtype is not None:  # a dtype field that may be None: it when set, else the argument
            where = f"in NNX in {dtype.replace(INPUT, 'self.' + field)}, {field} a keyword argument of {plan.name} defaulting to float32"
    else:
        where = f"{dtype}, the dtype the code gives {name}, in NNX too"
    ctx.report(VAR_007, site.ctor, f"{what} is created in {name}.dtype at Linen's init: {where}")


def _class_names(ctx: Any, node: cst.CSTNode) -> set[str]:
    """The names the class holding ``node`` binds in its body (methods, properties, class constants)
    and every ``self.<name>`` it reads (what a base class may define): none may be shadowed."""
    cls = ctx.parent_of(node)
    while cls is not None and not isinstance(cls, cst.ClassDef):
        cls = ctx.parent_of(cls)
    if cls is None:
        return set()
    names = set()
    for stmt in cls.body.body:
        names |= {stmt.name.value} if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) else assigned_in(stmt)
    stack: list[cst.CSTNode] = [cls.body]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.Attribute) and isinstance(cur.value, cst.Name) and cur.value.value == "self":
            names.add(cur.attr.value)
        stack.extend(syntax_children(cur))
    return names


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


class _DtypeRead(cst.CSTTransformer):
    """``x.dtype`` -> the expression ``replacement``."""

    def __init__(self, name: str, replacement: str) -> None:
        super().__init__()
        self.name, self.replacement = name, replacement

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if isinstance(original.value, cst.Name) and original.value.value == self.name:
            return cst.parse_expression(self.replacement)
        return updated


def dtype_fields(user: Any) -> list[str]:
    """The constructor arguments :func:`give_dtype_argument` gave ``user`` (a plan or a summary)."""
    return [
        f.name
        for f in getattr(user, "fields", ())
        if f.annotation == DTYPE_ANNOTATION and f.default == DTYPE_DEFAULT and f.kw_only
    ]


def check_cast_inputs(
    ctx: Any, uses: list[Any], sites_by_key: dict[str, list[Site]], fn: cst.FunctionDef
) -> None:
    """:func:`check_cast_input` for each module of the run that ``fn``'s flow applied (``uses``)."""
    for use in uses:
        for site in sites_by_key.get(use.key, ()):
            if site.kind == "module" and use.iteration == 0:
                check_cast_input(ctx, use.node, site.user, fn)


def check_cast_input(ctx: Any, call: cst.CSTNode, user: Any, fn: cst.FunctionDef) -> None:
    """A manual finding when ``call`` applies ``user``, a class with :func:`dtype_fields`, to a value
    it casts (or a built-in layer given ``dtype=`` outputs): directly, or through a local of ``fn`` that
    any binding casts."""
    fields = dtype_fields(user)
    args = getattr(call, "args", ())
    if not fields or not args or args[0].keyword is not None:
        return
    value = args[0].value
    sources = [value]
    if isinstance(value, cst.Name):
        sources += _bound_values(fn, value.value)
    cast = next((c for c in sources if _casts(c) or _layer_in_dtype(ctx, c)), None)
    if cast is None:
        return
    given = ", ".join(f"{f}=<that dtype>" for f in fields)
    ctx.report(
        VAR_008,
        call,
        f"{user.name} is applied to a value whose dtype the call sets ({one_line(code(cast))}): Linen's init creates its "
        f"variables in that dtype, NNX in {', '.join(fields)} (float32 unless given)",
        f"pass {given} where {user.name} is built",
    )


_NOT_A_CAST = frozenset(
    {"None", "jnp.float32", "jax.numpy.float32", "np.float32", "numpy.float32", "'float32'", '"float32"'}
)
"""A layer's ``dtype=`` that leaves its output in float32 (or its input's dtype): the callee's variable
is float32, as NNX creates it by default."""


def _layer_in_dtype(ctx: Any, node: cst.CSTNode) -> bool:
    """``nn.Dense(..., dtype=self.dtype_mm)(x)``: a built-in layer given a computation ``dtype`` outputs
    in it (Flax's ``promote_dtype``; ``LayerRule.output_dtype``), as a cast does: big_vision's mixed
    precision hands a bfloat16 value on so."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Call)):
        return False
    rule = ctx.layer_rule_of(node.func.func)
    return bool(
        rule is not None
        and rule.output_dtype
        and any(
            a.keyword is not None and a.keyword.value == "dtype" and code(a.value) not in _NOT_A_CAST
            for a in node.func.args
        )
    )


def _bound_values(fn: cst.FunctionDef, name: str) -> list[cst.CSTNode]:
    """The values every assignment in ``fn`` binds ``name`` to (a walrus's too)."""
    found: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [fn.body]
    while stack:
        cur = stack.pop()
        if (
            isinstance(cur, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr))
            and cur.value is not None
        ):
            targets = (
                [t.target for t in cur.targets] if isinstance(cur, cst.Assign) else [cur.target]  # type: ignore[attr-defined]
            )
            if any(name in names_in(t) for t in targets):
                found.append(cur.value)
        stack.extend(syntax_children(cur))
    return found


def _casts(node: cst.CSTNode) -> bool:
    """An explicit cast under ``node``: ``.astype(...)``, ``lax.convert_element_type(v, t)``,
    ``jnp.asarray(v, t)`` / ``jnp.array(v, dtype=t)``. Not followed: a layer's computation ``dtype=``,
    whose output may have that dtype too (the converter then names the leaf whose dtype differs)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.Call):
            func = cur.func
            attr = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
            if attr in ("astype", "convert_element_type"):
                return True
            if attr in ("asarray", "array") and (
                len([a for a in cur.args if a.keyword is None]) > 1
                or any(a.keyword is not None and a.keyword.value == "dtype" for a in cur.args)
            ):
                return True
        stack.extend(syntax_children(cur))
    return False
