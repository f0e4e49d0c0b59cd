"""Submodules built under a shape test: ``if residual.shape != y.shape: residual = conv_proj(residual)``.

ResNet blocks project the shortcut only when the main path changed the shape. Linen decides that at
the first call; NNX builds its modules in ``__init__``, so the test has to be restated there in terms
of the constructor's arguments. Two arrays of the main path differ in shape when their last axes
differ (the dataflow knows both) or when a convolution on the way strides (its ``strides`` argument).
Anything else that could change the other axes (padding other than ``'SAME'``, dilation, pooling, a
reshape) makes the test undecidable here: the construction stays a manual finding. The call keeps
Linen's own test, so the NNX module takes the same branch whenever its ``__init__`` built the same
modules; when they disagree the call fails loudly instead of computing something else.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from linen2nnx.migrate.array_functions import SHAPE_KEEPING_FUNCTIONS, SHAPE_KEEPING_METHODS
from linen2nnx.migrate.cst_meta import calls_in, inside, nodes_of
from linen2nnx.migrate.cst_utils import NOT_LOCAL, code, names_in, self_attr
from linen2nnx.migrate.elementwise import is_elementwise
from linen2nnx.migrate.sites import replace_shape_last, shape_last_refs
from linen2nnx.migrate.variable_planning import shape_kept_until

SPATIAL_LAYERS = frozenset({"Conv", "ConvTranspose"})
KEEPING_LAYERS = frozenset({"Dense", "LayerNorm", "RMSNorm", "BatchNorm", "GroupNorm", "Dropout", "Conv"})
"""Built-in layers whose output has their input's axes but the last (Conv: but for its strides)."""
SPATIAL_ARGS_UNDECIDED = ("input_dilation", "kernel_dilation")
POOLING = frozenset(
    {
        "flax.linen.max_pool",
        "flax.linen.avg_pool",
        "flax.linen.min_pool",
        "flax.linen.pool",
        "flax.linen.pooling.max_pool",
        "flax.linen.pooling.avg_pool",
        "flax.linen.pooling.min_pool",
        "flax.linen.pooling.pool",
        "jax.numpy.reshape",
    }
)


@dataclasses.dataclass
class ShapeTest:
    """``a.shape != b.shape`` (``equal``: ``==``) of two locals, as an ``if`` test."""

    token: str  # stands for the test in the sites' conditions until it is restated
    node: cst.If
    a: str
    b: str
    equal: bool
    last_refs: tuple[str, ...] = ()  # a last-axis test (see parse_last_axis_test): its v.shape[-1] locals


def parse_shape_test(test: cst.BaseExpression, node: cst.If, index: int) -> ShapeTest | None:
    """``x.shape != y.shape`` / ``x.shape == y.shape`` with ``x``, ``y`` names, else None."""
    if not (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, (cst.NotEqual, cst.Equal))
    ):
        return None
    sides = [test.left, test.comparisons[0].comparator]
    names = []
    for side in sides:
        if not (
            isinstance(side, cst.Attribute)
            and side.attr.value == "shape"
            and isinstance(side.value, cst.Name)
        ):
            return None
        names.append(side.value.value)
    return ShapeTest(
        f"__shape_test_{index}__",
        node,
        names[0],
        names[1],
        isinstance(test.comparisons[0].operator, cst.Equal),
    )


def parse_last_axis_test(
    test: cst.BaseExpression, node: cst.If, index: int, call_time: set[str]
) -> ShapeTest | None:
    """A test whose call-time values are only last axes of locals (``x.shape[-1] != nout or
    self.strides != (1, 1)``, ``nout`` replayed in ``__init__``): restated with each local's size, as
    the dataflow knows it at the ``if``; None for any other read of a call-time value."""
    uses = (names_in(test) - NOT_LOCAL) & call_time
    refs = shape_last_refs(test, uses) if uses else None
    if refs is None:
        return None
    return ShapeTest(f"__shape_test_{index}__", node, "", "", False, tuple(refs))


def last_axis_test(
    ctx: Any, node: cst.If, fn: cst.FunctionDef, index: int, local_names: set[str]
) -> ShapeTest | None:
    """A last-axis test (:func:`parse_last_axis_test`) of the method's first input only, its shape kept
    up to the ``if``: its size there is the class's input size, which ``__init__`` has."""
    test = parse_last_axis_test(node.test, node, index, local_names)
    params = fn.params.params
    if test is None or len(params) < 2 or set(test.last_refs) != {params[1].name.value}:
        return None
    top: Any = node
    while top is not None and ctx.parent_of(top) is not fn.body:
        top = ctx.parent_of(top)
    if top is None or not shape_kept_until(ctx, fn, top, params[1].name.value):
        return None
    return test


def restated_last_axes(test: ShapeTest, sizes: dict[str, str | None]) -> str | None:
    """A last-axis test with each ``v.shape[-1]`` written as ``v``'s size at the ``if`` (None: one
    size is unknown)."""
    if any(size is None for size in sizes.values()):
        return None
    return f"({replace_shape_last(test.node.test, sizes)})"  # type: ignore[arg-type]


def strided(strides: cst.BaseExpression, kernel_size: cst.BaseExpression | None) -> str | None:
    """A test that ``strides`` (an argument of a convolution with this ``kernel_size``) is not all ones."""
    if isinstance(strides, cst.Integer) or (isinstance(strides, cst.Name) and strides.value == "None"):
        return "False" if code(strides) in ("1", "None") else "True"
    if isinstance(kernel_size, (cst.Tuple, cst.List)):
        ones = (
            "("
            + ", ".join("1" for _ in kernel_size.elements)
            + ("," if len(kernel_size.elements) == 1 else "")
            + ")"
        )
        return f"{code(strides)} not in (None, 1, {ones}, [{ones[1:-1].rstrip(',')}])"  # a config's list too
    return None


def keeps_other_axes(ctx: Any, plan: Any, fn: cst.FunctionDef, node: cst.If) -> bool:
    """Whether every call of ``fn`` before the ``if`` keeps the axes of its input but the last (a
    convolution but for its strides, which the test restates): a built-in layer that does, an
    elementwise function, a shape-keeping array function or method. A block of the run, a
    ``Sequential``, a setup() submodule, a transposed convolution that strides, a resize, a pool or a
    slice may change the others in ways the restated test would not say."""
    built: list[cst.Call] = []  # the layers' constructor calls: what their arguments call is no array op
    for call in calls_in(fn.body):
        if inside(call, node, ctx.parent_of):
            break
        site = plan.sites.get(call) or plan.sites.get(call.func)
        if site is not None:
            rule = site.rule
            if rule is None or rule.linen not in KEEPING_LAYERS | SPATIAL_LAYERS:
                return False
            if rule.linen == "ConvTranspose" and "strides" in site.args:
                return False
            built.append(site.ctor)
            continue
        if any(inside(call, ctor, ctx.parent_of) for ctor in built):
            continue
        func = call.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if not (
            is_elementwise(ctx, func)
            or self_attr(func) in plan.activation_fields
            or ctx.qualnames(func) & SHAPE_KEEPING_FUNCTIONS
            or (method in SHAPE_KEEPING_METHODS and not ctx.qualnames(func))
        ):
            return False
    slices = [s for s in nodes_of(fn.body, (cst.Subscript,)) if not inside(s, node, ctx.parent_of)]
    return all(isinstance(s.value, cst.Attribute) and s.value.attr.value == "shape" for s in slices)


def restated(test: ShapeTest, width_a: str, width_b: str, stride_tests: list[str]) -> str:
    """The ``__init__`` form of ``test``: the widths, then every stride on the way."""
    if "True" in stride_tests:
        return "False" if test.equal else "True"
    text = " or ".join([f"{width_a} != {width_b}", *(t for t in stride_tests if t != "False")])
    return f"not ({text})" if test.equal else text


def shape_test_of(
    ctx: Any, plan: Any, node: cst.If, fn: cst.FunctionDef, local_names: set[str]
) -> ShapeTest | None:
    """The shape test of ``node`` in ``plan`` (recorded on first use, numbered in order), or None when
    its test is none the codemod restates."""
    if node not in plan.shape_tests:
        index = len(plan.shape_tests)
        test = parse_shape_test(node.test, node, index) or last_axis_test(ctx, node, fn, index, local_names)
        if test is None:
            return None
        plan.shape_tests[node] = (test, fn)
    return plan.shape_tests[node][0]
