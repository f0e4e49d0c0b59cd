"""The constructor arguments of a built-in layer, each against its NNX counterpart.

Part of the *analyse* step (:class:`~linen2nnx.migrate.site_planning.SitePlanner` calls it for every
built-in layer it plans): an argument NNX already honours is dropped (a ``split_rngs`` that is what
``nnx.RNN`` does, an ``attention_fn`` that is Linen's default), one NNX has no equivalent for, or
only for some values, is a finding.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.layers import ARG_CHECKS, LayerRule, nnx_ctor_params
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules import LAYER_001, LAYER_002
from linen2nnx.migrate.sites import ClassPlan, Site
from linen2nnx.migrate.stateless_classes import any_class_below


def check_layer_args(ctx: FileContext, rule: LayerRule, site: Site, bound: dict[str, cst.Arg]) -> None:
    """Each argument of a built-in layer against its NNX counterpart: dropped when it is a no-op
    there, else a finding when NNX has no equivalent or only some of its values are converted."""
    for arg_name, arg in bound.items():
        nnx_name = rule.nnx_arg(arg_name)
        if arg_name == rule.varargs_list:
            continue
        if arg_name in rule.dropped_when:
            check = ARG_CHECKS[rule.dropped_when[arg_name]]
            if check.passes(code(arg.value)):
                site.dropped_args += (arg_name,)
                ctx.report(LAYER_001, arg, f"nn.{rule.linen}({arg_name}=...) dropped: {check.note}")
            else:
                ctx.report(
                    LAYER_002,
                    arg,
                    f"nn.{rule.linen}({arg_name}={code(arg.value)}) has no nnx.{rule.nnx} equivalent",
                    f"see the nnx.{rule.nnx} signature; re-express it",
                )
        elif arg_name in rule.function_args:
            _check_function_arg(ctx, rule, site, arg_name, arg)
        elif arg_name in rule.unsupported_args or nnx_name not in nnx_ctor_params(rule.nnx):
            ctx.report(
                LAYER_002,
                arg,
                f"nn.{rule.linen}({arg_name}=...) has no nnx.{rule.nnx} equivalent",
                f"see the nnx.{rule.nnx} signature; drop or re-express it",
            )
        elif arg_name in rule.only_values and code(arg.value) not in rule.only_values[arg_name]:
            ctx.report(
                LAYER_002,
                arg,
                f"nn.{rule.linen}({arg_name}={code(arg.value)}) is not "
                f"converted yet (only {arg_name}={' / '.join(rule.only_values[arg_name])})",
                f"rewrite this nnx.{rule.nnx} by hand",
            )


# initializers that ignore their key: the carry a cell starts from is the same on both sides
_KEYLESS_CARRY_INITS = frozenset(
    f"{module}.{name}"
    for module in ("flax.linen.initializers", "jax.nn.initializers", "flax.nnx.initializers")
    for name in ("zeros", "zeros_init", "ones", "ones_init", "constant")
)


def check_rnn_carry_init(ctx: FileContext, cell: Site, rule: LayerRule, outer: Site) -> None:
    """A cell built in ``nn.RNN``'s arguments whose ``carry_init`` draws from its key: Linen's RNN draws
    the initial carry from ``init_key`` (``jax.random.key(0)`` unless given: the same every call),
    ``nnx.RNN`` from its ``carry`` stream (a new key every call)."""
    arg = cell.args.get("carry_init")
    if not rule.carry_init or arg is None or outer.rule is None or outer.rule.linen != "RNN":
        return
    value = arg.value.func if isinstance(arg.value, cst.Call) else arg.value
    if ctx.qualnames(value) & _KEYLESS_CARRY_INITS:
        return
    ctx.report(
        LAYER_002,
        arg,
        f"nn.{rule.linen}(carry_init={code(arg.value)}) in nn.RNN: Linen draws the initial carry from init_key "
        "(jax.random.key(0) unless given, the same every call), nnx.RNN from its rngs' carry stream (a new "
        "key every call)",
        "pass initial_carry= to the RNN call, built from a key of your own",
    )


def builds_mode_layers(plan: ClassPlan) -> bool:
    """Whether ``plan``'s class, or any class of the run below it, builds a layer with a mode flag
    (``use_running_average``, ``deterministic``): an ``nnx.view`` of it with that flag sets them all."""
    return any_class_below(plan, lambda site: site.rule is not None and bool(site.rule.call_args))


_CALLED_WITH = {
    "attention_fn": "its own arguments (is_causal=, an NNX module=)",
    "promote_dtype": "one tuple of the arrays (promote_dtype((x, kernel), dtype=)), where Linen passes them one by one",
    **dict.fromkeys(
        ("dot_general", "qkv_dot_general", "out_dot_general", "conv_general_dilated"),
        "out_sharding= (and preferred_element_type= when set)",
    ),
    **dict.fromkeys(
        ("qkv_dot_general_cls", "out_dot_general_cls"),
        "out_sharding= (the instance it builds)",
    ),
}


def _check_function_arg(ctx: FileContext, rule: LayerRule, site: Site, arg_name: str, arg: cst.Arg) -> None:
    """``attention_fn=nn.dot_product_attention``, ``dot_general=jax.lax.dot_general`` or ``None``: Linen's
    default, dropped (NNX's default is its counterpart); any other function NNX would call with arguments
    a Linen-style one does not take."""
    defaults = rule.function_args[arg_name]
    if code(arg.value) in defaults or ctx.qualnames(arg.value) & set(defaults):
        site.dropped_args += (arg_name,)
        ctx.report(
            LAYER_001,
            arg,
            f"nn.{rule.linen}({arg_name}={code(arg.value)}) dropped: Linen's default, "
            f"whose counterpart is nnx.{rule.nnx}'s default",
        )
        return
    how = _CALLED_WITH.get(arg_name, "its own arguments")
    ctx.report(
        LAYER_002,
        arg,
        f"nn.{rule.linen}({arg_name}={code(arg.value)}): nnx.{rule.nnx} calls it with {how}, which a "
        "function written for Linen's call does not take (TypeError)",
        f"give it the signature nnx.{rule.nnx} calls it with, then pass it",
    )


def einsum_bias_shape(bound: dict[str, cst.Arg]) -> str | None:
    """Linen Einsum's inferred bias shape, as source: the kernel dims that survive into the result
    (``flax.linen.Einsum._get_bias_shape``), when ``shape`` and ``einsum_str`` are literals."""
    shape, eq = bound.get("shape"), bound.get("einsum_str")
    if shape is None or eq is None or not isinstance(eq.value, cst.SimpleString):
        return None
    if not isinstance(shape.value, (cst.Tuple, cst.List)):
        return None
    text = eq.value.evaluated_value.replace(" ", "")
    if "..." in text or "->" not in text or text.count(",") != 1:
        return None
    operands, result = text.split("->")
    rhs = operands.split(",")[1]
    dims = [code(e.value) for e in shape.value.elements]
    if len(dims) != len(rhs):
        return None
    kept = [dims[rhs.index(c)] for c in result if c in rhs]
    return f"({', '.join(kept)}{',' if len(kept) == 1 else ''})"
