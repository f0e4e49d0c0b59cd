"""``model.init`` as a function value under ``jax.eval_shape``: the abstract NNX model (TRAIN_011).

``jax.eval_shape(functools.partial(model.init, decode=True), key, x)`` gives Linen's abstract variables
(shapes only, for partition specs or an empty decode cache). In NNX the abstract *model* stands for them,
so the init function becomes a local ``def init_model(rng, *args)`` that builds the NNX model (and makes
the call that creates its call-time state), defined right before the statement; where no statement can
go before it, a lambda (then no call-time state and no eager-sharding guard are possible).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_utils import code, needs_parens
from linen2nnx.migrate.rules.training import TRAIN_008, TRAIN_009, TRAIN_011, TRAIN_014
from linen2nnx.migrate.sites import ClassSummary
from linen2nnx.migrate.training.exprs import input_index, rngs_expr
from linen2nnx.migrate.training.init import creates_state, note_unsized
from linen2nnx.migrate.training.planner import INIT_ONLY_KWARGS, Edit, TrainPlanner
from linen2nnx.migrate.training.sharding import EAGER_GUARD
from linen2nnx.migrate.training.values import InitFunction


@dataclasses.dataclass(frozen=True)
class InitModel:
    """The names and pieces of the function that builds the abstract NNX model."""

    init: InitFunction
    rng: str
    args: str
    sizes: list[str]  # constructor keywords read from the inputs, spelled
    rngs: str
    def_name: str  # "" where the function is a lambda
    var: str  # the local holding the model, "" where it makes no call
    creates: bool
    guarded: bool


def plan_eval_shape(plan: TrainPlanner, call: cst.Call, init: InitFunction) -> None:
    """``jax.eval_shape(functools.partial(model.init, k=v), rng, *inputs)`` -> ``jax.eval_shape(f, rng,
    *inputs)`` with ``f`` building the NNX model (and making the call that creates its call-time
    state): the abstract model, whose ``nnx.state`` / partition specs stand for Linen's variables."""
    plan.handled.add(init.attr)
    summary = init.summary
    name = code(init.partial if init.partial is not None else init.attr)
    kwargs = _partial_kwargs(plan, init, name)
    if kwargs is None or not _takes_key_and_inputs(plan, call, name):
        return
    creates = creates_state(plan, call, summary, kwargs)
    if creates is None or summary is None:
        return
    fn = plan.function_of(call)
    rng, args = plan.fresh(fn, "rng"), plan.fresh(fn, "args")
    sizes = _sizes(plan, call, summary, args)
    rngs = code(rngs_expr(cst.Name(rng), sorted(plan.streams)))
    guarded = plan.sharding
    stmt = plan.insertable(call) if creates or guarded else None
    if (creates or guarded) and stmt is None:
        plan.block(
            TRAIN_008,
            call,
            f"`jax.eval_shape({name}, ...)` inside an expression the codemod cannot "
            "put a function definition before",
            "bind its result to a name in a plain statement",
        )
        return
    model = InitModel(
        init,
        rng,
        args,
        sizes,
        rngs,
        plan.fresh(fn, "init_model") if stmt is not None else "",
        plan.fresh(fn, "nnx_model") if creates else "",
        creates,
        guarded,
    )
    _note(plan, call, name, model, summary)
    target = init.partial if init.partial is not None else init.attr
    plan.edits[target] = Edit(_build(model), _before(model) if stmt is not None else None, stmt)


def _takes_key_and_inputs(plan: TrainPlanner, call: cst.Call, name: str) -> bool:
    """Whether the eval_shape call passes one PRNG key and positional inputs (blocked where not): the
    local function's ``(rng, *args)`` signature relies on it."""
    rest = call.args[1:]
    if not rest or any(a.keyword is not None or a.star for a in rest) or isinstance(rest[0].value, cst.Dict):
        plan.block(
            TRAIN_009,
            call,
            f"`jax.eval_shape({name}, ...)` without a single PRNG key and positional inputs",
            "pass jax.eval_shape a key and the example inputs",
        )
        return False
    return True


def _sizes(plan: TrainPlanner, call: cst.Call, summary: ClassSummary, args: str) -> list[str]:
    """The constructor keywords read from the inputs (``features=args[0].shape[-1]``); a note for each
    one the inputs do not give."""
    sizes: list[str] = []
    for arg, how in summary.new_args.items():
        if input_index(how) >= 0:
            sizes.append(
                f"{arg}={args}[{input_index(how)}].shape{'' if how.startswith('input_shape:') else '[-1]'}"
            )
        else:
            note_unsized(plan, call, summary.name, arg)
    return sizes


def _note(plan: TrainPlanner, call: cst.Call, name: str, model: InitModel, summary: ClassSummary) -> None:
    """The findings of a planned conversion: what the call becomes, and the eager-sharding guard."""
    plan.note(
        TRAIN_011,
        call,
        f"jax.eval_shape({name}, ...) -> jax.eval_shape of a function that builds "
        f"the NNX {summary.name}"
        + (" and makes the call that creates its call-time state" if model.creates else "")
        + ": the abstract model",
    )
    if model.guarded:
        plan.note(
            TRAIN_014,
            call,
            f"the NNX {summary.name} is built with eager sharding only under a mesh and logical axis rules "
            "(Linen's partition boxes are metadata until a mesh and rules make them shardings)",
        )


def _partial_kwargs(
    plan: TrainPlanner, init: InitFunction, name: str
) -> dict[str, cst.BaseExpression] | None:
    """The keywords ``functools.partial(model.init, k=v)`` binds; None (and blocked) for any other argument."""
    kwargs: dict[str, cst.BaseExpression] = {}
    for arg in init.partial.args[1:] if init.partial is not None else ():
        if arg.keyword is None or arg.star or arg.keyword.value in (*INIT_ONLY_KWARGS, "rngs"):
            plan.block(
                TRAIN_009,
                arg,
                f"`{name}` with an argument the NNX constructor cannot take",
                "build the NNX model in a function of (rng, *inputs) by hand",
            )
            return None
        kwargs[arg.keyword.value] = arg.value
    return kwargs


def _ctor(model: InitModel, updated: cst.CSTNode) -> str:
    """The NNX constructor call, spelled from the rewritten init function value."""
    attr = updated.args[0].value if model.init.partial is not None else updated  # type: ignore[attr-defined]
    receiver = attr.value  # type: ignore[attr-defined]
    text = code(receiver)
    if needs_parens(receiver) or isinstance(receiver, (cst.Await, cst.Yield, cst.NamedExpr)):
        text = f"({text})"
    return f"{text}({', '.join([*model.sizes, f'rngs={model.rngs}'])})"


def _before(model: InitModel) -> Callable[[cst.CSTNode], list[cst.BaseStatement]]:
    """The ``def init_model(rng, *args)`` that goes before the statement."""

    def call_kwargs(updated: cst.CSTNode) -> str:
        given = updated.args[1:] if model.init.partial is not None else []  # type: ignore[attr-defined]
        return "".join(f", {a.keyword.value}={code(a.value)}" for a in given)

    def before(updated: cst.CSTNode) -> list[cst.BaseStatement]:
        built, var = _ctor(model, updated), model.var
        if model.creates:
            body = f"{var} = {built}\n"
            body = f"with {EAGER_GUARD}:\n    {body}" if model.guarded else body
            body += f"{var}(*{model.args}{call_kwargs(updated)})\nreturn {var}\n"
        else:
            body = f"with {EAGER_GUARD}:\n    return {built}\n" if model.guarded else f"return {built}\n"
        text = f"def {model.def_name}({model.rng}, *{model.args}):\n" + "".join(
            f"    {line}\n" for line in body.splitlines()
        )
        return [cst.parse_statement(text)]

    return before


def _build(model: InitModel) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The init function value -> the local function's name, or a lambda that builds the model."""

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        if model.def_name:
            return cst.Name(model.def_name)
        return cst.parse_expression(f"lambda {model.rng}, *{model.args}: {_ctor(model, updated)}")

    return build
