"""Sizes of a layer's inputs other than the one the dataflow follows: an attention layer's keys and
values (``in_kv_features``), and a submodule's second input passed inside a loop (the encoder output
every block of a decoder attends to). Functions of the :class:`~linen2nnx.migrate.sizing.Sizer`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_utils import names_in, parse_expression
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.setup_order import ready_at
from linen2nnx.migrate.sites import ClassPlan, Site

if TYPE_CHECKING:
    from linen2nnx.migrate.sizing import Sizer


def invariant_input(
    sizer: Sizer, plan: ClassPlan, site: Site, given: Feat, params: list[str], node: cst.CSTNode
) -> bool:
    """Whether an input other than the first, passed inside a loop, has one known size in every
    iteration (every pass of the flow saw the same size, and it reads no loop variable)."""
    assert site.loop is not None
    if given.kind == "unknown":
        return False
    size = sizer.static_size(plan, given, params, node)
    return size is not None and site.loop.var not in names_in(parse_expression(size))


def kv_size(
    sizer: Sizer, plan: ClassPlan, site: Site, kv: list[Feat | None], params: list[str], node: cst.CSTNode
) -> str | None:
    """``in_kv_features`` of an attention layer whose keys and values are another value than its
    queries: their static size when every application gives the same one, outside any loop; else a
    required argument (a trace would show the query's size, the layer's input, not theirs)."""
    first = kv[0]
    plain = site.loop is None and site.elements is None and site.nest is None
    static = (
        sizer.static_size(plan, first, params, node)
        if plain and first is not None and all(f == first for f in kv)
        else None
    )
    if static is not None:  # a size __init__ can read where the layer is built (setup_order.py)
        static = ready_at(plan.setup, None if site.hoisted else site.ctor, static)
    if static is None:
        what = f"key / value feature size of {plan.name}.{site.attr} (in_kv_features)"
        static = sizer._required_arg(plan, site, what, node, child_arg="in_kv_features")
    return None if static == site.in_expr else static
