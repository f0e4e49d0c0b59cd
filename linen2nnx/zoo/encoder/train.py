"""Linen training loop for the BERT-like encoder.

The synthetic task: ``[CLS]`` + random filler tokens + exactly one "marker" token at a random
position, padded to a fixed length; the class is which marker appears, so the ``[CLS]`` position
has to attend to it.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state

from linen2nnx.spec import LinenSide
from linen2nnx.zoo.encoder.model import PAD_ID, Encoder

CONFIGS = {
    "tiny": {
        "model": {
            "vocab_size": 32,
            "num_classes": 4,
            "max_len": 16,
            "emb_dim": 32,
            "num_heads": 2,
            "num_layers": 2,
            "mlp_dim": 64,
            "dropout_rate": 0.1,
            "attention_dropout_rate": 0.0,
        },
        "seq_len": 16,
        "batch_size": 16,
        "learning_rate": 5e-3,
    },
    "bench": {
        "model": {
            "vocab_size": 4096,
            "num_classes": 8,
            "max_len": 128,
            "emb_dim": 256,
            "num_heads": 4,
            "num_layers": 4,
            "mlp_dim": 1024,
            "dropout_rate": 0.1,
            "attention_dropout_rate": 0.1,
        },
        "seq_len": 128,
        "batch_size": 32,
        "learning_rate": 1e-3,
    },
}

CLS_ID = 1
FIRST_MARKER_ID = 2  # markers are FIRST_MARKER_ID .. FIRST_MARKER_ID + num_classes - 1; fillers follow


def _config(config: str) -> dict:
    try:
        return CONFIGS[config]
    except KeyError:
        raise ValueError(f"unknown config {config!r}; expected one of {sorted(CONFIGS)}") from None


def make_model(config: str = "tiny", **overrides) -> Encoder:
    return Encoder(**{**_config(config)["model"], **overrides})


# ---------------------------------------------------------------------------------------------- data
def _sample(rng: np.random.Generator, cfg: dict, batch_size: int) -> dict[str, np.ndarray]:
    num_classes, vocab, seq_len = cfg["model"]["num_classes"], cfg["model"]["vocab_size"], cfg["seq_len"]
    first_filler = FIRST_MARKER_ID + num_classes
    labels = rng.integers(0, num_classes, size=batch_size)
    lengths = rng.integers(seq_len // 2, seq_len + 1, size=batch_size)
    tokens = rng.integers(first_filler, vocab, size=(batch_size, seq_len))
    tokens[:, 0] = CLS_ID
    for i in range(batch_size):
        tokens[i, lengths[i] :] = PAD_ID
        tokens[i, rng.integers(1, lengths[i])] = FIRST_MARKER_ID + labels[i]
    return {"tokens": tokens.astype(np.int32), "y": labels.astype(np.int32)}


def batches(config: str = "tiny", seed: int = 0, batch_size: int | None = None):
    """An endless, deterministic stream of ``{"tokens": (B, L) int32, "y": (B,) int32}``."""
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
    tokens = jnp.ones((1, cfg["seq_len"]), jnp.int32)

    @jax.jit
    def init(rng, tokens):
        return model.init(rng, tokens, train=False)

    variables = init(jax.random.key(seed), tokens)
    tx = optax.adamw(learning_rate or cfg["learning_rate"])
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)


@jax.jit
def train_step(state, batch, dropout_rng):
    def compute_loss(params):
        logits = state.apply_fn(
            {"params": params}, batch["tokens"], train=True, rngs={"dropout": dropout_rng}
        )
        return loss_fn(logits, batch), logits

    (loss, logits), grads = jax.value_and_grad(compute_loss, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
    return state, {"loss": loss, "accuracy": accuracy}


@jax.jit
def eval_step(state, batch):
    logits = state.apply_fn({"params": state.params}, batch["tokens"], train=False)
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
def _inputs(batch):
    return (batch["tokens"],), {}


def spec(config: str = "tiny") -> LinenSide:
    cfg = _config(config)
    return LinenSide(
        model=make_model(config),
        batch=example_batch(config),
        loss=loss_fn,
        inputs=_inputs,
        optimizer=optax.adamw(cfg["learning_rate"]),
        name="encoder",
    )
