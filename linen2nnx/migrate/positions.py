"""Where findings start, from the code of the module-level statements that hold them only.

:func:`~linen2nnx.migrate.cst_meta.start_positions` generates the code of the whole original module to
learn where a few nodes start: as much work as the output's own code generation. But libcst's code of
a module is its source text, statement after statement, and the findings sit in some of the
statements (the classes), not in the imports, helpers and constants between them. So
:func:`source_positions` walks the module-level statements in order with a cursor into the source:
a statement holding wanted nodes is generated (noting where they start) and starts at the cursor,
or, after statements it skipped, at the one place its text occurs in the rest of the source; only
when that text occurs twice there are the skipped statements generated to move the cursor. Lines
are the source's lines before the statement plus those inside it; the answers are
``PositionProvider``'s syntactic starts, as before. A ``\\r`` line end (which libcst may count as two
where a token splits ``\\r\\n``), a file without a final line end (libcst drops the last statement's)
and a statement not where it must be fall back to the whole-module code generation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst

from linen2nnx.migrate.codegen import record
from linen2nnx.migrate.cst_meta import (
    StartRecorder,
    code_of,
    line_columns,
    start_positions,
    wanted_with_start_nodes,
)

Position = tuple[int, int]


def source_positions(
    module: cst.Module,
    source: str,
    nodes: Collection[cst.CSTNode],
    parents: Mapping[cst.CSTNode, cst.CSTNode],
) -> dict[cst.CSTNode, Position]:
    """(line, column) of the start of each of ``nodes`` that is part of ``module`` (as
    :func:`~linen2nnx.migrate.cst_meta.start_positions`), given ``source``, the text ``module`` was
    parsed from, and ``parents``, a parent map of ``module`` that holds every node of ``nodes``."""
    groups = _by_module_statement(nodes, parents)
    if "\r" in source or None in groups or not module.has_trailing_newline:
        return start_positions(module, nodes)  # None: the module itself, or a node the codemod built
    cursor = len(_code(module.header, module))
    lines = 1 + source.count("\n", 0, cursor)  # the line the cursor is on
    found: dict[cst.CSTNode, Position] = {}
    skipped: list[cst.CSTNode] = []
    for stmt in module.body:
        wanted = groups.get(stmt)
        if wanted is None:
            skipped.append(stmt)
            continue
        state = StartRecorder(
            default_indent=module.default_indent,
            default_newline=module.default_newline,
            wanted=wanted_with_start_nodes(wanted),
        )
        record(stmt, state)
        text = "".join(state.tokens)
        offset = _offset_of(text, source, cursor, skipped, module)
        if offset is None:
            return start_positions(module, nodes)
        lines += source.count("\n", cursor, offset)
        index_of = {node: state.start_of(node) for node in wanted if node in state.starts}
        for node, (line, column) in zip(index_of, line_columns(state.tokens, list(index_of.values()))):
            found[node] = (lines + line - 1, column)  # the statement starts at column 0
        lines += text.count("\n")
        cursor, skipped = offset + len(text), []
    return found


def _by_module_statement(
    nodes: Collection[cst.CSTNode], parents: Mapping[cst.CSTNode, cst.CSTNode]
) -> dict[cst.CSTNode | None, list[cst.CSTNode]]:
    """``nodes`` by the module-level statement that holds them; under None the nodes that have no
    parent (the module itself, or a node that is not in it)."""
    groups: dict[cst.CSTNode | None, list[cst.CSTNode]] = {}
    for node in nodes:
        cur, parent = node, parents.get(node)
        while parent is not None and type(parent) is not cst.Module:
            cur, parent = parent, parents.get(parent)
        groups.setdefault(cur if parent is not None else None, []).append(node)
    return groups


def _offset_of(
    text: str, source: str, cursor: int, skipped: list[cst.CSTNode], module: cst.Module
) -> int | None:
    """Where a module-level statement whose code is ``text`` starts in ``source``, given that it
    follows the ``skipped`` statements, which start at ``cursor``: at the cursor when none was
    skipped, else at the one occurrence of ``text`` after the cursor, else after the code of the
    skipped statements. None when it is not there."""
    if skipped:
        offset = source.find(text, cursor)
        if offset >= 0 and source.find(text, offset + 1) < 0:
            return offset
        cursor += len(_code(skipped, module))
    return cursor if source.startswith(text, cursor) else None


def _code(nodes: Collection[cst.CSTNode], module: cst.Module) -> str:
    """The code of ``nodes`` one after the other, as the module's code generation writes them."""
    return "".join(code_of(node, module) for node in nodes)
