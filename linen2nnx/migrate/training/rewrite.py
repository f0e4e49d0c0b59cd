"""Applying a plan: one bottom-up transform of the file, then the import edits it needs.

:class:`TrainRewriter` rebuilds each planned node from its already-rewritten children (``Edit.build``),
puts the statements planned before / after / around a statement in place, and adds the inline TODO
markers of the manual findings. When the plan is blocked it only adds the markers.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from linen2nnx.migrate.cst_meta import code_of
from linen2nnx.migrate.imports import (
    drop_unused_imports,
    ensure_nnx_import,
    ensure_plain_import,
    without_unused_module,
)
from linen2nnx.migrate.sites import marker_line, one_line
from linen2nnx.migrate.training.planner import TrainPlanner
from linen2nnx.migrate.training.sharding import ACTIVE_RULES

_STATEMENT = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


class TrainRewriter(cst.CSTTransformer):
    """Applies a :class:`TrainPlanner`'s plan bottom-up (edits see their children already rewritten)."""

    def __init__(self, planner: TrainPlanner, markers: Mapping[cst.CSTNode, list[str]], apply_edits: bool):
        super().__init__()
        self.planner = planner
        self.markers = markers
        self.apply_edits = apply_edits
        self.pending: dict[cst.CSTNode, list[cst.BaseStatement]] = {}

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:  # type: ignore[override]
        updated = super().on_leave(original, updated)  # type: ignore[assignment]
        if self.apply_edits:
            edit = self.planner.edits.get(original)
            if edit is not None:
                if edit.before is not None and edit.stmt is not None:
                    self.pending.setdefault(edit.stmt, []).extend(edit.before(updated))
                updated = edit.build(updated)
        if not isinstance(original, _STATEMENT):
            return updated
        updated = self._with_markers(original, updated)
        if not self.apply_edits:
            return updated
        return self._statement(original, updated)

    def _with_markers(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        """The TODO markers of the statement's manual findings, as comment lines above it (once)."""
        notes = [
            n
            for n in map(one_line, self.markers.get(original, []))
            if n not in {line.comment.value for line in updated.leading_lines if line.comment}
        ]  # type: ignore[attr-defined]
        if not notes:
            return updated
        comments = [marker_line(n) for n in dict.fromkeys(notes)]
        return updated.with_changes(leading_lines=[*updated.leading_lines, *comments])  # type: ignore[attr-defined]

    def _statement(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:
        """The statement as planned: replaced, split, wrapped, followed, and preceded by its prelude."""
        plan = self.planner
        out: list[cst.BaseStatement] = [*plan.prelude.get(original, []), *self.pending.pop(original, [])]
        replace = plan.replace_stmt.get(original)
        body = replace(updated) if replace is not None else [updated]  # type: ignore[list-item]
        if original in plan.split_tuple:
            body = split_pair(body[0])  # type: ignore[arg-type]
        if plan.wrap.get(original):
            body = [wrap_in(body, plan.wrap[original])]
        body += [cst.parse_statement(line + "\n") for line in plan.after.get(original, [])]
        if not out:
            return cst.FlattenSentinel(body) if len(body) != 1 else body[0]
        # the statement's comments and blank lines now lead the inserted ones
        out[0] = out[0].with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(
            leading_lines=[cst.EmptyLine(indent=False)]
            if isinstance(body[0], (cst.FunctionDef, cst.ClassDef)) or isinstance(out[-1], cst.FunctionDef)
            else []
        )
        block = plan.parent(original)
        first = (
            isinstance(block, (cst.IndentedBlock, cst.Module)) and block.body and block.body[0] is original
        )
        if (
            isinstance(out[0], cst.FunctionDef)
            and not first
            and not (out[0].leading_lines and out[0].leading_lines[0].comment is None)
        ):  # a blank line before a def
            out[0] = out[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), *out[0].leading_lines])
        return cst.FlattenSentinel([*out, *body])


def wrap_in(body: list[cst.BaseStatement], managers: list[str]) -> cst.With:
    """``with <managers>:`` around ``body``; the first statement's comments and blank lines lead the block."""
    items = [
        cst.WithItem(cst.parse_expression(m), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        for m in managers
    ]
    items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    inner = [body[0].with_changes(leading_lines=[]), *body[1:]]
    return cst.With(items, cst.IndentedBlock(inner), leading_lines=body[0].leading_lines)  # type: ignore[arg-type]


def split_pair(stmt: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """``a, b = (x, y)`` -> ``a = x`` and ``b = y`` (``y`` reads neither ``a`` nor ``b``: it is built here)."""
    small = stmt.body[0]
    if not (
        isinstance(small, cst.Assign)
        and isinstance(small.value, cst.Tuple)
        and isinstance(small.targets[0].target, cst.Tuple)
    ):
        return [stmt]
    pairs = zip(small.targets[0].target.elements, small.value.elements)
    out: list[cst.BaseStatement] = [
        cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(t.value)], v.value)]) for t, v in pairs
    ]
    out[0] = out[0].with_changes(leading_lines=stmt.leading_lines)
    return out


def finish_imports(module: cst.Module, planner: TrainPlanner) -> cst.Module:
    """The imports the rewritten training code uses, and no ``train_state`` import it no longer does."""
    module = ensure_nnx_import(module)
    if planner.uses_partial:
        module = ensure_plain_import(module, "functools", blank_line_after=False)
    text = code_of(module)
    if "jax.sharding.get_abstract_mesh()" in text:
        module = ensure_plain_import(module, "jax", blank_line_after=False)
    if ACTIVE_RULES in text:
        module = ensure_plain_import(module, "flax.core.spmd", blank_line_after=False)
    return drop_unused_train_state_import(module)


def drop_unused_train_state_import(module: cst.Module) -> cst.Module:
    """Remove ``from flax.training import train_state`` (and aliases) once nothing uses the name."""
    return drop_unused_imports(module, without_unused_module("flax.training", "train_state"))
