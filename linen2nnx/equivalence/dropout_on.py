"""One train-mode forward with dropout on, the same masks on both sides.

Every other forward of ``check`` runs with dropout off (:mod:`.build`), so a dropout the migration
moved -- before the activation it followed, after the residual add it sat inside, onto the other
operand of a layer -- changes no number compared: with rate 0 it is the identity wherever it sits.
Trained, the two models differ (``gelu(mask * x) != mask * gelu(x)``).

Here both sides run in train mode with dropout on, under :func:`.randomness.same_keys`: every draw
(Linen's ``make_rng``, NNX's streams) gets one fixed key, and ``nn.Dropout`` / ``nnx.Dropout`` (and
attention dropout) draw their mask the same way from it, so an exact twin gives the same numbers and
a moved dropout does not (``forward/dropout``, ``loss/dropout``). Only a model that has an active
dropout runs it (or a Linen part behind the bridge, whose dropout the NNX model cannot see).
"""

from __future__ import annotations

from typing import Any

import jax

from linen2nnx.equivalence.build import Inputs
from linen2nnx.equivalence.compare import LeafResult, compare_leaf, compare_outputs, missing
from linen2nnx.equivalence.jitting import fast_jit
from linen2nnx.equivalence.randomness import same_keys
from linen2nnx.equivalence.sown import call_capturing
from linen2nnx.equivalence.tolerances import Tolerances

CHECK = "forward/dropout"


def has_active_dropout(model: Any) -> bool:
    """Whether ``model`` holds a dropout that draws a mask in training: an ``nnx.Dropout`` or attention
    with a rate above 0 not fixed to deterministic, or a Linen part behind ``nnx.bridge.ToNNX``."""
    from flax import nnx

    for _, module in nnx.iter_modules(model):
        if isinstance(module, nnx.bridge.ToNNX):
            return True
        if isinstance(module, nnx.Dropout) and module.rate > 0 and module.deterministic is not True:
            return True
        if isinstance(module, nnx.MultiHeadAttention) and module.dropout_rate > 0:
            return True
    return False


def dropout_leaves(pair: Any, sides: Any, tols: Tolerances, depth: int) -> list[LeafResult]:
    """``forward/dropout`` and ``loss/dropout`` leaves; none when the NNX model has no active dropout."""
    if not has_active_dropout(sides.nnx_model):
        return []
    ins = Inputs.of(pair, True)
    linen_out, linen_loss = _linen_forward(pair, ins)(
        sides.linen_variables, pair.linen.apply_rngs(), ins.dynamic
    )
    try:
        nnx_out, nnx_loss = _nnx_forward(pair, sides.nnx_model, ins)
    except Exception as e:
        note = f"NNX side raised {type(e).__name__}: {e}"
        return [missing(CHECK, "out", (), note), missing("loss/dropout", "loss", (), note)]
    leaves = compare_outputs(CHECK, linen_out, nnx_out, tols, depth)
    leaves.append(compare_leaf("loss/dropout", "loss", linen_loss, nnx_loss, tols, depth=depth))
    return leaves


def _linen_forward(pair: Any, ins: Inputs) -> Any:
    side = pair.linen
    mutable = list(side.mutable) or False

    def forward(variables: Any, rngs: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins.rebuild(dynamic)
        with same_keys():
            out = side.model.apply(variables, *args, **kwargs, rngs=rngs, mutable=mutable)
        out = out[0] if mutable else out
        return out, side.loss(out, batch)

    return fast_jit(forward)


def _nnx_forward(pair: Any, model: Any, ins: Inputs) -> tuple[Any, Any]:
    from flax import nnx

    gdef, state = nnx.split(model)

    def forward(state: Any, dynamic: list[Any]) -> Any:
        args, kwargs, batch = ins.rebuild(dynamic)
        with same_keys():  # copy=True: the model itself keeps its state (BatchNorm updates a copy)
            out, _, _ = call_capturing(lambda: nnx.merge(gdef, state, copy=True), args, kwargs)
        return out, pair.linen.loss(out, batch)

    return jax.block_until_ready(fast_jit(forward)(state, ins.dynamic))
