"""Linen collections NNX has no Variable type for (``self.variable('moving_stats', ...)``).

NNX names a variable's kind by its ``nnx.Variable`` subclass; Linen by a collection string. A
collection outside :data:`~linen2nnx.migrate.sites.COLLECTION_TYPES` gets one subclass per migrated
file, named after the collection (``moving_stats`` -> ``MovingStats``) and registered with
``nnx.register_variable_name`` so that NNX (``nnx.bridge``, ``variable_type_from_name``) and the
checkpoint converter map the Linen collection to it and back. Registration overwrites: two files of
a run that define the class for one collection, or a module imported twice, must not fail at import.
"""

from __future__ import annotations

import json
import re
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import names_in, parse_statement
from linen2nnx.migrate.imports import is_import_line
from linen2nnx.migrate.sites import COLLECTION_TYPES


def variable_type_ref(collection: str, custom: dict[str, str], taken: set[str]) -> str:
    """The expression naming the Variable type of ``collection``: ``nnx.BatchStat`` for a built-in one,
    else the file's own subclass (its name chosen, and recorded in ``custom``, on first use; a name
    the file already binds in ``taken`` gets a ``Variable`` suffix)."""
    builtin = COLLECTION_TYPES.get(collection)
    if builtin is not None:
        return f"nnx.{builtin}"
    if collection not in custom:
        words = [w for w in re.split(r"[^0-9A-Za-z]+", collection) if w]
        name = "".join(w[:1].upper() + w[1:] for w in words) or "Custom"
        if not name[0].isalpha():
            name = f"Var{name}"
        while name in taken or name in custom.values():
            name += "Variable"
        custom[collection] = name
    return custom[collection]


def file_variable_type(state: Any, collection: str) -> str:
    """:func:`variable_type_ref` for the file of ``state`` (a ``FileState``): a new subclass's name
    avoids every name the file binds (its tree's, its classes' and functions')."""
    custom = state.variable_classes
    if collection in COLLECTION_TYPES or collection in custom:
        return variable_type_ref(collection, custom, set())
    taken = names_in(state.tree) | state.module_classes | set(state.module_functions)
    return variable_type_ref(collection, custom, taken)


def _class_def(collection: str, name: str, sown: bool) -> cst.BaseStatement:
    literal = json.dumps(collection)  # a Python string literal, in the double quotes of formatted code
    doc = f"Values sown into Linen's {literal} collection." if sown else f"Linen's {literal} collection."
    base = "nnx.Intermediate" if sown else "nnx.Variable"
    return parse_statement(
        f"\n\n@nnx.register_variable_name({literal}, overwrite=True)\n"
        f"class {name}({base}):\n"
        f'    """{doc}"""\n'
    )


def add_variable_classes(
    module: cst.Module, classes: dict[str, str], sown: set[str] = frozenset()
) -> cst.Module:
    """Define ``classes`` (collection -> class name) after the last top-level import line (the file
    imports ``nnx`` by then), each two blank lines apart from its neighbours. A collection in ``sown``
    (only ever sown into: an auxiliary loss) gets an ``nnx.Intermediate`` subclass, so that what
    captures sown values (``nnx.capture(model, nnx.Intermediate)``) and the checkpoint converter,
    which converts no sown value, treat it as Linen treats ``intermediates``."""
    if not classes:
        return module
    body = list(module.body)
    at = max((i for i, s in enumerate(body) if is_import_line(s)), default=-1) + 1
    defs = [_class_def(col, name, col in sown) for col, name in classes.items()]
    if at < len(body):
        following = body[at]
        kept = list(following.leading_lines)
        while kept and kept[0].comment is None:
            kept.pop(0)
        body[at] = following.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *kept])
    body[at:at] = defs
    return module.with_changes(body=body)
