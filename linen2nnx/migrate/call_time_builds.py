"""Submodules Linen builds under a test of a call-time value that NNX can still build in ``__init__``.

A traced call that built one (with ``--unsafe-fixes``, :func:`built_in_trace`), or, without a trace,
one built only when an optional input is given (:func:`built_for_optional_input`):

``if context is not None: y = nn.MultiHeadDotProductAttention(...)(x, context)`` (a cross-attention a
decoder block runs only with an encoder output), ``if input_embds is None: input_embds =
nn.Embed(...)(ids)`` (GPT-2's token embedding): Linen builds the module on the path that reaches it,
so its weights exist where ``init`` was given (or not given) that input. NNX builds it in
``__init__`` always and keeps the call under the same test, which computes the same thing wherever
the Linen model has the module's weights. A checkpoint from an ``init`` that skipped the branch has
none of them: ``convert`` names each weight it cannot fill instead of leaving it at its init value.

Only a bare presence test of one of the method's parameters qualifies (``p is None`` /
``p is not None``, or such a test and-ed with config tests where the module runs when it holds), and
only where the test's other branch builds no module: two builds sharing one Linen auto-name across
branches would need one attribute each. Linen's auto-names count the modules that ran, so the
record the naming checks keep says the module runs under the test (a later auto-named module of its
class is a finding, see compact_collect.py; one in another @nn.compact method, method_auto_names.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import NOT_LOCAL, keyword_arg, names_in, parse_expression
from linen2nnx.migrate.guard_conditions import and_conjuncts, joined_conjuncts
from linen2nnx.migrate.rules import MOD_009, MOD_015

if TYPE_CHECKING:
    from linen2nnx.migrate.compact_collect import Built, CompactCollector
    from linen2nnx.migrate.sites import ClassPlan


def presence_test(expr: cst.BaseExpression, optional: frozenset[str]) -> bool:
    """``p is None`` / ``p is not None`` for a parameter ``p`` in ``optional``."""
    return (
        isinstance(expr, cst.Comparison)
        and not expr.lpar
        and isinstance(expr.left, cst.Name)
        and expr.left.value in optional
        and len(expr.comparisons) == 1
        and isinstance(expr.comparisons[0].operator, (cst.Is, cst.IsNot))
        and isinstance(expr.comparisons[0].comparator, cst.Name)
        and expr.comparisons[0].comparator.value == "None"
    )


def presence_part(
    test: cst.BaseExpression, holds: bool, optional: frozenset[str], call_time: set[str]
) -> str | None:
    """The config part of a test that makes a module run only when an optional input is (or is not)
    given: "" for a bare presence test (either branch), the other conjuncts of an ``and`` where it
    holds (``if self.guidance and guidance is not None:`` keeps ``self.guidance``); None where any
    part reads another call-time value, or no presence test decides it."""
    if presence_test(test, optional):
        return ""
    if not holds:
        return None
    parts: list[cst.BaseExpression] = []
    seen = False
    for cur in and_conjuncts(test):
        if presence_test(cur, optional):
            seen = True
        elif isinstance(cur, cst.BooleanOperation) or (names_in(cur) - NOT_LOCAL) & call_time:
            return None
        else:
            parts.append(cur)
    return joined_conjuncts(parts) if seen else None


def method_parameters(fn: cst.FunctionDef) -> frozenset[str]:
    """The parameters of ``fn`` but its first (``self``)."""
    params = fn.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    return frozenset(p.name.value for p in every[1:])


def other_branch_builds(guard_if: cst.If, holds: bool) -> bool:
    """Does the branch of ``guard_if`` that the construction is not in apply a constructed module
    (``Block(...)(x)``), call anything that names a module class (``nn.Dense(...)``) or call a method
    of its own (``self.mlp(x)``: an ``@nn.compact`` helper builds modules too)? Conservative: any
    applied call result, a call of a capitalised name, or any ``self.<name>(...)`` call."""
    other = guard_if.orelse if holds else guard_if.body
    if other is None:
        return False
    found = False

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
            on_self = (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == "self"
            )
            if isinstance(func, cst.Call) or on_self or (isinstance(name, str) and name[:1].isupper()):
                found = True

    other.visit(_Calls())
    return found


def built_in_other_methods(collector: CompactCollector, built: Built) -> bool:
    """Does another method of the class build an auto-named module Linen counts with ``built``'s
    (``Dense_0`` / ``Dense_1``)? An ``@nn.compact`` helper's modules share the class's counters, and
    the auto-name records see only this method: a module that runs only with an optional input would
    swap the names of a helper's. Conservative: any construction of the same class without a literal
    ``name=``, or any call through a partial, a factory or a module-valued field there."""
    ctx, fn = collector.ctx, collector.fn
    cls = ctx.enclosing(fn, cst.ClassDef)
    if cls is None:
        return True
    wanted = collector.class_name(built)
    for other in cls.body.body:
        if not isinstance(other, cst.FunctionDef) or other is fn:
            continue
        for call in calls_in(other):
            if keyword_arg(call, "name") is not None:
                continue
            rule = ctx.layer_rule_of(call.func)
            user = None if rule is not None else ctx.user_class_of(call.func)
            if rule is not None or user is not None:
                name = rule.auto_name if rule is not None else user.name  # type: ignore[union-attr]
                if ctx.linen_class_name(call.func, name) == wanted:
                    return True
            elif isinstance(call.func, cst.Call) and ctx.layer_rule_of(call.func.func) is None:
                if ctx.user_class_of(call.func.func) is None:
                    return True  # `dense(...)(x)`, `self.conv(...)(x)`: built through something unread
    return False


def built_for_optional_input(
    collector: CompactCollector, node: cst.Call, built: Built
) -> tuple[list[str] | None, list[str] | None]:
    """A module built only when an optional input of the compact method is (not) given: (the tests it
    is built under, for the auto-name checks; the config tests __init__ builds it under), reported;
    (None, None) when some other call-time value decides it."""
    presence: dict[str, str] = {}
    naming = collector.planner.conditions_of(
        node, collector.fn, collector.local_names, collector.plan, presence=presence
    )
    if naming is None or not presence:
        return None, None
    if keyword_arg(built.target, "name") is None and built_in_other_methods(collector, built):
        return None, None
    tests = [c for c in naming if c in presence]
    collector.ctx.report(
        MOD_015,
        node,
        f"{built.what} is built only when {' and '.join(f'`{t}`' for t in tests)}: built in __init__ always "
        "and used under the same test",
        "a checkpoint from an init that skipped the branch has none of its weights (convert names them)",
    )
    return naming, [part for c in naming if (part := presence.get(c, c))]


def built_in_trace(collector: CompactCollector, node: cst.Call, built: Built) -> bool:
    """A submodule built under a call-time condition that the traced call built (its Linen name is in
    the trace): with --unsafe-fixes it is built in __init__ always (L2N-MOD-009); the assumption is
    that checkpoints come from an init that took the branch the traced call took, as Linen's names
    of the modules built after it depend on it."""
    trace = collector.state.trace
    if trace is None or built.variable or (built.rule is None and built.user is None):
        return False
    class_name = collector.class_name(built)
    explicit = keyword_arg(built.target, "name")
    if explicit is not None:
        if not isinstance(explicit.value, cst.SimpleString):
            return False
        name = str(explicit.value.evaluated_value)
    else:
        count = collector.counters.get(class_name, 0)
        if count is None:
            return False
        name = f"{class_name}_{count}"
    if not trace.shapes_for(collector.plan.name, name) or not collector.state.unsafe_fixes:
        return False
    collector.ctx.report(
        MOD_009,
        node,
        f"{built.what} is built under a condition on a call-time value; the traced call built it "
        f"({name}): built in __init__ always and used under the same condition",
        "a checkpoint from an init that took the other branch names the modules after it differently",
    )
    return True


def built_when_sized(plan: ClassPlan) -> None:
    """A module sized by an optional input's size argument (``context_features: int | None = None``,
    ``nn.Dense(6)(context)`` under ``if context is not None``) is built only when that size is given:
    a builder that never passes the input passes no size, and ``nnx.Linear(None, 6)`` cannot be
    built. The call stays under the method's own test, so the attribute is never read as None there.
    A site that shares its attribute with another, or is an element of a list, is left as it is."""
    optional = plan.optional_inputs
    shared = {s.attr for s in plan.hoisted_order if s.exclusive_with is not None}
    for site in plan.hoisted_order if optional else ():
        if (
            site.attr in shared
            or site.loop is not None
            or site.nest is not None
            or site.container is not None
        ):
            continue
        sizes = [site.in_expr, site.in_kv_expr, *site.user_in.values()]
        read = set().union(*(names_in(parse_expression(e)) for e in sizes if e)) & optional
        site.conditions = [*site.conditions, *(f"{arg} is not None" for arg in sorted(read))]
