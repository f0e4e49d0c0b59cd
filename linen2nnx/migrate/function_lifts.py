"""Lifted transforms of plain functions that take a module: ``nn.remat(fn, ...)`` / ``nn.scan(fn, ...)``.

MaxText's pipeline builds its iteration loop this way: a function ``(module, carry, x)`` goes through
``nn.remat`` and ``nn.scan`` and is called with ``self`` first. NNX transforms take modules as
arguments too, so ``nn.remat`` is a rename and ``nn.scan`` becomes ``nnx.scan`` with the module's
axis (``None``: the params are broadcast) in front of the carry. ``nnx.scan`` needs one axis per
scanned input, so the function's parameters are counted: the function is defined in the file, or it
is a parameter of a module-level utility (``def create_pipeline_scan(body, length): ...
nn.scan(body, ...)``) and every call of that utility in the file passes the same kind of function
(module-level, or a ``def`` beside the call).

Each function returns the NNX expression, or the reason it cannot (the caller reports it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import code, names_in, parse_expression, parse_statement, strip_commas
from linen2nnx.migrate.lift_streams import report_stream_keys, split_rngs_of, split_text
from linen2nnx.migrate.lifted import STEP_SCAN_KWARGS, LiftError, in_axes_list, literal_dict
from linen2nnx.migrate.rules import XFORM_001

REMAT_KWARGS = frozenset({"policy", "prevent_cse", "static_argnums", "concrete"})


def remat_of_function(
    ctx: FileContext, original: cst.Call, updated: cst.Call, fn: str, kwargs: dict[str, cst.Arg]
) -> cst.BaseExpression | str:
    """``nn.remat(fn, ...)`` -> ``nnx.remat(fn, ...)``; why not, as a string, when it cannot be."""
    extra = set(kwargs) - REMAT_KWARGS
    if extra:
        return f"{', '.join(sorted(extra))}= not converted"
    args = [a for name, a in kwargs.items() if name != "concrete"]
    ctx.report(
        XFORM_001,
        original,
        f"nn.remat({fn}) -> nnx.remat({fn}) (it takes the module as an "
        "argument, as the Linen function does)"
        + ("; concrete= dropped (no NNX equivalent)" if "concrete" in kwargs else ""),
    )
    return updated.with_changes(
        func=parse_expression("nnx.remat"), args=strip_commas([updated.args[0], *args])
    )


def scan_of_function(
    ctx: FileContext,
    original: cst.Call,
    fn: str,
    kwargs: dict[str, cst.Arg],
    orig_kwargs: dict[str, cst.BaseExpression],
) -> cst.BaseExpression | str:
    """``nn.scan(fn, variable_broadcast="params", ...)`` -> ``nnx.scan`` with the module broadcast
    before the carry; why not, as a string, when it cannot be."""
    extra = set(kwargs) - STEP_SCAN_KWARGS - {"metadata_params"}
    if extra:
        return f"{', '.join(sorted(extra))}= not converted"
    broadcast = orig_kwargs.get("variable_broadcast")
    literal = isinstance(broadcast, (cst.SimpleString, cst.List, cst.Tuple)) or (
        isinstance(broadcast, cst.Name) and broadcast.value in ("True", "False")
    )
    if broadcast is not None and not literal:
        return f"variable_broadcast={code(broadcast)} is not a literal"
    broadcasts_params = broadcast is not None and ("params" in code(broadcast) or code(broadcast) == "True")
    axes = orig_kwargs.get("variable_axes")
    if not broadcasts_params:
        return (
            "the scanned function creates per-step (stacked) params; build the stack with nnx.vmap "
            "and scan over it (as for nn.scan of a class)"
        )
    if axes is not None and code(axes) not in ("{}", "None"):
        return "variable_axes besides broadcast params are not converted for functions"
    # metadata_params reaches only the variables scanned over an axis (flax.core.lift.scan's
    # variable_axes groups); with the params broadcast and nothing stacked it changes nothing
    dropped = "; metadata_params= dropped (nothing is stacked)" if "metadata_params" in kwargs else ""
    counted = _scanned_axes(ctx, original, fn, orig_kwargs.get("in_axes"))
    if isinstance(counted, str):
        return counted
    per_x, inputs = counted
    if fn in WRAPPER_LOCALS or re.fullmatch(r"_x\d+", fn):
        return f"the scanned function's name {fn} is one the conversion uses"
    out_axes = code(orig_kwargs["out_axes"]) if "out_axes" in orig_kwargs else "0"
    rest = "".join(f", {k}={code(kwargs[k].value)}" for k in ("length", "reverse", "unroll") if k in kwargs)
    streams = split_streams(orig_kwargs.get("split_rngs"))
    if isinstance(streams, str):
        return streams
    _report_unsplit(ctx, original, fn, orig_kwargs.get("split_rngs"), carried=bool(streams))
    if streams:
        return _scan_carrying_rngs(ctx, original, fn, per_x, out_axes, rest, streams, dropped)
    ctx.report(
        XFORM_001,
        original,
        f"nn.scan({fn}) -> nnx.scan({fn}) with the module broadcast (None) before the carry{dropped}",
    )
    return parse_expression(_closing_scan(fn, per_x, inputs, out_axes, rest))


def _closing_scan(fn: str, per_x: list[str], inputs: int, out_axes: str, rest: str) -> str:
    """``nnx.scan`` of ``fn`` over the inputs the call passes (``per_x``, their axes; ``inputs``: how many
    ``fn`` takes after the module and the carry). Linen's scan closes over a broadcast input (``nn.broadcast``)
    and binds no default of an input not passed; ``nnx.scan`` traces both (axis ``None``), so a Python flag
    in the body's ``if`` fails. So a lambda takes only the scanned inputs, closes over the broadcast ones,
    and calls ``fn`` with the inputs passed, its defaults its own."""
    if "None" not in per_x and len(per_x) == inputs:
        return f"nnx.scan({fn}, in_axes=({', '.join(['None', 'nnx.Carry', *per_x])}), out_axes=(nnx.Carry, {out_axes}){rest})"
    xs = [f"_x{i}" for i in range(len(per_x))]
    scanned = ["_module", "_carry", *(x for x, axis in zip(xs, per_x) if axis != "None")]
    in_axes = ", ".join(["None", "nnx.Carry", *(axis for axis in per_x if axis != "None")])
    body = f"lambda {', '.join(scanned)}: {fn}({', '.join(['_module', '_carry', *xs])})"
    scan = f"nnx.scan({body}, in_axes=({in_axes}), out_axes=(nnx.Carry, {out_axes}){rest})"
    if len(scanned) == len(xs) + 2:
        return scan
    return f"(lambda {', '.join(['_module', '_carry', *xs])}: {scan}({', '.join(scanned)}))"


def split_streams(node: cst.BaseExpression | None) -> list[str] | str:
    """The RNG streams besides ``params`` that ``split_rngs`` gives each iteration its own keys of;
    why not known, as a string."""
    try:
        streams = literal_dict(node)
    except LiftError as err:
        return f"split_rngs: {err}"
    return [name for name, value in streams.items() if name != "params" and code(value) != "False"]


def _report_unsplit(
    ctx: FileContext, original: cst.Call, fn: str, split_rngs: cst.BaseExpression | None, carried: bool
) -> None:
    """L2N-XFORM-004 for the streams ``split_rngs`` sets False (as for a scanned method): Linen draws the
    same key of one at every step, and a new one at each call. NNX cannot follow: the plain ``nnx.scan``
    drops the count the layer advances inside it (the same key at every step and every call: one dropout
    mask for the whole of training), and the scan that carries the RNG state round the loop (a stream set
    True beside it) draws a new key at each step."""
    split = split_rngs_of({"split_rngs": split_rngs})
    false = sorted(k for k, v in split.items() if k != "params" and v == "False")
    if not false:
        return
    how = (
        "NNX carries the layer's RNG state round the loop, a new key each step"
        if carried
        else "NNX's scan drops the count the layer advances inside it: the same key at every step and every call"
    )
    report_stream_keys(
        ctx,
        original,
        f"nn.scan({fn}) of a shared layer, {split_text(split, false)}: Linen draws the same key of it at "
        f"every step and a new one at each call; {how}",
    )


WRAPPER_LOCALS = frozenset(
    {"_module", "_carry", "_graphdef", "_rngs", "_rest", "_step", "_state", "_m", "_ys"}
)


def _scan_carrying_rngs(
    ctx: FileContext,
    original: cst.Call,
    fn: str,
    per_x: list[str],
    out_axes: str,
    rest: str,
    streams: list[str],
    dropped: str = "",
) -> cst.BaseExpression | str:
    """``nn.scan(fn, variable_broadcast='params', split_rngs={'dropout': True})``: each iteration
    draws new keys. A broadcast module's RNG counts updated inside ``nnx.scan`` would be dropped (the
    same keys at every iteration and every call), so a function defined just before the statement
    splits the module, carries its RNG state round the loop beside the carry, broadcasts the rest
    (params included) and writes the advanced RNG state back. It takes the inputs the call passes
    (``per_x``), closes over the broadcast ones as :func:`_closing_scan` does, and leaves ``fn`` its
    defaults."""
    scope = ctx.enclosing_function(original)
    taken = names_in(scope if scope is not None else ctx.state.tree)
    name = f"{fn.lstrip('_')}_scan"
    while name in taken:
        name += "_"
    xs = [f"_x{i}" for i in range(len(per_x))]
    scanned = [x for x, axis in zip(xs, per_x) if axis != "None"]  # broadcast ones: closed over
    params = ", ".join(["_module", "_carry", *xs])
    inner = ", ".join(["_state", "_rest", *scanned])
    in_axes = ", ".join(["nnx.Carry", "None", *(axis for axis in per_x if axis != "None")])
    source = (
        f"def {name}({params}):\n"
        f"    # split_rngs={{{', '.join(repr(s) + ': True' for s in streams)}}}: the RNG state goes round the loop\n"
        "    _graphdef, _rngs, _rest = nnx.split(_module, nnx.RngState, ...)\n\n"
        f"    def _step({inner}):\n"
        "        _m = nnx.merge(_graphdef, _state[0], _rest)\n"
        f"        _carry, _ys = {fn}(_m, {', '.join(['_state[1]', *xs])})\n"
        "        return (nnx.state(_m, nnx.RngState), _carry), _ys\n\n"
        f"    (_rngs, _carry), _ys = nnx.scan(_step, in_axes=({in_axes}), out_axes=(nnx.Carry, {out_axes}){rest})(\n"
        f"        {', '.join(['(_rngs, _carry)', '_rest', *scanned])}\n"
        "    )\n"
        "    nnx.update(_module, _rngs)\n"
        "    return _carry, _ys\n"
    )
    statement = ctx.enclosing_statement(original)
    wrapper = parse_statement(source).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    ctx.state.stmt_prefix.setdefault(statement, []).append(wrapper)
    ctx.report(
        XFORM_001,
        original,
        f"nn.scan({fn}) -> {name}: nnx.scan({fn}) with the params broadcast and the module's RNG state "
        f"carried, so each iteration draws new {', '.join(streams)} keys{dropped}",
    )
    return parse_expression(name)


def _scanned_axes(
    ctx: FileContext, node: cst.Call, fn: str, in_axes: cst.BaseExpression | None
) -> tuple[list[str], int] | str:
    """NNX's axis of each input the call passes ``fn`` (its parameters after the module and the carry),
    and how many inputs ``fn`` takes; why not known, as a string. A parameter with a default may or may not
    be passed at the call, which Linen's ``in_axes`` then counts or not: a tuple says how many; for one axis
    for all, the scan's calls do."""
    counted = parameter_count(ctx, node, fn)
    if isinstance(counted, str):
        return counted
    required, total = counted
    per_x = in_axes_list(in_axes, ctx.is_broadcast)
    if per_x is None or total < 2:
        return "in_axes is not a literal"
    if not isinstance(per_x, list):
        passed = total if required == total else _passed_at_calls(ctx, node)
        if passed is None or not max(required, 2) <= passed <= total:
            return f"{fn} has parameters with defaults: how many inputs the scan's call passes is not known"
        per_x = [per_x] * (passed - 2)
    if not max(required, 2) - 2 <= len(per_x) <= total - 2:
        return f"in_axes has {len(per_x)} entries for {total - 2} scanned inputs"
    return per_x, total - 2


def _passed_at_calls(ctx: FileContext, node: cst.Call) -> int | None:
    """How many positional arguments every call of the scan built at ``node`` passes: the call of it
    (``nn.scan(body, ...)(cell, c, xs)``) or of the local it is bound to (``run = nn.scan(...)``, then
    ``run(cell, c, xs)`` in the same function); None when they differ, unpack, or none is found."""
    parent = ctx.parent_of(node)
    if isinstance(parent, cst.Call) and parent.func is node:
        calls = [parent]
    elif (
        isinstance(parent, cst.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0].target, cst.Name)
    ):
        scope = ctx.enclosing_function(node)
        calls = list(_calls_of(scope, parent.targets[0].target.value)) if scope else []
    else:
        return None
    if any(a.star for c in calls for a in c.args):
        return None
    counts = {sum(a.keyword is None for a in c.args) for c in calls}
    return counts.pop() if len(counts) == 1 else None


def parameter_count(ctx: FileContext, node: cst.Call, fn: str) -> tuple[int, int] | str:
    """How many parameters the function ``fn`` (transformed at ``node``) takes: ``(without a default,
    all)``; why not known, as a string."""
    func_def = ctx.state.module_functions.get(fn)
    if func_def is not None:
        return _arity(func_def)
    utility = ctx.enclosing_function(node)
    if utility is None or ctx.state.module_functions.get(utility.name.value) is not utility:
        if utility is not None and any(  # `def body(...)` inside the method
            isinstance(s, cst.FunctionDef) and s.name.value == fn for s in utility.body.body
        ):
            return "the function is defined inside a method; only a module-level function is converted"
        return "the function is not defined in this file, so its inputs cannot be counted"
    names = [p.name.value for p in utility.params.params]
    if fn not in names:
        return "the function is not defined in this file, so its inputs cannot be counted"
    counts = set()
    for call in _calls_of(ctx.state.tree, utility.name.value):
        passed = _argument(call, names.index(fn), fn)
        defined = _function_def(ctx, call, passed) if isinstance(passed, cst.Name) else None
        if defined is None:
            return f"a call of {utility.name.value} passes {fn} a function that is not defined beside it"
        counts.add(_arity(defined))
    if len(counts) != 1:
        return f"the calls of {utility.name.value} pass {fn} functions of different arities (or none)"
    return counts.pop()


def _arity(func_def: cst.FunctionDef) -> tuple[int, int]:
    params = func_def.params.params
    return sum(p.default is None for p in params), len(params)


def _calls_of(tree: cst.CSTNode, name: str) -> Iterable[cst.Call]:
    return (c for c in calls_in(tree) if isinstance(c.func, cst.Name) and c.func.value == name)


def _argument(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if index < len(positional):
        return positional[index].value
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword), None)


def _function_def(ctx: FileContext, call: cst.Call, name: cst.Name) -> cst.FunctionDef | None:
    """The ``def`` ``name`` stands for at ``call``: in the function the call is in, else at module level."""
    caller = ctx.enclosing_function(call)
    if caller is not None:
        local = [s for s in caller.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name.value]
        if local:
            return local[-1]
    return ctx.state.module_functions.get(name.value)
