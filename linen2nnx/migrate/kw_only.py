"""Linen fields after ``_: dataclasses.KW_ONLY``: keyword-only constructor arguments.

A Linen module is a dataclass, so ``_: dataclasses.KW_ONLY`` is no field: it makes the fields after it
keyword-only, and the dataclass ``__init__`` takes them after every positional field. Read as a field,
it became a required positional argument ``_`` of the NNX ``__init__``, which no caller passes (every
``Adapter(rank=4, ...)`` of the class then fails): the marker is dropped and the fields after it are
written after a bare ``*``.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import bind_args, code
from linen2nnx.migrate.sites import Field


def is_kw_only_marker(small: cst.AnnAssign) -> bool:
    """``_: dataclasses.KW_ONLY``: no field, but the fields after it are keyword-only."""
    return small.value is None and code(small.annotation.annotation).rsplit(".", 1)[-1] == "KW_ONLY"


def bound_fields(fields: list[Field], call: cst.Call) -> dict[str, cst.Arg]:
    """A constructor call's arguments by field: a positional one in the order of the dataclass
    ``__init__``'s positional fields (those after ``KW_ONLY`` or with ``init=False`` take none)."""
    return bind_args([f.name for f in fields if f.init and not f.kw_only], call)[0]


def init_fields(fields: list[Field]) -> list[tuple[Field, bool]]:
    """The constructor arguments of ``fields`` in the dataclass ``__init__``'s order, each with whether a
    bare ``*`` goes before it: the positional fields in order (a required one after a defaulted one starts
    Linen's keyword-only part), then the keyword-only fields (``KW_ONLY``), which dataclasses move last."""
    ordered = [f for f in fields if f.init and not f.kw_only] + [f for f in fields if f.init and f.kw_only]
    out: list[tuple[Field, bool]] = []
    keyword_only, defaulted = False, False
    for f in ordered:
        star = not keyword_only and (f.kw_only or (f.default is None and defaulted))
        keyword_only = keyword_only or star
        defaulted = defaulted or f.default is not None
        out.append((f, star))
    return out
