"""Optimizers that mask or label parameters by a function of the params tree: the train-state
rewrite is blocked where one is in play.

NNX hands such a function an ``nnx.State``, whose paths differ from Linen's params tree (module names
in snake_case, a ``value`` at each leaf), so a mask written for Linen's tree matches other leaves or
fails: weight decay on a LayerNorm scale Linen never decays, silently. A mask may reach the optimizer
through the ``tx=`` expression, a helper that builds the optimizer or a name inside ``optax.chain``,
so any masking optax call of the file's training code counts.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_008
from linen2nnx.migrate.training.planner import TrainPlanner

MASKING = frozenset({"optax.masked", "optax.multi_transform", "optax.transforms.masked"})
DECAY = frozenset({"optax.add_decayed_weights", "optax.transforms.add_decayed_weights"})


def masked_by_path(plan: TrainPlanner, tx: cst.Arg) -> bool:
    """Blocked where the optimizer masks or labels parameters by a function of the params tree
    (``optax.adamw(..., mask=decay_mask_fn)``, ``optax.masked``, ``optax.multi_transform``): NNX hands it
    an ``nnx.State``, whose paths differ (snake_case module names, a ``value`` at each leaf), so a mask
    written for Linen's tree fails or, worse, matches nothing and decays every parameter."""
    # the tx expression's own calls first (the finding points there); then, since a mask may reach the
    # optimizer through its binding, a helper that builds it or a name inside optax.chain, any masking
    # optax call of the file's training code
    calls = [n for n in plan.values.nodes if isinstance(n, cst.Call) and not plan.values.in_module_class(n)]
    for node in [*nodes_of(tx.value, (cst.Call,)), *calls]:
        assert isinstance(node, cst.Call)
        if _masks(plan, node):
            plan.block(
                TRAIN_008,
                node,
                f"{code(node.func)}(...) masks or labels parameters by a function of the params tree: NNX "
                "hands it an nnx.State, whose paths differ (module names in snake_case, a `value` at each "
                "leaf), so a mask written for Linen's tree matches other leaves or fails",
                "write the mask over nnx.State paths (or filter with nnx.Param subsets) and build the "
                "optimizer by hand",
            )
            return True
    return False


def _masks(plan: TrainPlanner, call: cst.Call) -> bool:
    """``f(..., mask=m)``, ``optax.masked`` / ``multi_transform``, or ``optax.add_decayed_weights(wd, m)``
    (its mask given by position)."""
    if any(a.keyword is not None and a.keyword.value == "mask" for a in call.args):
        return True
    qualnames = plan.values.qualnames(call.func)
    if qualnames & MASKING:
        return True
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return bool(qualnames & DECAY) and len(positional) >= 2
