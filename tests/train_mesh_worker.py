"""Runs the zoo decoder's Linen train loop and its migrated NNX train loop on an 8-device CPU mesh; writes JSON.

    python tests/train_mesh_worker.py MIGRATED_PACKAGE_DIR PAIR_SPEC OUT.json

XLA reads ``--xla_force_host_platform_device_count`` once, when jax starts its CPU backend, so this is
a fresh process with the flag set before jax is imported (``tests/test_train_loop_migration.py``
starts it). Both loops run as their files are written, under ``jax.set_mesh`` (data=2, fsdp=2,
tensor=2) and the decoder's logical axis rules: each ``create_train_state`` builds its own sharded
state (Linen: ``out_shardings`` from its partition boxes; NNX: eager sharding), the NNX state gets the
Linen initial weights through the checkpoint converter, then both take the same steps on the same
batches with dropout off. Then both decode greedily from the trained weights (KV cache), with and
without the mesh. The report holds the per-step losses, every state leaf's sharding, the partition
specs each file's ``param_partition_specs`` gives under the rules, and the decoded tokens and logits.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f
    ]
    # both loops compile under the same flags; with LLVM's optimisations off XLA compiles ~3x faster here
    flags += ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
    os.environ["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=8"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # XLA's SPMD remat warnings are noise here

import dataclasses
import importlib
import json
import time
from pathlib import Path

STEPS = 3
MESH_SHAPE = (2, 2, 2)


def _no_dropout(train) -> None:
    cfg = train.CONFIGS["tiny"]
    rates = {f.name: 0.0 for f in dataclasses.fields(cfg["model"]) if "dropout" in f.name}
    cfg["model"] = dataclasses.replace(cfg["model"], **rates)


def _spec(array) -> str:
    """The array's PartitionSpec with trailing ``None`` s dropped (``P(None,)`` and ``P()`` are one layout)."""
    return _names(array.sharding.spec)


def _names(spec) -> str:
    names = list(spec)
    while names and names[-1] is None:
        names.pop()
    return repr(tuple(names))


def main(package: Path, spec_path: str, out: Path) -> None:
    import flax.linen as nn
    import jax
    from flax import nnx

    from linen2nnx.checkpoint_convert import convert_tree
    from linen2nnx.spec import load_pair
    from linen2nnx.zoo.decoder import train as linen_train

    sys.path.insert(0, str(package.parent))
    nnx_train = importlib.import_module(f"{package.name}.train")
    for train in (linen_train, nnx_train):
        _no_dropout(train)
    pair = load_pair(spec_path)
    batches = [b for _, b in zip(range(STEPS), linen_train.batches("tiny", 0))]
    keys = list(jax.random.split(jax.random.key(1), STEPS))
    mesh = linen_train.make_mesh(MESH_SHAPE)
    timings = {}
    with jax.set_mesh(mesh), nn.logical_axis_rules(linen_train.LOGICAL_AXIS_RULES):
        t0 = time.perf_counter()
        linen_state = linen_train.create_train_state("tiny", seed=0)
        graphdef, nnx_state = nnx_train.create_train_state("tiny", seed=0)
        timings["init"] = time.perf_counter() - t0
        model, optimizer = nnx.merge(graphdef, nnx_state)
        initial = {
            "/".join(map(str, p)): _spec(v.get_value())
            for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        }
        optimizer_specs = {
            "/".join(map(str, p)): _spec(v.get_value())
            for p, v in nnx.to_flat_state(nnx.state(optimizer))
            if v.get_value().ndim
        }
        converted = convert_tree(
            {"params": linen_state.params}, pair, package / "linen2nnx-map.json", optimizer=False
        ).model()
        weights = dict(nnx.to_flat_state(nnx.state(converted, nnx.Param)))
        for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):  # same values, the NNX sharding kept
            var.set_value(jax.device_put(weights[path].get_value(), var.get_value().sharding))
        state = (graphdef, nnx.state((model, optimizer)))

        t0 = time.perf_counter()
        linen_losses, nnx_losses = [], []
        for batch, key in zip(batches, keys):
            linen_state, metrics = linen_train.train_step(linen_state, batch, key)
            linen_losses.append(float(metrics["loss"]))
            state, metrics = nnx_train.train_step(state, batch, key)
            nnx_losses.append(float(metrics["loss"]))
        timings["steps"] = time.perf_counter() - t0
        model, optimizer = nnx.merge(*state)
        trained = {
            "/".join(map(str, p)): _spec(v.get_value())
            for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        }
        nnx_logical = {
            "/".join(map(str, p)): _names(v.get_value())
            for p, v in nnx.to_flat_state(nnx_train.param_partition_specs("tiny"))
        }
        linen_logical = {"/".join(p): _names(s) for p, s in _flat(linen_train.param_partition_specs("tiny"))}
        decoded = {
            "mesh": _decode(linen_train, nnx_train, linen_state.params, nnx.state(model, nnx.Param), batches)
        }
    t0 = time.perf_counter()
    decoded["no_mesh"] = _decode(
        linen_train,
        nnx_train,
        jax.device_get(linen_state.params),
        jax.device_get(nnx.state(model, nnx.Param)),
        batches,
    )
    timings["decode_no_mesh"] = time.perf_counter() - t0

    def linen_specs(tree) -> dict[str, str]:
        return {"/".join(p): _spec(a) for p, a in _flat(tree) if getattr(a, "ndim", 0)}

    report = {
        "devices": jax.device_count(),
        "mesh": dict(mesh.shape),
        "linen_losses": linen_losses,
        "nnx_losses": nnx_losses,
        "nnx_param_specs": initial,
        "nnx_param_specs_after": trained,
        "linen_param_specs": linen_specs(linen_state.params),
        "nnx_optimizer_specs": optimizer_specs,
        "linen_optimizer_specs": linen_specs(linen_state.opt_state),
        "linen_logical_specs": linen_logical,
        "nnx_logical_specs": nnx_logical,
        "decoded": decoded,
        "timings": timings,
    }
    out.write_text(json.dumps(report, indent=1))


def _flat(tree):
    import jax

    def key(k) -> str:
        return str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))

    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)[0]
    return [(tuple(key(k) for k in p), leaf) for p, leaf in leaves if leaf is not None]


def _decode(linen_train, nnx_train, linen_params, nnx_params, batches) -> dict:
    """Greedy decoding through each file's KV-cache functions, from the same prompt and weights."""
    import jax.numpy as jnp
    import numpy as np

    prompt = jnp.asarray(batches[0]["inputs"][:2, :4])
    linen_tokens = linen_train.greedy_generate(linen_train.make_model(), linen_params, prompt, 4)
    nnx_tokens = nnx_train.greedy_generate(nnx_train.make_model(), nnx_params, prompt, 4)
    linen_model, nnx_model = linen_train.make_model(), nnx_train.make_model()
    linen_logits, linen_cache = linen_train.decode_step(
        linen_model, linen_params, linen_train.init_cache(linen_model, 2, 8), prompt
    )
    nnx_logits, nnx_cache = nnx_train.decode_step(
        nnx_model, nnx_params, nnx_train.init_cache(nnx_model, 2, 8), prompt
    )
    return {
        "linen_tokens": np.asarray(linen_tokens).tolist(),
        "nnx_tokens": np.asarray(nnx_tokens).tolist(),
        "max_abs_logits": float(jnp.abs(linen_logits - nnx_logits).max()),
        "max_abs_ref": float(jnp.abs(linen_logits).max()),
        "linen_cache_index": np.asarray(linen_cache["layers"]["self_attention"]["cache_index"]).tolist(),
        "nnx_cache_index": np.asarray(nnx_cache["layers"]["self_attention"]["cache_index"][...]).tolist(),
    }


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
