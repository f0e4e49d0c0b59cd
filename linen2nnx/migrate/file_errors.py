"""The findings of a file the migration leaves untouched: one Python cannot parse, or one the codemod
itself failed on. Either way the run goes on with the other files."""

from __future__ import annotations

import ast

import libcst as cst

from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.rules import IO_001, IO_004


def syntax_error(source: str, path: str, e: cst.ParserSyntaxError) -> Finding:
    """The finding for a file libcst cannot parse, placed where CPython's parser says."""
    line, col, message = e.raw_line, e.raw_column + 1, e.message
    try:  # CPython's own parser names the real culprit (an unclosed bracket, ...)
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST)
    except SyntaxError as py_error:
        line, col, message = py_error.lineno or line, py_error.offset or col, py_error.msg
    return Finding.of(
        IO_001, path, line, col, f"syntax error: {message}", "fix the syntax; the file was left untouched"
    )


def internal_error(path: str, e: Exception) -> Finding:
    """The finding for a file the codemod failed on: it is left untouched, the run goes on."""
    return Finding.of(
        IO_004,
        path,
        1,
        1,
        f"internal error: {type(e).__name__}: {e}",
        "please report this file; it was left untouched",
    )
