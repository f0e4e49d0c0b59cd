"""What ``train --deterministic`` could not switch off.

``--deterministic`` sets the rate of every ``nnx.Dropout`` (and attention dropout) to 0, and a Dropout
at rate 0 draws no random numbers. Randomness the model draws by hand -- a mask from
``self.rngs.dropout()``, stochastic depth, injected noise -- is not a Dropout layer and stays on, so the
run is no longer step-by-step comparable with a Linen run although the user asked for exactly that.
The RNG streams' counters tell: any counter a training step advanced is such a draw.
"""

from __future__ import annotations

from typing import Any


def stream_counts(state: Any) -> dict[str, int]:
    """Every ``nnx.RngCount`` of the model part of a train state (``(model, optimizer)``): path -> count."""
    from flax import nnx

    counts = {}
    for path, variable in nnx.to_flat_state(state[0]):
        if isinstance(variable, nnx.RngCount):
            counts["/".join(map(str, path))] = int(variable.get_value())
    return counts


def draws_note(before: dict[str, int], after: dict[str, int], steps: int) -> str | None:
    """A note naming the streams a deterministic run still drew from, None when there were none."""
    drawn = {path: after[path] - count for path, count in before.items() if after.get(path, count) != count}
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
