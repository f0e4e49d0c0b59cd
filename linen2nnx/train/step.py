"""The train step: a pure function over the split ``(model, optimizer)`` state, jitted once.

This is the NNX fast path (``nnx.split`` once outside, ``nnx.merge`` inside ``jax.jit``), with the
state donated (``donate_argnums=0``) so XLA updates params and optimizer state in place. Inside,
gradients are taken with ``jax.value_and_grad`` over the ``nnx.Param`` state only; the rest of the
model state (BatchNorm statistics, RNG counters) is threaded through as a carry, so dropout keys
advance exactly as a plain NNX call would advance them, and a restored checkpoint continues them.

Gradient accumulation (``grad_accum=K``) splits the batch into K equal micro-batches along its
leading axis and sums their gradients in a ``jax.lax.scan``; for a loss that is a mean over the batch
the result equals one step on the whole batch within float32 rounding. ``remat`` wraps the loss in
``jax.checkpoint`` with a policy on top of whatever the model does itself (``nn.remat`` per layer
migrated to ``nnx.remat``): ``"full"`` saves nothing, ``"minimal"`` saves matmul outputs without a
batch dimension, ``"none"`` / ``None`` adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

REMAT_POLICIES = ("none", "minimal", "full")


def _checkpoint_policy(remat: str | None) -> Any:
    import jax

    if remat in (None, "none"):
        return None
    if remat == "full":
        return jax.checkpoint_policies.nothing_saveable
    if remat == "minimal":
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    raise ValueError(f"remat policy {remat!r}: expected one of {', '.join(REMAT_POLICIES)}")


def _micro_batches(batch: Mapping[str, Any], k: int) -> Any:
    """``batch`` with its leading axis ``B`` reshaped to ``(k, B // k)``."""
    import jax

    return jax.tree.map(lambda x: x.reshape(k, x.shape[0] // k, *x.shape[1:]), batch)


def make_loss_fn(graphdef: Any, side: Any, remat: str | None = None) -> Callable[..., Any]:
    """``(params, rest, batch) -> (loss, new rest)``: the spec's train-mode call and loss."""
    import jax
    from flax import nnx

    from linen2nnx.equivalence.sown import quiet_sow

    def loss_fn(params: Any, rest: Any, batch: Any) -> Any:
        model = nnx.merge(graphdef, params, rest, copy=True)  # fresh Variables at this trace level
        args, kwargs = side.inputs(batch)
        with quiet_sow():
            out = model(*args, **{**kwargs, **side.train_kwargs})
        loss = side.loss(out, batch)
        # sown values become attributes outside nnx.capture: keep the carry's structure fixed
        return loss, nnx.state(model, nnx.Not(nnx.Any(nnx.Param, nnx.Intermediate)))

    policy = _checkpoint_policy(remat)
    return loss_fn if policy is None else jax.checkpoint(loss_fn, policy=policy)


def make_train_step(
    graphdef: Any, side: Any, *, grad_accum: int = 1, remat: str | None = None
) -> Callable[[Any, Any], tuple[Any, dict[str, Any]]]:
    """The (un-jitted) pure step ``(state, batch) -> (state, {"loss", "grad_norm"})``.

    ``graphdef`` is that of ``(model, optimizer)``; ``side`` the spec's :class:`~linen2nnx.spec.LinenSide`
    (its ``inputs``, ``train_kwargs`` and ``loss`` are the NNX model's too).
    """
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    def step(state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        model, opt = nnx.merge(graphdef, state)
        model_gdef, params, rest = nnx.split(model, nnx.Param, nnx.Not(nnx.Intermediate))
        grad_fn = jax.value_and_grad(make_loss_fn(model_gdef, side, remat), has_aux=True)
        if grad_accum == 1:
            (loss, rest), grads = grad_fn(params, rest, batch)
        else:

            def micro(carry: Any, mb: Any) -> Any:
                rest, g_sum, l_sum = carry
                (loss, rest), g = grad_fn(params, rest, mb)
                return (rest, jax.tree.map(jnp.add, g_sum, g), l_sum + loss), None

            zeros = jax.tree.map(jnp.zeros_like, params)
            init = (rest, zeros, jnp.zeros((), jnp.float32))
            (rest, g_sum, l_sum), _ = jax.lax.scan(micro, init, _micro_batches(batch, grad_accum))
            grads = jax.tree.map(lambda g: g / grad_accum, g_sum)
            loss = l_sum / grad_accum
        nnx.update(model, rest)
        opt.update(model, grads)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads)}
        return nnx.state((model, opt), nnx.Not(nnx.Intermediate)), metrics

    return step


class JittedStep:
    """The step jitted over the state's flat list of arrays, state donated.

    Passing the ``nnx.State`` itself works too, but then every call flattens a tree of Variables in
    Python; over the leaves list the per-step dispatch of a small model is ~1.6x shorter. The loop
    carries the leaves and rebuilds the ``nnx.State`` (:meth:`unflatten`) only to save a checkpoint.
    With ``shardings``, the state goes in and comes out exactly as placed.
    """

    def __init__(
        self, step: Callable[..., Any], state: Any, shardings: Any = None, batch_sharding: Any = None
    ) -> None:
        import jax

        self.treedef = jax.tree.structure(state)

        def flat(leaves: list[Any], batch: Any) -> tuple[list[Any], dict[str, Any]]:
            new, metrics = step(jax.tree.unflatten(self.treedef, leaves), batch)
            return jax.tree.leaves(new), metrics

        kwargs: dict[str, Any] = {}
        if shardings is not None:
            placed = jax.tree.leaves(shardings)
            kwargs = {"in_shardings": (placed, batch_sharding), "out_shardings": (placed, None)}
        self.jitted = jax.jit(flat, donate_argnums=0, **kwargs)

    def flatten(self, state: Any) -> list[Any]:
        import jax

        return jax.tree.leaves(state)

    def unflatten(self, leaves: list[Any]) -> Any:
        import jax

        return jax.tree.unflatten(self.treedef, leaves)

    def __call__(self, leaves: list[Any], batch: Any) -> tuple[list[Any], dict[str, Any]]:
        return self.jitted(leaves, batch)

    def lower(self, leaves: Any, batch: Any) -> Any:
        return self.jitted.lower(leaves, batch)
