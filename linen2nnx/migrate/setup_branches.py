"""A setup() attribute that two branches build: what applying it gives.

``setup()`` may build one attribute in the branches of a config test, as statements
(``if self.wide: self.proj = nn.Dense(2 * n)`` / ``else: self.proj = nn.Dense(n)``) or as a
conditional expression (``self.proj = nn.Dense(2 * n) if self.wide else nn.Dense(n)``). Every such
construction is a site of its own, all under the attribute's name. Applying the attribute gives the
output of whichever branch ran: where the two outputs differ, the size after the call is a ``choice``
on the test (``2 * n if self.wide else n``), which ``__init__`` can evaluate as ``setup()`` did --
when the test reads the class's fields only and the two sites sit directly in its two branches.
Anything else (three sites, a test on a local of ``setup()``, an ``elif``) leaves the size unknown,
never the last branch's size.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import config_test, self_attr
from linen2nnx.migrate.dataflow_types import Feat, LayerInfo
from linen2nnx.migrate.setup_partials import attribute_values
from linen2nnx.migrate.tuple_flow import merge_value

BRANCHES_DIFFER = "differs between the setup() branches that build it"


def branch_test(
    ctx: FileContext, then_value: cst.BaseExpression, else_value: cst.BaseExpression
) -> str | None:
    """The test of the ``if`` statement or conditional expression whose then branch binds
    ``then_value`` and whose ``else`` branch binds ``else_value``, each directly (no other test or loop
    between them); None when there is none or when the test reads anything but ``self``."""
    then_owner, then_child = _branch(ctx, then_value)
    else_owner, else_child = _branch(ctx, else_value)
    if then_owner is None or then_owner is not else_owner:
        return None
    if isinstance(then_owner, cst.If):
        if then_child is not then_owner.body or not isinstance(then_owner.orelse, cst.Else):
            return None
        if else_child is not then_owner.orelse:
            return None
    elif not isinstance(then_owner, cst.IfExp) or (then_child, else_child) != (
        then_owner.body,
        then_owner.orelse,
    ):
        return None
    test = then_owner.test
    return config_test(test)


def _branch(ctx: FileContext, value: cst.BaseExpression) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """The nearest ``if`` / ``for`` / ``while`` / conditional expression around ``value`` and the child
    of it that holds ``value`` (a ``for`` or ``while`` gives None: bound in a loop)."""
    prev: cst.CSTNode = value
    cur = ctx.parent_of(value)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.If, cst.IfExp, cst.For, cst.While)):
        prev, cur = cur, ctx.parent_of(cur)
    if not isinstance(cur, (cst.If, cst.IfExp)):
        return None, None
    return cur, prev


def setup_alternatives(setup: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """Every value ``setup()`` binds each ``self.<attr>`` to, in source order, a conditional expression
    split into its branches (``Pooler(...) if self.pool else None`` gives both): one walk for all."""
    found: dict[str, list[cst.BaseExpression]] = {}

    class Assigns(FastVisitor):
        def visit_Assign(self, node: cst.Assign) -> bool:
            for target in node.targets:
                for attr, value in attribute_values(target.target, node.value):
                    found.setdefault(attr, []).extend(_branches(value))
            return False

        def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:  # `self.act: Callable = nn.relu`
            attr = self_attr(node.target)
            if node.value is not None and attr is not None:
                found.setdefault(attr, []).extend(_branches(node.value))
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is setup  # a nested function binds nothing of setup()'s

    Assigns().walk(setup)
    return found


def _branches(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(value, cst.IfExp):
        return [*_branches(value.body), *_branches(value.orelse)]
    return [value]


def setup_branch_info(
    ctx: FileContext, attr: str, alternatives: list[tuple[cst.BaseExpression, LayerInfo | None]]
) -> LayerInfo:
    """One application of ``self.<attr>``, which setup() may bind to each of ``alternatives`` (each value
    with what applying it gives; None for ``None``, which cannot be applied)."""
    applicable = [(node, info) for node, info in alternatives if info is not None]
    if not applicable:  # only ever None: applying it fails in Linen too
        return LayerInfo(attr, None, out_unknown=True)
    first_info = applicable[0][1]
    outputs_agree = first_info.out_fn is None and all(
        (i.out_expr, i.out_unknown, i.out_fn) == (first_info.out_expr, first_info.out_unknown, None)
        for _, i in applicable
    )
    if outputs_agree:
        return first_info
    test = branch_test(ctx, applicable[0][0], applicable[1][0]) if len(applicable) == 2 else None
    unknown = f"output of {attr}"

    def out(first: Feat) -> Feat:
        if test is None:
            return Feat.unknown(BRANCHES_DIFFER)
        then_out, else_out = (info.output(first, unknown) for _, info in applicable)
        return merge_value(then_out, else_out, test)

    return dataclasses.replace(first_info, out_expr=None, out_unknown=False, out_fn=out)
