"""Local partials of ``setup()``: ``dense = partial(nn.Dense, use_bias=False)``, then ``self.q = dense(4)``.

Each ``self.<attr> = dense(...)`` builds one submodule, exactly as ``nn.Dense(4, use_bias=False)``
written there would (``functools.partial``: the partial's positional arguments first, the call's
keywords over the partial's). It is planned as that constructor, built where it is written, and the
partial's statement is dropped. Only a partial every read of which is such an assignment (at the top
of ``setup()`` or under its ``if`` / ``match``) is followed; any other use (a list, a loop, a handed
value) leaves the partial as it is, with the findings a Linen constructor left in ``__init__`` gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_names, literal_name, self_attr
from linen2nnx.migrate.factories import PartialLocal

if TYPE_CHECKING:
    from linen2nnx.migrate.local_planning import LocalPlanner
    from linen2nnx.migrate.site_planning import SitePlanner
    from linen2nnx.migrate.sites import ClassPlan


def setup_assignments(body: Any) -> Iterator[tuple[str, cst.Call]]:
    """``self.<attr> = <call>`` statements of a ``setup()`` block, its ``if`` branches and ``match``
    cases (the statements setup planning reads), as (attr, call)."""
    for stmt in body:
        if isinstance(stmt, cst.If):
            yield from setup_assignments(stmt.body.body)
            orelse = stmt.orelse
            while orelse is not None:
                yield from setup_assignments(orelse.body.body)
                orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        elif isinstance(stmt, cst.Match):
            for case in stmt.cases:
                yield from setup_assignments(case.body.body)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    for attr, value in attribute_values(small.targets[0].target, small.value):
                        if isinstance(value, cst.Call):
                            yield attr, value


def attribute_values(
    target: cst.BaseExpression, value: cst.BaseExpression
) -> list[tuple[str, cst.BaseExpression]]:
    """``(attr, value)`` of ``self.attr = value``, and of each pair of ``self.q, self.k = dense(), dense()``
    (a tuple display of as many values, none starred: each attribute gets its own)."""
    attr = self_attr(target)
    if attr is not None:
        return [(attr, value)]
    if not (isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)):
        return []
    attrs = [self_attr(t.value) if isinstance(t, cst.Element) else None for t in target.elements]
    if len(attrs) != len(value.elements) or None in attrs or len(set(attrs)) != len(attrs):
        return []
    if any(not isinstance(v, cst.Element) for v in value.elements):
        return []
    return list(zip(attrs, [v.value for v in value.elements]))  # type: ignore[arg-type]


def setup_partials(
    locals_planner: LocalPlanner, plan: ClassPlan, fn: cst.FunctionDef
) -> dict[str, PartialLocal]:
    """The partial locals of ``setup()`` (of a built-in layer or a class of the run) each read of which
    builds a submodule assigned to an attribute."""
    found = {
        name: local
        for name, local in locals_planner.partial_locals(plan, fn, assigned_names(fn)).items()
        if type(local) is PartialLocal
    }
    built: dict[str, int] = {}
    for _, call in setup_assignments(fn.body.body):
        if isinstance(call.func, cst.Name) and call.func.value in found:
            built[call.func.value] = built.get(call.func.value, 0) + 1
    return {name: local for name, local in found.items() if local.uses and built.get(name) == local.uses}


def add_partial_site(
    site_planner: SitePlanner, plan: ClassPlan, attr: str, call: cst.Call, local: PartialLocal
) -> None:
    """The site of ``self.<attr> = <local>(...)``: planned as the constructor it stands for, keyed by
    the call the rewrite meets (which builds it from the rewritten partial and call)."""
    target = local.merged(call)
    literal = literal_name(target)
    site = site_planner.add_site(
        plan, target, attr=attr, linen_name=literal if literal is not None else attr, hoisted=False
    )
    plan.sites.pop(target)
    site.ctor, site.factory = call, local
    plan.sites[call] = site
