"""The plain data classes each file of the run hands to the files that import it.

``FlaxBaseModelOutput`` is often defined in one file (one the module pass may skip: it never says
``linen``) and built in the blocks of many others, whose dataflow then follows its fields and indexes
(:mod:`~linen2nnx.migrate.tuple_flow`). Each file's data classes travel as facts keyed by their
dotted names; an importing file sees those it imports by name at module level, under the local name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import absolute_qualname
from linen2nnx.migrate.tuple_flow import RecordClass, record_classes

FACT_PREFIX = "record:"
"""The key prefix of a data class handed to importing files (``record:pkg.outputs.Out``)."""


def external_records(facts: Mapping[str, Any]) -> dict[str, RecordClass]:
    """The data-class facts among the facts other files hand over."""
    return {k: v for k, v in facts.items() if k.startswith(FACT_PREFIX) and isinstance(v, RecordClass)}


def of_source(source: str, module_name: str, path: str = "") -> dict[str, RecordClass]:
    """The facts of a file the module pass skips (it never says ``linen``): parsed only when it may
    define a data class; none when it does not parse. ``path``: the file (see :func:`folders_of`)."""
    if "dataclass" not in source and "NamedTuple" not in source:
        return {}
    from linen2nnx.migrate.cst_meta import parse_module
    from linen2nnx.migrate.names import NameResolver

    try:
        tree = parse_module(source)
    except cst.ParserSyntaxError:
        return {}
    resolver = NameResolver(tree)
    try:
        records = record_classes(tree.body, resolver.qualnames, module_name, folders_of(path))
        return record_facts(records, module_name)
    finally:
        resolver.release()


def folders_of(path: str) -> tuple[str, ...]:
    """The names of the folders a file sits in, innermost last, for the relative imports that climb
    them (``tuple_flow.climbed_qualname``); () without a path."""
    return Path(path).resolve().parent.parts[1:] if path else ()


def record_facts(records: dict[str, RecordClass], module_name: str) -> dict[str, RecordClass]:
    """A file's data classes as facts for the files that import them, keyed by their dotted names."""
    prefix = f"{FACT_PREFIX}{module_name}." if module_name else FACT_PREFIX
    return {prefix + name: record for name, record in records.items()}


def imported_records(
    body: Sequence[cst.CSTNode], module_name: str, facts: Mapping[str, RecordClass]
) -> dict[str, RecordClass]:
    """The data classes of other files of the run this file imports by name at module level
    (``from ..outputs import Out`` / ``... as O``), under the local name."""
    if not facts:
        return {}
    out: dict[str, RecordClass] = {}
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            module = "." * len(small.relative) + (_dotted(small.module) if small.module is not None else "")
            for alias in small.names:
                if not isinstance(alias.name, cst.Name):
                    continue
                local = alias.asname.name if alias.asname is not None else alias.name
                record = facts.get(FACT_PREFIX + _joined(module, alias.name.value, module_name))
                if record is not None and isinstance(local, cst.Name):
                    out[local.value] = record
    return out


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value if isinstance(node, cst.Name) else ""


def _joined(module: str, name: str, module_name: str) -> str:
    """``from <module> import <name>`` as one absolute dotted name."""
    if module.startswith(".") and not module.strip("."):
        return absolute_qualname(module + name, module_name)
    return absolute_qualname(f"{module}.{name}", module_name)
