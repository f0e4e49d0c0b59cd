"""Annotations and defaults a generated ``__init__`` writes with names its file may not have.

A subclass's ``__init__`` repeats the fields of its base, annotations and defaults included; a base of
another file wrote ``codeword_dim: Optional[int]`` with its own ``from typing import Optional``, or
``layer_remat: LayerRemat = LayerRemat.LEGACY`` with the enum its own module defines, which the
subclass's file need not have. Python evaluates parameter annotations and defaults when it defines the
function, so the module would fail at import with a NameError. Such an annotation is written as a
string: the same type to a reader and a checker, nothing to evaluate. A default must be evaluated, so
its unbound names are read through the base's module instead (``t5_architecture.LayerRemat.LEGACY``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from linen2nnx.migrate.cst_utils import code, comprehension_names, names_in, parse_expression

BOUND_EVERYWHERE = frozenset(dir(builtins)) | {"nnx"}  # the rewrite imports nnx into every file it converts


def module_names(body: Sequence[cst.CSTNode]) -> frozenset[str] | None:
    """The names a module binds at its top level (imports, classes, functions, assignments, also under
    a top-level ``if`` / ``try`` / ``with``); None after a ``from x import *`` (anything may be bound)."""
    found: set[str] = set()
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            found.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    return None
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for alias in small.names:  # type: ignore[union-attr]
                        bound = alias.asname.name if alias.asname is not None else alias.name
                        found.add(code(bound).split(".")[0])
                elif isinstance(small, cst.Assign):
                    found.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    found.add(small.target.value)
        elif isinstance(stmt, (cst.If, cst.Try, cst.With)):
            stack.extend(stmt.body.body)
            for part in (
                getattr(stmt, "orelse", None),
                *getattr(stmt, "handlers", ()),
                getattr(stmt, "finalbody", None),
            ):
                while part is not None:
                    stack.extend(part.body.body)
                    part = getattr(part, "orelse", None)  # an elif chain
    return frozenset(found)


def outer_names(expression: cst.BaseExpression) -> set[str]:
    """The names ``expression`` reads from around it: not a lambda's parameters nor a comprehension's
    targets, which are its own."""
    params = {p.name.value for p in m.findall(expression, m.Param())}  # type: ignore[attr-defined]
    return names_in(expression) - params - comprehension_names(expression)


def written_annotation(annotation: str, names: frozenset[str] | None) -> str:
    """``annotation`` as a parameter of this file may write it: as it is when every name it reads is
    bound here (or a builtin, or ``names`` is unknown), else as a string."""
    if names is None or annotation.startswith(("'", '"')):
        return annotation
    try:
        used = names_in(parse_expression(annotation))
    except Exception:  # not an expression libcst parses: leave it to the verifier's parse
        return annotation
    if used <= names | BOUND_EVERYWHERE:
        return annotation
    flat = " ".join(annotation.split())  # one line: a string literal cannot span the lines it did
    return repr(flat) if '"' in flat else f'"{flat}"'


def qualified_default(default: str, names: frozenset[str] | None, qualifier: str) -> str:
    """``default`` (an inherited field's, as its base's file writes it) with every name this file does
    not bind (``names``) read as ``<qualifier>.<name>``, the base's module, where that file binds it."""
    if names is None:
        return default
    try:
        expression = parse_expression(default)
    except Exception:  # not an expression libcst parses: leave it to the verifier's parse
        return default
    unbound = outer_names(expression) - names - BOUND_EVERYWHERE
    if not unbound:
        return default
    owner = parse_expression(qualifier)

    class Qualify(cst.CSTTransformer):
        def visit_Param(self, node: cst.Param) -> bool:
            return False  # `lambda x: ...`: its parameters are not reads

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            if updated.value not in unbound:
                return updated
            bare = updated.with_changes(lpar=(), rpar=())  # `(f)` -> `(owner.f)`, never `owner.(f)`
            return cst.Attribute(owner, bare, lpar=updated.lpar, rpar=updated.rpar)

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            return updated.with_changes(attr=original.attr)  # `.LEGACY` is an attribute, not a read

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
            return updated.with_changes(keyword=original.keyword)  # `f(stddev=...)`: a keyword, not a read

    return code(expression.visit(Qualify()))
