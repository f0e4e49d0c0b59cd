"""Planning one file: a single walk over the tree routes each node to the handler of its construct.

The walk collects the calls, subscripts, attributes and names outside module classes (module code
belongs to the module pass); the RNG streams of the file's apply calls are read from the same list
before any handler runs, since the constructions they plan name each stream. Train-state bindings are
then planned from the scope analysis, without another walk.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.metadata import Assignment

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_008, TRAIN_009
from linen2nnx.migrate.training.apply import plan_module_apply
from linen2nnx.migrate.training.eval_shape import plan_eval_shape
from linen2nnx.migrate.training.exprs import dict_items
from linen2nnx.migrate.training.init import plan_attribute, plan_init, plan_partial
from linen2nnx.migrate.training.module_values import plan_module_use
from linen2nnx.migrate.training.planner import TrainPlanner
from linen2nnx.migrate.training.receivers import plan_unfollowed
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


# functions that hand a tree's key paths to code written for Linen's params tree (or return them)
PATH_AWARE = frozenset(
    {
        "jax.tree_util.tree_map_with_path",
        "jax.tree_util.tree_flatten_with_path",
        "jax.tree_util.tree_leaves_with_path",
        "jax.tree_util.keystr",
        "jax.tree.map_with_path",
        "jax.tree.flatten_with_path",
        "jax.tree.leaves_with_path",
        "flax.traverse_util.flatten_dict",
        "flax.traverse_util.path_aware_map",
    }
)
CONVERTED_KINDS = frozenset({"vars", "coll", "ts"})
"""What the rewrite turns into NNX objects: a model's variables, one collection of them, a train state."""


def plan_path_reads(plan: TrainPlanner) -> None:
    """Run on the plan the driver keeps (after :func:`plan_file`, and after the retry of an init's
    subscript as a statement of its own, so that this finding does not send the driver back to a plan
    blocked for another reason). Training code the rewrite converts that reads key paths (``tree_map_with_path`` testing
    ``keystr(path).endswith("['kernel']")``, ``flatten_dict(params)``): the params and gradients it gets
    become ``nnx.State``s, whose paths differ (snake_case module names, a ``value`` at each leaf) and which
    ``flatten_dict`` refuses, so a test written for Linen's tree matches nothing (a weight decay dropped),
    with no error. Blocked at the first such call; a file the rewrite leaves alone (or that another finding
    blocks already) gets no finding."""
    if plan.blocked or not (plan.edits or plan.replace_stmt or plan.wrap or plan.after):
        return
    values = plan.values
    defs = {s.name.value: s for s in values.module.body if isinstance(s, cst.FunctionDef)}
    readers = _path_reading_functions(plan, defs)
    applied = _applied_names(plan)
    for node in values.nodes:
        if not isinstance(node, cst.Call) or values.in_module_class(node):
            continue
        helper = _read_args(node, readers, defs)
        if (values.qualnames(node.func) & PATH_AWARE and _reads_converted(plan, node.args, applied)) or (
            helper and _reads_converted(plan, helper, applied)
        ):
            plan.block(
                TRAIN_008,
                node,
                f"{code(node.func)}(...) reads key paths"
                + (" of what it is handed" if helper else "")
                + ", which differ in the nnx.State the rewritten params and gradients are (snake_case module "
                "names, a `value` at each leaf): a test written for Linen's tree would match other leaves or none",
                "rewrite the test over nnx.State paths (or select leaves with nnx filters), then migrate again",
            )
            return


def _path_reading_functions(plan: TrainPlanner, defs: dict[str, cst.FunctionDef]) -> dict[str, set[str]]:
    """The file's module-level functions that hand a parameter to a key-path reader, each with those
    parameters, directly or through another such function (``def l2(params): flatten_dict(params)``): a
    converted params State handed to one is read by paths as much as one handed to ``flatten_dict``.
    ``defs``: the file's module-level functions by name."""
    found: dict[str, set[str]] = {}
    grew = True
    while grew:
        grew = False
        for name, fn in defs.items():
            params = {p.name.value for p in _parameters(fn)}
            for call in nodes_of(fn.body, (cst.Call,)):
                path_aware = bool(plan.values.qualnames(call.func) & PATH_AWARE)
                for arg in call.args if path_aware else _read_args(call, found, defs):
                    read = {n.value for n in nodes_of(arg.value, (cst.Name,))} & params  # type: ignore[attr-defined]
                    if read - found.get(name, set()):
                        found.setdefault(name, set()).update(read)
                        grew = True
    return found


def _parameters(fn: cst.FunctionDef) -> list[cst.Param]:
    return [*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params]


def _read_args(
    call: cst.Call, readers: dict[str, set[str]], defs: dict[str, cst.FunctionDef]
) -> list[cst.Arg]:
    """The arguments of ``call`` (a call of one of ``readers``) that land on a parameter it reads paths of."""
    if not isinstance(call.func, cst.Name) or call.func.value not in readers:
        return []
    params = [p.name.value for p in _parameters(defs[call.func.value])]
    read = readers[call.func.value]
    out = []
    for i, arg in enumerate(call.args):
        target = arg.keyword.value if arg.keyword is not None else (params[i] if i < len(params) else None)
        if arg.star or target in read:
            out.append(arg)
    return out


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
    elif attr in ("init", "apply") and receiver is None:
        plan_unfollowed(plan, call)  # `MLP.tiny().init(...)`: may be a class of the run, NNX now


def is_init_receiver(plan: TrainPlanner, call: cst.Call) -> bool:
    """``MLP(...).init(...)``: the construction is rewritten with the init, not as a partial."""
    attr = plan.parent(call)
    return (
        isinstance(attr, cst.Attribute)
        and attr.attr.value == "init"
        and isinstance(plan.parent(attr), cst.Call)
    )


def _reads_converted(
    plan: TrainPlanner, args: Sequence[cst.Arg], applied: set[tuple[cst.FunctionDef | None, str]]
) -> bool:
    """Whether one of ``args`` (of a call) reads what the rewrite converts (``params``, ``variables``,
    ``state.params``, or a name the function hands a rewritten apply as a collection: ``loss_fn(params)``
    applying ``{'params': params}`` gets the params State); the paths of other trees (a restored
    checkpoint, a batch) stay as they are. ``applied``: :func:`_applied_names`, computed once per file."""
    values = plan.values
    for arg in args:
        for node in nodes_of(arg.value, (cst.Name, cst.Attribute, cst.Subscript)):
            base = node.value if isinstance(node, cst.Attribute) else node
            value = values.value_of(base)  # type: ignore[arg-type]
            if value is not None and value.kind in CONVERTED_KINDS:
                return True
            if isinstance(base, cst.Name) and (plan.function_of(base), base.value) in applied:
                return True
    return False


def _applied_names(plan: TrainPlanner) -> set[tuple[cst.FunctionDef | None, str]]:
    """(function, name) of each name a rewritten apply takes as a collection (``{'params': params}``):
    in NNX the State that function is handed."""
    found: set[tuple[cst.FunctionDef | None, str]] = set()
    for call in plan.edits:
        first = call.args[0].value if isinstance(call, cst.Call) and call.args else None
        for entry in (plan.variables_dict(first) or ()) if first is not None else ():
            if isinstance(entry.value, cst.Name):
                found.add((plan.function_of(call), entry.value.value))
    return found
