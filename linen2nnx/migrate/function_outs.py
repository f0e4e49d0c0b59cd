"""What other files' module-level functions return, for the size dataflow of the files importing them.

Preprocessing and normalising helpers often live in a shared file (``preprocess_atari_inputs(x)``:
``x.astype(jnp.float32) / 255.0``) and are called by the networks of another: the result keeps the
argument's last axis. Each file hands its functions whose result is one of their arguments' last
axis to its importers as facts (``function_out:<module>.<name>``); a call resolved to such a function
gives the size of the argument it passes (:func:`~linen2nnx.migrate.dataflow.transfer`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_utils import absolute_qualname
from linen2nnx.migrate.dataflow_types import Feat

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

KEY_PREFIX = "function_out:"


@dataclasses.dataclass(frozen=True)
class FunctionOut:
    """A module-level function whose result's last axis is one of its arguments'."""

    params: tuple[str, ...]
    out: Feat


def function_out_facts(ctx: FileContext) -> dict[str, FunctionOut]:
    """This file's functions whose result keeps an argument's last axis, as facts for importers."""
    module = ctx.state.module_name
    facts = {}
    for name in ctx.state.module_functions:
        known = ctx.function_out(name)
        if known is not None and known[1].kind == "input":
            facts[f"{KEY_PREFIX}{module}.{name}" if module else KEY_PREFIX + name] = FunctionOut(
                tuple(known[0]), known[1]
            )
    return facts


def imported_function_out(ctx: FileContext, func: cst.BaseExpression) -> tuple[list[str], Feat] | None:
    """``(params, out)`` of the function another file of the run defines that ``func`` names."""
    outs = ctx.state.external_function_outs
    if not outs or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    for q in ctx.qualnames(func):
        fact = outs.get(KEY_PREFIX + absolute_qualname(q, ctx.state.module_name))
        if fact is not None:
            return list(fact.params), fact.out
    return None
