"""Linen training loop for the MNIST-shaped CNN.

The synthetic task: each 28x28x1 image is Gaussian noise plus a bright square; the square's position
on a 2x5 grid (jittered by a pixel) is the class. No downloads, learnable in a few dozen steps.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state

from linen2nnx.spec import LinenSide
from linen2nnx.zoo.cnn.model import CNN

CONFIGS = {
    "tiny": {
        "model": {"features": (4, 8), "hidden": 32, "num_classes": 10, "dropout_rate": 0.25},
        "batch_size": 8,
        "learning_rate": 3e-3,
    },
    "bench": {
        "model": {"features": (32, 64), "hidden": 256, "num_classes": 10, "dropout_rate": 0.25},
        "batch_size": 128,
        "learning_rate": 1e-3,
    },
}

IMAGE_SHAPE = (28, 28, 1)
_SQUARE = 6
_NOISE = 0.3


class TrainState(train_state.TrainState):
    batch_stats: Any = None


def _config(config: str) -> dict:
    try:
        return CONFIGS[config]
    except KeyError:
        raise ValueError(f"unknown config {config!r}; expected one of {sorted(CONFIGS)}") from None


def make_model(config: str = "tiny", **overrides) -> CNN:
    return CNN(**{**_config(config)["model"], **overrides})


# ---------------------------------------------------------------------------------------------- data
def _sample(rng: np.random.Generator, num_classes: int, batch_size: int) -> dict[str, np.ndarray]:
    labels = rng.integers(0, num_classes, size=batch_size).astype(np.int32)
    images = rng.normal(scale=_NOISE, size=(batch_size, *IMAGE_SHAPE)).astype(np.float32)
    for i, label in enumerate(labels):
        row, col = divmod(int(label), 5)  # a 2x5 grid of positions; the square stays inside 28x28
        top = 3 + row * 14 + rng.integers(-1, 2)
        left = 1 + col * 5 + rng.integers(0, 2)
        images[i, top : top + _SQUARE, left : left + _SQUARE, 0] += 1.0
    return {"x": images, "y": labels}


def batches(config: str = "tiny", seed: int = 0, batch_size: int | None = None):
    """An endless, deterministic stream of ``{"x": (B, 28, 28, 1) float32, "y": (B,) int32}``."""
    cfg = _config(config)
    rng = np.random.default_rng(seed)
    while True:
        yield _sample(rng, cfg["model"]["num_classes"], batch_size or cfg["batch_size"])


def example_batch(
    config: str = "tiny", seed: int = 0, batch_size: int | None = None
) -> dict[str, np.ndarray]:
    return next(batches(config, seed, batch_size))


def loss_fn(logits, batch):
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


# ------------------------------------------------------------------------------------------ training
def create_train_state(config: str = "tiny", seed: int = 0, learning_rate: float | None = None) -> TrainState:
    cfg = _config(config)
    model = make_model(config)
    x = jnp.ones((1, *IMAGE_SHAPE), jnp.float32)

    @jax.jit
    def init(rng, x):
        return model.init(rng, x, train=False)

    variables = init(jax.random.key(seed), x)
    tx = optax.adam(learning_rate or cfg["learning_rate"])
    return TrainState.create(
        apply_fn=model.apply,
        params=variables["params"],
        batch_stats=variables["batch_stats"],
        tx=tx,
    )


@jax.jit
def train_step(state: TrainState, batch, dropout_rng):
    def compute_loss(params):
        logits, updates = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            batch["x"],
            train=True,
            mutable=["batch_stats"],
            rngs={"dropout": dropout_rng},
        )
        return loss_fn(logits, batch), (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(compute_loss, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    state = state.replace(batch_stats=updates["batch_stats"])
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
    return state, {"loss": loss, "accuracy": accuracy}


@jax.jit
def eval_step(state: TrainState, batch):
    logits = state.apply_fn(
        {"params": state.params, "batch_stats": state.batch_stats}, batch["x"], train=False
    )
    return {"loss": loss_fn(logits, batch), "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["y"])}


def train(config: str = "tiny", steps: int = 50, seed: int = 0, learning_rate: float | None = None):
    """Train for ``steps`` steps; returns ``(state, losses)``."""
    state = create_train_state(config, seed, learning_rate)
    rng = jax.random.key(seed + 1)
    losses = []
    for _, batch in zip(range(steps), batches(config, seed)):
        rng, dropout_rng = jax.random.split(rng)
        state, metrics = train_step(state, batch, dropout_rng)
        losses.append(float(metrics["loss"]))
    return state, losses


def save_checkpoint(state: TrainState, path) -> None:
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.abspath(path), state, force=True)
    checkpointer.wait_until_finished()


def load_checkpoint(path):
    """Restore a saved TrainState as a plain pytree (``{"step", "params", "batch_stats", "opt_state"}``)."""
    return ocp.StandardCheckpointer().restore(os.path.abspath(path))


# -------------------------------------------------------------------------------------------- spec
def spec(config: str = "tiny") -> LinenSide:
    cfg = _config(config)
    return LinenSide(
        model=make_model(config),
        batch=example_batch(config),
        loss=loss_fn,
        mutable=("batch_stats",),
        optimizer=optax.adam(cfg["learning_rate"]),
        name="cnn",
    )
