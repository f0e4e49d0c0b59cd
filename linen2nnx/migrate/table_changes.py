"""Which names some statement may change the value of, in place: what a table of activations
(``elementwise.py``) must not be, since its lookups are judged by the values its display lists.

A table is a plain dict, shared by every module that imports it, so any file may change it:
``ACTS["glu"] = halve`` after ``from acts import ACTS``, ``acts.ACTS.update(...)``, or through another
name (``_T = ACTS; _T["glu"] = halve``, ``register(ACTS)``). Short of following every value, a name
counts as possibly changed wherever it is used other than read: looked up (``ACTS[key]``), asked a
reading method (``ACTS.get(key)``), tested for a key (``key in ACTS``), imported under its own name,
or bound (a rebinding makes a new value; the module-level binding count is the table's own check).
Names are compared by their last part (``acts.ACTS`` is ``ACTS``): a file of the run cannot change
another's table without spelling its name.

The whole run is scanned once, before any file is migrated (:func:`run_changes`), with Python's own
parser: a fraction of a second per megabyte of source, against minutes for the migration itself.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from linen2nnx.migrate.discovery import RunSources

KEY = "elementwise:run-changes"
READERS = frozenset({"get", "keys", "values", "items", "copy"})
"""The dict methods that leave a table as it is (any other may change it)."""
_WORD = re.compile(rb"[A-Za-z_][A-Za-z_0-9]*")
_TABLE_LINE = re.compile(
    rb"(?:^|;[ \t]*)([A-Za-z_][A-Za-z_0-9]*(?:[ \t]*=[ \t]*[A-Za-z_][A-Za-z_0-9]*)*)[ \t]*=[\s\\(]*\{", re.M
)
"""A module-level ``NAME = {`` (also ``A = B = {``, ``NAME = (\\n {``): every name a top-level
statement binds to a dict display starts a line so, whatever else the line holds."""


@dataclasses.dataclass(frozen=True)
class RunChanges:
    """The names some file of the run may change (by last part; only those some file binds to a dict
    display at module level, the only ones a table can have); ``complete`` is False when a file could
    not be scanned, and then no table is trusted."""

    changed: frozenset[str]
    complete: bool = True

    def trusts(self, name: str) -> bool:
        """Whether no file of the run may change a table called ``name`` (by its last part)."""
        return self.complete and name.rsplit(".", 1)[-1] not in self.changed


def run_changes(run: RunSources) -> RunChanges:
    """The names the files of ``run`` may change, as one fact every file of the run is given.

    Only names a module may bind to a dict display matter, so the text is searched for them first
    (:data:`_TABLE_LINE`, a superset of what the parser finds) and only the files that spell one of
    them are parsed: most runs parse none, and the answer is the same as parsing every file."""
    sources, complete = run.sources, run.complete
    candidates: set[bytes] = set()
    for data in sources:
        for match in _TABLE_LINE.finditer(data):
            candidates.update(_WORD.findall(match.group(1)))
    if not candidates:
        return RunChanges(frozenset(), complete)
    mentions = re.compile(rb"\b(?:" + b"|".join(map(re.escape, sorted(candidates))) + rb")\b")
    changed: set[str] = set()
    tables: set[str] = set()  # what may be a table: a name a module binds to a dict display
    for data in sources:
        if not mentions.search(data):  # names none of the candidates: changes none of them
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError):  # newer syntax: any name it spells may change
            changed.update(w.decode("ascii") for w in _WORD.findall(data))
            continue
        changed |= changed_names(tree)
        tables.update(
            t.id
            for stmt in tree.body
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict)
            for t in stmt.targets
            if isinstance(t, ast.Name)
        )
    return RunChanges(frozenset(changed & tables), complete)


def source_changes(source: str) -> frozenset[str] | None:
    """The names one file's ``source`` may change; None when Python's parser does not read it."""
    try:
        return frozenset(changed_names(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError):
        return None


def changed_names(tree: ast.AST) -> set[str]:
    """The names (and attribute names) ``tree`` uses other than by reading or binding them."""
    changed: set[str] = set()
    for parent in ast.walk(tree):
        if isinstance(parent, (ast.Global, ast.Nonlocal)):
            changed.update(parent.names)
        elif isinstance(parent, (ast.Import, ast.ImportFrom)):  # `from acts import ACTS as T`: T is ACTS
            for alias in parent.names:
                last = alias.name.rsplit(".", 1)[-1]
                if alias.asname is not None and alias.asname != last:
                    changed.add(last)
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.Name) and not _read_or_bound(child, child.ctx, parent):
                changed.add(child.id)
            elif isinstance(child, ast.Attribute) and not _read_or_bound(child, child.ctx, parent):
                changed.add(child.attr)
    return changed


def _read_or_bound(node: ast.expr, ctx: ast.expr_context, parent: ast.AST) -> bool:
    if isinstance(ctx, ast.Store):  # a plain name rebound; an attribute set or `T |= ...` changes
        return isinstance(node, ast.Name) and not isinstance(parent, ast.AugAssign)
    if not isinstance(ctx, ast.Load):
        return False  # `del`
    if isinstance(parent, ast.Subscript):
        return parent.value is node and isinstance(parent.ctx, ast.Load)
    if isinstance(parent, ast.Attribute):
        return parent.attr in READERS
    if isinstance(parent, ast.Compare):
        index = next((i for i, c in enumerate(parent.comparators) if c is node), None)
        return index is not None and isinstance(parent.ops[index], (ast.In, ast.NotIn))
    return False
