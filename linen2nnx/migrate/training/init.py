"""Linen module values and ``model.init``: ``MLP(...)`` -> ``functools.partial(MLP, ...)``, ``init`` -> construction.

A Linen module built outside a module is configuration until ``init``; the NNX constructor also needs
``rngs`` and the input sizes, which only ``init`` knows. So the module value becomes a partial
constructor (TRAIN_001) and ``model.init(rng, x)`` the call that completes it (TRAIN_002): construction
is initialisation. An init that Linen runs with the class's call-time state condition true (a decode
cache under ``if decode:``) is followed by that one call (see :mod:`.sharding`); in a file that deals in
sharding the construction runs under the eager-sharding guard (TRAIN_014).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

from linen2nnx.migrate.cst_utils import code, keyword_arg, kwarg
from linen2nnx.migrate.rules.training import (
    TRAIN_001,
    TRAIN_002,
    TRAIN_008,
    TRAIN_009,
    TRAIN_010,
    TRAIN_014,
    TRAIN_015,
)
from linen2nnx.migrate.rules.verify import VERIFY_002
from linen2nnx.migrate.sites import ClassSummary
from linen2nnx.migrate.training.exprs import (
    bare,
    input_index,
    input_size,
    pure_or_literal,
    rngs_expr,
    with_args,
)
from linen2nnx.migrate.training.planner import INIT_ONLY_KWARGS, Edit, TrainPlanner
from linen2nnx.migrate.training.sharding import EAGER_GUARD, decide, literal, partition_spec_key
from linen2nnx.migrate.training.values import Val, string_index

Sizes = dict[str, tuple[int, str]]  # constructor argument -> (index of the init argument, how it is read)


def plan_attribute(plan: TrainPlanner, node: cst.Attribute) -> None:
    """``model.init`` / ``model.apply`` used as a value (``jax.jit(model.init)``): no call to rewrite."""
    if node.attr.value not in ("init", "apply") or node in plan.handled:
        return
    parent = plan.parent(node)
    if isinstance(parent, cst.Call) and parent.func is node:
        return
    receiver = plan.values.value_of(node.value)
    if receiver is not None and receiver.kind == "module" and not is_create_apply_fn(plan, node):
        plan.block(
            TRAIN_009,
            node,
            f"`{code(node)}` used as a value",
            "call it directly: NNX builds the module instead of init, and calls the module instead of apply",
        )


def is_create_apply_fn(plan: TrainPlanner, node: cst.CSTNode) -> bool:
    """``TrainState.create(apply_fn=model.apply)``: the train-state handler rewrites it."""
    arg = plan.parent(node)
    return isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value == "apply_fn"


def plan_partial(plan: TrainPlanner, call: cst.Call) -> None:
    """``MLP(hidden=32)`` outside a module -> ``functools.partial(MLP, hidden=32)`` (``MLP()`` -> ``MLP``)."""
    plan.uses_partial = plan.uses_partial or bool(call.args)
    name = code(call.func)
    plan.note(
        TRAIN_001,
        call,
        f"{name}(...) built outside a module -> functools.partial({name}, ...): "
        "the NNX constructor also needs rngs and input sizes, which init supplies",
    )

    if keyword_arg(call, "name") is not None:  # the partial would hand it to an __init__ that has no `name`
        plan.note(
            VERIFY_002,
            call,
            f"{name}(..., name=...) built outside a module: the NNX {name}.__init__ takes no name= "
            "(NNX modules are named by the attribute that holds them), so calling the partial fails",
            "drop name= where the module is built top-level; a submodule is named by its parent's attribute",
        )

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        if not updated.args:
            return updated.func  # the class itself is the constructor
        return with_args(
            updated, [cst.Arg(updated.func), *updated.args], func=cst.parse_expression("functools.partial")
        )

    plan.edits[call] = Edit(build)


def plan_init(plan: TrainPlanner, call: cst.Call, receiver: Val) -> None:
    """``variables = model.init(rng, x, train=False)`` -> ``variables = model(in_features=x.shape[-1],
    rngs=nnx.Rngs(rng, dropout=rng))``, the call that creates call-time state after it where Linen's
    init made that call."""
    summary = receiver.summary
    assert summary is not None
    parent = plan.parent(call)
    arguments = _init_arguments(plan, call, parent)
    if arguments is None:
        return
    rng_index, inputs, keywords = arguments
    sizes = _sizes(plan, call, summary, inputs, keywords)
    call_kwargs = {k: call.args[i].value for k, i in keywords.items() if k != "rngs"}
    creates = creates_state(plan, call, summary, call_kwargs)
    if creates is None:
        return
    stmt = plan.insertable(call)
    creates = creates or summary.kept_linen or summary.bridged_inside  # behind nnx.bridge.ToNNX: first call
    if creates and not _call_after(plan, call, parent, stmt, summary, inputs, keywords):
        return
    if plan.sharding and stmt is not None:
        eager(plan, stmt, call, summary.name)
    plan.note(
        TRAIN_002,
        call,
        f"{code(call.func)}(...) -> constructing the NNX {summary.name} "
        "(construction is initialisation)"
        + (", then the call that creates its call-time state" if creates else ""),
    )
    direct = (
        isinstance(call.func, cst.Attribute)
        and isinstance(call.func.value, cst.Call)
        and plan.values.user_class(call.func.value.func) is not None
    )
    plan.edits[call] = Edit(_construction(sizes, rng_index, sorted(plan.streams), direct))


def _init_arguments(
    plan: TrainPlanner, call: cst.Call, parent: cst.CSTNode | None
) -> tuple[int, list[int], dict[str, int]] | None:
    """(index of the rngs argument, indices of the inputs, keyword -> index) of an init the codemod can
    rewrite; None (and blocked) for any other."""
    if not (
        (isinstance(parent, cst.Subscript) and parent.value is call and string_index(parent) is not None)
        or (isinstance(parent, (cst.Return, cst.Assign, cst.AnnAssign)) and parent.value is call)
    ):
        plan.block(
            TRAIN_008,
            call,
            f"`{code(call.func)}(...)` used as a whole (in NNX it builds the model)",
            "bind the model to a name, then use nnx.state(model, nnx.Param)",
        )
        return None
    if any(a.star for a in call.args):
        plan.block(
            TRAIN_009,
            call,
            f"`{code(call.func)}(*...)`: the example inputs are not visible",
            "pass the rngs and example inputs explicitly",
        )
        return None
    positional = [i for i, a in enumerate(call.args) if a.keyword is None]
    keywords = {a.keyword.value: i for i, a in enumerate(call.args) if a.keyword is not None}
    for name in keywords:
        if name in INIT_ONLY_KWARGS:
            plan.block(
                TRAIN_009,
                call,
                f"init keyword {name}= changes what Linen initialises",
                "construct the NNX module by hand",
            )
            return None
    rng_index = keywords.get("rngs", positional[0] if positional else None)
    if rng_index is None:
        plan.block(TRAIN_009, call, "init without rngs", "pass the PRNG key")
        return None
    return rng_index, [i for i in positional if i != rng_index], keywords  # the inputs only run __call__


def _sizes(
    plan: TrainPlanner, call: cst.Call, summary: ClassSummary, inputs: list[int], keywords: dict[str, int]
) -> Sizes:
    """The constructor arguments the init's inputs give; a TRAIN_010 note for each they do not."""
    sizes: Sizes = {}
    for arg, how in summary.new_args.items():
        index = input_index(how)
        if 0 <= index < len(inputs):
            sizes[arg] = (inputs[index], how)
        elif index == 0 and summary.first_input in keywords:
            sizes[arg] = (keywords[summary.first_input], how)
        elif arg not in summary.optional_inputs:  # an input init leaves out may be None: its size too
            note_unsized(plan, call, summary.name, arg)
    return sizes


def note_unsized(plan: TrainPlanner, call: cst.Call, class_name: str, arg: str) -> None:
    """A constructor size the init call's inputs do not give (TRAIN-010)."""
    plan.note(
        TRAIN_010,
        call,
        f"{class_name} needs constructor argument {arg}, which init's inputs do not give",
        f"pass {arg}=... where the module is built (see L2N-SHAPE-003)",
    )


def _call_after(
    plan: TrainPlanner,
    call: cst.Call,
    parent: cst.CSTNode | None,
    stmt: cst.CSTNode | None,
    summary: ClassSummary,
    inputs: list[int],
    keywords: dict[str, int],
) -> bool:
    """Linen's init call created call-time state: the NNX model makes that call once, right after it is
    built (a class kept as Linen behind the bridge, which creates every variable so, through
    ``nnx.bridge.lazy_init``). False (and blocked) where the init is not a ``name = ...`` statement of
    plain arguments."""
    target = parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
    args = [call.args[i] for i in inputs] + [call.args[i] for k, i in keywords.items() if k != "rngs"]
    if stmt is None or not isinstance(target, cst.Name) or not all(pure_or_literal(a.value) for a in args):
        plan.block(
            TRAIN_015,
            call,
            f"`{code(call.func)}(...)` creates {summary.name}'s "
            + (
                "variables, which its NNX wrapper (kept as Linen behind the bridge) creates on a first call"
                if summary.kept_linen
                else "variables of the classes it builds kept as Linen behind the bridge, created on a first call"
                if summary.bridged_inside
                else "call-time state (e.g. a decode cache), which NNX creates on the first such call"
            )
            + "; the init is not a `name = ...` statement of plain arguments to repeat that call after",
            "bind the init to a name: `variables = model.init(...)`",
        )
        return False
    listed = ", ".join(code(bare(a)) for a in args)
    plan.after.setdefault(stmt, []).append(
        f"nnx.bridge.lazy_init({target.value}, {listed})"
        if summary.kept_linen or summary.bridged_inside
        else f"{target.value}({listed})"
    )
    return True


def _construction(
    sizes: Sizes, rng_index: int, streams: list[str], direct: bool
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The edit of the init call: the (partial) constructor called with the sizes and ``rngs``."""

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
        new = [kwarg(arg, input_size(updated.args[i].value, how)) for arg, (i, how) in sizes.items()]
        new.append(kwarg("rngs", rngs_expr(updated.args[rng_index].value, streams)))
        ctor = updated.func.value
        if direct:
            assert isinstance(ctor, cst.Call)
            return with_args(ctor, [*ctor.args, *new])
        return with_args(cst.Call(ctor), new)

    return build


def eager(plan: TrainPlanner, stmt: cst.CSTNode, node: cst.CSTNode, name: str) -> None:
    """Build under ``nnx.use_eager_sharding(<a mesh and logical axis rules are active>)``: partition
    metadata would otherwise raise with no mesh, or read logical names as mesh axes with no rules, where
    Linen's boxes stay metadata."""
    guards = plan.wrap.setdefault(stmt, [])
    if EAGER_GUARD not in guards:
        guards.append(EAGER_GUARD)
    plan.note(
        TRAIN_014,
        node,
        f"the NNX {name} is built with eager sharding only under a mesh and logical axis rules (Linen's "
        "partition boxes are metadata until a mesh and rules make them shardings)",
    )


def creates_state(
    plan: TrainPlanner,
    node: cst.CSTNode,
    summary: ClassSummary | None,
    kwargs: Mapping[str, cst.BaseExpression],
) -> bool | None:
    """Does the Linen init at ``node`` (called with ``kwargs``) create call-time state that the
    program reads? None (and blocked) when that cannot be decided."""
    when = summary.state_when if summary is not None else None
    if when is None:
        return False
    known = {}
    for key, value in kwargs.items():
        ok, evaluated = literal(code(value))
        if ok:
            known[key] = evaluated
    decided = decide(when, known)
    if decided is not None:
        return decided
    reads = collections_read(plan, node)
    if reads is not None and reads <= {"params"}:
        return False  # only the params are read: whatever the call would create is never seen
    plan.block(
        TRAIN_015,
        node,
        f"whether this init creates {summary.name}'s call-time state "  # type: ignore[union-attr]
        f"(when `{when}`) depends on arguments it does not pass as literals",
        "pass them as literal keywords (e.g. decode=True), or build the NNX model and make that call by hand",
    )
    return None


def collections_read(plan: TrainPlanner, node: cst.CSTNode) -> set[str] | None:
    """The collections the program reads from the variables ``node`` evaluates to (directly, or through
    the one name they are bound to); None when they may be used any other way."""
    parent = plan.parent(node)
    if isinstance(parent, cst.Subscript) and parent.value is node:
        key = string_index(parent)
        return {key} if key is not None else None
    if not (
        isinstance(parent, cst.Assign)
        and parent.value is node
        and len(parent.targets) == 1
        and isinstance(parent.targets[0].target, cst.Name)
    ):
        return None
    assignment = plan.values.assignment_of(parent.targets[0].target)
    if assignment is None:
        return None
    reads: set[str] = set()
    for use in plan.values.uses(assignment):
        use_parent = plan.parent(use)
        key = (
            string_index(use_parent)
            if isinstance(use_parent, cst.Subscript) and use_parent.value is use
            else partition_spec_key(plan, use)
        )
        if key is None:
            return None
        reads.add(key)
    return reads
