"""The Linen loss at the step an NNX run starts from: the evidence that ``train --init-from``
continues the Linen run rather than a look-alike.

The Linen model is applied to its checkpoint's variables on the NNX run's first batch, in train mode
with dropout off (as ``train --deterministic`` runs), mutable collections updated as Linen's train
step does (BatchNorm then normalises with the batch statistics on both sides).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def linen_loss(pair: Any, linen_ckpt: str | Path, batch: Mapping[str, Any]) -> float:
    """The Linen train-mode loss of ``linen_ckpt``'s variables on ``batch`` (dropout off)."""
    import jax

    from linen2nnx.checkpoint_convert.read import read_linen_checkpoint
    from linen2nnx.equivalence.build import linen_dropout_off
    from linen2nnx.equivalence.mesh import strip_boxes

    side = pair.linen
    variables = strip_boxes(read_linen_checkpoint(str(linen_ckpt)).variables())

    @jax.jit
    def loss(variables: Any, batch: Any) -> Any:
        args, kwargs = side.inputs(batch)
        with linen_dropout_off():
            out = side.model.apply(
                variables, *args, **kwargs, **side.train_kwargs, mutable=list(side.state_collections), rngs={}
            )
        return side.loss(out[0], batch)

    return float(loss(variables, dict(batch)))
