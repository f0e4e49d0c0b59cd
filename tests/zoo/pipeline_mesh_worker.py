"""Trains the pipeline zoo model on 8 host CPU devices (mesh stage=2, data=2, fsdp=2); prints JSON.

    python tests/zoo/pipeline_mesh_worker.py [circular]

A fresh process, because XLA reads ``--xla_force_host_platform_device_count`` only when jax first
initialises its CPU backend. Reports the PartitionSpec of every trained param, the losses of a few
training steps on the mesh and the same steps with no mesh (which must agree).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json

import jax
from flax import linen as nn

STEPS = 3


def _train(module, overrides: dict) -> tuple:
    model = module.make_model("tiny", **overrides)
    state = module.create_train_state("tiny", model=model)
    rng, losses = jax.random.key(1), []
    for _, batch in zip(range(STEPS), module.batches("tiny")):
        rng, dropout_rng = jax.random.split(rng)
        state, metrics = module.train_step(state, batch, dropout_rng)
        losses.append(float(metrics["loss"]))
    return state, losses


def main(variant: str) -> dict:
    from linen2nnx.zoo.pipeline import train as module

    overrides = module.CIRCULAR if variant == "circular" else {}
    _, plain_losses = _train(module, overrides)
    mesh = module.make_mesh((2, 2, 2))
    with jax.set_mesh(mesh), nn.logical_axis_rules(module.LOGICAL_AXIS_RULES):
        state, mesh_losses = _train(module, overrides)
    specs = {
        jax.tree_util.keystr(path): [list(a) if isinstance(a, tuple) else a for a in leaf.sharding.spec]
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.params)
    }
    return {"devices": jax.device_count(), "plain": plain_losses, "mesh": mesh_losses, "specs": specs}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "plain")))
