"""The same random keys on both sides of a check.

Linen draws a key with ``self.make_rng('dropout')``, NNX with ``self.rngs.dropout()``; the two derive
it differently (Linen folds the module path into the apply's key, NNX counts calls of a stream), so a
model whose forward draws random numbers itself (stochastic depth, a VAE's sampling, noise layers)
computes something else on each side even when the twin is exact. ``nn.Dropout`` and attention dropout
are switched off instead (:mod:`.build`), but a hand-written draw has no rate to set to zero.

Inside :func:`same_keys` every draw gets one fixed key on both sides: Linen's ``Module.make_rng(name)``
and NNX's ``RngStream.__call__`` both return :data:`FIXED_SEED`'s key. The stream is not told apart: NNX
draws a stream the ``Rngs`` lacks from its ``default`` one (``rngs.noise()`` is the default stream), so a
key by stream name would differ on an exact twin. A twin that draws what Linen draws, in the same shape,
computes the same numbers; one that draws where Linen does not (a ``deterministic`` flag lost) still
differs. The patch is active only while a forward is traced or run, never while either model is built
or initialised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

FIXED_SEED = 0x5EED


def fixed_key() -> Any:
    """The key every draw gets inside :func:`same_keys`."""
    import jax

    return jax.random.key(FIXED_SEED)


@contextlib.contextmanager
def same_keys() -> Iterator[None]:
    """Linen's ``make_rng`` and NNX's RNG streams return :func:`fixed_key`."""
    import flax.linen as nn
    from flax.nnx import rnglib

    def linen_make_rng(self: Any, name: str = "params") -> Any:
        return fixed_key()

    def nnx_draw(self: Any) -> Any:
        return fixed_key()

    saved = nn.Module.make_rng, rnglib.RngStream.__call__
    nn.Module.make_rng, rnglib.RngStream.__call__ = linen_make_rng, nnx_draw  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.make_rng, rnglib.RngStream.__call__ = saved  # type: ignore[method-assign]
