"""Sizes after the loops of a loop nest (see sites.LoopNest), for the feature-size dataflow.

``__init__`` replays a nest's loops and appends each module to its ``nnx.List``, so a size read from
a list's last element (``self.block[-1].out_features``) is the last module built so far. After the
whole nest that holds only if the loops built one (else the size from before them: a choice). After
an inner loop (``for b in range(n)`` in ``for s, n in enumerate(self.stages)``) it holds only if that
loop ran this time: with ``n == 0`` the last element is an earlier stage's, or there is none, so a
module the nest builds outside that loop (a norm after each stage) cannot be sized by it.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import inside
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.loop_runs import ran_test
from linen2nnx.migrate.sites import ClassPlan, LoopNest, Site


def after_nest(plan: ClassPlan, loop: cst.For, before: dict[str, Feat], env: dict[str, Feat]) -> None:
    """After the outer loop of a nest: a size read from a list's last element, or the size from before
    the loops when they built none."""
    nest = plan.nests.get(loop)
    for site in nest.sites if nest is not None else ():
        last = f"self.{site.attr}[-1]."
        for name, feat in list(env.items()):
            previous = before.get(name)
            if (
                feat.kind == "expr"
                and feat.expr.startswith(last)
                and previous is not None
                and previous != feat
            ):
                env[name] = Feat(
                    "choice",
                    expr=f"len(self.{site.attr}) > 0",
                    elements=(feat, previous),
                    reason=f"a size that depends on whether the loops built a {site.attr}",
                )


def after_inner_loop(
    plan: ClassPlan,
    loop: cst.For,
    before: dict[str, Feat],
    env: dict[str, Feat],
    parent_of: Callable[[cst.CSTNode], cst.CSTNode | None],
) -> None:
    """After an inner loop of a nest whose other modules are built outside it: a size read from the
    last element the inner loop builds is unknown (it may not have run this time)."""
    nest = next(
        (n for n in plan.nests.values() if n.outer is not loop and inside(loop, n.outer, parent_of)), None
    )
    if nest is None or all(inside(nest.statements[id(s)], loop, parent_of) for s in nest.sites):
        return  # only this loop's modules read their list's last element
    for site in nest.sites:
        if not inside(nest.statements[id(site)], loop, parent_of):
            continue
        last = f"self.{site.attr}[-1]."
        for name, feat in list(env.items()):
            if feat.kind == "expr" and feat.expr.startswith(last) and before.get(name) != feat:
                env[name] = Feat.unknown(
                    f"a size from before a loop that may not run ({ran_test(loop.iter)})"
                )


def in_inner_loop(nest: LoopNest, site: Site, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """Whether ``site`` of ``nest`` is built in a loop inside the nest's outer loop."""
    cur = parent_of(nest.statements[id(site)])
    while cur is not None and cur is not nest.outer:
        if isinstance(cur, cst.For):
            return True
        cur = parent_of(cur)
    return False
