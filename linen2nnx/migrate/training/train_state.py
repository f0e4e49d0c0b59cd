"""Train states: ``TrainState.create``, the functions that read one, ``apply_gradients`` / ``replace``.

- ``TrainState.create(apply_fn=model.apply, params=variables['params'], tx=tx)`` ->
  ``nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))`` (TRAIN_004): the train state becomes the
  ``(graphdef, state)`` pair. The graphdef has no leaves, so ``jax.jit`` treats it as static and only the
  state's arrays cross the jit boundary (the fast path, not ``nnx.jit`` over the whole graph).
- a function that reads its train-state argument starts with ``model, optimizer = nnx.merge(*state)``;
  ``state.params`` -> ``nnx.state(model, nnx.Param)``, ``state.step`` -> ``optimizer.step[...]`` (TRAIN_007).
- ``state = state.apply_gradients(grads=g)`` -> ``optimizer.update(model, g)`` (in place); ``state =
  state.replace(batch_stats=b)`` -> ``nnx.update(model, b)`` (TRAIN_006); later uses of ``state`` read
  the re-split ``(state[0], nnx.state((model, optimizer)))``. ``new = state.apply_gradients(...)`` works
  the same way when the old state is never read again (NNX updates in place, Linen made a copy).
- a train state held in a local (``state = create_train_state(...)``, rebound by a train step in a loop)
  is merged right before each statement that reads a field of it.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from libcst.metadata import Assignment, FunctionScope

from linen2nnx.migrate.cst_utils import code, is_docstring, names_in
from linen2nnx.migrate.rules.training import TRAIN_004, TRAIN_006, TRAIN_007, TRAIN_008
from linen2nnx.migrate.training.apply import plan_apply
from linen2nnx.migrate.training.optimizer_masks import masked_by_path
from linen2nnx.migrate.training.planner import STATE_TYPES, Edit, Owner, TrainPlanner

_CREATE_HINT = "build the model, then nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))"


def plan_create(plan: TrainPlanner, call: cst.Call) -> None:
    """``TrainState.create(apply_fn=model.apply, params=variables['params'], tx=tx)`` -> ``nnx.split((model,
    nnx.Optimizer(model, tx, wrt=nnx.Param)))``; blocked where a field has no NNX counterpart."""
    args = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if any(a.keyword is None for a in call.args) or not {"params", "tx"} <= set(args):
        plan.block(TRAIN_008, call, "TrainState.create without params= and tx= keywords", _CREATE_HINT)
        return
    holder = _params_holder(plan, call, args["params"])
    if holder is None or not _fields_convert(plan, call, args, holder) or masked_by_path(plan, args["tx"]):
        return
    plan.note(
        TRAIN_004,
        call,
        "TrainState.create(...) -> nnx.split((model, nnx.Optimizer(model, tx, "
        "wrt=nnx.Param))): the train state is the (graphdef, state) pair",
    )
    plan.edits[call] = Edit(_split_model_and_optimizer(holder.name))


def _params_holder(plan: TrainPlanner, call: cst.Call, params: cst.Arg) -> Assignment | None:
    """The binding of the model whose params ``params=`` passes, visible where the state is created;
    None (and blocked) where there is none: the NNX state is split from that model."""
    value = plan.values.value_of(params.value)
    if value is None or value.kind != "coll" or value.collection != "params" or value.holder is None:
        plan.block(
            TRAIN_008,
            call,
            "TrainState.create(params=...) whose params do not come from a model "
            "this run migrates, initialised in scope",
            _CREATE_HINT,
        )
        return None
    holder = value.holder
    scope = plan.values.scopes.get(call)
    if scope is None or holder not in scope[holder.name]:
        plan.block(
            TRAIN_008,
            call,
            f"the model `{holder.name}` is not visible where its TrainState is created",
            _CREATE_HINT,
        )
        return None
    return holder


def _fields_convert(plan: TrainPlanner, call: cst.Call, args: dict[str, cst.Arg], holder: Assignment) -> bool:
    """Whether every field besides ``params`` / ``tx`` has an NNX counterpart (blocked at the first that
    has not): ``apply_fn`` a module's apply, a variable collection the same model holds."""
    fields = plan.values.ts_fields(call.func.value)  # type: ignore[attr-defined]
    for name, arg in args.items():
        if name in ("params", "tx"):
            continue
        if name == "apply_fn":
            if not (isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "apply"):
                plan.block(
                    TRAIN_008,
                    arg,
                    "TrainState.create(apply_fn=...) that is not a module's apply",
                    "call the NNX model (or a function of it) in the train step",
                )
                return False
            if plan.values.another_model(holder, arg.value.value):
                plan.block(
                    TRAIN_008,
                    arg,
                    f"TrainState.create(apply_fn={code(arg.value)}) applies another module instance than the one "
                    "whose init made params=: the NNX state holds the model init built, without this one's "
                    "constructor arguments",
                    "build the NNX model with these arguments and nnx.update it with the state of the one init built",
                )
                return False
            continue
        value = plan.values.value_of(arg.value)
        if not (
            name in fields
            and name in STATE_TYPES
            and value is not None
            and value.kind == "coll"
            and value.holder is holder
            and value.collection == name
        ):
            plan.block(
                TRAIN_008,
                arg,
                f"TrainState field {name}= has no NNX counterpart here",
                "keep it next to the (graphdef, state) pair by hand",
            )
            return False
    return True


def _split_model_and_optimizer(model: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The rewritten ``TrainState.create(...)`` -> ``nnx.split((model, nnx.Optimizer(model, tx, ...)))``."""

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        tx = next(a.value for a in updated.args if a.keyword is not None and a.keyword.value == "tx")
        return cst.parse_expression(
            f"nnx.split(({model}, nnx.Optimizer({model}, {code(tx)}, wrt=nnx.Param)))"
        )

    return build


def plan_binding(plan: TrainPlanner, assignment: Assignment, scope: object) -> None:
    """A binding of a train state: a parameter (its function reads it through a merge prelude) or a
    local (merged before each statement that reads it)."""
    node = assignment.node
    if isinstance(node, cst.Param):
        value = plan.values.param_value(node, assignment)
        if value is None or value.kind != "ts":
            return
        fn = plan.function_of(node)
        if fn is not None and isinstance(scope, FunctionScope):
            plan_owner(plan, fn, assignment, scope)
        return
    value = plan.values.bound(assignment)
    key = (scope, assignment.name)
    if value is None or value.kind != "ts" or key in plan.locals_done:
        return
    plan.locals_done.add(key)
    group = plan.values.bindings(scope, assignment.name)  # type: ignore[attr-defined]
    local_state(plan, assignment.name, group)


def local_state(plan: TrainPlanner, name: str, group: list[Assignment]) -> None:
    """A train state held in a local (``state = create_train_state(...)``): each statement that reads
    it is preceded by its own ``model, optimizer = nnx.merge(*state)`` (the local may be rebound by
    any call in between, e.g. ``state, metrics = train_step(state, batch)``)."""
    uses = list(dict.fromkeys(u for a in group for u in plan.values.uses(a)))
    reads: dict[cst.SimpleStatementLine, list[cst.Attribute]] = {}
    for use in uses:
        attr = plan.parent(use)
        if not (isinstance(attr, cst.Attribute) and attr.value is use):
            continue
        field = attr.attr.value
        call = plan.parent(attr)
        is_call = isinstance(call, cst.Call) and call.func is attr
        stmt = plan.insertable(attr)
        readable = field in ("params", "step", "tx") or field in STATE_TYPES
        if stmt is None or (field != "apply_fn" if is_call else not readable):
            plan.block(
                TRAIN_008,
                attr,
                f"`{code(attr)}` of a train state held in a local variable",
                "read it after `model, optimizer = nnx.merge(*state)`",
            )
            return
        reads.setdefault(stmt, []).append(attr)
    for stmt, attrs in reads.items():
        fn = plan.function_of(stmt)
        owner = plan.local_owner.get((fn, name)) or Owner(
            fn,
            name,
            plan.fresh(fn, "model"),  # type: ignore[arg-type]
            plan.fresh(fn, "optimizer"),
        )
        plan.local_owner[(fn, name)] = owner
        needs_optimizer = needs_model = False
        for attr in attrs:
            if attr.attr.value == "apply_fn":
                if not plan_apply(
                    plan, plan.parent(attr), owner.model, state_own(group, plan, plan.parent(attr))
                ):  # type: ignore[arg-type]
                    return
                needs_model = True
            else:
                needs_optimizer |= attr.attr.value in ("step", "tx")
                needs_model |= attr.attr.value not in ("step", "tx")
                field_read(plan, attr, owner)
        if needs_model and needs_optimizer:
            merge = f"{owner.model}, {owner.optimizer} = nnx.merge(*{name})"
        elif needs_optimizer:
            merge = f"{owner.optimizer} = nnx.merge(*{name})[1]"
        else:
            merge = f"{owner.model} = nnx.merge(*{name})[0]"
        plan.prelude.setdefault(stmt, []).append(cst.parse_statement(merge + "\n"))


def plan_owner(plan: TrainPlanner, fn: cst.FunctionDef, param: Assignment, scope: FunctionScope) -> None:
    """Plan the merge prelude, field reads, apply sites and rebinding statements of one train-state
    parameter of ``fn`` and of the names ``apply_gradients`` / ``replace`` rebind it to in ``fn``."""
    names, group, rebinding, foreign = _group(plan, param, scope)
    accesses = list(
        dict.fromkeys(use for a in group for use in plan.values.uses(a))
    )  # an access may see several
    attribute_uses = [
        u for u in accesses if isinstance(plan.parent(u), cst.Attribute) and plan.parent(u).value is u
    ]  # type: ignore[union-attr]
    if not attribute_uses:
        return
    if foreign is not None:
        plan.block(
            TRAIN_008,
            foreign.node,
            f"train state `{foreign.name}` reassigned by something other than apply_gradients / replace",
            "read its fields after `model, optimizer = nnx.merge(*state)`",
        )
        return
    body = fn.body
    if not isinstance(body, cst.IndentedBlock):
        plan.block(TRAIN_008, fn, f"{fn.name.value} is a one-line function", "give it an indented body")
        return
    for stmt, call in rebinding.items():
        if not linear_update(plan, stmt, call, fn, accesses):
            return
    owner = Owner(fn, param.name, plan.fresh(fn, "model"), plan.fresh(fn, "optimizer"))
    if not _plan_uses(plan, owner, attribute_uses, group, rebinding):
        return
    for stmt, call in rebinding.items():
        if not plan_rebind(plan, stmt, call, owner):
            return
    owner.rebinds = bool(rebinding)
    if owner.rebinds:
        owner.uses_optimizer = True
        receivers = {c.func.value for c in rebinding.values()}  # type: ignore[attr-defined]
        for use in accesses:
            if use not in attribute_uses and use not in receivers and not plan.is_target(use):
                plan.edits[use] = Edit(lambda updated: cst.parse_expression(resplit(plan, owner)))
    _merge_prelude(plan, fn, body, owner, names)


Rebinding = dict[cst.CSTNode, cst.Call]  # statement -> the apply_gradients / replace call it makes


def _group(
    plan: TrainPlanner, param: Assignment, scope: FunctionScope
) -> tuple[set[str], list[Assignment], Rebinding, Assignment | None]:
    """The names the state parameter lives on in its function (grown through ``new =
    old.apply_gradients(...)``, ``new = new.replace(...)``), their bindings, the rebinding statements,
    and a rebinding by anything else (a problem only if fields are read)."""
    names = {param.name}
    group: list[Assignment] = [param]
    rebinding: Rebinding = {}
    foreign: Assignment | None = None
    changed = True
    while changed and foreign is None:
        changed = False
        for use in [u for a in group for u in plan.values.uses(a)]:
            target = update_target(plan, use)
            if target is not None and target not in names:
                names.add(target)
                changed = True
        for name in sorted(names):
            for a in plan.values.bindings(scope, name):
                if a in group:
                    continue
                found = rebinding_statement(plan, a.node, names)
                if found is None:
                    foreign = a
                    break
                group.append(a)
                rebinding[found[0]] = found[1]
                changed = True
    return names, group, rebinding, foreign


def _plan_uses(
    plan: TrainPlanner,
    owner: Owner,
    attribute_uses: list[cst.Name],
    group: list[Assignment],
    rebinding: Rebinding,
) -> bool:
    """Plan each ``state.<attr>`` of the group: apply sites, updates, field reads. False (and blocked)
    at the first one with no NNX counterpart."""
    for use in attribute_uses:
        attr = plan.parent(use)
        assert isinstance(attr, cst.Attribute)
        field = attr.attr.value
        call = plan.parent(attr)
        is_call = isinstance(call, cst.Call) and call.func is attr
        if field == "apply_fn" and is_call:
            if not plan_apply(plan, call, owner.model, state_own(group, plan, call)):  # type: ignore[arg-type]
                return False
        elif field in ("apply_gradients", "replace") and is_call:
            stmt = plan.statement_of(call)  # type: ignore[arg-type]
            if rebinding.get(stmt) is not call and not returned_update(call, stmt):  # type: ignore[arg-type]
                plan.block(
                    TRAIN_008,
                    call,
                    f"`{use.value}.{field}(...)` outside `name = ...` / `return ...`",
                    "apply the update with optimizer.update(model, grads) by hand",
                )
                return False
            if stmt not in rebinding:
                rebinding[stmt] = call  # type: ignore[index,assignment]
        elif not is_call and field_read(plan, attr, owner):
            pass
        else:
            plan.block(
                TRAIN_008,
                attr,
                f"train-state field `{field}` has no NNX counterpart",
                "use the model / optimizer merged from the split state",
            )
            return False
    return True


def _merge_prelude(
    plan: TrainPlanner, fn: cst.FunctionDef, body: cst.IndentedBlock, owner: Owner, names: set[str]
) -> None:
    """``model, optimizer = nnx.merge(*state)`` as the function's first statement (after its docstring)."""
    first = next((s for s in body.body if not is_docstring(s)), None)
    if first is None:
        return
    targets = f"{owner.model}, {owner.optimizer}" if owner.uses_optimizer else f"{owner.model}, _"
    if not owner.uses_optimizer and "_" in names_in(fn):
        targets = owner.model
    # copy=True: merge hands back the state's own Variables, which an update or a train-mode call
    # then changes in place, where Linen's state stays what it was for whoever else holds it
    # (`init_state` kept for an eval, a step run outside jax.jit)
    merge = f"nnx.merge(*{owner.param}, copy=True)" + ("[0]" if targets == owner.model else "")
    plan.prelude.setdefault(first, []).insert(0, cst.parse_statement(f"{targets} = {merge}\n"))
    plan.note(
        TRAIN_007, fn, f"{fn.name.value}: train state `{owner.param}` read through `{targets} = {merge}`"
    )


def update_target(plan: TrainPlanner, use: cst.Name) -> str | None:
    """``new = <use>.apply_gradients(...)`` / ``.replace(...)`` -> ``"new"``."""
    attr = plan.parent(use)
    call = plan.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is use else None
    if not (
        isinstance(call, cst.Call) and call.func is attr and attr.attr.value in ("apply_gradients", "replace")
    ):  # type: ignore[union-attr]
        return None
    assign = plan.parent(call)
    if (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
    ):
        return assign.targets[0].target.value
    return None


def linear_update(
    plan: TrainPlanner, stmt: cst.CSTNode, call: cst.Call, fn: cst.FunctionDef, accesses: list[cst.Name]
) -> bool:
    """NNX updates in place, so ``new = old.apply_gradients(...)`` is only the same program when ``old``
    is never read again: not after the statement, and not on a later turn of a loop around it."""
    receiver = call.func.value  # type: ignore[attr-defined]
    target = stmt.body[0].targets[0].target  # type: ignore[attr-defined]
    if target.value == receiver.value:
        return True
    cur = plan.parent(stmt)
    while cur is not None and cur is not fn:
        if isinstance(cur, (cst.For, cst.While)):
            plan.block(
                TRAIN_008,
                call,
                f"`{target.value} = {receiver.value}.{call.func.attr.value}(...)` "  # type: ignore[attr-defined]
                "inside a loop (NNX updates the state in place)",
                f"rebind `{receiver.value}` itself",
            )
            return False
        cur = plan.parent(cur)
    end = plan.positions[stmt].end.line
    for use in accesses:
        if use.value == receiver.value and use is not receiver and plan.positions[use].start.line > end:
            plan.block(
                TRAIN_008,
                use,
                f"`{receiver.value}` read after `{target.value} = "
                f"{receiver.value}.{call.func.attr.value}(...)` (NNX updates the state in place)",  # type: ignore[attr-defined]
                "keep what you need from the old state before the update",
            )
            return False
    return True


def rebinding_statement(
    plan: TrainPlanner, target: cst.CSTNode, names: set[str]
) -> tuple[cst.CSTNode, cst.Call] | None:
    """``state = state.apply_gradients(...)`` / ``new = state.replace(...)``: (statement, call)."""
    assign_target = plan.parent(target)
    assign = plan.parent(assign_target) if isinstance(assign_target, cst.AssignTarget) else None
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    call = assign.value
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value in ("apply_gradients", "replace")
        and isinstance(call.func.value, cst.Name)
        and call.func.value.value in names
    ):
        return None
    stmt = plan.statement_of(assign)
    return (stmt, call) if stmt is not None else None


def returned_update(call: cst.Call, stmt: cst.CSTNode | None) -> bool:
    """``return state.apply_gradients(...)``: the update is the whole return statement."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Return)
        and stmt.body[0].value is call
    )


def plan_rebind(plan: TrainPlanner, stmt: cst.CSTNode, call: cst.Call, owner: Owner) -> bool:
    """``state = state.apply_gradients(grads=g)`` / ``.replace(...)`` -> the in-place NNX updates (and
    the re-split state where the update is returned). False (and blocked) for an argument with no counterpart."""
    field = call.func.attr.value  # type: ignore[attr-defined]
    effects: list[tuple[str, int]] = []  # (statement template, index of the argument it uses)
    for i, arg in enumerate(call.args):
        key = arg.keyword.value if arg.keyword is not None else None
        if field == "apply_gradients" and key == "grads":
            effects.append(("{optimizer}.update({model}, {value})", i))
            owner.uses_optimizer = True
        elif key in STATE_TYPES and (key != "params" or field == "replace"):
            effects.append(("nnx.update({model}, {value})", i))
        else:
            what = (
                f"{key}="
                if key
                else "**"
                if arg.star == "**"
                else "*"
                if arg.star
                else "a positional argument"
            )
            plan.block(
                TRAIN_008,
                arg,
                f"{owner.param}.{field}({what}...) has no NNX counterpart",
                "update the model / optimizer by hand",
            )
            return False
    if field == "apply_gradients" and not any(t.startswith("{optimizer}") for t, _ in effects):
        plan.block(TRAIN_008, call, "apply_gradients without grads=", "optimizer.update(model, grads)")
        return False
    returned = returned_update(call, stmt)
    plan.note(
        TRAIN_006,
        call,
        f"{owner.param}.{field}(...) -> "
        + ("optimizer.update(model, grads)" if field == "apply_gradients" else "nnx.update(model, ...)"),
    )

    def replace(updated: cst.CSTNode) -> list[cst.BaseStatement]:
        assert isinstance(updated, cst.SimpleStatementLine)
        small = updated.body[0]
        new_call = small.value  # type: ignore[attr-defined]
        lines = [
            template.format(optimizer=owner.optimizer, model=owner.model, value=code(new_call.args[i].value))
            for template, i in effects
        ]
        if returned:
            lines.append(f"return {resplit(plan, owner)}")
        out = [cst.parse_statement(line + "\n") for line in lines]
        out[0] = out[0].with_changes(leading_lines=updated.leading_lines)
        return out

    plan.replace_stmt[stmt] = replace
    return True


def resplit(plan: TrainPlanner, owner: Owner) -> str:
    """The train state again after an update: ``(state[0], nnx.state((model, optimizer)))``. Where the
    function calls the model itself (not a copy), what the call sows stays on it, where Linen's apply
    without ``mutable`` drops it: those Intermediates are left out, so the state keeps the leaves of
    the graphdef it is merged with."""
    state = f"nnx.state(({owner.model}, {owner.optimizer}))"
    if owner.fn in plan.direct_calls:
        state = f"nnx.state(({owner.model}, {owner.optimizer}), nnx.Not(nnx.Intermediate))"
    return f"({owner.param}[0], {state})"


def field_read(plan: TrainPlanner, attr: cst.Attribute, owner: Owner) -> bool:
    """``state.params`` / ``.batch_stats`` / ``.step`` / ``.tx`` read -> the merged model's or optimizer's;
    False for another field, or one that is assigned or deleted."""
    field = attr.attr.value
    if field == "params":
        expr = f"nnx.state({owner.model}, nnx.Param)"
    elif field in STATE_TYPES:
        expr = f"nnx.state({owner.model}, nnx.{STATE_TYPES[field]})"
    elif field == "step":
        # nnx.Optimizer counts in uint32: `state.step - warmup` would wrap below 0 where Linen's int32 goes negative
        expr, owner.uses_optimizer = f'{owner.optimizer}.step[...].astype("int32")', True
        if _python_number(plan, attr):  # `int(state.step)`: the same number either way
            expr = f"{owner.optimizer}.step[...]"
    elif field == "tx":
        expr, owner.uses_optimizer = f"{owner.optimizer}.tx", True
    else:
        return False
    if plan.is_target(attr) or isinstance(plan.parent(attr), (cst.AugAssign, cst.Del)):
        return False
    if field != "step" and _kept(plan, attr):
        # nnx.state hands back the model's own Variables, which an update changes in place; Linen's
        # field is a value, so what is kept under a name (`old_params = state.params`) is a copy
        expr = f"nnx.clone({expr})"
    extra = " (read as int32, Linen's type: the optimizer's own count is uint32)" if field == "step" else ""
    plan.note(TRAIN_007, attr, f"{owner.param}.{field} -> {expr}{extra}")
    plan.edits[attr] = Edit(lambda updated, e=expr: cst.parse_expression(e))
    return True


def _python_number(plan: TrainPlanner, attr: cst.Attribute) -> bool:
    """``attr`` is the one argument of ``int(...)`` / ``float(...)``."""
    arg = plan.parent(attr)
    call = plan.parent(arg) if isinstance(arg, cst.Arg) else None
    return (
        isinstance(call, cst.Call)
        and len(call.args) == 1
        and isinstance(call.func, cst.Name)
        and call.func.value in ("int", "float")
    )


def _kept(plan: TrainPlanner, attr: cst.Attribute) -> bool:
    """``attr`` is assigned to a name, as it is or as an element of a dict, tuple or list display."""
    cur, parent = attr, plan.parent(attr)
    if isinstance(parent, (cst.DictElement, cst.Element)) and parent.value is attr:
        cur = plan.parent(parent)
        parent = plan.parent(cur) if cur is not None else None
    return isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is cur


def state_own(
    group: list[Assignment], plan: TrainPlanner, call: cst.CSTNode
) -> Callable[[str, cst.BaseExpression], bool]:
    """For ``state.apply_fn``: a collection is the state's own when the dict of the apply ``call``
    passes ``state.<field>`` in the call itself. A dict bound earlier holds the field as it was then
    (``variables = {'params': state.params}``, an update, then the apply): an override of its own."""
    values = plan.values

    def own(key: str, value: cst.BaseExpression) -> bool:
        if not (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name)):
            return False
        if plan.statement_of(value) is not plan.statement_of(call):
            return False
        refs = values.referents(value.value)
        return value.attr.value == key and bool(refs) and all(r in group for r in refs)

    return own
