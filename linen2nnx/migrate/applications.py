"""One input size from the several applications of one module (a module has one size per input).

Linen builds a module's parameters once, from its first application; :func:`one_size` reads what
the flow saw at each application (in order, with the branches and loops around it) and
:func:`agreeing_args` the sizes of every positional argument. Sizes are compared without their
ranks: one module may read values of several ranks (a projection applied before or after a reshape).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.dataflow_types import DISAGREEING
from linen2nnx.migrate.tuple_flow import SIZED


def one_size(applied: list[tuple[Feat, tuple]]) -> Feat:
    """The input size of a module from the sizes of its applications, in order, each with the
    branches and loops it sits in (``LayerUse.path``). Linen builds the parameters once, from the
    first application, and any other size fails (a kernel's contraction, a scale's broadcast). So where
    one application's size is known (a config expression, a method's input) and it surely ran before
    every application of unknown size (it comes first, in branches and loops that enclose theirs), the
    known size is the module's; where none is known, the size is still one, which a trace shows. Anything
    else that differs disagrees (never taken from a trace, which sees one config): two known sizes, or a
    known one on another path (``if flag: norm(x)`` / ``else: norm(h)`` may each be the only one to run).
    Two known sizes agree with the first where it surely runs first: any other size fails there."""
    feats = [f for f, _ in applied]
    if all(f == feats[0] for f in feats):
        return feats[0]
    if len({f.rankless() for f in feats}) == 1:  # one size, read from values of several ranks
        return feats[0].rankless()
    known = [i for i, f in enumerate(feats) if f.kind in SIZED]
    if not any(map(_disagreeing, feats)):
        if not known:  # each size unknown here: what the module has is still one size, a trace's
            candidates = {f.candidate for f in feats}
            return Feat(
                "unknown",
                reason="applications of sizes unknown statically",
                candidate=(candidates.pop() if len(candidates) == 1 else None),
            )
        first, path = known[0], applied[known[0]][1]
        if len({feats[i] for i in known}) == 1 and all(
            i > first and p[: len(path)] == path for i, (f, p) in enumerate(applied) if f.kind not in SIZED
        ):
            return feats[first]
        if first == 0 and all(p[: len(path)] == path for _, p in applied[1:]):
            # the first application runs before every other whenever they run, and its size is known:
            # Linen builds the parameters from it, and any later size must match it to run at all
            # (`shared(x)` then `shared(relu(shared(x)))`: in_features, which must equal the features)
            return feats[0]
    return Feat.unknown(DISAGREEING + " two apply it to inputs of different sizes")


def _disagreeing(feat: Feat) -> bool:
    return feat.kind == "unknown" and feat.reason.startswith(DISAGREEING)


def agreeing_args(seen: tuple[Feat, ...] | None, args: tuple[Feat, ...]) -> tuple[Feat, ...]:
    """The sizes of the arguments every application of one layer passes: an argument another
    application (another iteration of a loop) passes at another size becomes unknown, as one module
    has one size per input."""
    if seen is None or seen == args or len(seen) != len(args):
        return args if seen is None else seen
    return tuple(
        a
        if a == b
        else a.rankless()
        if a.rankless() == b.rankless()
        else Feat.unknown(DISAGREEING + " two apply it to inputs of different sizes")
        for a, b in zip(seen, args)
    )


def helper_arguments(call: cst.Call, args: list[Feat], params: list[str]) -> dict[str, Feat]:
    """What each parameter of a helper method holds when ``call`` (its arguments' values ``args``, in
    order) calls it: positional arguments in order, keywords by name; a parameter left to its default,
    or any after an unpacked argument, is unknown."""
    values = {p: Feat.unknown("a helper's parameter the call does not pass") for p in params}
    if any(a.star for a in call.args):
        return values
    positional = [f for a, f in zip(call.args, args) if a.keyword is None]
    values.update(zip(params, positional))
    for arg, feat in zip(call.args, args):
        if arg.keyword is not None and arg.keyword.value in values:
            values[arg.keyword.value] = feat
    return values
