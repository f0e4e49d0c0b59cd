"""Linen training loop for the Llama-style decoder (MaxText style: logical axis rules, unboxed state).

The synthetic task is next-token prediction on affine sequences ``x[t+1] = (a * x[t] + b) mod vocab``
with a random start, a fixed offset ``b`` and a multiplier ``a`` drawn per row from a few odd numbers:
the current token alone narrows the next one down to ``len(MULTIPLIERS)`` choices (learned in a few
dozen steps); attending to the previous pair pins it down exactly.

Works with no mesh (the ``LogicallyPartitioned`` boxes are metadata only) and under
``with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_AXIS_RULES):`` for a mesh with axes
``('data', 'fsdp', 'tensor')`` of ``AxisType.Auto`` (see :func:`make_mesh`).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import linen as nn
from flax.training import train_state

from linen2nnx.spec import LinenSide
from linen2nnx.zoo.decoder.model import Decoder, DecoderConfig

CONFIGS = {
    "tiny": {
        "model": DecoderConfig(
            vocab_size=64,
            emb_dim=32,
            num_heads=2,
            head_dim=16,
            mlp_dim=64,
            num_layers=2,
            dropout_rate=0.1,
            scan_layers=True,
            remat_policy="full",
        ),
        "seq_len": 16,
        "batch_size": 8,
        "learning_rate": 1e-2,
    },
    "bench": {
        "model": DecoderConfig(
            vocab_size=1024,
            emb_dim=256,
            num_heads=4,
            head_dim=64,
            mlp_dim=768,
            num_layers=4,
            dropout_rate=0.0,
            scan_layers=True,
            remat_policy="minimal",
        ),
        "seq_len": 128,
        "batch_size": 16,
        "learning_rate": 3e-3,
    },
}

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axis name -> mesh axes (MaxText style: batch over data+fsdp, weights' embed dim over fsdp,
# heads / mlp / vocab over tensor; the scanned 'layers' axis is not sharded).
LOGICAL_AXIS_RULES = (
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_kv", None),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("norm", None),
    ("layers", None),
)

MULTIPLIERS = (1, 3, 5, 7)
OFFSET = 3


def _config(config: str) -> dict:
    try:
        return CONFIGS[config]
    except KeyError:
        raise ValueError(f"unknown config {config!r}; expected one of {sorted(CONFIGS)}") from None


def make_model(config: str = "tiny", **overrides) -> Decoder:
    """The Decoder for a named config; ``overrides`` replace DecoderConfig fields (e.g. scan_layers=False)."""
    return Decoder(dataclasses.replace(_config(config)["model"], **overrides))


def make_mesh(shape: tuple[int, int, int] | None = None) -> jax.sharding.Mesh:
    """A ``('data', 'fsdp', 'tensor')`` mesh with ``AxisType.Auto`` axes (all devices on fsdp by default)."""
    shape = shape or (1, jax.device_count(), 1)
    return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


# ---------------------------------------------------------------------------------------------- data
def _sample(rng: np.random.Generator, vocab: int, seq_len: int, batch_size: int) -> dict[str, np.ndarray]:
    a = rng.choice(MULTIPLIERS, size=(batch_size, 1))
    tokens = np.empty((batch_size, seq_len + 1), np.int64)
    tokens[:, 0] = rng.integers(0, vocab, size=batch_size)
    for t in range(seq_len):
        tokens[:, t + 1] = (a[:, 0] * tokens[:, t] + OFFSET) % vocab
    tokens = tokens.astype(np.int32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}


def batches(config: str = "tiny", seed: int = 0, batch_size: int | None = None):
    """An endless, deterministic stream of ``{"inputs", "targets"}``, both (B, seq_len) int32."""
    cfg = _config(config)
    rng = np.random.default_rng(seed)
    while True:
        yield _sample(rng, cfg["model"].vocab_size, cfg["seq_len"], batch_size or cfg["batch_size"])


def example_batch(
    config: str = "tiny", seed: int = 0, batch_size: int | None = None
) -> dict[str, np.ndarray]:
    return next(batches(config, seed, batch_size))


def loss_fn(logits, batch):
    """Mean next-token cross entropy over all positions."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


# ------------------------------------------------------------------------------------------ training
def make_optimizer(learning_rate: float):
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(learning_rate, weight_decay=1e-4))


def create_train_state(
    config: str = "tiny", seed: int = 0, learning_rate: float | None = None, model: Decoder | None = None
):
    """A TrainState with unboxed params, initialised under jit (MaxText's ``setup_initial_state`` recipe).

    With an active mesh and ``nn.logical_axis_rules``, the state is created directly with the shardings
    its logical names map to (``nn.logical_to_mesh_sharding``), optimizer state included; with no mesh
    the boxes are metadata only and are dropped.
    """
    cfg = _config(config)
    model = model or make_model(config)
    tx = make_optimizer(learning_rate or cfg["learning_rate"])
    tokens = jnp.ones((1, cfg["seq_len"]), jnp.int32)

    def init_fn(rng):
        params_rng, dropout_rng = jax.random.split(rng)
        variables = model.init({"params": params_rng, "dropout": dropout_rng}, tokens, train=False)
        return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)

    mesh, rules = jax.sharding.get_mesh(), nn.get_logical_axis_rules()
    rng = jax.random.key(seed)
    abstract_state = jax.eval_shape(init_fn, rng)
    out_shardings = None
    if not mesh.empty and rules:
        out_shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract_state), mesh, rules)
    state = jax.jit(init_fn, out_shardings=out_shardings)(rng)
    return nn.unbox(state)


def param_partition_specs(config: str = "tiny", model: Decoder | None = None):
    """The logical PartitionSpec of every param (``P('layers', 'embed', 'mlp')`` etc.)."""
    model = model or make_model(config)
    tokens = jnp.ones((1, _config(config)["seq_len"]), jnp.int32)
    abstract = jax.eval_shape(functools.partial(model.init, train=False), jax.random.key(0), tokens)
    return nn.get_partition_spec(abstract)["params"]


@jax.jit
def train_step(state, batch, dropout_rng):
    def compute_loss(params):
        logits = state.apply_fn(
            {"params": params}, batch["inputs"], train=True, rngs={"dropout": dropout_rng}
        )
        return loss_fn(logits, batch), logits

    (loss, logits), grads = jax.value_and_grad(compute_loss, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["targets"])
    return state, {"loss": loss, "accuracy": accuracy}


@jax.jit
def eval_step(state, batch):
    logits = state.apply_fn({"params": state.params}, batch["inputs"], train=False)
    return {"loss": loss_fn(logits, batch), "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["targets"])}


def train(config: str = "tiny", steps: int = 50, seed: int = 0, learning_rate: float | None = None):
    """Train for ``steps`` steps; returns ``(state, losses)``. Runs under the caller's mesh/rules, if any."""
    state = create_train_state(config, seed, learning_rate)
    rng = jax.random.key(seed + 1)
    losses = []
    for _, batch in zip(range(steps), batches(config, seed)):
        rng, dropout_rng = jax.random.split(rng)
        state, metrics = train_step(state, batch, dropout_rng)
        losses.append(float(metrics["loss"]))
    return state, losses


# ---------------------------------------------------------------------------------------- decoding
def init_cache(model: Decoder, batch_size: int, max_length: int):
    """An empty KV cache (``cached_key``/``cached_value``/``cache_index`` per layer) for ``max_length`` tokens."""
    tokens = jnp.zeros((batch_size, max_length), jnp.int32)
    shapes = jax.eval_shape(functools.partial(model.init, decode=True), jax.random.key(0), tokens)["cache"]
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


@functools.partial(jax.jit, static_argnums=0)
def decode_step(model: Decoder, params, cache, tokens):
    """Feed ``tokens`` (B, n) at the cache's current position; returns ``(logits (B, n, V), cache)``."""
    logits, updates = model.apply({"params": params, "cache": cache}, tokens, decode=True, mutable=["cache"])
    return logits, updates["cache"]


def greedy_generate(model: Decoder, params, prompt, num_new_tokens: int):
    """Prefill ``prompt`` (B, P) through the cache, then greedily decode ``num_new_tokens`` tokens."""
    prompt = jnp.asarray(prompt, jnp.int32)
    cache = init_cache(model, prompt.shape[0], prompt.shape[1] + num_new_tokens)
    logits, cache = decode_step(model, params, cache, prompt)
    out = [prompt]
    for _ in range(num_new_tokens):
        token = jnp.argmax(logits[:, -1:], axis=-1).astype(jnp.int32)
        out.append(token)
        logits, cache = decode_step(model, params, cache, token)
    return jnp.concatenate(out, axis=1)


# ------------------------------------------------------------------------------------ checkpointing
def save_checkpoint(state, path) -> None:
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.abspath(path), state, force=True)
    checkpointer.wait_until_finished()


def load_checkpoint(path):
    """Restore a saved TrainState as a plain pytree (``{"step", "params", "opt_state"}``)."""
    return ocp.StandardCheckpointer().restore(os.path.abspath(path))


# -------------------------------------------------------------------------------------------- spec
def _inputs(batch):
    return (batch["inputs"],), {}


def spec(config: str = "tiny") -> LinenSide:
    cfg = _config(config)
    return LinenSide(
        model=make_model(config),
        batch=example_batch(config),
        loss=loss_fn,
        inputs=_inputs,
        optimizer=make_optimizer(cfg["learning_rate"]),
        name="decoder",
        logical_axis_rules=LOGICAL_AXIS_RULES,
        mesh_axes=MESH_AXES,
        long_batch=long_batch(config),
    )


def long_batch(config: str = "tiny", factor: int = 4) -> dict[str, np.ndarray]:
    """Two sequences ``factor`` times longer than training's: ``check`` runs the eval forward on them."""
    cfg = _config(config)
    return _sample(np.random.default_rng(1), cfg["model"].vocab_size, factor * cfg["seq_len"], 2)
