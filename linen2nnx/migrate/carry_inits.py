"""``initialize_carry`` of an RNN cell: Linen's ``(rng, input_shape)``, NNX's ``(input_shape, rngs)``.

A detached cell built only for its carry (``nn.OptimizedLSTMCell(h, parent=None).initialize_carry(rng,
shape)``) is the class's own cell's carry when that cell has the same arguments; a cell the class builds
(``cell = nn.LSTMCell(4)``, ``self.cell`` of ``setup()``, a cell class of the run) is asked directly.
Either way the call becomes ``self.<cell>.initialize_carry(shape, rngs=nnx.Rngs(carry=rng))`` when the
carry does not depend on the key (the default zero ``carry_init``: NNX draws keys differently); else a
finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import bind_args, code, self_attr
from linen2nnx.migrate.rules import API_002
from linen2nnx.migrate.sites import ClassPlan, Site

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext


def plan_carry_inits(ctx: FileContext, plan: ClassPlan, fn: cst.FunctionDef) -> None:
    """``plan.carry_inits``: each ``initialize_carry(rng, shape)`` call of ``fn`` on a detached cell
    or on a cell the class builds, with the site of the class's cell it asks."""
    for node in calls_in(fn):  # in source order, as a visitor meets them
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "initialize_carry"):
            continue
        if isinstance(func.value, cst.Call):
            _plan_detached(ctx, plan, node, func.value)
            continue
        cell = _built_cell(plan, func.value)
        if cell is not None:
            _plan_bound(ctx, plan, node, cell)


def _built_cell(plan: ClassPlan, value: cst.BaseExpression) -> Site | None:
    """The cell site ``value`` names: a local bound to it, or its ``self.<attr>``; None otherwise."""
    if isinstance(value, cst.Name):
        site = plan.local_sites.get(value.value)
    else:
        attr = self_attr(value)
        site = next((s for s in plan.sites.values() if attr is not None and s.attr == attr), None)
    if (
        site is None
        or site.kind not in ("layer", "module")
        or site.container is not None
        or site.loop is not None
    ):
        return None
    is_cell = (site.rule is not None and site.rule.carry_init) or (
        site.user is not None and site.user.is_cell
    )
    return site if is_cell else None


def _plan_bound(ctx: FileContext, plan: ClassPlan, node: cst.Call, cell: Site) -> None:
    """``cell.initialize_carry(rng, shape)`` of a cell the class builds."""
    positional = [a for a in node.args if a.keyword is None and not a.star]
    why = ""
    if len(positional) != 2 or len(node.args) != 2:
        why = "initialize_carry is not called as (rng, input_shape)"
    elif "carry_init" in cell.args:
        why = "its carry_init draws from the key, which NNX splits differently"
    if why:
        ctx.report(
            API_002,
            node,
            f"{code(node.func)}: {why}",
            "call initialize_carry(input_shape, rngs=...) on the NNX cell by hand",
        )
        return
    ctx.state.handled.add(node.func)
    plan.carry_inits[node] = cell


def _plan_detached(ctx: FileContext, plan: ClassPlan, node: cst.Call, ctor: cst.Call) -> None:
    """One ``<cell>(...).initialize_carry(...)`` call ``node`` of a cell constructor ``ctor``."""
    func = node.func
    rule = ctx.layer_rule_of(ctor.func)
    if rule is None or not rule.carry_init or ctor in plan.sites:
        return
    ctx.state.handled.update({ctor.func, func})
    args = {k: code(a.value) for k, a in bind_args(rule.linen_arg_order(), ctor)[0].items()}
    parent = args.pop("parent", None)
    same = [
        s
        for s in plan.sites.values()
        if s.rule is rule and s.kind == "layer" and {k: code(a.value) for k, a in s.args.items()} == args
    ]
    positional = [a for a in node.args if a.keyword is None and not a.star]
    why = ""
    if parent != "None":
        why = "a cell bound to this module (no parent=None) would be a submodule"
    elif "carry_init" in args:
        why = "its carry_init draws from the key, which NNX splits differently"
    elif len(same) != 1:
        why = (
            f"no nn.{rule.linen} of this class has the same arguments"
            if not same
            else f"{len(same)} nn.{rule.linen}s of this class have the same arguments"
        )
    elif len(positional) != 2 or len(node.args) != 2:
        why = "initialize_carry is not called as (rng, input_shape)"
    if why:
        ctx.report(
            API_002,
            node,
            f"nn.{rule.linen}(...).initialize_carry: {why}",
            f"call initialize_carry(input_shape, rngs=...) on an nnx.{rule.nnx} by hand",
        )
        return
    plan.carry_inits[node] = same[0]
