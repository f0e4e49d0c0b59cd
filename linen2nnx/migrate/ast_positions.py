"""Where findings start, read from Python's own parser instead of a code generation.

A finding's position is the syntactic start of its node in the original source (what libcst's
``PositionProvider`` gives). Learning it from libcst means generating the code of the statements that
hold the node (:mod:`~linen2nnx.migrate.positions`), and nearly every class of a migrated file holds a
finding: about as costly as the output's own code generation. CPython's ``ast`` parser records the
same starts for calls, attributes, classes and functions while it parses, in C, for a tenth of that.

The two trees are paired without positions: statements by their index in their block (a libcst line
of ``a; b`` is two ``ast`` statements; ``elif`` is an ``If`` in ``orelse``; handlers, ``else`` /
``finally`` blocks and match cases by their index), then, inside the innermost statement (its
header only, never the blocks under it), the k-th node of a kind in libcst's visit order is the k-th
``ast`` node of that kind ordered by where it starts (and, for one start, the longer first: the outer
of ``f(x)(y)``). Whatever does not pair exactly (another node kind, a statement holding an f-string,
an import, counts that differ) is left to :mod:`~linen2nnx.migrate.positions`; columns are converted
from ``ast``'s UTF-8 bytes to characters.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping, Sequence

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children

Position = tuple[int, int]

# libcst node kind -> the ast node kinds it is, one for one, inside a statement's header
_KINDS: dict[type, tuple[type, ...]] = {
    cst.Call: (ast.Call,),
    cst.Attribute: (ast.Attribute,),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
}
# libcst children that are blocks under a statement (their nodes belong to the statements inside)
_BLOCKS = (
    cst.IndentedBlock,
    cst.SimpleStatementSuite,
    cst.Else,
    cst.Finally,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.MatchCase,
)
_AST_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
# statement headers whose nodes libcst and ast do not both hold (dotted import names are
# attributes only in libcst); f-strings are parsed by both, but ast's positions inside them are not
# libcst's on every Python
_UNPAIRED = (cst.Import, cst.ImportFrom, cst.FormattedString)


def ast_positions(
    source: str, nodes: Collection[cst.CSTNode], parents: Mapping[cst.CSTNode, cst.CSTNode]
) -> dict[cst.CSTNode, Position]:
    """(line, column) of the start of each of ``nodes`` that pairs with a node of ``ast.parse(source)``
    (see the module docstring); ``parents`` is a parent map of the libcst module parsed from
    ``source`` that holds every node of ``nodes``. Nodes missing from the answer are the caller's."""
    wanted = [node for node in nodes if type(node) in _KINDS]
    if not wanted or "\r" in source:
        return {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a grammar newer than this Python's
        return {}
    lines = source.split("\n")
    found: dict[cst.CSTNode, Position] = {}
    pairs: dict[int, tuple[list[cst.CSTNode], list[ast.AST]] | None] = {}
    for node in wanted:
        target = _paired(node, tree, parents, pairs)
        if target is not None:
            line = target.lineno
            text = lines[line - 1]
            column = target.col_offset
            if not text.isascii():
                column = len(text.encode()[:column].decode())
            found[node] = (line, column)
    return found


def _paired(
    node: cst.CSTNode,
    tree: ast.Module,
    parents: Mapping[cst.CSTNode, cst.CSTNode],
    pairs: dict[int, tuple[list[cst.CSTNode], list[ast.AST]] | None],
) -> ast.AST | None:
    """The ast node that is ``node``, or None when they do not pair exactly."""
    chain = [node]
    while not isinstance(chain[-1], cst.Module):
        parent = parents.get(chain[-1])
        if parent is None:
            return None  # a node the codemod built
        chain.append(parent)
    chain.reverse()
    located = _statement(chain, tree)
    if located is None:
        return None
    statement, target, depth = located
    if depth == len(chain) - 1:
        return target if isinstance(target, _KINDS[type(node)]) else None
    key = id(statement) * 8 + list(_KINDS).index(type(node))
    if key not in pairs:
        pairs[key] = _header_nodes(statement, target, type(node))
    found = pairs[key]
    if found is None:
        return None
    ours, theirs = found
    for index, candidate in enumerate(ours):
        if candidate is node:
            return theirs[index]
    return None


def _statement(chain: list[cst.CSTNode], tree: ast.Module) -> tuple[cst.CSTNode, ast.AST, int] | None:
    """The innermost statement on ``chain`` (module first), its ast twin, and its index in the chain."""
    target: ast.AST = tree
    i = 0
    while i < len(chain) - 1:
        step = _step(chain[i], target, chain[i + 1 :])
        if step is None:
            return None if i == 0 else (chain[i], target, i)
        if step is False:
            return None
        target, used = step
        i += used
    return chain[i], target, i


def _step(
    current: cst.CSTNode, target: ast.AST, rest: list[cst.CSTNode]
) -> tuple[ast.AST, int] | bool | None:
    """One level down from ``current`` (paired with ``target``) along ``rest``: the ast twin of the
    statement (or handler, or case) reached and how many chain nodes that took; None when ``rest[0]``
    is in ``current``'s header; False when the trees do not pair."""
    child = rest[0]
    if isinstance(current, cst.Module):
        return _in_block(current.body, target.body, rest, 0)
    if isinstance(child, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return _in_block(child.body, getattr(target, "body", None), rest[1:], 1)
    if isinstance(current, cst.If) and child is current.orelse and isinstance(child, cst.If):
        orelse = getattr(target, "orelse", None)
        return (orelse[0], 1) if orelse and len(orelse) == 1 and isinstance(orelse[0], ast.If) else False
    if isinstance(child, (cst.Else, cst.Finally)):
        theirs = getattr(target, "finalbody" if isinstance(child, cst.Finally) else "orelse", None)
        if len(rest) < 2 or rest[1] is not child.body:
            return False
        return _in_block(child.body.body, theirs, rest[2:], 2)
    if isinstance(child, (cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase)):
        cases = isinstance(child, cst.MatchCase)
        siblings = current.cases if cases else current.handlers
        theirs = getattr(target, "cases" if cases else "handlers", None)
        index = next(k for k, sibling in enumerate(siblings) if sibling is child)
        return (theirs[index], 1) if theirs is not None and len(theirs) == len(siblings) else False
    return None


def _in_block(
    ours: Sequence[cst.CSTNode], theirs: list[ast.stmt] | None, rest: list[cst.CSTNode], used: int
) -> tuple[ast.AST, int] | bool:
    """The ast twin of ``rest[0]``, a statement of the block ``ours``, and the chain nodes used to reach
    it (a libcst line of small statements counts as each of them: then ``rest[1]`` is the small
    statement, one more chain node)."""
    if theirs is None or not rest:
        return False
    child, index = rest[0], 0
    for statement in ours:
        if statement is child:
            used += 1
            if isinstance(statement, cst.SimpleStatementLine):
                small = next(
                    (k for k, s in enumerate(statement.body) if len(rest) > 1 and s is rest[1]), None
                )
                if small is None:
                    return False
                index, used = index + small, used + 1
            return (theirs[index], used) if index < len(theirs) else False
        index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return False


def _header_nodes(
    statement: cst.CSTNode, target: ast.AST, kind: type
) -> tuple[list[cst.CSTNode], list[ast.AST]] | None:
    """The nodes of ``kind`` in ``statement``'s header, libcst's in visit order and ast's by start,
    when they pair one for one; else None."""
    ours: list[cst.CSTNode] = []
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, _UNPAIRED):
            return None
        if type(node) is kind:
            ours.append(node)
        children = syntax_children(node)
        if node is statement:
            skip = node.orelse if isinstance(node, cst.If) else None
            children = tuple(c for c in children if not isinstance(c, _BLOCKS) and c is not skip)
        stack.extend(reversed(children))
    theirs: list[ast.AST] = []
    kinds = _KINDS[kind]
    todo: list[ast.AST] = [target]
    while todo:
        node = todo.pop()
        if node is not target and isinstance(node, kinds):
            theirs.append(node)
        for field, value in ast.iter_fields(node):
            if node is target and field in _AST_BLOCK_FIELDS:
                continue
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, ast.AST))
    if len(ours) != len(theirs) + (1 if type(statement) is kind else 0):
        return None
    if type(statement) is kind:
        ours.remove(statement)
    theirs.sort(key=lambda n: (n.lineno, n.col_offset, -n.end_lineno, -n.end_col_offset))
    return ours, theirs
