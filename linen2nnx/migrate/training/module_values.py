"""Where a Linen module value built outside a module goes.

``network = QNet(4)`` becomes ``functools.partial(QNet, 4)`` (init.py): a constructor the file's
``network.init(...)`` completes. That is right only while the pass sees every use of the value. Handed
to a function it does not follow (a parameter with no class annotation, another file's helper), stored
in a container, an attribute or a dataclass, or read for another attribute (``network.clone()``,
``network.hidden``), the receiver gets the partial and fails at run time -- after a clean report. So
each such use blocks the file's training-code rewrite (TRAIN_008); the uses the pass follows pass:
the receiver of ``.init`` / ``.apply``, a binding to a name, a ``return``, ``model or Default()``, an
identity test, printing, a pair spec's ``LinenSide(model=...)``, and an argument bound to a parameter
annotated with a class of the run (through ``jax.jit`` / ``functools.partial`` aliases and methods of
plain classes too).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_008
from linen2nnx.migrate.training.planner import TrainPlanner
from linen2nnx.migrate.training.values import JIT, annotation_parts

FOLLOWED_ATTRIBUTES = frozenset({"init", "apply"})
PRINTING = frozenset({"print", "repr", "str"})
PARTIAL = frozenset({"functools.partial"})
LINEN_SIDES = frozenset({"linen2nnx.spec.LinenSide"})


def plan_module_use(plan: TrainPlanner, node: cst.BaseExpression) -> None:
    """Block the file's training-code rewrite where the module value ``node`` (a name, a construction,
    a call that returns one) goes somewhere the pass does not follow."""
    value = plan.values.value_of(node)
    if value is None or value.kind != "module" or _followed(plan, node):
        return
    plan.block(
        TRAIN_008,
        node,
        f"the Linen module `{code(node)}` is handed on as a value: its construction becomes a partial "
        "constructor, and what the receiver does with it is not followed",
        "call init / apply where the module is built, or hand on the NNX model built there",
    )


def _followed(plan: TrainPlanner, node: cst.BaseExpression) -> bool:
    parent = plan.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return parent.attr.value in FOLLOWED_ATTRIBUTES or _apply_method(plan, parent)
    if isinstance(parent, cst.Assign) and parent.value is node:
        return all(isinstance(t.target, cst.Name) for t in parent.targets)
    if isinstance(parent, cst.AnnAssign) and parent.value is node:
        return isinstance(parent.target, cst.Name)
    if isinstance(parent, (cst.Return, cst.BooleanOperation, cst.FormattedStringExpression)):
        return True  # `model or Default()`: the expression's value is followed like the name's
    if isinstance(parent, cst.Comparison):
        return all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in parent.comparisons)
    if isinstance(parent, cst.Arg):
        call = plan.parent(parent)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in PRINTING:
            return True
        if isinstance(call, cst.Call) and plan.values.qualnames(call.func) & LINEN_SIDES:
            return True  # a pair spec's Linen side describes the original; the NNX program never runs it
        return isinstance(call, cst.Call) and _annotated_receiver(plan, call, parent)
    return False


def _apply_method(plan: TrainPlanner, attr: cst.Attribute) -> bool:
    """``model.forward`` as the ``method=`` of ``model.apply(...)``: the apply's rewrite calls it."""
    arg = plan.parent(attr)
    call = plan.parent(arg) if isinstance(arg, cst.Arg) else None
    return (
        isinstance(arg, cst.Arg)
        and arg.keyword is not None
        and arg.keyword.value == "method"
        and isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "apply"
    )


def _annotated_receiver(plan: TrainPlanner, call: cst.Call, arg: cst.Arg) -> bool:
    """``arg`` binds a parameter annotated with a class of the run (the pass follows the value there)."""
    if arg.star:
        return False
    target = _callee(plan, call.func)
    if (
        target is None
        and plan.values.qualnames(call.func) & PARTIAL
        and call.args
        and call.args[0] is not arg
    ):
        inner = _callee(plan, call.args[0].value)  # `functools.partial(create_state, model=model)`
        target = None if inner is None else (inner[0], inner[1] - 1)
    if target is None:
        return False
    fn, skipped = target
    params = [*fn.params.posonly_params, *fn.params.params]
    if arg.keyword is not None:
        params = [p for p in (*params, *fn.params.kwonly_params) if p.name.value == arg.keyword.value]
    else:
        position = [a for a in call.args if a.keyword is None and not a.star].index(arg) + skipped
        params = params[position : position + 1] if position >= 0 else []
    annotation = params[0].annotation if params else None
    return annotation is not None and any(
        plan.values.user_class(part) is not None for part in annotation_parts(annotation.annotation)
    )


def _callee(plan: TrainPlanner, func: cst.BaseExpression) -> tuple[cst.FunctionDef, int] | None:
    """The file's function a call reaches and how many of its leading parameters the call does not
    pass (a method's ``self``): a function, ``jax.jit(f, ...)``, an alias bound once to either, or the
    one method of that name the file's classes define."""
    fn = plan.values.function_of(func)
    if fn is not None:
        return fn, 0
    if isinstance(func, cst.Name):
        bound = plan.values.referents(func)
        value = plan.values.binding_value(bound[0]) if len(bound) == 1 else None
        if isinstance(value, cst.Call) and plan.values.qualnames(value.func) & (JIT | PARTIAL) and value.args:
            inner = _callee(plan, value.args[0].value)
            bound_args = (
                sum(1 for a in value.args[1:] if a.keyword is None)
                if plan.values.qualnames(value.func) & PARTIAL
                else 0
            )
            return None if inner is None else (inner[0], inner[1] + bound_args)
        return None
    if isinstance(func, cst.Attribute):
        methods = [
            f
            for c in plan.values.module.body
            if isinstance(c, cst.ClassDef)
            for f in c.body.body
            if isinstance(f, cst.FunctionDef) and f.name.value == func.attr.value
        ]
        return (methods[0], 1) if len(methods) == 1 else None
    return None
