"""What ``train --deterministic`` could not switch off.

``--deterministic`` sets the rate of every ``nnx.Dropout`` (and attention dropout) to 0, and a Dropout
at rate 0 draws no random numbers. Randomness the model draws by hand -- a mask from
``self.rngs.dropout()``, stochastic depth, injected noise -- is not a Dropout layer and stays on, so the
run is no longer step-by-step comparable with a Linen run although the user asked for exactly that.
The RNG streams' counters tell: any counter a training step advanced is such a draw.
"""

from __future__ import annotations

from typing import Any


def stream_counts(state: Any) -> dict[str, Any]:
    """Every ``nnx.RngCount`` of the model part of a train state (``(model, optimizer)``): path -> its
    counter as a numpy array (one per layer in a stacked, scanned stack)."""
    import numpy as np
    from flax import nnx

    return {
        "/".join(map(str, path)): np.asarray(variable.get_value())
        for path, variable in nnx.to_flat_state(state[0])
        if isinstance(variable, nnx.RngCount) and BRIDGE_STREAMS not in map(str, path)
    }


#: Where ``nnx.bridge.ToNNX`` keeps the streams it advances on every call, whether or not the Linen code
#: draws (its Linen dropout is off under ``--deterministic``: loop.py)
BRIDGE_STREAMS = "to_nnx__rngs"


def draws_note(before: dict[str, Any], after: dict[str, Any], steps: int) -> str | None:
    """A note naming the streams a deterministic run still drew from, None when there were none."""
    import numpy as np

    drawn = {
        path: int(np.max(after[path] - count))
        for path, count in before.items()
        if path in after and not np.array_equal(after[path], count)
    }
    if not drawn:
        return None
    streams = ", ".join(
        f"{path.removesuffix('/count')} ({n} in {steps} step(s))" for path, n in sorted(drawn.items())
    )
    return (
        "--deterministic set every Dropout rate to 0, but the model still drew random numbers while "
        f"training: {streams}. Those draws (hand-written dropout, noise, stochastic depth) stay on, so "
        "its steps depend on the seed and are not comparable step by step with a Linen run"
    )
