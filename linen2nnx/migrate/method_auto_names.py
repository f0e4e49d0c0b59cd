"""Linen auto-names that depend on which @nn.compact method runs first.

Linen's auto-name counters (``Dense_0``, ``Dense_1``) belong to the module instance and count in the
order modules are *built*: across ``__call__`` and the compact helpers it calls, that is the order the
methods run, which the planner, walking the methods as written, cannot know.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from linen2nnx.migrate.cst_utils import keyword_arg
from linen2nnx.migrate.rules import MOD_004

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext
    from linen2nnx.migrate.sites import Site


def auto_names_across_methods(ctx: FileContext, by_method: list[list[Site]]) -> None:
    """Auto-named modules of one class built by two ``@nn.compact`` methods: Linen numbers them in the
    order the calls *run*, which a planner walking the methods as written cannot know. A finding on
    each, where the map would swap the names (and weights) of a helper written before its caller."""
    classes: list[dict[str, list[Site]]] = []
    for sites in by_method:
        found: dict[str, list[Site]] = {}
        for site in sites:
            auto = re.fullmatch(r"(\w+)_\d+", site.linen_name or "")
            base = site.rule.auto_name if site.rule else site.user.name if site.user else None
            name = auto.group(1) if auto and site.container is None else base  # a loop's: its class's
            stateless = (site.rule is not None and site.rule.no_variables) or (
                site.user is not None and site.user.holds_nothing
            )  # a Dropout: its name holds no weight (and NNX's dropout streams differ anyway)
            if name and not stateless and keyword_arg(site.ctor, "name") is None:
                found.setdefault(name, []).append(site)
        classes.append(found)
    for name in {n for found in classes for n in found}:
        if sum(name in found for found in classes) < 2:
            continue
        for found in classes:
            for site in found.get(name, []):
                ctx.state.handled.add(site.ctor)
                ctx.report(
                    MOD_004,
                    site.ctor,
                    f"auto-named {name} built in several @nn.compact methods: Linen numbers them in the order "
                    "the methods run, not the order they are written",
                    "give these modules explicit name= (one attribute each)",
                )
