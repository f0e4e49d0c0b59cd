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

from linen2nnx.migrate.array_functions import numpy_reduction
from linen2nnx.migrate.cst_meta import FastVisitor, inside
from linen2nnx.migrate.linen_api import feature_preserving_functions

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext


def qualnames_through_alias(ctx: FileContext, node: cst.CSTNode) -> set[str]:
    """What ``node`` may name (see :meth:`FileContext.qualnames`), and, for a name bound once to a
    dotted name, also what that dotted name names."""
    found = ctx.qualnames(node)
    if type(node) is not cst.Name:
        return found
    value = _sole_dotted_value(ctx, node)
    if value is not None:
        return found | ctx.qualnames(value)
    return found | _looked_up_qualnames(ctx, node)


def _looked_up_qualnames(ctx: FileContext, node: cst.Name) -> set[str]:
    """What a name bound once to a lookup in a dict display of dotted names may name, when every
    entry acts alike on an array (``fn = {'gap': jnp.mean, 'gmp': jnp.max}[self.classifier]``: each
    reduces the axes it is given): the union of the entries, as a call of any of them reads the same
    way. Empty when the entries differ in kind (a reduction beside a reshape), so no call is read."""
    value = sole_assigned_value(ctx, node)
    table = value.value if type(value) is cst.Subscript else None
    if type(table) is not cst.Dict or not table.elements:
        return set()
    entries = [e.value for e in table.elements if type(e) is cst.DictElement]
    if len(entries) < len(table.elements) or any(type(e) not in (cst.Name, cst.Attribute) for e in entries):
        return set()
    named = [ctx.qualnames(e) for e in entries]
    kinds = {_array_effect(qualnames) for qualnames in named}
    return set().union(*named) if len(kinds) == 1 and None not in kinds else set()


def _array_effect(qualnames: set[str]) -> object:
    """What calling a function named ``qualnames`` does to an array's axes, as far as lookups of
    several functions need to tell: keeps them (an activation), reduces the given axes (a NumPy
    reduction), or, for anything else, exactly that function (so only one same function agrees)."""
    if not qualnames:
        return None
    if qualnames & feature_preserving_functions():
        return "elementwise"
    if all(map(numpy_reduction, qualnames)):
        return "reduction"
    return frozenset(qualnames)


def _sole_dotted_value(ctx: FileContext, node: cst.Name) -> cst.BaseExpression | None:
    """The dotted name ``node``'s one binding assigns (``wlc = nn.with_logical_constraint``)."""
    value = sole_assigned_value(ctx, node)
    return value if type(value) in (cst.Name, cst.Attribute) and value is not node else None


def sole_binding(ctx: FileContext, node: cst.Name) -> cst.CSTNode | None:
    """The one node that binds the name ``node`` reads (see :meth:`NameResolver.sole_binding`)."""
    resolver = ctx.state.resolver
    return None if resolver is None else resolver.sole_binding(node)


def reaching_binding(ctx: FileContext, node: cst.Name) -> cst.CSTNode | None:
    """:func:`sole_binding`, or, for a name its function binds only on top-level lines of its body (ViT
    code unpacks ``n, h, w, c = x.shape`` of the images, then again of the patch embedding), the binding
    on the last of those lines before the line that reads it: straight-line code, so that one reaches
    the read. None when a binding is anywhere else, or the read is in a lambda (it runs later)."""
    sole = sole_binding(ctx, node)
    if sole is not None:
        return sole
    resolver = ctx.state.resolver
    bindings = None if resolver is None else resolver.bindings_of(node)
    fn = ctx.enclosing_function(node)
    if not bindings or None in bindings or fn is None or type(fn.body) is not cst.IndentedBlock:
        return None
    read_line = _top_line(ctx, fn, node)
    lines = [_top_line(ctx, fn, b) for b in bindings]  # type: ignore[arg-type]
    if read_line is None or None in lines:
        return None
    if type(fn.body.body[read_line]) is not cst.SimpleStatementLine:
        return _reaching_in_block(ctx, fn, node, bindings)  # type: ignore[arg-type]
    if any(type(fn.body.body[line]) is not cst.SimpleStatementLine for line in lines):  # type: ignore[index]
        return None
    if read_line in lines:
        return None  # `n, c = h.shape; y = h.reshape(n, 1, c)`: which binding a read on the line sees
    before = [(line, b) for line, b in zip(lines, bindings) if line < read_line]  # type: ignore[operator]
    last = max((line for line, _ in before), default=None)
    reaching = [b for line, b in before if line == last]
    return reaching[0] if len(reaching) == 1 else None


def _reaching_in_block(
    ctx: FileContext, fn: cst.FunctionDef, node: cst.Name, bindings: list[cst.CSTNode]
) -> cst.CSTNode | None:
    """For a read inside a block (an ``if``'s branch): the binding on the nearest line before it in the
    same block, or in a block around it, every statement between them binding the name nowhere. None
    when a compound statement before the read, or a loop / try / with around it, binds it, or no line
    before it does (``if self.transformer: n, h, w, c = x.shape`` ... ``(1, 1, c)`` in that branch)."""
    lines: dict[int, list[cst.CSTNode]] = {}
    for binding in bindings:
        line = _line_of(ctx, binding)
        if line is None:
            return None
        lines.setdefault(id(line), []).append(binding)
    child: cst.CSTNode = node
    cur = ctx.parent_of(node)
    while cur is not None and cur is not fn:
        if type(cur) is cst.Lambda:
            return None
        if not isinstance(cur, (cst.IndentedBlock, cst.If, cst.Else)):
            if any(inside(b, cur, ctx.parent_of) for b in bindings):
                return None  # a loop's earlier pass, a try's body, a with's target: not straight-line
            child, cur = cur, ctx.parent_of(cur)
            continue
        if not isinstance(cur, cst.IndentedBlock):  # another branch of an if does not reach this one
            child, cur = cur, ctx.parent_of(cur)
            continue
        statements = cur.body
        index = next((i for i, stmt in enumerate(statements) if stmt is child), None)
        for stmt in reversed(statements[:index] if index is not None else ()):
            found = lines.get(id(stmt))
            if found is not None:
                return found[0] if len(found) == 1 else None
            if type(stmt) is not cst.SimpleStatementLine and any(
                inside(b, stmt, ctx.parent_of) for b in bindings
            ):
                return None
        child, cur = cur, ctx.parent_of(cur)
    return None


def _line_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode | None:
    cur: cst.CSTNode | None = node
    while cur is not None and type(cur) is not cst.SimpleStatementLine:
        cur = ctx.parent_of(cur)
    return cur


def _top_line(ctx: FileContext, fn: cst.FunctionDef, node: cst.CSTNode) -> int | None:
    """The index in ``fn``'s body of the top-level statement holding ``node``; None past a lambda."""
    child, cur = node, ctx.parent_of(node)
    while cur is not None and cur is not fn.body:
        if type(cur) is cst.Lambda:
            return None
        child, cur = cur, ctx.parent_of(cur)
    if cur is None:
        return None
    return next((i for i, stmt in enumerate(fn.body.body) if stmt is child), None)


def assigned_values(ctx: FileContext, node: cst.Name) -> list[cst.BaseExpression] | None:
    """The values the name ``node`` reads may hold, when every binding its scope makes is a plain
    ``name = value`` (``act = nn.relu`` in one branch, ``act = nn.tanh`` in the other); None when one
    binding is anything else (a parameter, a loop target, an import, ``+=``, a tuple target)."""
    resolver = ctx.state.resolver
    targets = None if resolver is None else resolver.bindings_of(node)
    if not targets:
        return None
    assigns = [plain_assign(ctx, target) for target in targets]
    return None if None in assigns else [a.value for a in assigns]  # type: ignore[union-attr]


def plain_assign(ctx: FileContext, target: cst.CSTNode | None) -> cst.Assign | None:
    """The ``name = value`` statement whose one target is the binding ``target``; None for any other
    binding (a parameter, a loop target, ``a = b = v``, a tuple target, ...)."""
    holder = ctx.parent_of(target) if type(target) is cst.Name else None
    assign = ctx.parent_of(holder) if type(holder) is cst.AssignTarget else None
    return assign if type(assign) is cst.Assign and len(assign.targets) == 1 else None


MUTABLE_DISPLAYS = (cst.List, cst.ListComp, cst.Dict, cst.DictComp, cst.Set, cst.SetComp)


def sole_assigned_value(ctx: FileContext, node: cst.Name) -> cst.BaseExpression | None:
    """The value a plain ``name = value`` assigns, when that is the only binding of the name ``node``
    reads (so every read sees that value); None otherwise."""
    assign = plain_assign(ctx, sole_binding(ctx, node))
    if assign is None:
        return None
    value = assign.value
    if isinstance(value, MUTABLE_DISPLAYS) or (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value in ("list", "dict", "set")
    ):
        return None  # bound once, but changed in place (`reps[-1] = 3`, `pad.append(...)`) as often as not
    return value


def reads_linen(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Does ``node`` read a name or attribute that stands for Flax Linen (``nn``,
    ``nn.initializers.zeros``, a name imported from ``flax.linen``)?"""

    class Reads(FastVisitor):
        found = False

        def visit_Name(self, name: cst.Name) -> None:
            Reads.found = Reads.found or any(q.startswith("flax.linen") for q in ctx.qualnames(name))

        def visit_Attribute(self, attr: cst.Attribute) -> None:
            Reads.found = Reads.found or any(q.startswith("flax.linen") for q in ctx.qualnames(attr))

    Reads().walk(node)
    return Reads.found
