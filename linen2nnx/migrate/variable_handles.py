"""Locals that hold a variable their ``@nn.compact`` method creates: ``count = self.variable(...)``.

Hoisted, the line becomes ``count = self.count`` and ``count.value`` is the NNX variable's value,
spelled ``count[...]`` as every other variable read of the rewrite is (``.value`` is deprecated in
NNX). Only a local bound once, by a top-level line of the method, counts: one bound in a branch, or
again later, may hold something else where it is read.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import file_memo
from linen2nnx.migrate.cst_utils import rebound_names
from linen2nnx.migrate.sites import ClassPlan

_FOUND = file_memo()  # id(method) -> (method, its variable locals)


def compact_variable_locals(plan: ClassPlan, fn: cst.FunctionDef | None) -> frozenset[str]:
    """The locals of ``fn`` (a method of ``plan``'s class, original tree) that hold a variable it creates."""
    if fn is None:
        return frozenset()
    entry = _FOUND.get(id(fn))
    if entry is not None and entry[0] is fn:
        return entry[1]
    ctors = {id(s.ctor) for s in plan.sites.values() if s.kind == "variable" and s.hoisted}
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}
    found = set()
    for stmt in fn.body.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign) and id(small.value) in ctors and len(small.targets) == 1:
            target = small.targets[0].target
            if (
                isinstance(target, cst.Name)
                and target.value not in params
                and not any(
                    target.value in rebound_names(other) for other in fn.body.body if other is not stmt
                )
            ):
                found.add(target.value)
    _FOUND[id(fn)] = (fn, frozenset(found))
    return _FOUND[id(fn)][1]
