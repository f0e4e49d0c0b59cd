"""A local of ``setup()`` that holds a Linen class of the run, used only to build modules.

Hugging Face's stage collections pick the layer class once and build every layer from the local::

    layer = BottleNeckLayer if self.config.layer_type == "bottleneck" else BasicLayer
    layers = [layer(self.in_channels, self.out_channels, name="0")]
    for i in range(self.depth - 1):
        layers.append(layer(self.out_channels, self.out_channels, name=str(i + 1)))

(also ``linear_cls = ClippedEinsum if self.clipped else Einsum``, then ``self.q = linear_cls(...)``; or
just ``layer = BasicLayer``). Each ``layer(...)`` is planned as the class the local holds
(compact_aliases.py finds such locals, as in ``@nn.compact``; of a choice the first class stands for
all, where the candidates look alike to their builder: class_choices.py) and rewritten where it
stands; the local's statement stays in ``__init__``, where it picks the NNX class as it picked the
Linen one. A local that holds a remat is not taken (the verifier reports what is left).

Linen names such a use by its attribute or its ``name=``: one name whichever class builds it, so of a
choice the name map names one build's weights only, an ``L2N-MOD-013`` on each use (as for an
attribute ``setup()`` builds as two classes in two branches).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.class_choices import finish_choice
from linen2nnx.migrate.compact_aliases import CompactAlias
from linen2nnx.migrate.sites import ClassPlan


def finish_setup_aliases(ctx: Any, plan: ClassPlan, aliases: list[CompactAlias]) -> None:
    """Each use of a local chosen among several classes names the classes it may build (what its
    builder reads of its output is what they agree on), and gets the name map's caveat."""
    for alias in aliases:
        uses = [s for s in plan.sites.values() if isinstance(s.ctor, cst.Call) and s.ctor.func in alias.uses]
        finish_choice(ctx, uses, alias.classes, all_named=True)
