"""Names that hold a library function under another name, for the feature-size dataflow.

Code often shortens a function it calls many times: ``wlc = nn.with_logical_constraint`` inside a
method, or ``with_sharding_constraint = nn_partitioning.with_sharding_constraint`` at module level. A
call of such a name is a call of the function itself, so the dataflow may read what the function does
to the last axis. Only a name its scope binds exactly once, by a plain ``name = dotted.name``
assignment, counts: every read of it then sees that function (or raises, before the binding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext


def qualnames_through_alias(ctx: FileContext, node: cst.CSTNode) -> set[str]:
    """What ``node`` may name (see :meth:`FileContext.qualnames`), and, for a name bound once to a
    dotted name, also what that dotted name names."""
    found = ctx.qualnames(node)
    if type(node) is not cst.Name:
        return found
    value = _sole_dotted_value(ctx, node)
    if value is None:
        return found
    return found | ctx.qualnames(value)


def _sole_dotted_value(ctx: FileContext, node: cst.Name) -> cst.BaseExpression | None:
    """The dotted name ``node``'s one binding assigns (``wlc = nn.with_logical_constraint``)."""
    value = sole_assigned_value(ctx, node)
    return value if type(value) in (cst.Name, cst.Attribute) and value is not node else None


def sole_binding(ctx: FileContext, node: cst.Name) -> cst.CSTNode | None:
    """The one node that binds the name ``node`` reads (see :meth:`NameResolver.sole_binding`)."""
    resolver = ctx.state.resolver
    return None if resolver is None else resolver.sole_binding(node)


def assigned_values(ctx: FileContext, node: cst.Name) -> list[cst.BaseExpression] | None:
    """The values the name ``node`` reads may hold, when every binding its scope makes is a plain
    ``name = value`` (``act = nn.relu`` in one branch, ``act = nn.tanh`` in the other); None when one
    binding is anything else (a parameter, a loop target, an import, ``+=``, a tuple target)."""
    resolver = ctx.state.resolver
    targets = None if resolver is None else resolver.bindings_of(node)
    if not targets:
        return None
    values = []
    for target in targets:
        holder = ctx.parent_of(target) if type(target) is cst.Name else None
        assign = ctx.parent_of(holder) if type(holder) is cst.AssignTarget else None
        if type(assign) is not cst.Assign or len(assign.targets) != 1:
            return None
        values.append(assign.value)
    return values


MUTABLE_DISPLAYS = (cst.List, cst.ListComp, cst.Dict, cst.DictComp, cst.Set, cst.SetComp)


def sole_assigned_value(ctx: FileContext, node: cst.Name) -> cst.BaseExpression | None:
    """The value a plain ``name = value`` assigns, when that is the only binding of the name ``node``
    reads (so every read sees that value); None otherwise."""
    target = sole_binding(ctx, node)
    if type(target) is not cst.Name:
        return None
    holder = ctx.parent_of(target)
    assign = ctx.parent_of(holder) if type(holder) is cst.AssignTarget else None
    if type(assign) is not cst.Assign or len(assign.targets) != 1:
        return None
    value = assign.value
    if isinstance(value, MUTABLE_DISPLAYS) or (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value in ("list", "dict", "set")
    ):
        return None  # bound once, but changed in place (`reps[-1] = 3`, `pad.append(...)`) as often as not
    return value
