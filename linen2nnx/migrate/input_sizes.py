"""A submodule argument read from one axis of a ``__call__`` input's shape, which becomes a size argument.

``LinearLayer(in_features=z[:, self.index].shape[1], out_features=x.shape[3])`` in an ``@nn.compact``
``__call__`` reads sizes of the call's inputs. ``__init__`` has no inputs, so the class gains one
required constructor argument per such size (``linear_layer_0_in_features: int``), holding exactly
that value, and the submodule is built from it; whoever builds the class passes the size (a finding
there when its own flow cannot tell it, as for any input size). A plain axis of the first input of a
class whose ``__init__`` already stands in for that input (its parameter shapes read it: ``x_shape``)
is read from the stand-in instead, with no argument of its own. Only an exact reading qualifies: one
axis (an integer literal) of ``.shape`` of an input parameter, or of a slice of it by config, at a
top-level statement of ``__call__`` before which the input keeps its shape, for a submodule built once
and unconditionally. Anything else stays the call-time finding.

:func:`flat_input` is the other size read from an input's shape: a layer fed ``x.reshape(x.shape[0], -1)``
of a ``__call__`` input reads the product of its other axes, from an ``x_shape`` argument.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import code, name_counts, names_in
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.rank_guards import rank_read
from linen2nnx.migrate.rules import SHAPE_002
from linen2nnx.migrate.sites import ClassPlan, Site
from linen2nnx.migrate.variable_planning import shape_kept_until


def shape_axis_input(value: cst.BaseExpression) -> cst.Name | None:
    """The input name of ``v.shape[k]`` / ``v[...].shape[k]`` (``k`` an integer literal); else None."""
    if not (
        isinstance(value, cst.Subscript)
        and len(value.slice) == 1
        and isinstance(value.slice[0].slice, cst.Index)
        and isinstance(value.value, cst.Attribute)
        and value.value.attr.value == "shape"
    ):
        return None
    index = value.slice[0].slice.value
    if isinstance(index, cst.UnaryOperation) and isinstance(index.operator, cst.Minus):
        index = index.expression
    if not isinstance(index, cst.Integer):
        return None
    base = value.value.value
    if isinstance(base, cst.Subscript):
        base = base.value
    return base if isinstance(base, cst.Name) else None


def _top_statement(ctx: FileContext, fn: cst.FunctionDef, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement of ``fn``'s own body that holds ``node`` (None: ``node`` is not inside it)."""
    body = fn.body.body
    cur: cst.CSTNode | None = node
    while cur is not None and not any(cur is stmt for stmt in body):
        cur = ctx.parent_of(cur)
    return cur  # type: ignore[return-value]


def _method_of(ctx: FileContext, fn: cst.FunctionDef, plan: ClassPlan) -> bool:
    """Is ``fn`` a method of the class ``plan`` is made of (not a function nested in one)?"""
    block = ctx.parent_of(fn)
    owner = ctx.parent_of(block) if block is not None else None
    return isinstance(owner, cst.ClassDef) and owner.name.value == plan.name


def input_size_arg(
    ctx: FileContext, plan: ClassPlan, site: Site, arg_name: str, arg: cst.Arg, uses: set[str], what: str
) -> bool:
    """Route ``arg`` (which reads the call-time ``uses``) through a new size argument of ``plan`` when it
    is one axis of an input's shape (see the module docstring); False leaves it to the caller."""
    base = shape_axis_input(arg.value)
    fn = ctx.enclosing_function(site.ctor)
    if (
        base is None
        or uses != {base.value}
        or fn is None
        or fn.name.value != "__call__"
        or not _method_of(ctx, fn, plan)
        or any(site_condition(site))
    ):
        return False
    params = [p.name.value for p in fn.params.params[1:]] + [p.name.value for p in fn.params.kwonly_params]
    sliced = arg.value.value.value  # type: ignore[attr-defined]
    index_names = (
        {n for e in sliced.slice for n in names_in(e)} if isinstance(sliced, cst.Subscript) else set()
    )
    if base.value not in params or base.value in index_names:
        return False
    stmt = _top_statement(ctx, fn, site.ctor)
    if stmt is None or not shape_kept_until(ctx, fn, stmt, base.value):
        return False
    name = f"{site.attr}_{arg_name}"
    while name in plan.field_names or name in plan.new_args:
        name += "_"
    positional = [p.name.value for p in fn.params.params[1:]]
    where = str(positional.index(base.value)) if base.value in positional else "kw"
    plan.new_args[name] = f"input_axis:{where}:{' '.join(code(arg.value).split())}"  # see namemap.ClassEntry
    site.arg_sources[arg_name] = name
    plan.input_sizes.append(InputSize(site, arg_name, arg, name, base.value, sliced is base, what))
    return True


@dataclasses.dataclass
class InputSize:
    """One argument :func:`input_size_arg` routed through the new size argument ``name``."""

    site: Site
    arg_name: str
    arg: cst.Arg
    name: str
    input_name: str
    plain: bool  # ``x.shape[k]`` itself, not of a slice of ``x``
    what: str


def finish_input_sizes(ctx: FileContext, plan: ClassPlan) -> None:
    """Once ``__init__``'s locals are planned: a plain axis of the input that ``__init__`` stands in for
    (``x = jax.ShapeDtypeStruct(tuple(x_shape), ...)``, for parameter shapes that read it) is read from
    the stand-in, with no argument of its own; every other size keeps its argument and says so."""
    stand_in = (
        plan.input_shape_locals or plan.input_shape_params
    ) and "input_shape:0" in plan.new_args.values()
    for size in plan.input_sizes:
        value = code(size.arg.value)
        if stand_in and size.plain and size.input_name == plan.shape_input:
            del plan.new_args[size.name]
            size.site.arg_sources[size.arg_name] = value
            plan.shape_rank_only = False  # an axis of the stand-in is read: ones would size it wrong
            continue
        ctx.report(
            SHAPE_002,
            size.arg,
            f"{plan.name} gains constructor argument {size.name}: `{value}` of its input "
            f"`{size.input_name}`, for argument {size.arg_name}= of {size.what}",
            _hint(size, value, plan.name),
        )
    plan.input_sizes.clear()


def _hint(size: InputSize, value: str, owner: str) -> str:
    """What the caller passes: the expression is in the class's own terms, so a ``self`` in it is the
    instance being built, not the caller."""
    own = f", `self` being the {owner} built" if "self." in value else ""
    return f"pass {size.name}= the value `{value}` has for the input {owner} is called with{own}"


def site_condition(site: Site) -> list[object]:
    """Why ``site`` is not built exactly once and unconditionally (empty: it is)."""
    return [
        why
        for why in (
            site.loop,
            site.nest,
            site.conditions,
            site.tail_of,
            site.extends,
            site.elements,
            site.exclusive_with,
            site.container,
        )
        if why
    ]


def flat_input(
    ctx: FileContext, plan: ClassPlan, feat: Feat, params: list[str], node: cst.CSTNode
) -> str | None:
    """``x.reshape(x.shape[0], -1)`` of a ``__call__`` input: the product of its other axes, from a
    new constructor argument holding the input's shape (``math.prod(x_shape[1:])``)."""
    base = feat.base
    if not (
        feat.kind == "flatten"
        and feat.leading
        and base is not None
        and base.kind == "input"
        and ctx.state.flow_method == "__call__"
        and base.input_name in params
    ):
        return None
    arg = f"{base.input_name}_shape"
    while arg in plan.field_names:
        arg += "_"
    how = f"input_shape:{params.index(base.input_name)}"
    if plan.new_args.get(arg, how) != how:
        return None
    plan.shape_rank_only = False  # the argument's axes are read: a shape of ones would size the layer
    if arg not in plan.new_args:
        plan.new_args[arg] = how
        ctx.report(
            SHAPE_002,
            node,
            f"{plan.name} gains constructor argument {arg}: the shape of "
            f"`{base.input_name}`, whose axes after the first {feat.leading} a layer reads flattened",
            f"pass {arg}={base.input_name}.shape where {plan.name} is built",
        )
    ctx.state.needs_math_import = True
    return f"math.prod({arg}[{feat.leading}:])"


def reads_rank_only(nodes: list[cst.CSTNode], name: str) -> bool:
    """Whether every read of the input ``name`` in ``nodes`` is its rank (``x.ndim``, ``len(x.shape)``:
    scenic's ``StochasticDepth`` builds ``nn.Dropout(broadcast_dims=range(1, x.ndim))``). Then any
    size of each axis builds the same module, so a caller that knows the rank of what it passes gives
    a shape of ones (``x_shape=(1, 1, 1)``) instead of a size nothing explains."""
    rank_reads = 0

    class RankReads(FastVisitor):
        def on_node(self, node: cst.BaseExpression) -> None:
            nonlocal rank_reads
            rank_reads += rank_read(node) == name

        visit_Attribute = visit_Call = on_node  # type: ignore[assignment]

    reads = 0
    for node in nodes:
        RankReads().walk(node)
        reads += name_counts(node).get(name, 0)
    return reads > 0 and reads == rank_reads


def ones(rank: int) -> str:
    """A shape of ``rank`` axes of size 1, as source: ``(1, 1, 1)``, ``(1,)``."""
    return f"({', '.join(['1'] * rank)}{',' if rank == 1 else ''})"


def input_arg_name(plan: ClassPlan, input_name: str, params: list[str]) -> str:
    """The constructor argument that carries the last-axis size of the ``__call__`` input ``input_name``
    (``in_features`` for the first; a config field may already be called so)."""
    arg = "in_features" if input_name == params[0] else f"{input_name}_features"
    while arg in plan.field_names:
        arg += "_"
    return arg


def tuple_valued(how: str) -> bool:
    """A new constructor argument that takes a tuple (a whole input shape, or one size per element of
    a setup() list): a builder that passes one on takes a tuple too, not the int a plain size is."""
    return how.startswith("input_shape:") or how in ("unresolved_shape", "unresolved_each")


def child_size_label(arg: str, child: str, how: str) -> str:
    """How a finding names a class's size argument ``arg`` that its builder cannot give: a tuple one
    takes says what the tuple holds (passing one int fails only where the class indexes it)."""
    if how == "unresolved_each":
        return f"{arg} of {child} (a tuple, one size per element of its list)"
    if how.startswith("input_shape:"):
        return f"{arg} of {child} (a whole input shape)"
    return f"{arg} of {child} (a tuple)" if tuple_valued(how) else f"{arg} of {child}"
