"""The names a ``from module import *`` of another file of the run binds.

A star import binds no name the resolver can see in the importing file, so ``Block`` after
``from mypkg.layers import *`` (or ``from .layers import *``) resolved to nothing: in ``setup()``
``self.b = Block(5)`` stayed as written and ``nn.Sequential([Block(5)])`` lost its rngs, with no
finding, and the NNX class did not build. Before any file is migrated the engine reads, for each file
of the run some file star-imports, the names it exports that way (its literal ``__all__``, else its
module-level names that do not start with ``_``), and hands the run the table as a fact
(:data:`KEY`); :class:`~linen2nnx.migrate.names.NameResolver` binds those names at the star import,
to ``module.Name``, as an explicit import would. A star import of anything else binds nothing.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import absolute_qualname
from linen2nnx.migrate.names import NameResolver

KEY = "run:star_exports"  # a run's fact: module -> the names `from module import *` binds

_STAR = re.compile(rb"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\*", re.MULTILINE)


def star_exports(source: bytes) -> frozenset[str] | None:
    """The names ``from <this file> import *`` binds; None for a file that does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    listed: list[str] | None = None
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):  # still module level
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(stmt, field, ()):
                    pending.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
            continue
        names.update(_bound(stmt))
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
        ):
            listed = _literal_names(stmt.value) if listed is None else []  # bound twice: trust neither
    if listed is not None:
        return frozenset(listed)
    return frozenset(n for n in names if not n.startswith("_"))


def _bound(stmt: ast.stmt) -> Iterable[str]:
    """The module-level names ``stmt`` binds (a star import of its own binds none that is known)."""
    if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _literal_names(value: ast.expr) -> list[str]:
    """The strings of a literal list or tuple (``__all__``); empty for anything else."""
    if not isinstance(value, (ast.List, ast.Tuple)):
        return []
    return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def run_star_exports(
    work: Sequence[tuple[object, str, str]], sources: Sequence[bytes], aliases: Sequence[tuple[str, ...]]
) -> dict[str, frozenset[str]]:
    """For each file of the run whose last module part some file star-imports, the names that binds,
    under its module name and each alias (``sources`` and ``aliases`` line up with ``work``)."""
    wanted = {m[1].rsplit(b".", 1)[-1] for s in sources for m in _STAR.findall(s)}
    out: dict[str, frozenset[str]] = {}
    if not wanted:
        return out
    for (_, _, module), source, more in zip(work, sources, aliases):
        if not module or module.rsplit(".", 1)[-1].encode() not in wanted:
            continue
        names = star_exports(source)
        if names is not None:
            out.update({name: names for name in (module, *more)})
    return out


def star_names(facts: Mapping[str, Any] | None, module_name: str) -> Callable[[str], Collection[str]] | None:
    """What the resolver of ``module_name``'s file asks, from the run's ``facts``: the names a star import
    of the module spelled ``spelled`` (``.layers`` or ``mypkg.layers``) binds."""
    exports: Mapping[str, Collection[str]] = (facts or {}).get(KEY) or {}
    if not exports:
        return None
    return lambda spelled: exports.get(absolute_qualname(spelled, module_name), ())


def lazy_resolver(
    tree: cst.Module, facts: Mapping[str, Any] | None, module_name: str
) -> Callable[[], NameResolver]:
    """The resolver of ``tree``, built on first use, knowing what its star imports of the run bind."""
    return functools.cache(lambda: NameResolver(tree, star_names(facts, module_name)))
