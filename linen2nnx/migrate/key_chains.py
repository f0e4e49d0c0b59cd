"""PRNG keys a module is built with that come from a chain of splits, for a clearer call-time finding.

``init_rng, init_key = random.split(init_rng)`` before each submodule, starting from a key field
(``init_rng = self.rng``), hands every submodule its own key as a constructor field (StyleGAN2's
layers draw their initial weights from it). ``__init__`` replays such a chain where it provably
gives every submodule the same key (key_replay.py); where not, the finding names the chain and why,
so whoever ports it by hand replays the same splits in the same order.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.key_replay import refusal

SPLIT = {"jax.random.split"}


def split_chain(ctx: FileContext, fn: cst.FunctionDef | None, name: str) -> str | None:
    """The first ``rest, name = random.split(rest)`` of ``fn`` that binds ``name`` and rebinds the key
    it splits (a chain), as source; None when ``name`` comes from no such statement."""
    found: list[str] = []

    class V(FastVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            value, targets = node.value, node.targets
            if found or len(targets) != 1 or not isinstance(targets[0].target, cst.Tuple):
                return
            bound = [e.value.value for e in targets[0].target.elements if isinstance(e.value, cst.Name)]
            if (
                name in bound
                and isinstance(value, cst.Call)
                and value.args
                and isinstance(value.args[0].value, cst.Name)
                and value.args[0].value.value in bound
                and ctx.qualnames(value.func) & SPLIT
            ):
                found.append(f"{code(targets[0].target)} = {code(value)}")

    if fn is not None:
        V().walk(fn.body)
    return found[0] if found else None


def call_time_message(
    ctx: FileContext, arg_name: str, arg: cst.Arg, uses: set[str], what: str
) -> tuple[str, str]:
    """The finding (message, hint) for constructor argument ``arg`` that reads the call-time ``uses``:
    the chain's own words when it is a key of a split chain, else the general one."""
    fn = ctx.enclosing_function(arg)
    chain = split_chain(ctx, fn, code(arg.value)) if len(uses) == 1 and code(arg.value) in uses else None
    if chain is None:
        return (
            f"argument {arg_name}= of {what} uses the call-time value "
            f"{', '.join(sorted(uses))} and cannot move to __init__",
            "compute it from constructor arguments / config",
        )
    why = refusal(fn, code(arg.value))  # key_replay.py: what keeps __init__ from replaying it
    return (
        f"argument {arg_name}= of {what} is {code(arg.value)}, a key of the split chain `{chain}`, which "
        + (f"__init__ does not replay: {why}" if why else "__init__ does not replay"),
        "the keys depend only on where the chain starts: build the modules in __init__ by hand, "
        "splitting in the same order",
    )
