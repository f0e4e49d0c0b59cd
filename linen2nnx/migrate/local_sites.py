"""Submodules a method applies through a local: ``dense = nn.Dense(4)`` then ``dense(x)``.

The local stands for the site it holds when it is bound once: in the method's body, in one branch of
an ``if``, or in the body of a loop that alone reads it (the module that iteration builds); or it is
bound in both branches of an ``if``, to a layer in one and to a field in the other
(:class:`~linen2nnx.migrate.sites.BranchLocal`).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import assigned_names, code, name_counts, negated, self_attr, single_assign
from linen2nnx.migrate.handed_modules import built_alone
from linen2nnx.migrate.sites import BranchLocal, ClassPlan


def plan_local_sites(plan: ClassPlan, body: Any, counts: dict[str, int], loop: Any = None) -> None:
    """``dense = nn.Dense(4)`` then ``dense(x)``, ``embed.attend(y)``: the local applies the site; so
    does one bound once in one branch of an ``if``, or in the body of a loop (``block = Block(name=
    f'b_{i}')`` then ``block(x)``) when only that loop reads it, and every iteration applies it (Linen
    creates the parameters of the modules it applies only): the module that iteration builds."""
    for stmt in body:
        assign = single_assign(stmt)
        if assign is not None:
            name, value = assign
            inside = loop is None or (
                name_counts(loop).get(name) == name_counts(plan.compact).get(name)
                and not _conditional_use(loop.body, name)
            )
            if counts.get(name) == 1 and value in plan.sites and inside:
                plan.local_sites[name] = plan.sites[value]
        elif isinstance(stmt, cst.If):
            _plan_branch_local(plan, stmt, counts)
            plan_local_sites(plan, _blocks_of(stmt), counts, loop)
        elif isinstance(stmt, cst.For) and stmt.orelse is None:
            plan_local_sites(plan, _blocks_of(stmt), counts, stmt)


def _plan_branch_local(plan: ClassPlan, stmt: cst.If, counts: dict[str, int]) -> None:
    """``if t: v = nn.Embed(...)`` ``else: v = self.field`` (either order): see :class:`BranchLocal`."""
    if not isinstance(stmt.orelse, cst.Else):
        return

    def single(block: cst.BaseSuite) -> tuple[str, cst.BaseExpression] | None:
        body = block.body if isinstance(block, cst.IndentedBlock) else []
        return single_assign(body[0]) if len(body) == 1 else None

    then, orelse = single(stmt.body), single(stmt.orelse.body)
    if then is None or orelse is None or then[0] != orelse[0] or counts.get(then[0]) != 2:
        return
    test = code(stmt.test)
    for (own, other), own_test in (((then[1], orelse[1]), test), ((orelse[1], then[1]), negated(test))):
        site = plan.sites.get(own) if isinstance(own, cst.Call) else None
        field = self_attr(other)
        if (
            site is not None
            and site.kind == "layer"
            and site.rule is not None
            and site.rule.out_attr
            and site.rule.out_arg in site.args
            and field in plan.field_names
        ):
            plan.branch_sites[then[0]] = BranchLocal(site, own_test, f"self.{field}")


def _blocks_of(stmt: cst.If | cst.For) -> list[cst.BaseStatement]:
    """The statements of a loop's body, or of every branch of an ``if`` / ``elif`` / ``else``."""
    found: list[cst.BaseStatement] = []
    node: Any = stmt
    while node is not None:
        body = node.body
        found += list(body.body) if isinstance(body, cst.IndentedBlock) else []
        node = node.orelse if isinstance(node, cst.If) else None
        if isinstance(node, cst.Else):
            body = node.body
            found += list(body.body) if isinstance(body, cst.IndentedBlock) else []
            node = None
    return found


# constructs under which a read may not happen on every pass
_CONDITIONAL = (
    cst.If,
    cst.While,
    cst.For,
    cst.Try,
    cst.IfExp,
    cst.BooleanOperation,
    cst.ListComp,
    cst.Lambda,
)


def _conditional_use(node: cst.CSTNode, name: str, under: bool = False) -> bool:
    """``name`` is read under ``node`` inside a branch, a nested loop, a conditional expression or the
    like: somewhere an iteration may not reach."""
    if isinstance(node, cst.Name):
        return under and node.value == name
    under = under or isinstance(node, _CONDITIONAL)
    return any(_conditional_use(child, name, under) for child in syntax_children(node))


def held_submodule(plan: ClassPlan, value: cst.BaseExpression) -> str | None:
    """``rel = Biases(..., name='relpos_bias')`` then ``Layer(relative_embedding=rel)`` in ``@nn.compact``:
    the argument in ``__init__``'s terms, ``self.relpos_bias``, when it is a local bound once, by a
    top-level statement of the method, to a submodule built there unconditionally (one module, shared
    by every layer handed it, as in Linen); None otherwise."""
    if plan.compact is None or not isinstance(value, cst.Name):
        return None
    if assigned_names(plan.compact).get(value.value) != 1:
        return None
    for stmt in plan.compact.body.body:
        assign = single_assign(stmt)
        if assign is None or assign[0] != value.value:
            continue
        site = plan.sites.get(assign[1]) if isinstance(assign[1], cst.Call) else None
        if site is not None and site.hoisted and not site.conditions and built_alone(site):
            return f"self.{site.attr}"
    return None
