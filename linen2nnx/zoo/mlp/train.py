"""Linen training loop for the MLP classifier (a fixed random linear teacher labels Gaussian inputs)."""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state

from linen2nnx.spec import LinenSide
from linen2nnx.zoo.mlp.model import MLP

CONFIGS = {
    "tiny": {
        "model": {"hidden": 32, "num_classes": 4, "dropout_rate": 0.1},
        "in_dim": 16,
        "batch_size": 32,
        "learning_rate": 1e-2,
    },
    "bench": {
        "model": {"hidden": 1024, "num_classes": 10, "dropout_rate": 0.1},
        "in_dim": 512,
        "batch_size": 256,
        "learning_rate": 1e-3,
    },
}

_TEACHER_SEED = 1234


def _config(config: str) -> dict:
    try:
        return CONFIGS[config]
    except KeyError:
        raise ValueError(f"unknown config {config!r}; expected one of {sorted(CONFIGS)}") from None


def make_model(config: str = "tiny", **overrides) -> MLP:
    return MLP(**{**_config(config)["model"], **overrides})


# ---------------------------------------------------------------------------------------------- data
@functools.cache
def _teacher(in_dim: int, num_classes: int) -> np.ndarray:
    return np.random.default_rng(_TEACHER_SEED).normal(size=(in_dim, num_classes)).astype(np.float32)


def _sample(rng: np.random.Generator, cfg: dict, batch_size: int) -> dict[str, np.ndarray]:
    x = rng.normal(size=(batch_size, cfg["in_dim"])).astype(np.float32)
    y = np.argmax(x @ _teacher(cfg["in_dim"], cfg["model"]["num_classes"]), axis=-1).astype(np.int32)
    return {"x": x, "y": y}


def batches(config: str = "tiny", seed: int = 0, batch_size: int | None = None):
    """An endless, deterministic stream of batches ``{"x": (B, D) float32, "y": (B,) int32}``."""
    cfg = _config(config)
    rng = np.random.default_rng(seed)
    while True:
        yield _sample(rng, cfg, batch_size or cfg["batch_size"])


def example_batch(
    config: str = "tiny", seed: int = 0, batch_size: int | None = None
) -> dict[str, np.ndarray]:
    return next(batches(config, seed, batch_size))


def loss_fn(logits, batch):
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


# ------------------------------------------------------------------------------------------ training
def create_train_state(config: str = "tiny", seed: int = 0, learning_rate: float | None = None):
    cfg = _config(config)
    model = make_model(config)
    x = jnp.asarray(example_batch(config)["x"])

    @jax.jit
    def init(rng, x):
        return model.init(rng, x, train=False)

    variables = init(jax.random.key(seed), x)
    tx = optax.adam(learning_rate or cfg["learning_rate"])
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)


@jax.jit
def train_step(state, batch, dropout_rng):
    def compute_loss(params):
        logits = state.apply_fn({"params": params}, batch["x"], train=True, rngs={"dropout": dropout_rng})
        return loss_fn(logits, batch), logits

    (loss, logits), grads = jax.value_and_grad(compute_loss, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
    return state, {"loss": loss, "accuracy": accuracy}


@jax.jit
def eval_step(state, batch):
    logits = state.apply_fn({"params": state.params}, batch["x"], train=False)
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


def save_checkpoint(state, path) -> None:
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.abspath(path), state, force=True)
    checkpointer.wait_until_finished()


def load_checkpoint(path):
    """Restore a saved TrainState as a plain pytree (``{"step", "params", "opt_state"}``)."""
    return ocp.StandardCheckpointer().restore(os.path.abspath(path))


# -------------------------------------------------------------------------------------------- spec
def spec(config: str = "tiny") -> LinenSide:
    cfg = _config(config)
    return LinenSide(
        model=make_model(config),
        batch=example_batch(config),
        loss=loss_fn,
        optimizer=optax.adam(cfg["learning_rate"]),
        name="mlp",
    )
