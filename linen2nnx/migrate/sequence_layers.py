"""Sizes through a layer that applies a list of callables in order (``nn.Sequential``).

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.sizing.Sizer`. The list's layers are
sites of their own; its plain callables are not, and one of them may change the last axis
(``nn.Sequential([nn.Dense(8), lambda z: z[..., :2]])``, ``nn.glu``, a helper that concatenates). Taking
the last layer's width for the list's output, or feeding the next layer the width before such a
callable, would size a layer wrongly with no finding; after one, sizes are unknown until a layer
sets its own (a Dense). Elementwise callables (``nn.relu``, ``partial(nn.gelu, approximate=False)``:
elementwise.py) keep the width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.dataflow_types import Feat, LayerInfo
from linen2nnx.migrate.elementwise import is_elementwise

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext
    from linen2nnx.migrate.sites import Site


def unfollowed_elements(ctx: FileContext, site: Site) -> tuple[int, frozenset[int]]:
    """How many elements a layer's list argument has (``nn.Sequential([nn.Dense(8), lambda z: z[...,
    :2], nn.LayerNorm()])``), and the positions of the plain callables the flow cannot tell keep the
    last axis (a slice, ``nn.glu``, a helper that concatenates): the sizes after one are unknown, not
    those of the layer before it. Built elements (sites) and elementwise functions are not among them."""
    listed = site.args.get(site.rule.varargs_list) if site.rule and site.rule.varargs_list else None
    if listed is None or not isinstance(listed.value, (cst.List, cst.Tuple)):
        return 0, frozenset()
    built = {inner.element for inner in site.nested if inner.element >= 0}
    elements = listed.value.elements
    return len(elements), frozenset(
        i for i, e in enumerate(elements) if i not in built and not is_elementwise(ctx, e.value)
    )


def through_list(
    site: Site, count: int, unfollowed: frozenset[int], infos: dict[int, LayerInfo]
) -> LayerInfo:
    """What applying ``site``'s list gives: each element's output fed to the next, an elementwise
    callable keeping it, one of ``unfollowed`` making it unknown (``infos``: the layers by position)."""

    def through(first: Feat) -> Feat:
        current = first
        for i in range(count):
            info = infos.get(i)
            if info is not None:
                current = info.output(current)
            elif i in unfollowed:
                current = Feat.unknown(f"a callable in {site.attr}'s list")
        return current

    if not infos:
        return LayerInfo(site.flow_key, None, out_unknown=True)
    return LayerInfo(site.flow_key, None, out_fn=through)
