"""The pipeline zoo model: the pipeline computes what running the stages one after another computes,
its weights keep the (repeat, stage, ...) layout, and it trains sharded over a stage mesh axis.

Training on one device, checkpoints and gradients are covered with the other zoo models in
``test_zoo_linen.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from linen2nnx.zoo.pipeline import train as T
from linen2nnx.zoo.pipeline.model import Pipeline, StageBlock

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"plain": {}, "circular": T.CIRCULAR, "two_layers": {"layers_per_stage": 2}}


def _sequential(cfg, params, x):
    """Every microbatch through repeat 0's stages in order, then repeat 1's, ... (no pipeline)."""
    for r in range(cfg.num_pipeline_repeats):
        for s in range(cfg.num_stages):
            stage_params = jax.tree.map(lambda p, i=(r, s): p[i], params)
            x = StageBlock(cfg).apply({"params": stage_params}, x, True)
    return x


@pytest.mark.parametrize("variant", VARIANTS)
def test_pipeline_equals_stages_run_in_order(variant):
    cfg = T.make_model("tiny", **VARIANTS[variant]).config
    x = jax.random.normal(jax.random.key(0), (8, 5, cfg.emb_dim))
    pipeline = Pipeline(cfg)
    params = T.remove_logically_partition(pipeline.init(jax.random.key(1), x))["params"]
    out = pipeline.apply({"params": params}, x)
    want = _sequential(cfg, params["stages"], x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_weights_keep_repeat_and_stage_axes():
    specs = T.param_partition_specs(model=T.make_model("tiny", **T.CIRCULAR))
    stage = specs["pipeline"]["stages"]["layers_0"]
    assert stage["wi"]["kernel"] == P("circular_repeats", "layers", "embed", "mlp")
    assert stage["norm"]["scale"] == P("circular_repeats", "layers", "norm")
    plain = T.param_partition_specs()["pipeline"]["stages"]["layers_0"]
    assert plain["wo"]["kernel"] == P("circular_repeats", "layers", "mlp", "embed")


def test_remove_logically_partition_unboxes_only_boxes():
    boxed = T.make_model("tiny").init(jax.random.key(0), T._init_tokens("tiny"))
    plain = T.remove_logically_partition(boxed)
    leaves = jax.tree.leaves(plain)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)
    assert T.remove_logically_partition({"a": 1}) == {"a": 1}


@pytest.mark.parametrize("variant", ["plain", "circular"])
def test_trains_on_stage_data_fsdp_mesh(variant):
    """On 8 host devices (stage=2, data=2, fsdp=2): the same losses as with no mesh, stages sharded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "zoo" / "pipeline_mesh_worker.py"), variant],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 8
    np.testing.assert_allclose(report["mesh"], report["plain"], rtol=1e-4)
    assert report["mesh"][-1] < report["mesh"][0]
    specs = report["specs"]
    assert specs["['pipeline']['stages']['layers_0']['wi']['kernel']"] == [None, "stage", "fsdp"]
    assert specs["['pipeline']['stages']['layers_0']['wo']['kernel']"] == [None, "stage", None, "fsdp"]
