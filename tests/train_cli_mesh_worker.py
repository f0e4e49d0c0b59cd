"""Runs ``linen2nnx.train`` on an 8-device CPU mesh (data=2, fsdp=2, tensor=2); writes a JSON report.

    python tests/train_cli_mesh_worker.py SPEC NNX_CKPT LINEN_CKPT OUT_DIR REPORT.json

A fresh process, so the device-count flag is set before jax is imported (``tests/test_train.py``
starts it). The run starts from convert's output with dropout off; the report holds the losses,
the ``partition_spec`` comparison of every parameter (NNX metadata under the rules vs Linen's
logical names, through the converter's path table), and every trained param's actual array
sharding next to the spec its metadata gives, a compile-only report of the same step, and the
Linen loss of the first batch (one device, the Linen checkpoint's weights).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f
    ]
    # with LLVM's optimisations off XLA compiles several times faster; the numbers stay float32-close
    flags += ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
    os.environ["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=8"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
from pathlib import Path

MESH = {"data": 2, "fsdp": 2, "tensor": 2}


def _trim(spec) -> str:
    names = [tuple(e) if isinstance(e, list) else e for e in spec]
    while names and names[-1] is None:
        names.pop()
    return repr(tuple(names))


def main(spec_path: str, nnx_ckpt: str, linen_ckpt: str, out: str, report_path: str) -> None:
    import jax
    from flax import nnx

    from linen2nnx.checkpoint_convert.write import read_report
    from linen2nnx.equivalence.mesh import mesh_scope, nnx_param_specs, partition_spec_leaves
    from linen2nnx.spec import load_pair
    from linen2nnx.train import TrainConfig, run_training
    from linen2nnx.train.data import SyntheticData
    from linen2nnx.train.linen_reference import linen_loss
    from linen2nnx.train.loop import compile_only
    from linen2nnx.train.state import abstract_state, choose_tx

    pair = load_pair(spec_path)
    cfg = TrainConfig(out=Path(out), steps=3, mesh=MESH, init_from=Path(nnx_ckpt), deterministic=True)
    result = run_training(pair, cfg, on_step=None)
    table = {
        tuple(m["linen"].split("/")[1:]): tuple(m["nnx"].split("/"))
        for m in read_report(nnx_ckpt)["mapped"]
        if m["linen"].startswith("params/")
    }
    with mesh_scope(pair, MESH):
        target = abstract_state(pair, choose_tx(pair))
        model = nnx.merge(target.graphdef, target.state)[0]
        leaves = partition_spec_leaves(pair, model, table)
        meta = {p: _trim(spec) for p, (_, spec, _) in nnx_param_specs(model).items()}
    trained = {
        "/".join(map(str, p)): _trim(v.get_value().sharding.spec)
        for p, v in nnx.to_flat_state(result.state[0])
        if isinstance(v, nnx.Param)
    }
    report = compile_only(pair, cfg)
    first = SyntheticData(pair.linen.batch, len(pair.linen.batch["inputs"]), cfg.seed).batch_at(0)
    json.dump(
        {
            "devices": jax.device_count(),
            "losses": result.losses,
            "start_step": result.start_step,
            "linen_first_loss": linen_loss(pair, linen_ckpt, first),
            "partition_spec": [(lf.path, lf.passed, lf.note) for lf in leaves],
            "metadata_specs": meta,
            "trained_specs": trained,
            "compile": report.to_json(),
        },
        open(report_path, "w"),
        indent=1,
    )


if __name__ == "__main__":
    main(*sys.argv[1:6])
