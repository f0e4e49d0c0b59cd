"""Planning one file: a single walk over the tree routes each node to the handler of its construct.

The walk collects the calls, subscripts, attributes and names outside module classes (module code
belongs to the module pass); the RNG streams of the file's apply calls are read from the same list
before any handler runs, since the constructions they plan name each stream. Train-state bindings are
then planned from the scope analysis, without another walk.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_009
from linen2nnx.migrate.training.apply import plan_module_apply
from linen2nnx.migrate.training.eval_shape import plan_eval_shape
from linen2nnx.migrate.training.exprs import dict_items
from linen2nnx.migrate.training.init import plan_attribute, plan_init, plan_partial
from linen2nnx.migrate.training.module_values import plan_module_use
from linen2nnx.migrate.training.planner import TrainPlanner
from linen2nnx.migrate.training.sharding import PARTITION_SPEC, plan_partition_spec
from linen2nnx.migrate.training.state_reads import plan_subscript, plan_variables_use
from linen2nnx.migrate.training.train_state import plan_binding, plan_create


def plan_file(plan: TrainPlanner) -> None:
    """Fill ``plan`` with the notes and edits of every training construct of the file."""
    values = plan.values
    nodes = values.nodes
    plan.streams = streams(plan, [n for n in nodes if isinstance(n, cst.Call)])
    plan_state_methods(plan)
    for node in nodes:
        if values.in_module_class(node):
            continue
        if isinstance(node, cst.Call):
            route_call(plan, node)
        elif isinstance(node, cst.Subscript):
            plan_subscript(plan, node)
        elif isinstance(node, cst.Attribute):
            plan_attribute(plan, node)
        elif node in values.access:
            plan_variables_use(plan, node)  # type: ignore[arg-type]
            plan_module_use(plan, node)  # type: ignore[arg-type]
    for scope in {s for s in values.scopes.values() if s is not None}:
        for assignment in scope.assignments:
            if isinstance(assignment, Assignment) and not values.in_module_class(assignment.node):
                plan_binding(plan, assignment, scope)


def plan_state_methods(plan: TrainPlanner) -> None:
    """A TrainState subclass of the file that defines methods (``apply_gradients`` clipping the
    gradients, a ``create`` of its own, a helper): the rewrite turns the state into a model and an
    ``nnx.Optimizer``, which have none of them, so what they do would be lost without a word."""
    for stmt in plan.values.module.body:
        if not (isinstance(stmt, cst.ClassDef) and stmt.name.value in plan.values.ts_classes):
            continue
        methods = [m.name.value for m in stmt.body.body if isinstance(m, cst.FunctionDef)]
        if methods:
            plan.block(
                TRAIN_009,
                stmt,
                f"TrainState subclass {stmt.name.value} defines {', '.join(methods)}, which the model and "
                "nnx.Optimizer the rewrite makes of it would not have",
                "move what the methods do into the train step (or an nnx.Optimizer subclass), then migrate again",
            )


def streams(plan: TrainPlanner, calls: list[cst.Call]) -> set[str]:
    """RNG streams the file's apply calls seed (``rngs={'dropout': k}``): the model is built with
    each one named, so that ``nnx.reseed`` finds them (a stream that falls back to ``default`` would not)."""
    found = {"dropout"}
    for call in calls:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("apply", "apply_fn"):
            rngs = next((a.value for a in call.args if a.keyword and a.keyword.value == "rngs"), None)
            entries = plan.variables_dict(rngs) if rngs is not None else None
            found |= {e.key for e in entries or () if e.key and e.key.isidentifier()}
    return found


def route_call(plan: TrainPlanner, call: cst.Call) -> None:
    """A call outside module classes -> the handler of the construct it is, if any."""
    values = plan.values
    plan_module_use(plan, call)  # `fit(MLP(8), x)`, `{"model": MLP(8)}`: a module handed on as it is built
    if values.user_class(call.func) is not None and not is_init_receiver(plan, call):
        plan_partial(plan, call)
        return
    init = values.eval_shape_init(call)
    if init is not None:
        plan_eval_shape(plan, call, init)
        return
    if values.qualnames(call.func) & PARTITION_SPEC:
        plan_partition_spec(plan, call)
        return
    if not isinstance(call.func, cst.Attribute):
        return
    attr = call.func.attr.value
    receiver = values.value_of(call.func.value)
    if attr == "init" and receiver is not None and receiver.kind == "module":
        plan_init(plan, call, receiver)
    elif attr == "apply" and receiver is not None and receiver.kind == "module":
        plan_module_apply(plan, call, receiver)
    elif (
        attr == "apply"
        and call.args
        and isinstance(call.args[0].value, cst.Dict)
        and "params" in {k for k, _ in dict_items(call.args[0].value)}
    ):
        plan.block(
            TRAIN_009,
            call,
            f"`{code(call.func)}({{'params': ...}}, ...)`: a Linen apply on a "
            "model this run does not migrate",
            "migrate the file that defines the model in the same run, or call the NNX model directly",
        )
    elif attr == "create" and values.is_ts_class(call.func.value):
        plan_create(plan, call)


def is_init_receiver(plan: TrainPlanner, call: cst.Call) -> bool:
    """``MLP(...).init(...)``: the construction is rewritten with the init, not as a partial."""
    attr = plan.parent(call)
    return (
        isinstance(attr, cst.Attribute)
        and attr.attr.value == "init"
        and isinstance(plan.parent(attr), cst.Call)
    )
