"""A decoder whose layers run as a pipeline, written the way MaxText's Linen pipeline is.

The layers are split into ``num_stages`` stages of ``layers_per_stage`` layers. The stages are one
module class vmapped over a leading stage axis (``nn.vmap`` with ``variable_axes={'params': 0}``,
``spmd_axis_name='stage'`` and the partition name ``'layers'``, which the logical axis rules map to
the ``stage`` mesh axis), so every stage's weights sit on the device that runs it. The batch is cut
into ``num_microbatches`` microbatches that move one stage further each iteration: each iteration
runs every stage once on its current input (``jnp.roll`` shifts the outputs one stage on, a
collective permute when the stage axis is sharded), the first stage reads the next microbatch and
the last stage's output is written back in its place.

A second ``nn.vmap`` over ``num_pipeline_repeats`` (partition name ``'circular_repeats'``) gives every
stage one block per repeat, so the weights are ``(repeats, stages, ...)``. With more than one repeat
the pipeline is circular: a microbatch goes round the stages that many times. Each iteration every stage runs all its repeats' blocks and keeps
the one its microbatch is at, which keeps the weights in their stored layout (no gather of the
current repeat's weights) at ``repeats`` times the compute: this model is for checking a migration,
not for speed.

The iterations run in ``nn.scan`` of a plain function of the module (``variable_broadcast='params'``:
every iteration sees all the weights) wrapped in ``nn.remat``, both built by utility functions the
way MaxText's ``pipeline_utils`` builds them; ``remove_logically_partition`` unboxes
``LogicallyPartitioned`` weights.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

Array = jax.Array
DType = Any

STATE_AXES = ("activation_stage", "activation_batch", "activation_length", "activation_embed")
"""Logical names of the per-stage loop buffers ``(stages, microbatch, length, embed)``."""


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    vocab_size: int = 256
    emb_dim: int = 64
    mlp_dim: int = 128
    num_stages: int = 2
    layers_per_stage: int = 1
    num_pipeline_repeats: int = 1
    num_microbatches: int = 4
    dropout_rate: float = 0.0
    dtype: DType = jnp.float32
    param_dtype: DType = jnp.float32
    normalization_layer_epsilon: float = 1e-6
    remat_policy: str = "full"  # 'full' | 'minimal' | 'save_dots'


def remat_policy(name: str):
    """The ``jax.checkpoint`` policy for a remat policy name (``None`` rematerialises everything)."""
    if name == "full":
        return None
    if name == "minimal":
        return jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims
    if name == "save_dots":
        return jax.checkpoint_policies.checkpoint_dots
    raise ValueError(f"unknown remat_policy {name!r}; expected 'full', 'minimal' or 'save_dots'")


def remove_logically_partition(tree):
    """The tree with every ``LogicallyPartitioned`` box replaced by the array it holds."""

    def unbox(leaf):
        return leaf.unbox() if isinstance(leaf, nn.LogicallyPartitioned) else leaf

    return jax.tree.map(unbox, tree, is_leaf=lambda leaf: isinstance(leaf, nn.LogicallyPartitioned))


def create_pipeline_scan(body, length: int, policy_name: str):
    """``nn.scan`` over ``length`` iterations of ``nn.remat(body)``; body is ``(module, carry, x)``.

    Every iteration sees all the weights (``variable_broadcast='params'``) and draws its own dropout.
    """
    body = nn.remat(body, prevent_cse=False, policy=remat_policy(policy_name))
    return nn.scan(
        body,
        variable_broadcast="params",
        split_rngs={"params": False, "dropout": True},
        length=length,
    )


def kernel_init(axes: tuple[str, str]):
    return nn.with_logical_partitioning(nn.initializers.lecun_normal(), axes)


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation with a learned per-feature scale."""

    epsilon: float = 1e-6
    dtype: DType = jnp.float32
    param_dtype: DType = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = jnp.asarray(x, jnp.float32)
        mean2 = jnp.mean(jax.lax.square(x), axis=-1, keepdims=True)
        y = jnp.asarray(x * jax.lax.rsqrt(mean2 + self.epsilon), self.dtype)
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
            (x.shape[-1],),
            self.param_dtype,
        )
        return y * jnp.asarray(scale, self.dtype)


class MixerLayer(nn.Module):
    """Pre-norm residual MLP over a learned mix of each token and the token before it."""

    config: PipelineConfig

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        cfg = self.config
        x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))
        y = RMSNorm(cfg.normalization_layer_epsilon, cfg.dtype, cfg.param_dtype, name="norm")(x)
        previous = jnp.pad(y[:, :-1], ((0, 0), (1, 0), (0, 0)))
        mix = self.param(
            "token_mix",
            nn.with_logical_partitioning(nn.initializers.constant(0.5), ("norm",)),
            (cfg.emb_dim,),
            cfg.param_dtype,
        )
        h = nn.Dense(
            cfg.mlp_dim,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            kernel_init=kernel_init(("embed", "mlp")),
            name="wi",
        )(y * mix + previous * (1.0 - mix))
        h = nn.Dropout(rate=cfg.dropout_rate)(nn.silu(h), deterministic=deterministic)
        return x + nn.Dense(
            cfg.emb_dim,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            kernel_init=kernel_init(("mlp", "embed")),
            name="wo",
        )(h)


class StageBlock(nn.Module):
    """The layers one pipeline stage runs: ``layers_0`` ... ``layers_{layers_per_stage - 1}``."""

    config: PipelineConfig

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        for i in range(self.config.layers_per_stage):
            x = MixerLayer(self.config, name=f"layers_{i}")(x, deterministic)
        return x


class Pipeline(nn.Module):
    """``(batch, length, embed) -> (batch, length, embed)`` through every stage, microbatch by microbatch.

    The weights of ``stages`` are ``(repeats, stages, ...)``; ``repeats`` is 1 unless the pipeline is
    circular.
    """

    config: PipelineConfig

    def setup(self):
        cfg = self.config
        self.stages = nn.vmap(
            nn.vmap(
                StageBlock,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(0, None),
                out_axes=0,
                axis_size=cfg.num_stages,
                spmd_axis_name="stage",
                metadata_params={nn.PARTITION_NAME: "layers"},
            ),
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(None, None),
            out_axes=0,
            axis_size=cfg.num_pipeline_repeats,
            metadata_params={nn.PARTITION_NAME: "circular_repeats"},
        )(cfg)

    def run_stages(self, inputs: Array, iteration: Array, deterministic: bool) -> Array:
        """Every stage on its input ``(stages, microbatch, ...)``, with its current repeat's block."""
        cfg = self.config
        outputs = self.stages(inputs, deterministic)
        stage_ids = jnp.arange(cfg.num_stages)
        repeats = jnp.clip((iteration - stage_ids) // cfg.num_microbatches, 0, cfg.num_pipeline_repeats - 1)
        return outputs[repeats, stage_ids]

    def iterate(self, carry: dict, deterministic: bool) -> dict:
        """Run the stages once; shift their outputs one stage on; bank the last stage's output."""
        cfg = self.config
        iteration, io = carry["iteration"], carry["io"]
        first = jax.lax.dynamic_index_in_dim(io, iteration % cfg.num_microbatches, keepdims=False)
        inputs = carry["shift"].at[0].set(first)
        inputs = nn.with_logical_constraint(inputs, STATE_AXES)
        outputs = self.run_stages(inputs, iteration, deterministic)
        finished = (iteration - cfg.num_stages + 1) % cfg.num_microbatches
        banked = jax.lax.dynamic_update_index_in_dim(io, outputs[-1], finished, 0)
        io = jnp.where(iteration >= cfg.num_stages - 1, banked, io)
        shift = nn.with_logical_constraint(jnp.roll(outputs, 1, axis=0), STATE_AXES)
        return {"iteration": iteration + 1, "io": io, "shift": shift}

    def __call__(self, x: Array, deterministic: bool = True) -> Array:
        cfg = self.config
        batch, length, emb = x.shape
        micro = batch // cfg.num_microbatches
        carry = {
            "iteration": jnp.array(0, jnp.int32),
            "io": x.reshape(cfg.num_microbatches, micro, length, emb),
            "shift": jnp.zeros((cfg.num_stages, micro, length, emb), x.dtype),
        }

        def run_iteration(pipeline, carry, _):
            # Linen lifts transform functions whose first argument is a module (here ``self``)
            return pipeline.iterate(carry, deterministic), None

        num_iterations = cfg.num_microbatches * cfg.num_pipeline_repeats + cfg.num_stages - 1
        scan = create_pipeline_scan(run_iteration, num_iterations, cfg.remat_policy)
        carry, _ = scan(self, carry, None)
        return carry["io"].reshape(batch, length, emb)


class PipelineDecoder(nn.Module):
    """Token ids (batch, length) -> next-token logits (batch, length, vocab)."""

    config: PipelineConfig

    @nn.compact
    def __call__(self, tokens: Array, *, train: bool = False) -> Array:
        cfg = self.config
        y = nn.Embed(
            num_embeddings=cfg.vocab_size,
            features=cfg.emb_dim,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            embedding_init=nn.with_logical_partitioning(nn.initializers.normal(1.0), ("vocab", "embed")),
            name="token_embedder",
        )(tokens.astype(jnp.int32))
        y = nn.with_logical_constraint(y, ("activation_batch", "activation_length", "activation_embed"))
        y = Pipeline(cfg, name="pipeline")(y, deterministic=not train)
        y = RMSNorm(cfg.normalization_layer_epsilon, cfg.dtype, cfg.param_dtype, name="decoder_norm")(y)
        logits = nn.Dense(
            cfg.vocab_size,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            kernel_init=kernel_init(("embed", "vocab")),
            name="logits_dense",
        )(y)
        return nn.with_logical_constraint(
            logits, ("activation_batch", "activation_length", "activation_vocab")
        )
