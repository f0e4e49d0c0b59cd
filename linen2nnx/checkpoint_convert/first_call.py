"""Linen cache entries the NNX model creates on its first call, as Linen's ``init`` did.

A ``self.variable('cache', ...)`` whose shape comes from the input (``lambda: jnp.ones(h.shape)``) is
created by Linen's ``init``, so every Linen checkpoint holds it; migrate moves its creation to the NNX
model's first call (``if not hasattr(self, 'c'): self.c = nnx.Cache(...)``, ``L2N-VAR-004``), so the
freshly built NNX model has no slot for it. Such an entry is ignored, with that reason, when one
abstract call of the NNX model on the pair's example batch creates an ``nnx.Cache`` at the very path the
name map gives it: the first call makes it as Linen's init made it. Any other homeless entry stays a
"no NNX home" problem: a value the model would not get back is never dropped quietly.
"""

from __future__ import annotations

from typing import Any

from linen2nnx.checkpoint_convert.mapping import Problem

FIRST_CALL = (
    "created by the NNX model's first call (an nnx.Cache migrate made lazy, as Linen's init creates it): "
    "the checkpoint's value is not restored"
)


def created_on_first_call(problems: list[Problem], pair: Any) -> tuple[dict[str, str], list[Problem]]:
    """(Linen leaf -> the NNX path the first call creates it at, the other problems) for the "no NNX
    home" cache leaves whose NNX path an abstract first call of the model creates as an ``nnx.Cache``."""
    homeless = {  # the NNX path the name map gives it, else (mapped structurally) its own path
        id(p): p.nnx or p.linen.partition("/")[2]
        for p in problems
        if p.kind == "no NNX home" and p.linen and p.linen.startswith("cache/")
    }
    if not homeless:
        return {}, problems
    created = _first_call_caches(pair)
    moved = {id(p) for p in problems if homeless.get(id(p)) in created}
    first = {p.linen: homeless[id(p)] for p in problems if id(p) in moved and p.linen}
    return first, [p for p in problems if id(p) not in moved]


def _first_call_caches(pair: Any) -> set[str]:
    """The paths of the ``nnx.Cache`` variables an (abstract) eval call of the NNX model creates; empty
    when the model cannot be built or called so."""
    from flax import nnx

    args, kwargs = pair.linen.call_args(False)
    found: dict[str, set[str]] = {}

    def build_and_call() -> Any:
        model = pair.make_nnx(0)
        found["before"] = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Cache))}
        model(*args, **kwargs)
        return model

    try:
        model = nnx.eval_shape(build_and_call)
    except Exception:
        return set()
    after = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Cache))}
    return after - found.get("before", set())
