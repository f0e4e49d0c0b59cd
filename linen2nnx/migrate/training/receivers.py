"""``.init`` / ``.apply`` on a receiver the value analysis does not follow, which may be a model of the run.

The module pass turns every class of the run into an NNX class, which has no ``init`` / ``apply``; a
receiver :mod:`.values` knows is rewritten, but one it cannot follow -- a classmethod constructor
(``MLP.tiny()``), a class looked up by key (``REG['mlp'](width=3)``), a builder handed the class
(``create_model(model_cls=MLP)``) -- was left as written with no finding, and failed when run. Such a
call is a located TRAIN_008. Receivers that cannot be a model of the run get none: one no call builds (a
parameter, an attribute), an optax transformation (``tx.init(params)``), a class kept as Linen.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_008
from linen2nnx.migrate.training.planner import TrainPlanner
from linen2nnx.migrate.training.values import ValueAnalysis

_LOOKUPS = frozenset({"builtins.getattr"})


def plan_unfollowed(plan: TrainPlanner, call: cst.Call) -> None:
    """Block ``call`` (``<receiver>.init(...)`` / ``.apply(...)``, a receiver with no known value) where
    the receiver may be built from a class of the run."""
    assert isinstance(call.func, cst.Attribute)
    how = next((h for o in _origins(plan.values, call.func.value) if (h := _builds(plan, o, set()))), None)
    if how is None:
        return
    plan.block(
        TRAIN_008,
        call,
        f"`{code(call.func)}(...)` on a model the rewrite does not follow ({how}): a class of this run is "
        f"an NNX class after the migration, which has no `{call.func.attr.value}`",
        "build the model as `model = Model(...)` where it is initialised (the rewrite follows that), or build "
        "the NNX model with rngs= and call it",
    )


def _origins(values: ValueAnalysis, node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """What ``node`` may hold: the values a name's bindings assign, or ``node`` itself."""
    if isinstance(node, cst.Name):
        return [v for a in values.referents(node) if (v := values.binding_value(a)) is not None]
    return [node]


def _builds(plan: TrainPlanner, node: cst.BaseExpression | None, seen: set[cst.FunctionDef]) -> str | None:
    """How the call ``node`` may build a model of the run (None where it cannot): through a class's own
    method, a call handed a class, a class looked up by key in a file that names one, or a function of
    the file returning one of those."""
    values = plan.values
    if not isinstance(node, cst.Call) or any(q.startswith("optax.") for q in values.qualnames(node.func)):
        return None
    func = node.func
    if isinstance(func, cst.Attribute) and _run_class(values, func.value):
        return f"built by {code(func)}(...)"
    handed = next((a.value for a in node.args if _run_class(values, a.value)), None)
    if handed is not None:
        return f"built by a call handed the class {code(handed)}"
    if any(_lookup(values, f) for f in [func, *_origins(values, func)]) and _names_run_class(values):
        return f"built by {code(func)}(...), a class looked up by key"
    fn = values.function_of(func)
    if fn is None or fn in seen:
        return None
    seen.add(fn)
    returned = [o for r in values.returns(fn) if r.value is not None for o in _origins(values, r.value)]
    return next((h for o in returned if (h := _builds(plan, o, seen))), None)


def _run_class(values: ValueAnalysis, node: cst.BaseExpression) -> bool:
    """``node`` names a class of the run that becomes an NNX class (not one kept as Linen)."""
    summary = values.user_class(node)
    return summary is not None and not summary.kept_linen


def _lookup(values: ValueAnalysis, node: cst.BaseExpression) -> bool:
    """``REG['mlp']``, ``getattr(models, name)``, ``registry.get(name)``: a value found by key."""
    if isinstance(node, cst.Subscript):
        return True
    return isinstance(node, cst.Call) and (
        bool(values.qualnames(node.func) & _LOOKUPS)
        or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "get")
    )


def _names_run_class(values: ValueAnalysis) -> bool:
    """The file's code outside module classes names a class of the run (``REG['mlp'] = MLP``)."""
    return any(
        type(n) in (cst.Name, cst.Attribute) and _run_class(values, n) and not values.in_module_class(n)
        for n in values.nodes
    )
