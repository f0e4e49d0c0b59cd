"""Runs the mesh parity scenarios in a process that sees 8 host CPU devices; writes a JSON report.

    python tests/mesh_worker.py SCENARIO OUT.json      (SCENARIO: small | handwritten | zoo | decoder)

XLA reads ``--xla_force_host_platform_device_count`` once, when jax first initialises its CPU
backend, so this has to be a fresh process with the flag set before jax is imported; the test
(``tests/test_mesh_parity.py``) starts it and asserts on the JSON it writes. Also here: a small
Linen model with logically partitioned weights and an ``nn.scan``-stacked layer, and its
hand-written NNX twin (``nnx.vmap`` over ``nnx.transform_metadata`` + ``nnx.scan``), plus two
deliberately wrong twins.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f
    ]
    os.environ["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=8"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # XLA's SPMD remat warnings are noise here

import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linen2nnx.equivalence import perturbed
from linen2nnx.equivalence.build import build_sides
from linen2nnx.equivalence.mesh import (
    MeshError,
    check_on_mesh,
    mesh_scope,
    partition_spec_leaves,
    place_sides,
    shard_batch,
    shard_nnx_model,
    strip_boxes,
    with_sharded_batch,
)
from linen2nnx.spec import LinenSide, ModelPair
from linen2nnx.zoo.decoder.train import LOGICAL_AXIS_RULES, MESH_AXES

ROOT = Path(__file__).resolve().parents[1]
MESH = {"data": 2, "fsdp": 2, "tensor": 2}
VOCAB, D, H, LAYERS, BATCH, LENGTH = 32, 16, 32, 2, 8, 12

WL = nn.with_logical_partitioning
WN = nnx.with_partitioning
LECUN, ONES, ZEROS = nn.initializers.lecun_normal(), nn.initializers.ones, nn.initializers.zeros
ACT = ("activation_batch", "activation_length", "activation_embed")


# ---- the hand-written pair -----------------------------------------------------------------------
class LBlock(nn.Module):
    d: int
    h: int

    @nn.compact
    def __call__(self, x: jax.Array, _: Any) -> tuple[jax.Array, None]:
        y = nn.LayerNorm(scale_init=WL(ONES, ("norm",)), bias_init=WL(ZEROS, ("norm",)), name="ln")(x)
        y = nn.Dense(
            self.h, kernel_init=WL(LECUN, ("embed", "mlp")), bias_init=WL(ZEROS, ("mlp",)), name="up"
        )(y)
        y = nn.with_logical_constraint(
            nn.gelu(y), ("activation_batch", "activation_length", "activation_mlp")
        )
        y = nn.Dense(
            self.d, kernel_init=WL(LECUN, ("mlp", "embed")), bias_init=WL(ZEROS, ("embed",)), name="down"
        )(y)
        return x + y, None


class LModel(nn.Module):
    """Embed -> ``nn.scan`` stack of LBlocks (``metadata_params={nn.PARTITION_NAME: 'layers'}``) -> head."""

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(
            VOCAB, D, embedding_init=WL(nn.initializers.normal(1.0), ("vocab", "embed")), name="embed"
        )(tokens)
        x = nn.with_logical_constraint(x, ACT)
        stack = nn.scan(
            LBlock,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=LAYERS,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, _ = stack(D, H, name="blocks")(x, None)
        x = x * self.param("final_scale", WL(ONES, ("norm",)), (D,))
        return nn.Dense(VOCAB, kernel_init=WL(LECUN, ("embed", "vocab")), use_bias=False, name="head")(x)


MLP_ACT = ("activation_batch", "activation_length", "activation_mlp")


class NBlock(nnx.Module):
    def __init__(
        self,
        d: int,
        h: int,
        *,
        up_axes: tuple[str, str] = ("embed", "mlp"),
        act_axes: tuple[str, ...] | None = MLP_ACT,
        rngs: nnx.Rngs,
    ):
        self.act_axes = act_axes
        self.ln = nnx.LayerNorm(d, scale_init=WN(ONES, ("norm",)), bias_init=WN(ZEROS, ("norm",)), rngs=rngs)
        self.up = nnx.Linear(d, h, kernel_init=WN(LECUN, up_axes), bias_init=WN(ZEROS, ("mlp",)), rngs=rngs)
        self.down = nnx.Linear(
            h, d, kernel_init=WN(LECUN, ("mlp", "embed")), bias_init=WN(ZEROS, ("embed",)), rngs=rngs
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        y = nnx.gelu(self.up(self.ln(x)))
        if self.act_axes is not None:
            y = nn.with_logical_constraint(y, self.act_axes)
        return x + self.down(y)


class NModel(nnx.Module):
    """The twin. ``up_axes`` and ``layers_axis=False`` make the deliberately wrong variants."""

    def __init__(
        self,
        *,
        up_axes: tuple[str, str] = ("embed", "mlp"),
        layers_axis: bool = True,
        act_axes: tuple[str, ...] | None = MLP_ACT,
        rngs: nnx.Rngs,
    ):
        self.embed = nnx.Embed(
            VOCAB, D, embedding_init=WN(nnx.initializers.normal(1.0), ("vocab", "embed")), rngs=rngs
        )

        def block(rngs: nnx.Rngs) -> NBlock:
            return NBlock(D, H, up_axes=up_axes, act_axes=act_axes, rngs=rngs)

        if layers_axis:  # the NNX spelling of metadata_params={nn.PARTITION_NAME: 'layers'}
            block = nnx.transform_metadata(block, in_axes=0, out_axes=0, partition="layers")
        self.blocks = nnx.split_rngs(splits=LAYERS)(nnx.vmap(block, in_axes=(0,), out_axes=0))(rngs)
        self.final_scale = nnx.Param(jnp.ones((D,)), out_sharding=("norm",))
        self.head = nnx.Linear(D, VOCAB, use_bias=False, kernel_init=WN(LECUN, ("embed", "vocab")), rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.with_logical_constraint(self.embed(tokens), ACT)
        x = nnx.scan(lambda x, blk: blk(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, self.blocks)
        return self.head(x * self.final_scale[...])


def handwritten_pair(**twin: Any) -> ModelPair:
    tokens = np.random.default_rng(0).integers(0, VOCAB, (BATCH, LENGTH)).astype(np.int32)
    side = LinenSide(
        model=LModel(),
        batch={"x": tokens},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
        logical_axis_rules=LOGICAL_AXIS_RULES,
        mesh_axes=MESH_AXES,
        name="handwritten",
    )
    return ModelPair(linen=side, nnx_factory=lambda rngs: NModel(rngs=rngs, **twin))


# ---- reporting -----------------------------------------------------------------------------------
def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def leaves_json(leaves: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "check": lf.check,
            "path": lf.path,
            "passed": bool(lf.passed),
            "max_abs": _num(lf.max_abs),
            "ref_max": _num(lf.ref_max),
            "note": lf.note,
        }
        for lf in leaves
    ]


def spec_of(x: Any) -> list[Any]:
    return [list(e) if isinstance(e, tuple) else e for e in x.sharding.spec]


def _devices(x: Any) -> int:
    return len(x.sharding.device_set)


# ---- scenarios -----------------------------------------------------------------------------------
def handwritten() -> dict[str, Any]:
    """(a) sharded parity + spec equality, with the placement recorded; (b) two wrong twins."""
    out: dict[str, Any] = {"device_count": jax.device_count()}
    pair = handwritten_pair()
    variables = perturbed(strip_boxes(pair.linen.init_variables()))
    out["leaves"] = leaves_json(check_on_mesh(pair, MESH, variables).leaves)
    sides = build_sides(pair, variables)  # again, to look at where the placed arrays live
    with mesh_scope(pair, MESH) as mesh:
        sharded = with_sharded_batch(pair, mesh)
        place_sides(sharded, sides, mesh)
    lin_kernel = sides.linen_variables["params"]["blocks"]["up"]["kernel"]
    nnx_kernel = sides.nnx_model.blocks.up.kernel[...]
    out["placement"] = {
        "batch": spec_of(sharded.linen.batch["x"]),
        "linen/blocks/up/kernel": spec_of(lin_kernel),
        "nnx/blocks/up/kernel": spec_of(nnx_kernel),
        "linen/embed/embedding": spec_of(sides.linen_variables["params"]["embed"]["embedding"]),
        "nnx/embed/embedding": spec_of(sides.nnx_model.embed.embedding[...]),
        "devices": _devices(nnx_kernel),
    }
    for name, twin in (
        ("wrong_name", {"up_axes": ("mlp", "embed")}),
        ("no_layers_axis", {"layers_axis": False}),
        ("renamed", {"up_axes": ("embed", "vocab")}),  # `vocab` goes where `mlp` goes under these rules
    ):
        bad = handwritten_pair(**twin)
        bad_sides = build_sides(bad, variables)
        with mesh_scope(bad, MESH):
            out[name] = leaves_json(
                partition_spec_leaves(bad, bad_sides.nnx_model, bad_sides.report.param_table("params"))
            )
    # activation constraints: dropped, or with two names swapped -- the numbers agree either way
    for name, act_axes in (
        ("no_constraint", None),
        ("swapped_constraint", ("activation_batch", *MLP_ACT[:0:-1])),
    ):
        bad = handwritten_pair(act_axes=act_axes)
        out[name] = [lf for lf in leaves_json(check_on_mesh(bad, MESH, variables).leaves) if not lf["passed"]]
    # a name the rules do not know: Linen replicates that axis, NNX takes it for a mesh axis
    unknown = handwritten_pair(up_axes=("embed", "hidden"))
    unknown_sides = build_sides(unknown, variables)
    with mesh_scope(unknown, MESH):
        try:
            shard_nnx_model(unknown_sides.nnx_model)
            out["unknown_name_error"] = None
        except MeshError as e:
            out["unknown_name_error"] = str(e)
    return out


def migrated_pair(model: str, workdir: Path) -> tuple[ModelPair | None, list[str]]:
    """The zoo model migrated by the real codemod (traced), as ``migrate`` + ``write_pair_spec`` leave it."""
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.findings import Severity
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    ref = zoo.spec_ref(model)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source(model)], Mode.OUT_DIR, out_dir=workdir / model, trace=trace)
    manual = [f.format_text() for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    if manual:
        return None, manual
    return load_pair(str(write_pair_spec(workdir / model, trace, result))), []


def zoo_models() -> dict[str, Any]:
    """(c) the migrated zoo encoder and mlp, sharded parity through ``check_on_mesh``."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("encoder", "mlp"):
            t0 = time.perf_counter()
            pair, manual = migrated_pair(model, Path(tmp))
            if pair is None:
                out[model] = {"manual": manual}
                continue
            result = check_on_mesh(pair, MESH, perturbed(strip_boxes(pair.linen.init_variables())))
            out[model] = {
                "passed": result.passed,
                "leaves": leaves_json(result.leaves),
                "seconds": time.perf_counter() - t0,
            }
    return out


def decoder() -> dict[str, Any]:
    """The Linen decoder's own train step under the mesh + rules (vs unsharded), then the NNX side:
    the decoder as the codemod migrates it (traced) when that has no manual finding, else the
    hand-written twin (``bench/nnx_decoder_twin.py``, what ``bench/memory_decoder.py`` falls back to)."""
    from linen2nnx.zoo.decoder import train

    out: dict[str, Any] = {}
    side = train.spec("tiny")
    steps = 3

    def run() -> tuple[Any, list[float]]:
        state = train.create_train_state("tiny", seed=0)
        rng, losses = jax.random.key(1), []
        for _, batch in zip(range(steps), train.batches("tiny", seed=0)):
            rng, dropout_rng = jax.random.split(rng)
            if not jax.sharding.get_mesh().empty:
                batch = shard_batch(side, batch)
            state, metrics = train.train_step(state, batch, dropout_rng)
            losses.append(float(metrics["loss"]))
        return state, losses

    with mesh_scope(side, MESH):
        state, sharded_losses = run()
        out["linen_train"] = {
            "losses": sharded_losses,
            "wi_0": spec_of(state.params["layers"]["mlp"]["wi_0"]["kernel"]),
            "embedding": spec_of(state.params["token_embedder"]["embedding"]),
            "mu_wi_0": spec_of(state.opt_state[1][0].mu["layers"]["mlp"]["wi_0"]["kernel"]),
            "devices": _devices(state.params["layers"]["mlp"]["wi_0"]["kernel"]),
        }
    out["linen_train"]["unsharded_losses"] = run()[1]

    variables = perturbed(strip_boxes(side.init_variables()), scale=0.05)
    with tempfile.TemporaryDirectory() as tmp:
        pair, manual = migrated_pair("decoder", Path(tmp))
        if pair is not None:
            result = check_on_mesh(pair, MESH, variables)
            out["migrated"] = {"passed": result.passed, "leaves": leaves_json(result.leaves)}
            out["layouts"] = _other_layouts(Path(tmp) / "decoder")
            return out
    out["migrated"] = {"manual": manual}
    sys.path.insert(0, str(ROOT / "bench"))
    from nnx_decoder_twin import make_twin

    cfg = side.model.config
    result = check_on_mesh(
        ModelPair(linen=side, nnx_factory=lambda rngs: make_twin(cfg, rngs)), MESH, variables
    )
    out["twin"] = {"passed": result.passed, "leaves": leaves_json(result.leaves)}
    return out


def _other_layouts(migrated_dir: Path) -> dict[str, Any]:
    """The same migrated source, the three other decoder layouts (the source is config-independent:
    scan_layers and remat_policy stay runtime switches), each sharded on the mesh."""
    import dataclasses

    from linen2nnx.spec import import_file, linen_ctor_kwargs, load_linen_side

    module = import_file(migrated_dir / "model.py")
    out = {}
    for scan_layers, policy in ((True, "minimal"), (False, "full"), (False, "minimal")):
        side = load_linen_side("linen2nnx.zoo.decoder.train:spec")
        side.model = type(side.model)(
            dataclasses.replace(side.model.config, scan_layers=scan_layers, remat_policy=policy)
        )
        kwargs = linen_ctor_kwargs(side.model)
        pair = ModelPair(
            linen=side,
            nnx_factory=lambda rngs, kw=kwargs: module.Decoder(**kw, rngs=rngs),
            name_map=migrated_dir / "linen2nnx-map.json",
        )
        variables = perturbed(strip_boxes(side.init_variables()), scale=0.05)
        result = check_on_mesh(pair, MESH, variables)
        out[f"scan={scan_layers},remat={policy}"] = {
            "passed": result.passed,
            "leaves": leaves_json(result.leaves),
        }
    return out


def small() -> dict[str, Any]:
    """The hand-written pair and the migrated zoo encoder / mlp, in one process."""
    return {"handwritten": handwritten(), "zoo": zoo_models()}


SCENARIOS = {"small": small, "handwritten": handwritten, "zoo": zoo_models, "decoder": decoder}


def main(argv: list[str]) -> int:
    name, dest = argv
    t0 = time.perf_counter()
    report = SCENARIOS[name]()
    report["seconds"] = time.perf_counter() - t0
    Path(dest).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
