"""Where findings start, from the code of the statements that hold them only.

:func:`~linen2nnx.migrate.cst_meta.start_positions` generates the code of the whole original module to
learn where a few nodes start: as much work as the output's own code generation. But libcst's code of
a module is its source text, statement after statement, and the findings sit in some of the
statements (the classes), not in the imports, helpers and constants between them. So
:func:`source_positions` walks the module-level statements in order with a cursor into the source:
a statement holding wanted nodes is generated (noting where they start) and starts at the cursor,
or, after statements it skipped, at the one place its text occurs in the rest of the source; only
when that text occurs twice there are the skipped statements generated to move the cursor. Lines
are the source's lines before the statement plus those inside it; the answers are
``PositionProvider``'s syntactic starts, as before.

First it goes further in: a class or function whose findings all lie in its header (the class
itself, its bases, its decorators) or in statements of its body generates the code of its header
(a copy with an empty body, up to the body) and of those statements only, recursively, and each
text is placed at the one place it occurs after the texts placed before it (at a line start, the
indentation of the enclosing blocks generated with it). When a text occurs twice, the enclosing
statement's code is generated instead; when a module-level statement's does, the walk above runs.
A ``\\r`` line end (which libcst may count as two
where a token splits ``\\r\\n``), a file without a final line end (libcst drops the last statement's)
and a statement not where it must be fall back to the whole-module code generation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst

from linen2nnx.migrate.cst_meta import (
    StartRecorder,
    code_of,
    line_columns,
    start_positions,
    wanted_with_start_nodes,
)
from linen2nnx.migrate.traverse import copy_node

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
    found = _innermost_positions(module, source, groups, parents)
    return found if found is not None else _statement_positions(module, source, groups, nodes)


def _statement_positions(
    module: cst.Module,
    source: str,
    groups: dict[cst.CSTNode | None, list[cst.CSTNode]],
    nodes: Collection[cst.CSTNode],
) -> dict[cst.CSTNode, Position]:
    """:func:`source_positions` by the code of each module-level statement holding wanted nodes."""
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
        stmt._codegen(state)
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
        while parent is not None and not isinstance(parent, cst.Module):
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


def _innermost_positions(
    module: cst.Module,
    source: str,
    groups: dict[cst.CSTNode | None, list[cst.CSTNode]],
    parents: Mapping[cst.CSTNode, cst.CSTNode],
) -> dict[cst.CSTNode, Position] | None:
    """:func:`source_positions` by the code of the innermost statements holding wanted nodes (a method's
    statements, not the whole class): each is found at the one place its text occurs after the
    statements found before it. None when a module-level statement's text is not found that way."""
    found: dict[cst.CSTNode, Position] = {}
    cursor = 0
    for stmt in module.body:
        wanted = groups.get(stmt)
        if wanted is not None:
            placed = _place(stmt, wanted, source, cursor, [], module, parents)
            if placed is None:
                return None
            found.update(placed[0])
            cursor = placed[1]
    return found


def _place(
    stmt: cst.CSTNode,
    wanted: list[cst.CSTNode],
    source: str,
    cursor: int,
    indents: list[str],
    module: cst.Module,
    parents: Mapping[cst.CSTNode, cst.CSTNode],
) -> tuple[dict[cst.CSTNode, Position], int] | None:
    """The positions of ``wanted`` (nodes inside ``stmt``) and where ``stmt``'s located text ends, given
    that ``stmt`` starts at or after ``cursor`` under the indentation ``indents``: from its body's
    statements when every wanted node lies in one of them, else from its own code; None when that code
    does not occur exactly once after ``cursor``, at the start of a line."""
    block = getattr(stmt, "body", None)
    inner = _by_statement_of(wanted, block, parents) if isinstance(block, cst.IndentedBlock) else None
    header = inner.pop(None, None) if inner is not None else None
    found: dict[cst.CSTNode, Position] = {}
    end = cursor
    if header is not None:  # the statement itself, or nodes before its body: from the code of its header
        placed = _place_header(stmt, header, block, source, cursor, indents, module)  # type: ignore[arg-type]
        if placed is None:
            inner = None
        else:
            found, end = placed
    if inner is not None:
        indent = module.default_indent if block.indent is None else block.indent  # type: ignore[union-attr]
        for child in block.body:  # type: ignore[union-attr]
            if child in inner:
                placed = _place(child, inner[child], source, end, [*indents, indent], module, parents)
                if placed is None:
                    break  # its text occurs twice: this statement's own code decides
                found.update(placed[0])
                end = placed[1]
        else:
            return found, end
    state = StartRecorder(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        wanted=wanted_with_start_nodes(wanted),
    )
    state.indent_tokens = list(indents)
    stmt._codegen(state)
    text = "".join(state.tokens)
    offset = source.find(text, cursor)
    if offset < 0 or source.find(text, offset + 1) >= 0 or (offset and source[offset - 1] != "\n"):
        return None
    lines = 1 + source.count("\n", 0, offset)
    index_of = {node: state.start_of(node) for node in wanted if node in state.starts}
    return {
        node: (lines + line - 1, column)  # the statement starts at column 0
        for node, (line, column) in zip(index_of, line_columns(state.tokens, list(index_of.values())))
    }, offset + len(text)


def _by_statement_of(
    nodes: list[cst.CSTNode], block: cst.IndentedBlock, parents: Mapping[cst.CSTNode, cst.CSTNode]
) -> dict[cst.CSTNode, list[cst.CSTNode]] | None:
    """``nodes`` by the statement of ``block`` that holds them; None when one is not inside one."""
    out: dict[cst.CSTNode, list[cst.CSTNode]] = {}
    for node in nodes:
        cur, parent = node, parents.get(node)
        while parent is not None and parent is not block:
            cur, parent = parent, parents.get(parent)
        if parent is None and node is block:
            return None
        out.setdefault(cur if parent is not None else None, []).append(node)  # type: ignore[arg-type]
    return out


def _place_header(
    stmt: cst.CSTNode,
    wanted: list[cst.CSTNode],
    block: cst.IndentedBlock,
    source: str,
    cursor: int,
    indents: list[str],
    module: cst.Module,
) -> tuple[dict[cst.CSTNode, Position], int] | None:
    """:func:`_place` for the nodes of ``stmt`` that start before its body ``block``: from the code of
    ``stmt`` up to its body (a copy of it with an empty body), found once after ``cursor``; with where
    that code ends."""
    empty = cst.IndentedBlock(body=(), header=block.header, indent=block.indent)
    copy = copy_node(stmt, {"body": empty})
    state = StartRecorder(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        wanted=wanted_with_start_nodes([copy if node is stmt else node for node in wanted]) | {empty},
    )
    state.indent_tokens = list(indents)
    copy._codegen(state)
    if empty not in state.starts:
        return None
    stop = state.starts[empty]
    text = "".join(state.tokens[:stop])
    offset = source.find(text, cursor)
    if offset < 0 or source.find(text, offset + 1) >= 0 or (offset and source[offset - 1] != "\n"):
        return None
    index_of = {node: state.start_of(copy if node is stmt else node) for node in wanted}
    if any(node is not stmt and node not in state.starts for node in wanted) or any(
        index >= stop for index in index_of.values()
    ):
        return None  # a node after the body (an ``else:``): the whole statement's code decides
    lines = 1 + source.count("\n", 0, offset)
    return {
        node: (lines + line - 1, column)
        for node, (line, column) in zip(index_of, line_columns(state.tokens, list(index_of.values())))
    }, offset + len(text)
