"""Import edits for migrated files, done directly on the module (no extra libcst passes).

libcst's ``AddImportsVisitor`` / ``RemoveImportsVisitor`` each re-walk and re-resolve the whole file;
two targeted edits of the top-level import block are all a migration needs.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_utils import (
    code,
    names_in,
    parse_statement,
)

NNX_IMPORT = "from flax import nnx\n"


def is_import_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _imports_nnx(stmt: cst.BaseStatement) -> bool:
    if not is_import_line(stmt):
        return False
    for small in stmt.body:  # type: ignore[attr-defined]
        if (
            isinstance(small, cst.ImportFrom)
            and small.module is not None
            and code(small.module) == "flax"
            and not isinstance(small.names, cst.ImportStar)
        ):
            if any(a.name.value == "nnx" and a.asname is None for a in small.names):
                return True
        if isinstance(small, cst.Import):
            if any(
                code(a.name) == "flax.nnx" and a.asname is not None and code(a.asname.name) == "nnx"
                for a in small.names
            ):
                return True
    return False


def ensure_nnx_import(module: cst.Module) -> cst.Module:
    """Add ``from flax import nnx`` after the last top-level import that comes before the first class
    or function (after the docstring if none): an import further down, after the classes that use
    ``nnx``, would run too late for their annotations and bases."""
    body = list(module.body)
    if any(_imports_nnx(s) for s in body):
        return module
    first_def = next(
        (i for i, s in enumerate(body) if isinstance(s, (cst.ClassDef, cst.FunctionDef))), len(body)
    )
    last_import = max((i for i, s in enumerate(body[:first_def]) if is_import_line(s)), default=-1)
    if (
        last_import < 0
        and body
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, cst.SimpleString)
    ):
        last_import = 0
    body.insert(last_import + 1, parse_statement(NNX_IMPORT))
    return module.with_changes(body=body)


def _is_future_import(stmt: cst.BaseStatement) -> bool:
    return is_import_line(stmt) and all(
        isinstance(s, cst.ImportFrom) and s.module is not None and code(s.module) == "__future__"
        for s in stmt.body  # type: ignore[attr-defined]
    )


def ensure_plain_import(module: cst.Module, name: str, *, blank_line_after: bool = True) -> cst.Module:
    """Add ``import <name>`` before the first top-level import, unless the module already binds ``name``
    with an ``import``. ``from __future__`` imports stay first (Python requires it): the line goes after
    them; with no other import, after the docstring.

    The line takes over the blank lines and comments above the import it goes before; ``blank_line_after``
    says how that import then starts. True (the module pass, adding ``math``): one blank line, the
    standard-library line a group of its own. False (the training pass, adding the ``functools`` /
    ``jax`` its rewritten code calls): none, the line joins the import block."""
    body = list(module.body)
    if any(
        isinstance(small, cst.Import)
        and any((a.evaluated_alias or a.evaluated_name) == name for a in small.names)
        for stmt in body
        if isinstance(stmt, cst.SimpleStatementLine)
        for small in stmt.body
    ):
        return module
    first = next((i for i, s in enumerate(body) if is_import_line(s) and not _is_future_import(s)), None)
    if first is None:
        docstring = (
            bool(body)
            and isinstance(body[0], cst.SimpleStatementLine)
            and isinstance(body[0].body[0], cst.Expr)
            and isinstance(body[0].body[0].value, cst.SimpleString)
        )
        first = 1 if docstring else 0
        while first < len(body) and _is_future_import(body[first]):
            first += 1
    line = parse_statement(f"import {name}\n")
    if first < len(body) and is_import_line(body[first]):  # take over the blank lines / comments above
        line = line.with_changes(leading_lines=body[first].leading_lines)  # type: ignore[union-attr]
        below = [cst.EmptyLine()] if blank_line_after else []
        body[first] = body[first].with_changes(leading_lines=below)
    body.insert(first, line)
    return module.with_changes(body=body)


def drop_unused_linen_imports(module: cst.Module) -> cst.Module:
    """Remove ``import flax.linen as nn`` / ``from flax import linen [as nn]`` / ``from flax.linen import X``
    once nothing uses the name."""
    return drop_unused_imports(module, without_unused_module("flax", "linen", members=True))


SmallFilter = Callable[[cst.BaseSmallStatement, set[str]], cst.BaseSmallStatement | None]


def drop_unused_imports(module: cst.Module, without_unused: SmallFilter) -> cst.Module:
    """Remove the names of top-level import lines that ``without_unused(small, used)`` drops, given the
    names the rest of the module uses: it returns the import without them, or None to drop the import.
    A line left without imports goes, and the statement that becomes the first one of a module without
    a header loses the blank lines above it."""
    used: set[str] = set()
    for stmt in module.body:
        if not is_import_line(stmt):
            used |= names_in(stmt)
    body = []
    for stmt in module.body:
        if is_import_line(stmt):
            smalls = [s for s in (without_unused(small, used) for small in stmt.body) if s is not None]
            if not smalls:
                continue
            smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            stmt = stmt.with_changes(body=smalls)
        if not body and not module.header:
            stmt = stmt.with_changes(
                leading_lines=[line for line in stmt.leading_lines if line.comment is not None]
            )
        body.append(stmt)
    return module.with_changes(body=body)


def without_unused_module(package: str, name: str, *, members: bool = False) -> SmallFilter:
    """The filter for :func:`drop_unused_imports` that drops the module ``package.name`` where nothing
    uses it: ``import package.name as x`` and ``from package import name [as x]``; with ``members``,
    also the unused names of ``from package.name[.sub] import y``."""
    dotted = f"{package}.{name}"

    def without_unused(small: cst.BaseSmallStatement, used: set[str]) -> cst.BaseSmallStatement | None:
        if isinstance(small, cst.Import):
            keep = [
                a
                for a in small.names
                if not (code(a.name) == dotted and a.asname is not None and code(a.asname.name) not in used)
            ]
        elif (
            not isinstance(small, cst.ImportFrom)
            or small.module is None
            or isinstance(small.names, cst.ImportStar)
        ):
            return small
        elif code(small.module) == package:
            keep = [
                a
                for a in small.names
                if not (a.name.value == name and code(a.asname.name if a.asname else a.name) not in used)
            ]
        elif members and code(small.module).startswith(dotted):
            keep = [a for a in small.names if code(a.asname.name if a.asname else a.name) in used]
        else:
            return small
        if not keep:
            return None
        return small.with_changes(names=[*keep[:-1], keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])

    return without_unused
