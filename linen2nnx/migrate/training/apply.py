"""``module.apply`` / ``state.apply_fn``: a call of the NNX model (TRAIN_005, TRAIN_012).

``apply(variables, x, rngs={'dropout': k}, mutable=['batch_stats'])`` becomes a call of the model, or
of a copy of it that holds the collections the dict overrides (``nnx.merge(nnx.graphdef(model), params,
nnx.state(model, nnx.Not(nnx.Param)), copy=True)``, so a ``jax.value_and_grad`` over the params State
stays a pure function). ``rngs=`` becomes ``nnx.reseed(copy, dropout=k, policy="match_shape")`` (layers
stacked by ``nnx.vmap`` hold one key per layer, as Linen's ``split_rngs`` gives each its own) and
``mutable=`` the pair ``(copy(x), {'batch_stats': nnx.state(copy, nnx.BatchStat)})``. With no model in
scope (``decode_step(model, params, cache, tokens)``) the States go into an abstract instance built by
``nnx.eval_shape``: no weights are initialised only to be overwritten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst
from libcst.metadata import Assignment

from linen2nnx.migrate.cst_utils import code, needs_parens
from linen2nnx.migrate.rules.training import TRAIN_005, TRAIN_008, TRAIN_009, TRAIN_010, TRAIN_012, TRAIN_014
from linen2nnx.migrate.sites import ClassSummary
from linen2nnx.migrate.training.exprs import (
    input_index,
    input_size,
    method_name,
    mutable_kwarg_collections,
    rngs_expr,
    with_args,
)
from linen2nnx.migrate.training.planner import MUTABLE_TYPES, STATE_TYPES, Edit, Entry, TrainPlanner
from linen2nnx.migrate.training.sharding import EAGER_GUARD
from linen2nnx.migrate.training.values import Val

Own = Callable[[str, cst.BaseExpression], bool]  # (collection, value) -> the model already holds it
_HINT = "call the NNX model directly (nnx.merge a copy with the params it should use)"


@dataclasses.dataclass
class Options:
    """The keyword arguments of an apply besides the variables."""

    streams: list[Entry] = dataclasses.field(default_factory=list)  # rngs={...}
    mutable: list[str] = dataclasses.field(default_factory=list)
    method: str = "__call__"
    method_class: str = ""  # method=Base.m of another class of the run: called as Base.m(model, ...)


@dataclasses.dataclass
class Applied:
    """What one apply call becomes: a call of ``applied`` (``model`` itself, or a copy made before it)."""

    model: str
    applied: str
    overrides: list[tuple[Entry, str]]  # (dict entry, variable type) of the collections the copy takes
    options: Options
    constructor: bool
    sizes: list[tuple[str, int, str]]  # (constructor argument, index of the input, how it is read)
    sharding: bool
    rng_streams: list[str]


def plan_module_apply(plan: TrainPlanner, call: cst.Call, receiver: Val) -> None:
    """``model.apply(variables, x)`` where the variables come from a model initialised in scope, or
    are passed in (``decode_step(model, params, cache, tokens)``): then, in NNX, the States of those
    collections, put into an abstract instance of the model (see :func:`plan_apply`)."""
    hint = "keep the NNX model from construction and call it (nnx.merge it with the params to apply)"
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        plan.block(TRAIN_009, call, "apply without a variables argument", hint)
        return
    first = call.args[0].value
    whole = plan.values.value_of(first)
    scope = plan.values.scopes.get(call)
    if whole is not None and whole.kind == "vars" and isinstance(first, cst.Name):
        bindings = plan.values.referents(first)
        if not _applies_another_model(plan, call, bindings[0] if len(bindings) == 1 else None):
            plan_apply(plan, call, first.value, lambda key, value: True, receiver.summary)
        return
    entries = plan.variables_dict(first)
    params = next((e.value for e in entries or () if e.key == "params"), None)
    held = plan.values.value_of(params) if params is not None else None
    if (
        held is None
        or held.kind != "coll"
        or held.holder is None
        or scope is None
        or held.holder not in scope[held.holder.name]
    ):
        given = [plan.values.value_of(e.value) for e in entries or ()]
        if params is not None and all(
            v is None or (v.kind == "coll" and v.collection == e.key) for v, e in zip(given, entries or ())
        ):
            plan_apply(plan, call, "", lambda key, value: False, receiver.summary, constructor=True)
            return
        plan.block(
            TRAIN_009,
            call,
            f"`{code(call.func)}(...)` with params that do not come from a model initialised in scope",
            hint,
        )
        return
    holder = held.holder
    if _applies_another_model(plan, call, holder):
        return

    def own(key: str, value: cst.BaseExpression) -> bool:
        v = plan.values.value_of(value)
        return v is not None and v.kind == "coll" and v.holder is holder and v.collection == key

    plan_apply(plan, call, holder.name, own, receiver.summary)


def _applies_another_model(plan: TrainPlanner, call: cst.Call, holder: Assignment | None) -> bool:
    """Blocks (and says True) where ``call``'s module may be another instance than the one whose init
    made the variables (:meth:`~.values.ValueAnalysis.another_model`)."""
    assert isinstance(call.func, cst.Attribute)
    if not plan.values.another_model(holder, call.func.value):
        return False
    plan.block(
        TRAIN_009,
        call,
        f"`{code(call.func)}(...)` applies the variables of another module instance than the one their init "
        "built: NNX calls the model init built, so this instance's constructor arguments would be lost",
        "build the NNX model with these arguments and nnx.update it with the state of the model init built",
    )
    return True


def plan_apply(
    plan: TrainPlanner,
    call: cst.Call,
    model: str,
    own: Own,
    summary: ClassSummary | None = None,
    constructor: bool = False,
) -> bool:
    """Plan ``<apply>(variables, *args, rngs=, mutable=, method=, **kw)`` -> a call of ``model`` or of a
    copy of it holding the overriding collections. Returns False (and blocks) when it cannot.

    ``constructor``: ``call`` is ``module.apply`` on a module value (an NNX constructor) with no model
    in scope; the collections given are NNX States, put with ``nnx.update`` into the abstract model
    ``nnx.eval_shape`` builds (no weights are initialised only to be overwritten). ``nnx.update`` also
    adds Variables the constructor does not make, such as a decode cache (created at call time)."""
    name = code(call.func)
    entries = _variables_entries(plan, call)
    if entries is None and not _names_variables(plan, call):
        plan.block(
            TRAIN_008, call, f"`{name}(...)` with a variables argument that is not a dict literal", _HINT
        )
        return False
    overrides = _overrides(plan, call, name, entries, own)
    options = _options(plan, call, name, summary) if overrides is not None else None
    if overrides is None or options is None:
        return False
    if constructor and entries is None:
        plan.block(
            TRAIN_009, call, f"`{name}(...)` with a variables argument that is not a dict literal", _HINT
        )
        return False
    sizes = _sizes(plan, call, summary) if constructor and summary is not None else []
    # Linen's apply without `mutable=` drops what the model sows; NNX's sow keeps it in the model (and
    # raises under a jit that closes over it), so a model that may sow runs on a copy
    copy = bool(overrides or options.streams or options.mutable or constructor or plan.sows)
    stmt = plan.insertable(call) if copy else None
    if copy and stmt is None:
        _block_no_merge_site(plan, call, name)
        return False
    fn = plan.function_of(call)
    if not copy:
        plan.direct_calls.add(fn)
    applied = Applied(
        model,
        plan.fresh(fn, "applied") if copy else model,
        overrides,
        options,
        constructor,
        sizes,
        plan.sharding,
        sorted(plan.streams),
    )
    _note(plan, call, name, applied, summary)
    plan.edits[call] = Edit(_build(applied), _before(applied) if copy else None, stmt)
    if options.mutable and stmt is not None and _unpacks_pair(stmt, call):
        plan.split_tuple.add(stmt)
    return True


def _variables_entries(plan: TrainPlanner, call: cst.Call) -> list[Entry] | None:
    """The entries of the variables argument where it is a dict literal (``{'params': p, ...}``)."""
    first = call.args[0] if call.args else None
    if first is None or first.keyword is not None or first.star:
        return None
    return plan.variables_dict(first.value)


def _names_variables(plan: TrainPlanner, call: cst.Call) -> bool:
    """Whether the variables argument is a name the analysis knows (the variables ``init`` returned, a
    collection of them): applied whole, without a dict literal to read."""
    return (
        bool(call.args)
        and isinstance(call.args[0].value, cst.Name)
        and plan.values.value_of(call.args[0].value) is not None
    )


def _block_no_merge_site(plan: TrainPlanner, call: cst.Call, name: str) -> None:
    """Block an apply that needs a copy of the model merged before it where no statement can go."""
    plan.block(
        TRAIN_008,
        call,
        f"`{name}(...)` inside an expression the codemod cannot put a merge "
        "before (lambda, comprehension, compound statement header)",
        _HINT,
    )


def _unpacks_pair(stmt: cst.SimpleStatementLine, call: cst.Call) -> bool:
    """``out, updates = <apply>(..., mutable=...)``: the statement the rewrite splits in two (the pair is
    built right there, see :func:`linen2nnx.migrate.training.rewrite.split_pair`)."""
    small = stmt.body[0]
    return (
        isinstance(small, cst.Assign)
        and small.value is call
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Tuple)
        and len(small.targets[0].target.elements) == 2
    )


def _overrides(
    plan: TrainPlanner, call: cst.Call, name: str, entries: list[Entry] | None, own: Own
) -> list[tuple[Entry, str]] | None:
    """The dict's collections the model does not hold already; None (and blocked) for an unknown
    collection or a dict without params."""
    overrides: list[tuple[Entry, str]] = []
    for entry in entries or ():
        var_type = STATE_TYPES.get(entry.key or "")
        if var_type is None or entry.key is None:
            plan.block(TRAIN_008, call, f"`{name}(...)` with collection {entry.key!r}", _HINT)
            return None
        if not own(entry.key, entry.value):
            overrides.append((entry, var_type))
    if entries is not None and "params" not in {e.key for e in entries}:
        plan.block(TRAIN_008, call, f"`{name}(...)` without params", _HINT)
        return None
    return overrides


def _options(plan: TrainPlanner, call: cst.Call, name: str, summary: ClassSummary | None) -> Options | None:
    """``rngs=`` / ``mutable=`` / ``method=`` of the apply; None (and blocked) for any the NNX call
    cannot take."""
    options = Options()
    for arg in call.args[1:]:
        if arg.star == "**":
            plan.block(TRAIN_008, call, f"`{name}(..., **kwargs)` may hold rngs / mutable", _HINT)
            return None
        key = arg.keyword.value if arg.keyword is not None else None
        if key == "rngs":
            items = plan.variables_dict(arg.value)
            if items is None or not all(e.key and e.key.isidentifier() for e in items):
                plan.block(
                    TRAIN_008,
                    arg,
                    "rngs= that is not a dict literal of stream names",
                    "nnx.reseed(model, <stream>=key) before the call",
                )
                return None
            options.streams = items
        elif key == "mutable":
            cols = mutable_kwarg_collections(arg.value)
            if cols is None or any(c not in MUTABLE_TYPES for c in cols):
                plan.block(
                    TRAIN_008,
                    arg,
                    f"mutable={code(arg.value)}",
                    "NNX updates state in place; read it back with nnx.state(model, <VariableType>)",
                )
                return None
            options.mutable = cols
        elif key == "method":
            if not _method(plan, call, arg, summary, options):
                return None
        elif key in ("capture_intermediates",):
            plan.block(TRAIN_008, arg, f"{key}=", "use nnx.capture(model, nnx.Intermediate)")
            return None
    return options


def _method(
    plan: TrainPlanner, call: cst.Call, arg: cst.Arg, summary: ClassSummary | None, options: Options
) -> bool:
    """``method=``: Linen runs the function it names on the module. ``'m'``, ``Model.m`` of the model's
    own class and ``model.m`` of the applied model itself are the NNX model's ``m``; ``Base.m`` of another
    class of the run converted to NNX stays that function, ``Base.m(model, ...)`` (the model's class may
    override ``m``). Anything else (a function of a class outside the run) blocks: the model's own ``m``
    would compute something else."""
    node = arg.value
    method = method_name(node)
    if method and isinstance(node, cst.Attribute):
        owner = plan.values.user_class(node.value)
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if summary is not None and (
            (owner is not None and owner.key == summary.key)
            or (receiver is not None and code(node.value) == code(receiver))
        ):
            pass  # the model's own method
        elif owner is not None and not owner.kept_linen:
            options.method_class = code(node.value)
        else:
            method = None
    if not method:
        plan.block(
            TRAIN_008,
            arg,
            f"method={code(arg.value)}: not a method of the applied model's class, nor of a class of the run",
            "call the function on the NNX model (`Base.encode(model, x)`)",
        )
        return False
    options.method = method
    return True


def _sizes(plan: TrainPlanner, call: cst.Call, summary: ClassSummary) -> list[tuple[str, int, str]]:
    """The constructor arguments the apply's inputs give (abstract model); TRAIN_010 for the others."""
    sizes: list[tuple[str, int, str]] = []
    inputs = [i for i, a in enumerate(call.args) if i > 0 and a.keyword is None]
    for arg, how in summary.new_args.items():
        index = input_index(how)
        if 0 <= index < len(inputs):
            sizes.append((arg, inputs[index], how))
        else:
            plan.note(
                TRAIN_010,
                call,
                f"{summary.name} needs constructor argument {arg}, which the apply's inputs do not give",
                f"pass {arg}=... where the module is built",
            )
    return sizes


def _note(
    plan: TrainPlanner, call: cst.Call, name: str, applied: Applied, summary: ClassSummary | None
) -> None:
    given = ", ".join(str(e.key) for e, _ in applied.overrides)
    if applied.constructor:
        plan.note(
            TRAIN_012,
            call,
            f"{name}(...) -> the abstract NNX {summary.name if summary else 'model'} "
            "(nnx.eval_shape) updated with the given " + given + " States, then called",
        )
        if plan.sharding:
            plan.note(
                TRAIN_014,
                call,
                "the abstract model is built with eager sharding only under a mesh and logical axis rules",
            )
    else:
        plan.note(
            TRAIN_005,
            call,
            f"{name}(...) -> a call of the NNX model"
            + (" (a copy holding the given " + given + ")" if applied.overrides else ""),
        )


def _copy_lines(a: Applied, updated: cst.Call) -> list[str]:
    """The statements that make the model copy the call runs on."""
    given = [e.source(updated.args[0].value) for e, _ in a.overrides]
    if a.constructor:
        assert isinstance(updated.func, cst.Attribute)
        receiver = code(updated.func.value)
        if needs_parens(updated.func.value):
            receiver = f"({receiver})"
        rngs = code(rngs_expr(cst.Integer("0"), a.rng_streams))
        ctor_args = [f"{arg}={code(input_size(updated.args[i].value, how))}" for arg, i, how in a.sizes]
        abstract = (
            f"{a.applied} = nnx.eval_shape(lambda: {receiver}({', '.join([*ctor_args, f'rngs={rngs}'])}))"
        )
        return [
            f"with {EAGER_GUARD}:\n    {abstract}" if a.sharding else abstract,
            f"nnx.update({a.applied}, {', '.join(code(g) for g in given)})",
        ]
    if a.overrides:
        types = [f"nnx.{t}" for _, t in a.overrides]
        rest = types[0] if len(types) == 1 else f"nnx.Any({', '.join(types)})"
        return [
            f"{a.applied} = nnx.merge(nnx.graphdef({a.model}), {', '.join(code(g) for g in given)}, "
            f"nnx.state({a.model}, nnx.Not({rest})), copy=True)"
        ]
    return [f"{a.applied} = nnx.merge(*nnx.split({a.model}), copy=True)"]


def _before(a: Applied) -> Callable[[cst.CSTNode], list[cst.BaseStatement]]:
    """The copy of the model, reseeded with the apply's rngs."""

    def before(updated: cst.CSTNode) -> list[cst.BaseStatement]:
        assert isinstance(updated, cst.Call)
        lines = _copy_lines(a, updated)
        if a.options.streams:
            rngs = next(x.value for x in updated.args if x.keyword is not None and x.keyword.value == "rngs")
            keys = ", ".join(f"{e.key}={code(e.source(rngs))}" for e in a.options.streams)
            lines.append(f'nnx.reseed({a.applied}, {keys}, policy="match_shape")')
        return [cst.parse_statement(line + "\n") for line in lines]

    return before


def _build(a: Applied) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The apply call -> the call of the model (and the mutable collections read back)."""

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        args = [
            x
            for x in updated.args[1:]
            if x.keyword is None or x.keyword.value not in ("rngs", "mutable", "method")
        ]
        method = a.options.method
        if a.options.method_class:  # Base.m(model, ...): the model goes first
            func = cst.parse_expression(f"{a.options.method_class}.{method}")
            args.insert(0, cst.Arg(cst.Name(a.applied)))
        else:
            func = cst.parse_expression(a.applied if method == "__call__" else f"{a.applied}.{method}")
        result: cst.BaseExpression = with_args(updated, args, func=func)
        if a.options.mutable:
            state = ", ".join(
                f'"{c}": nnx.state({a.applied}, nnx.{MUTABLE_TYPES[c]})' for c in a.options.mutable
            )
            result = cst.Tuple([cst.Element(result), cst.Element(cst.parse_expression(f"{{{state}}}"))])
        return result

    return build
