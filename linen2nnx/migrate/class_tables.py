"""Module classes chosen at call time from a table or a function of the file: ``NORMS[self.norm](...)``.

Code keeps its normalisation layers in a module-level table and picks one by a config string
(``NORMS = {'ln': nn.LayerNorm, 'rms': nn.RMSNorm}``, then ``NORMS[self.norm](epsilon=1e-3)(x)`` in
an ``@nn.compact`` method), or behind a helper that returns the class (``def get_norm(name): return
nn.LayerNorm if name == 'ln' else nn.RMSNorm``, then ``get_norm(self.norm)(...)(x)``). The callee is
neither a layer nor a class of the run, so nothing planned a submodule: the class was rewritten as NNX
with the norm left out of its parameters and a Linen module built at call time (Linen's
``CallCompactUnboundModuleError``), and reported converted -- a silent failure. Such a construction,
also through a local bound to the lookup or in ``setup()``, is L2N-MOD-004: the class stays Linen
behind the bridge, which runs as written.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in, returned_values
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.function_aliases import assigned_values
from linen2nnx.migrate.linen_factories import display_values
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.verify_names import flax_class_kind

_PARTIALS = frozenset({"functools.partial"})


def report_class_choices(ctx: FileContext, methods: list[cst.FunctionDef]) -> None:
    """Report each call in ``methods`` (a Linen class's) that builds a module whose class is looked up
    in a table of the file, or returned by a function of the file (L2N-MOD-004, blocking)."""
    for fn in methods:
        for call in calls_in(fn.body):
            found = _chosen_class(ctx, call.func, 0)
            if found is not None:
                ctx.report(
                    MOD_004,
                    call,
                    f"{code(call.func)}(...) builds a module of a class chosen at call time from a table or a "
                    f"function of the file ({found} among them), which the codemod does not follow",
                    "build the NNX counterpart in __init__ (choose the class there, with rngs=rngs)",
                )


def _chosen_class(ctx: FileContext, func: cst.BaseExpression, depth: int) -> str | None:
    """The first module class ``func`` may evaluate to where it is a lookup in a table of the file
    (``T[key]``, ``T.get(key)``), a call of a function of the file returning a class, or a name bound
    to one of those; None otherwise."""
    if depth > 3:
        return None
    if isinstance(func, cst.Subscript):
        return _first_class(ctx, _table_values(ctx, func.value), depth)
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Attribute) and func.func.attr.value == "get":
        return _first_class(ctx, _table_values(ctx, func.func.value), depth)
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Name):
        fn = ctx.state.module_functions.get(func.func.value)
        if fn is None or ctx.qualnames(func.func) != {func.func.value}:
            return None
        returned = [v for v in returned_values(fn.body) if v is not None]
        return _first_class(ctx, returned[::-1], depth)  # the finding names the last return's class
    if isinstance(func, cst.Name):
        values = assigned_values(ctx, func) or []
        return next((f for v in values if (f := _chosen_class(ctx, v, depth + 1)) is not None), None)
    return None


def _table_values(ctx: FileContext, table: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values of the dict, list or tuple display a name of the file is bound to (every binding)."""
    if not isinstance(table, cst.Name):
        return [table] if isinstance(table, (cst.Dict, cst.List, cst.Tuple)) else []
    found: list[cst.BaseExpression] = []
    for value in assigned_values(ctx, table) or []:
        found += display_values(value)
    return found


def _first_class(ctx: FileContext, values: list[cst.BaseExpression], depth: int) -> str | None:
    """The first module class among ``values`` (through conditional expressions, lookups of displays
    and ``functools.partial``)."""
    for value in values:
        if isinstance(value, cst.IfExp):
            found = _first_class(ctx, [value.body, value.orelse], depth)
        elif isinstance(value, cst.Subscript):
            found = _first_class(ctx, display_values(value.value) or _table_values(ctx, value.value), depth)
        elif isinstance(value, cst.Call) and ctx.qualnames(value.func) & _PARTIALS and value.args:
            found = _first_class(ctx, [value.args[0].value], depth)
        elif isinstance(value, (cst.Name, cst.Attribute)):
            found = _module_class(ctx, value)
            if found is None and isinstance(value, cst.Name):  # `T[k]` through a name bound to it
                found = _chosen_class(ctx, value, depth + 1)
        else:
            found = None
        if found is not None:
            return found
    return None


def _module_class(ctx: FileContext, node: cst.Name | cst.Attribute) -> str | None:
    """The module class ``node`` names: a built-in layer, a Linen class of the run, or of flax.linen."""
    rule = ctx.layer_rule_of(node)
    if rule is not None:
        return f"nn.{rule.linen}"
    if ctx.user_class_of(node) is not None:
        return code(node)
    return next((q for q in ctx.qualnames(node) if flax_class_kind(q) == "linen"), None)
