"""Tests for a Linen metadata box (``isinstance(v, nn.LogicallyPartitioned)``) that only strip it.

NNX values are never boxed, so such a test is False on NNX state. Where its True branch only takes the
value out of the box and its False branch leaves the value as it is, the code computes the same on
boxed values (Linen's) and on plain ones (NNX's): it is exact as written and stays, with a
``converted`` note instead of a finding. The forms proven here (MaxText's pipeline and its tree
helpers write them):

- ``v.unbox() if isinstance(v, Box) else v`` (or ``v.value`` / ``getattr(v, "value")``): unbox or
  identity;
- ``is_leaf=lambda v: isinstance(v, Box)`` of a ``jax.tree.map(f, tree, ...)`` whose ``f`` is unbox or
  identity (a lambda of the first form, or a function of the same block that returns one): on a tree
  with no box the predicate is False everywhere, as if it were absent, and ``f`` is the identity;
- ``def is_box(x): return isinstance(x, Box)``, every use of which (in the block that defines it) is
  one of the two above: ``x.value if is_box(x) else x``, or ``is_leaf=is_box`` of such a tree map.

A test whose branches decide more (``leaf.names``, ``x.value.partitions``, a different shape) is outside
these forms and keeps its finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.api_findings import unbox_if_boxed
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import name_reads
from linen2nnx.migrate.linen_api import BOX_TYPES, UNBOX_FUNCTIONS
from linen2nnx.migrate.rules import PART_004

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

TREE_MAPS = frozenset({"jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map"})


def strips_box_only(ctx: FileContext, box: cst.Attribute) -> bool:
    """``box`` (a Linen box class) is tested only to take values out of the box (see the module
    docstring), so the code is exact on NNX values and stays as written."""
    if unbox_if_boxed(box, ctx.parent_of):
        return True
    test = _isinstance_of_name(ctx, box)
    if test is None:
        return False
    name = test.args[0].value.value  # type: ignore[attr-defined]
    parent = ctx.parent_of(test)
    if isinstance(parent, cst.IfExp) and parent.test is test:
        return _unbox_or_identity(parent, name)
    if isinstance(parent, cst.Lambda) and parent.body is test and _one_param(parent.params) == name:
        return _leaf_of_unboxing_map(ctx, parent)
    if isinstance(parent, cst.Return) and parent.value is test:
        fn = _function_of_return(ctx, parent)
        return fn is not None and _one_param(fn.params) == name and _predicate_uses_exact(ctx, fn)
    return False


def unboxes_its_argument(ctx: FileContext, fn: cst.FunctionDef) -> bool:
    """``fn`` is ``def f(tree): return jax.tree.map(g, tree, ...)`` (a docstring and local functions
    aside), ``g`` unbox or identity: on a tree with no box it gives the tree back, so ``f(x)`` is ``x``
    in NNX."""
    param = _one_param(fn.params)
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    statements = [s for s in body if not _is_docstring(s)]
    if param is None or fn.decorators or not statements:
        return False
    if not all(isinstance(s, cst.FunctionDef) for s in statements[:-1]):
        return False
    last = statements[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1):
        return False
    ret = last.body[0]
    call = ret.value if isinstance(ret, cst.Return) else None
    if not (isinstance(call, cst.Call) and ctx.qualnames(call.func) & TREE_MAPS):
        return False
    positional = [a for a in call.args if a.keyword is None]
    keywords = [a.keyword.value for a in call.args if a.keyword is not None]
    if len(positional) != 2 or any(a.star for a in call.args) or keywords not in ([], ["is_leaf"]):
        return False
    return _is_name(positional[1].value, param) and _unboxing_function(ctx, call, positional[0].value, None)


def _isinstance_of_name(ctx: FileContext, box: cst.Attribute) -> cst.Call | None:
    """The ``isinstance(name, box)`` call whose class is ``box``, with a plain name as its value."""
    arg = ctx.parent_of(box)
    call = ctx.parent_of(arg) if isinstance(arg, cst.Arg) else None
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Name)
        and call.func.value == "isinstance"
        and len(call.args) == 2
        and call.args[1] is arg
        and not any(a.keyword or a.star for a in call.args)
        and isinstance(call.args[0].value, cst.Name)
    ):
        return None
    return call


def _one_param(params: cst.Parameters) -> str | None:
    """The name of the only parameter (no default, no star, no keyword-only), else None."""
    if (
        len(params.params) != 1
        or params.posonly_params
        or params.kwonly_params
        or not isinstance(params.star_arg, cst.MaybeSentinel)
        or params.star_kwarg is not None
        or params.params[0].default is not None
    ):
        return None
    return params.params[0].name.value


def _unbox_or_identity(expr: cst.IfExp, name: str, predicate: str | None = None) -> bool:
    """``name.unbox() / name.value / getattr(name, "value") if <test> else name``, the test being the
    ``isinstance`` already checked (``predicate`` None) or ``predicate(name)``."""
    if predicate is not None and not _calls_with_name(expr.test, predicate, name):
        return False
    return _is_name(expr.orelse, name) and _takes_value_out(expr.body, name)


def _takes_value_out(expr: cst.BaseExpression, name: str) -> bool:
    if isinstance(expr, cst.Attribute):
        return expr.attr.value == "value" and _is_name(expr.value, name)
    if not isinstance(expr, cst.Call):
        return False
    if isinstance(expr.func, cst.Attribute):  # name.unbox()
        return not expr.args and expr.func.attr.value == "unbox" and _is_name(expr.func.value, name)
    return (  # getattr(name, "value")
        isinstance(expr.func, cst.Name)
        and expr.func.value == "getattr"
        and len(expr.args) == 2
        and not any(a.keyword or a.star for a in expr.args)
        and _is_name(expr.args[0].value, name)
        and isinstance(expr.args[1].value, cst.SimpleString)
        and expr.args[1].value.evaluated_value == "value"
    )


def _is_name(expr: cst.BaseExpression, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _calls_with_name(expr: cst.BaseExpression, func: str, name: str) -> bool:
    """``func(name)``."""
    return (
        isinstance(expr, cst.Call)
        and _is_name(expr.func, func)
        and len(expr.args) == 1
        and not expr.args[0].keyword
        and not expr.args[0].star
        and _is_name(expr.args[0].value, name)
    )


def _leaf_of_unboxing_map(ctx: FileContext, leaf: cst.BaseExpression, predicate: str | None = None) -> bool:
    """``leaf`` is the ``is_leaf=`` of ``jax.tree.map(f, tree, is_leaf=leaf)`` whose ``f`` is unbox or
    identity (tested with ``isinstance`` of a box, or with ``predicate``)."""
    arg = ctx.parent_of(leaf)
    call = ctx.parent_of(arg) if isinstance(arg, cst.Arg) else None
    if not (
        isinstance(arg, cst.Arg)
        and arg.keyword is not None
        and arg.keyword.value == "is_leaf"
        and isinstance(call, cst.Call)
        and ctx.qualnames(call.func) & TREE_MAPS
    ):
        return False
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) != 2 or any(a.star for a in call.args) or len(call.args) != 3:
        return False
    return _unboxing_function(ctx, call, positional[0].value, predicate)


def _unboxing_function(
    ctx: FileContext, call: cst.Call, fn: cst.BaseExpression, predicate: str | None
) -> bool:
    """``fn`` is a lambda, or a function defined once in ``call``'s block, that returns unbox or
    identity of its one parameter."""
    if isinstance(fn, cst.Lambda):
        param = _one_param(fn.params)
        return (
            param is not None
            and isinstance(fn.body, cst.IfExp)
            and _box_test_unbox(ctx, fn.body, param, predicate)
        )
    if not isinstance(fn, cst.Name):
        return False
    block = _block_of(ctx, call)
    defs = [s for s in block if isinstance(s, cst.FunctionDef) and s.name.value == fn.value] if block else []
    if len(defs) != 1 or defs[0].decorators or _bindings(block, fn.value) != 1:
        return False
    param = _one_param(defs[0].params)
    value = _single_return(defs[0])
    return (
        param is not None and isinstance(value, cst.IfExp) and _box_test_unbox(ctx, value, param, predicate)
    )


def _box_test_unbox(ctx: FileContext, expr: cst.IfExp, name: str, predicate: str | None) -> bool:
    """``expr`` is unbox or identity of ``name``, its test ``isinstance(name, <a Linen box>)`` or
    ``predicate(name)``."""
    if predicate is not None and _unbox_or_identity(expr, name, predicate):
        return True
    test = expr.test
    if not (
        isinstance(test, cst.Call)
        and _is_name(test.func, "isinstance")
        and len(test.args) == 2
        and not any(a.keyword or a.star for a in test.args)
        and _is_name(test.args[0].value, name)
        and _is_box(ctx, test.args[1].value)
    ):
        return False
    return _unbox_or_identity(expr, name)


def _is_box(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    return any(
        q.removeprefix("flax.linen.") in BOX_TYPES for q in ctx.qualnames(expr) if q.startswith("flax.linen.")
    )


def _function_of_return(ctx: FileContext, ret: cst.Return) -> cst.FunctionDef | None:
    """The function whose whole body is ``return <ret.value>`` (a docstring aside)."""
    line = ctx.parent_of(ret)
    block = ctx.parent_of(line) if isinstance(line, cst.SimpleStatementLine) else None
    fn = ctx.parent_of(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(fn, cst.FunctionDef) or fn.decorators or _single_return(fn) is not ret.value:
        return None
    return fn


def _single_return(fn: cst.FunctionDef) -> cst.BaseExpression | None:
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    statements = [s for s in body if not _is_docstring(s)]
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        return None
    small = statements[0].body
    if len(small) != 1 or not isinstance(small[0], cst.Return):
        return None
    return small[0].value


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString)
    )


def _block_of(ctx: FileContext, node: cst.CSTNode) -> tuple[cst.BaseStatement, ...] | None:
    """The statements of the function body (or module) that holds ``node`` directly."""
    cur = ctx.parent_of(node)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module, cst.ClassDef, cst.Lambda)):
        cur = ctx.parent_of(cur)
    if isinstance(cur, cst.Module):
        return tuple(cur.body)
    if isinstance(cur, cst.FunctionDef) and isinstance(cur.body, cst.IndentedBlock):
        return tuple(cur.body.body)
    return None


def _predicate_uses_exact(ctx: FileContext, fn: cst.FunctionDef) -> bool:
    """Every read of the predicate ``fn`` in the block that defines it is the test of unbox or
    identity, or the ``is_leaf=`` of a tree map of unbox or identity; ``fn`` is bound there once."""
    block = _block_of(ctx, fn)
    name = fn.name.value
    if block is None or fn not in block or _bindings(block, name) != 1:
        return False
    reads = [n for s in block for n in name_reads(s, name) if n is not fn.name]
    return bool(reads) and all(_exact_predicate_use(ctx, n, name) for n in reads)


def _exact_predicate_use(ctx: FileContext, read: cst.Name, predicate: str) -> bool:
    parent = ctx.parent_of(read)
    if isinstance(parent, cst.Arg):
        return _leaf_of_unboxing_map(ctx, read, predicate)
    if isinstance(parent, cst.Call) and parent.func is read:
        test = ctx.parent_of(parent)
        if isinstance(test, cst.IfExp) and test.test is parent and len(parent.args) == 1:
            arg = parent.args[0].value
            return isinstance(arg, cst.Name) and _unbox_or_identity(test, arg.value, predicate)
    return False


def _bindings(block: tuple[cst.BaseStatement, ...], name: str) -> int:
    """How often ``name`` is bound in ``block`` (a def, an assignment or any other target), nested
    scopes included: a second binding anywhere makes the reads ambiguous."""
    count = 0

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, n: cst.FunctionDef) -> None:
            nonlocal count
            count += n.name.value == name
            count += any(p.name.value == name for p in _all_params(n.params))

        def visit_Lambda(self, n: cst.Lambda) -> None:
            nonlocal count
            count += any(p.name.value == name for p in _all_params(n.params))

        def visit_ClassDef(self, n: cst.ClassDef) -> None:
            nonlocal count
            count += n.name.value == name

        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_For(self, n: cst.For) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AsName(self, n: cst.AsName) -> None:
            nonlocal count
            count += len(name_reads(n.name, name))

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_ImportAlias(self, n: cst.ImportAlias) -> None:
            nonlocal count
            bound = n.asname.name if n.asname is not None else n.name
            count += isinstance(bound, cst.Name) and bound.value == name

        def visit_Global(self, n: cst.Global) -> None:
            nonlocal count
            count += 2 * any(item.name.value == name for item in n.names)

        def visit_Nonlocal(self, n: cst.Nonlocal) -> None:
            nonlocal count
            count += 2 * any(item.name.value == name for item in n.names)

    for statement in block:
        statement.visit(V())
    return count


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    found = [*params.posonly_params, *params.params, *params.kwonly_params]
    if isinstance(params.star_arg, cst.Param):
        found.append(params.star_arg)
    if params.star_kwarg is not None:
        found.append(params.star_kwarg)
    return found


def is_unbox_helper(ctx: FileContext, fn: cst.FunctionDef) -> bool:
    """A one-argument function whose body unboxes Linen partition metadata (MaxText's
    ``unbox_logicallypartioned``, lm1b's ``unbox_logicallypartioned_trainstate``): a tree map of
    unbox-or-identity over its argument (``box_tests.unboxes_its_argument``), so it gives a tree
    with no box back; the boxes' names (marked handled here) need no other finding."""
    params = fn.params.params
    if (
        len(params) != 1
        or fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
        or fn.params.kwonly_params
    ):
        return False
    boxes: list[cst.Attribute] = []
    unboxes = False

    class V(FastVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            nonlocal unboxes
            short = {
                q.removeprefix("flax.linen.") for q in ctx.qualnames(node) if q.startswith("flax.linen.")
            }
            if short & BOX_TYPES:
                boxes.append(node)
            if node.attr.value == "unbox" or short & UNBOX_FUNCTIONS:
                unboxes = True

    V().walk(fn)
    if boxes and unboxes and unboxes_its_argument(ctx, fn):
        ctx.state.handled.update(boxes)
        ctx.report(
            PART_004,
            fn,
            f"{fn.name.value}() only unboxes Linen partition metadata: removable "
            "(NNX values are never boxed); its calls become their argument",
        )
        return True
    return False
