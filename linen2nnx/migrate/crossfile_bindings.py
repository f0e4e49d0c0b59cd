"""Factory fields of another file's class bound to another class in this file.

``class Base(nn.Module): block_cls: Any = blocks.Small`` in one file, then ``class BigNet(Base):
block_cls: Any = Big`` or ``functools.partial(Base, block_cls=Big)`` in another: Base's file plans its
``self.block_cls(...)`` build from the bindings it sees (``factory_fields.FieldBindings`` reads one
file), so its name map records ``Small_0`` only and the layer after the block is sized from Small's
output. Nothing here can fix that file any more (it is written), so each such binding is a located
L2N-MOD-008: never a clean report for a map and sizes that follow only the default.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules import MOD_008

_HINT = (
    "bind the class in the base's own file (a subclass or partial there), or check the NNX class and its "
    "name map entry by hand: both follow the field's default only"
)


def factory_fields(ctx: Any, plan: Any) -> frozenset[str]:
    """The fields of ``plan`` its build calls as module factories (``self.block_cls(...)(x)``) whose
    bindings this file resolved: what another file must not bind to another class."""
    if ctx.state.bindings is None:  # no `self.<field>(...)` build asked for them
        return frozenset()
    return frozenset(f for f in plan.field_names if ctx.field_factory(plan, f) is not None)


def _factory_summary(ctx: Any, node: cst.BaseExpression) -> Any:
    summary = ctx._from_other_file(node, ctx.state.external)
    return summary if summary is not None and summary.factory_fields else None


def _default_of(summary: Any, name: str) -> str | None:
    return next((f.default for f in summary.fields if f.name == name), None)


def report_overridden_defaults(ctx: Any, node: cst.ClassDef) -> None:
    """A subclass's default of a factory field of a base another file of the run defines."""
    for base in node.bases:
        summary = _factory_summary(ctx, base.value)
        if summary is None:
            continue
        for stmt in node.body.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if not (isinstance(small, cst.AnnAssign | cst.Assign) and small.value is not None):
                    continue
                targets = (
                    [small.target] if isinstance(small, cst.AnnAssign) else [t.target for t in small.targets]
                )
                for target in targets:
                    if isinstance(target, cst.Name) and target.value in summary.factory_fields:
                        _report(ctx, small, summary, target.value, small.value)


def report_crossfile_bindings(ctx: Any, tree: cst.Module) -> None:
    """Each binding in ``tree`` of a factory field of a class another file of the run defines."""
    if not any(getattr(s, "factory_fields", ()) for s in ctx.state.external.values()):
        return
    nodes = nodes_of(tree, (cst.Call, cst.ClassDef))  # one walk, in source order
    for node in nodes:
        if isinstance(node, cst.ClassDef):
            report_overridden_defaults(ctx, node)
    report_bound_keywords(ctx, [n for n in nodes if isinstance(n, cst.Call)])


def report_bound_keywords(ctx: Any, found: list[cst.Call]) -> None:
    """``partial(Base, block_cls=Big)`` / ``Base(block_cls=Big)`` of such a base, anywhere in the file."""
    for call in found:
        func, args = call.func, list(call.args)
        if "functools.partial" in ctx.qualnames(func) and args:
            func, args = args[0].value, args[1:]
        if type(func) not in (cst.Name, cst.Attribute):
            continue
        summary = _factory_summary(ctx, func)
        if summary is None:
            continue
        order = [f.name for f in summary.fields if f.init]
        positional = [a for a in args if a.keyword is None and not a.star]
        named = [(order[i], a) for i, a in enumerate(positional) if i < len(order)]
        named += [(a.keyword.value, a) for a in args if a.keyword is not None]
        for name, arg in named:
            if name in summary.factory_fields:
                _report(ctx, arg, summary, name, arg.value)


def _report(ctx: Any, node: cst.CSTNode, summary: Any, field: str, value: cst.BaseExpression) -> None:
    if code(value).strip() == (_default_of(summary, field) or "").strip():
        return  # the default itself, spelled as in the base's file
    ctx.report(
        MOD_008,
        node,
        f"{code(value).strip()} is bound to the module-factory field {field!r} of {summary.name}, which "
        f"another file defines: its NNX build, sizes and name map follow only the bindings of its own file",
        _HINT,
    )
