"""The lines a compact method's ``__init__`` replays: ``name = value`` bound once, and the unpacking of
an input's whole shape (``n, l, d = x.shape``), whose last name is the input's last axis."""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import single_assign


def shape_unpack_last(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``n, l, d = x.shape`` on a line of its own -> ``("d", x.shape[-1])``: the last name of an unpacking
    of an input's whole shape is its last axis, exactly as ``d = x.shape[-1]`` binds it (a starred or
    non-name target, or any other value, gives None)."""
    unpack = shape_unpack(stmt)
    if unpack is None:
        return None
    names, source = unpack
    return names[-1], cst.parse_expression(f"{source}.shape[-1]")


def shape_unpack(stmt: cst.CSTNode) -> tuple[list[str], str] | None:
    """``n, l, d = x.shape`` on a line of its own -> ``(["n", "l", "d"], "x")`` (a starred or non-name
    target, or any other value, gives None)."""
    if not (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
    ):
        return None
    target, value = stmt.body[0].targets[0].target, stmt.body[0].value
    if not (
        isinstance(target, (cst.Tuple, cst.List))
        and target.elements
        and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements)
        and isinstance(value, cst.Attribute)
        and value.attr.value == "shape"
        and isinstance(value.value, cst.Name)
    ):
        return None
    return [e.value.value for e in target.elements], value.value.value  # type: ignore[attr-defined]


def replayed_assign(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """The ``(name, value)`` a replayed local's line binds: :func:`single_assign`, else the last axis of
    a shape unpacking (:func:`shape_unpack_last`)."""
    return single_assign(stmt) or shape_unpack_last(stmt)
