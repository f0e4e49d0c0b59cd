"""The rank of what a class of the file returns, for a caller that knows the rank of its input.

A class's ``out`` (its ``__call__``'s result, sized in its own terms) is computed once, for an input
of unknown rank: so a caller that applies it to a value of rank 3 learns the result's last-axis size,
but not its rank, and a later ``y[:, 0]`` cannot tell whether it indexes the last axis (scenic's ViT:
``x = Encoder(...)(x)`` then ``x[:, 0]``). Here the callee's ``__call__`` is walked once more, with the
caller's rank on its first input (a probe run: nothing is recorded or resolved), and each sized leaf
of the caller's view of the result takes the rank the probe found at the same place. Both runs walk
the same code with the same callbacks; only the input's rank differs, so the leaves correspond by
position; a leaf whose kind differs between them keeps its unknown rank.

Only classes of the file (whose methods the module pass holds), defined once in it with one
``__call__``, are probed. A class of another file answers from its summary: the file that plans it
probes it for a sequence's rank (``SUMMARY_RANKS``; each rank probed walks every class with a sized
result once more, so only a file another file of the run imports does it) and the summary carries
what the probe found (scenic's ViT applies ``attention_layers.Add1DPositionEmbedding`` of another
file in one branch; without it the rank 3 of every branch is lost at the merge). Other ranks of
another file's class stay unknown.
Cells, scanned ``__call__``s (a carry), a ``__call__`` with a decorator other than ``nn.compact`` (a
lift such as ``nn.vmap`` moves axes) and positional-only parameters are not probed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.sites import ClassPlan, ClassSummary, compact_only
from linen2nnx.migrate.tuple_flow import COMPOUND, SIZED

_DEPTH_LIMIT = 4  # classes probing the classes they apply, at most this deep
SUMMARY_RANKS = (3,)  # sequences ([batch, length, features]); each rank probed costs a walk of __call__


def output_at_rank(sizer: Any, plan: ClassPlan, rank: int) -> Feat | None:
    """What ``plan``'s ``__call__`` returns for a first input of ``rank`` axes; None when it cannot
    be walked (a class of another file, a cell, a scanned call, no input, probes nested too deep)."""
    from linen2nnx.migrate.method_flow import MethodFlow

    if plan.known_out_ranks:  # a class of another file: what its own file's probes found
        return plan.known_out_ranks.get(rank)
    memo, active = sizer.state.rank_probes, sizer.state.rank_probes_running
    key = (id(plan), rank)  # the plan: two classes of one name (nested in functions) are two classes
    if key in memo:
        return memo[key][1]
    if len(active) >= _DEPTH_LIMIT or key in active or sizer.state.linen_classes.get(plan.name) is not plan:
        return None  # this time only: a probe further out, or a class planned later, may still ask
    walked = _walked_call(sizer, plan)
    if walked is None:
        memo[key] = (plan, None)  # what the class is does not change: never asked again
        return None
    fn, params = walked
    active.append(key)
    try:
        memo[key] = (plan, MethodFlow(sizer, plan, fn, params, resolve=False).output_at_rank(rank))
    finally:
        active.pop()
    return memo[key][1]


def with_out_ranks(sizer: Any, plan: ClassPlan, summary: ClassSummary) -> ClassSummary:
    """``summary`` carrying what ``plan``'s ``__call__`` returns for inputs of ``SUMMARY_RANKS``, when
    its result is sized and a probe finds a rank (for the files that apply it)."""
    if plan.out is None or plan.out.kind not in (*SIZED, *COMPOUND):
        return summary
    imported = sizer.state.imported_modules  # None: not known (one file's text), so probe
    if imported is not None and sizer.state.module_name not in imported:
        return summary  # no file of the run imports this one: nobody reads the summary
    found = tuple((r, out) for r in SUMMARY_RANKS if (out := output_at_rank(sizer, plan, r)) is not None)
    ranked = tuple((r, out) for r, out in found if _ranked(out))
    return dataclasses.replace(summary, out_ranks=ranked) if ranked else summary


def _ranked(feat: Feat) -> bool:
    """Whether some sized leaf of ``feat`` has a known rank."""
    if feat.kind in COMPOUND:
        return any(_ranked(e) for e in feat.elements)
    return feat.kind in SIZED and bool(feat.rank)


def _walked_call(sizer: Any, plan: ClassPlan) -> tuple[cst.FunctionDef, list[str]] | None:
    """``plan``'s one ``__call__`` and its parameters less ``self``, when a probe may walk it."""
    calls = [m for m in sizer.state.methods.get(plan.name, []) if m.name.value == "__call__"]
    if (
        len(calls) != 1  # several: Python keeps the last, and the planner's methods may be another class's
        or calls[0].params.posonly_params
        or not _defined_once(sizer.state.tree, plan.name)
        or plan.is_cell
        or "__call__" in plan.scanned_methods
        or not compact_only(calls[0], sizer.ctx.qualnames)
    ):
        return None
    params = [p.name.value for p in (*calls[0].params.params, *calls[0].params.kwonly_params)][1:]
    return (calls[0], params) if params else None


def _defined_once(tree: cst.Module, name: str) -> bool:
    """Whether the file defines one class ``name`` (anywhere: a class nested in a function counts)."""
    count, stack = 0, [tree]
    while stack and count < 2:
        cur = stack.pop()
        if isinstance(cur, cst.ClassDef) and cur.name.value == name:
            count += 1
        if isinstance(cur, (cst.Module, cst.BaseSuite, cst.BaseCompoundStatement)):
            stack.extend(syntax_children(cur))
    return count == 1


def with_ranks(seen: Feat, probe: Feat | None) -> Feat:
    """``seen`` (the result in the caller's terms) with the ranks ``probe`` found at the same places."""
    if probe is None:
        return seen
    if seen.kind in COMPOUND:
        if probe.kind != seen.kind or len(probe.elements) != len(seen.elements):
            return seen
        elements = tuple(with_ranks(s, p) for s, p in zip(seen.elements, probe.elements))
        return dataclasses.replace(seen, elements=elements)
    if seen.kind in (*SIZED, "unknown") and not seen.rank and probe.kind in SIZED and probe.rank:
        # an unknown size keeps its rank too: `y + x` of it and a value of that rank keeps the rank
        return dataclasses.replace(seen, rank=probe.rank)
    return seen
