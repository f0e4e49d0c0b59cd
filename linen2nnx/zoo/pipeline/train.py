"""Linen training loop for the pipelined decoder (MaxText style: logical axis rules, unboxed state).

The task is the decoder zoo model's (next-token prediction on affine sequences, the same data).
Works with no mesh (the ``LogicallyPartitioned`` boxes are metadata only) and under
``with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_AXIS_RULES):`` for a mesh with axes
``('stage', 'data', 'fsdp')`` of ``AxisType.Auto`` (see :func:`make_mesh`): each stage's
weights and loop buffers live on their own slice of the ``stage`` axis.
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
from linen2nnx.zoo.decoder.train import _sample
from linen2nnx.zoo.pipeline.model import PipelineConfig, PipelineDecoder, remove_logically_partition

CONFIGS = {
    "tiny": {
        "model": PipelineConfig(
            vocab_size=64,
            emb_dim=32,
            mlp_dim=64,
            num_stages=2,
            layers_per_stage=1,
            num_pipeline_repeats=1,
            num_microbatches=2,
            dropout_rate=0.1,
            remat_policy="full",
        ),
        "seq_len": 16,
        "batch_size": 8,
        "learning_rate": 1e-2,
    },
    "bench": {
        "model": PipelineConfig(
            vocab_size=1024,
            emb_dim=256,
            mlp_dim=768,
            num_stages=4,
            layers_per_stage=2,
            num_pipeline_repeats=1,
            num_microbatches=8,
            dropout_rate=0.0,
            remat_policy="minimal",
        ),
        "seq_len": 128,
        "batch_size": 32,
        "learning_rate": 3e-3,
    },
}

CIRCULAR = {"num_pipeline_repeats": 2, "num_microbatches": 2}
"""``make_model(config, **CIRCULAR)``: the circular variant (two rounds through the stages)."""

MESH_AXES = ("stage", "data", "fsdp")

# Logical axis name -> mesh axes: the vmapped stage axis of the weights ('layers') and of the loop
# buffers ('activation_stage') on the stage mesh axis, the repeats of a circular pipeline replicated,
# batch over data+fsdp, the weights' embed dim over fsdp (no tensor parallelism).
LOGICAL_AXIS_RULES = (
    ("activation_stage", "stage"),
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_vocab", None),
    ("layers", "stage"),
    ("circular_repeats", None),
    ("vocab", None),
    ("embed", "fsdp"),
    ("mlp", None),
    ("norm", None),
)


def _config(config: str) -> dict:
    try:
        return CONFIGS[config]
    except KeyError:
        raise ValueError(f"unknown config {config!r}; expected one of {sorted(CONFIGS)}") from None


def make_model(config: str = "tiny", **overrides) -> PipelineDecoder:
    """The PipelineDecoder for a named config; ``overrides`` replace PipelineConfig fields."""
    return PipelineDecoder(dataclasses.replace(_config(config)["model"], **overrides))


def make_mesh(shape: tuple[int, int, int] | None = None) -> jax.sharding.Mesh:
    """A ``('stage', 'data', 'fsdp')`` mesh of ``AxisType.Auto`` axes (default: 2 stages)."""
    shape = shape or (2, 1, jax.device_count() // 2)
    return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


# ---------------------------------------------------------------------------------------------- data
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
def _init_tokens(config: str):
    """Init tokens: one row per microbatch (the pipeline splits the batch into microbatches)."""
    cfg = _config(config)
    return jnp.ones((cfg["model"].num_microbatches, cfg["seq_len"]), jnp.int32)


def make_optimizer(learning_rate: float):
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(learning_rate, weight_decay=1e-4))


def create_train_state(
    config: str = "tiny",
    seed: int = 0,
    learning_rate: float | None = None,
    model: PipelineDecoder | None = None,
):
    """A TrainState with unboxed params, initialised under jit (MaxText's ``setup_initial_state`` recipe).

    With an active mesh and ``nn.logical_axis_rules``, the state is created directly with the shardings
    its logical names map to (``nn.logical_to_mesh_sharding``), optimizer state included; with no mesh
    the boxes are metadata only and are dropped.
    """
    cfg = _config(config)
    model = model or make_model(config)
    tx = make_optimizer(learning_rate or cfg["learning_rate"])
    tokens = _init_tokens(config)

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
    return remove_logically_partition(state)


def param_partition_specs(config: str = "tiny", model: PipelineDecoder | None = None):
    """The logical PartitionSpec of every param (``P('layers', 'embed', 'mlp')`` etc.)."""
    model = model or make_model(config)
    tokens = _init_tokens(config)
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
        name="pipeline",
        logical_axis_rules=LOGICAL_AXIS_RULES,
        mesh_axes=MESH_AXES,
        long_batch=long_batch(config),
    )


def circular_spec(config: str = "tiny") -> LinenSide:
    """The spec of the circular variant (``make_model(config, **CIRCULAR)``)."""
    return dataclasses.replace(spec(config), model=make_model(config, **CIRCULAR), name="pipeline_circular")


def long_batch(config: str = "tiny", factor: int = 4) -> dict[str, np.ndarray]:
    """Two sequences ``factor`` times longer than training's: ``check`` runs the eval forward on them."""
    cfg = _config(config)
    return _sample(np.random.default_rng(1), cfg["model"].vocab_size, factor * cfg["seq_len"], 2)
