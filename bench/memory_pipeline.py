"""Does the migrated NNX pipeline train step cost more memory or time than the Linen one, sharded?

    python bench/memory_pipeline.py [--small] [--variants plain,circular] [--steps 20] [--json FILE]

For the zoo pipeline model (``linen2nnx/zoo/pipeline``, config ``bench``; ``--small``: ``tiny``) in
its plain and circular variants, on 8 host devices with the mesh stage=2, data=2, fsdp=2:

1. ``linen2nnx migrate --trace`` writes the NNX side (the run must leave no manual finding);
2. both sides are built and placed exactly as ``linen2nnx check --mesh`` places them (converted
   weights, ``mesh_scope`` with the model's logical axis rules, the batch split over data+fsdp);
3. the train steps are the ones the equivalence training check runs (``training._linen_step`` and
   ``training._nnx_step``), re-jitted with XLA's default options (the check compiles with LLVM
   optimisations off, which would make the timings meaningless);
4. each step is lowered and compiled: ``memory_analysis()`` gives temp / argument / output bytes;
5. the compiled steps run alternately (so load from other processes hits both alike) and the
   median of ``--steps`` warm steps of each is compared.

Printed as ratios NNX / Linen measured in this one run; the goals are temp <= 1.00 and time <= 1.02.
XLA needs the device count before jax starts, so when this process sees fewer than 8 devices the
script runs itself again in a subprocess with ``--xla_force_host_platform_device_count=8``.

Exit status: 0; 2 when the migration leaves a manual finding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MESH = {"stage": 2, "data": 2, "fsdp": 2}
VARIANTS = {"plain": "spec", "circular": "circular_spec"}
GOALS = {"temp": 1.00, "time": 1.02}
SHOWN = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes")

sys.path.insert(0, str(HERE))
from memory_decoder import _mib, memory  # noqa: E402  (shared helpers of the bench scripts)


# ---- the spec functions `migrate --trace` is pointed at -----------------------------------------
def _side(variant: str, config: str) -> Any:
    from linen2nnx import zoo

    return getattr(zoo.load_train_module("pipeline"), VARIANTS[variant])(config)


def plain_bench() -> Any:
    return _side("plain", "bench")


def circular_bench() -> Any:
    return _side("circular", "bench")


def plain_tiny() -> Any:
    return _side("plain", "tiny")


def circular_tiny() -> Any:
    return _side("circular", "tiny")


# ---- building both sides -------------------------------------------------------------------------
def migrated_pair(variant: str, config: str, workdir: Path) -> Any:
    """The ModelPair whose NNX side is what ``migrate --trace`` writes for the variant's spec."""
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.findings import Severity
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    ref = f"{Path(__file__).resolve()}:{variant}_{config}"
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    out = workdir / variant
    result = migrate_paths([zoo.model_source("pipeline")], Mode.OUT_DIR, out_dir=out, trace=trace)
    manual = sorted({f.rule for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)})
    if manual:
        raise SystemExit(
            f"error: migrate of the {variant} pipeline left manual findings: {', '.join(manual)}"
        )
    return load_pair(f"{write_pair_spec(out, trace, result)}:pair")


def compiled_steps(pair: Any) -> dict[str, Any]:
    """Both train steps compiled on the active mesh, with their first arguments (already placed).

    Runs inside ``mesh_scope``: the logical axis rules are read while tracing.
    """
    import jax

    from linen2nnx.equivalence.build import Inputs, build_sides
    from linen2nnx.equivalence.mesh import place_sides, with_sharded_batch
    from linen2nnx.equivalence.training import _choose_tx, _linen_step, _nnx_step

    mesh = jax.sharding.get_mesh()
    sides = build_sides(pair)
    pair = with_sharded_batch(pair, mesh)
    place_sides(pair, sides, mesh)
    tx, _ = _choose_tx(pair, None)
    first = Inputs.of(pair, True)
    variables = dict(sides.linen_variables)
    params = variables.pop("params")
    linen_args = (params, variables, tx.init(params), first.dynamic)
    nnx_fast, n_state = _nnx_step(pair, sides, tx, first)
    linen_fast = _linen_step(pair, tx, first)
    # the check's steps with XLA's default (optimising) compile options
    linen = jax.jit(linen_fast.__wrapped__).lower(*linen_args).compile()
    nnx = jax.jit(nnx_fast.__wrapped__).lower(n_state, first.dynamic).compile()
    return {"linen": (linen, linen_args), "nnx": (nnx, (n_state, first.dynamic))}


def time_steps(steps: dict[str, Any], n: int) -> dict[str, list[float]]:
    """Seconds per warm step of each side; the sides alternate so background load hits both.

    Every call takes the first state again (the steps donate nothing): the check's Linen step leaves
    its output shardings to XLA, which places some of them differently from the inputs, and the
    compiled executable accepts only the shardings it was compiled for.
    """
    import jax

    def one(side: str) -> float:
        compiled, args = steps[side]
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        return time.perf_counter() - t0

    for side in steps:  # warm-up: first-run allocations
        one(side)
    times: dict[str, list[float]] = {side: [] for side in steps}
    for _ in range(n):
        for side in steps:
            times[side].append(one(side))
    return times


def measure_variant(variant: str, config: str, workdir: Path, n_steps: int) -> dict[str, Any]:
    from linen2nnx.equivalence.mesh import mesh_scope

    pair = migrated_pair(variant, config, workdir)
    with mesh_scope(pair, MESH):
        steps = compiled_steps(pair)
        mem = {side: memory(compiled) for side, (compiled, _) in steps.items()}
        times = time_steps(steps, n_steps)
    median = {side: statistics.median(ts) for side, ts in times.items()}
    ratio = {f: mem["nnx"][f] / max(mem["linen"][f], 1) for f in SHOWN}
    return {
        "variant": variant,
        "memory": mem,
        "median_step_s": median,
        "ratios": {**ratio, "step_time": median["nnx"] / median["linen"]},
    }


def measure(config: str, variants: list[str], n_steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="l2n-pipeline-") as tmp:
        results = [measure_variant(v, config, Path(tmp), n_steps) for v in variants]
    return {
        "config": config,
        "mesh": MESH,
        "steps": n_steps,
        "goals": GOALS,
        "variants": results,
        "seconds": time.perf_counter() - t0,
    }


# ---- output --------------------------------------------------------------------------------------
def report(numbers: dict[str, Any]) -> None:
    mesh = ",".join(f"{k}={v}" for k, v in numbers["mesh"].items())
    print(f"pipeline train step, config {numbers['config']!r}, mesh {mesh}: NNX (migrated) / Linen")
    for res in numbers["variants"]:
        print(f"\n[{res['variant']}]{'Linen':>36}{'NNX':>15}{'NNX/Linen':>11}")
        for field in SHOWN:
            lin, nnx = res["memory"]["linen"][field], res["memory"]["nnx"][field]
            print(f"{field:28}{_mib(lin)}{_mib(nnx)}{res['ratios'][field]:11.4f}")
        med = res["median_step_s"]
        label = f"median step ({numbers['steps']} steps)"
        print(
            f"{label:28}{med['linen'] * 1e3:11.3f} ms{med['nnx'] * 1e3:11.3f} ms{res['ratios']['step_time']:11.4f}"
        )
        for what, key in (("temp", "temp_size_in_bytes"), ("time", "step_time")):
            value, goal = res["ratios"][key], numbers["goals"][what]
            print(
                f"  {what} ratio {value:.4f} (goal <= {goal:.2f}: {'OK' if value <= goal else 'ABOVE GOAL'})"
            )


def _device_env() -> dict[str, str]:
    from linen2nnx.equivalence.mesh import device_count_needed, host_device_env

    return host_device_env(device_count_needed(MESH))


def _rerun_with_devices(argv: list[str]) -> int:
    """Run this script again in a process whose XLA sees enough host devices."""
    env = _device_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["L2N_BENCH_CHILD"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env).returncode


def _enough_devices() -> bool:
    if "jax" not in sys.modules:  # the flag still takes effect
        os.environ.update(_device_env())
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # XLA's per-compile sharding warnings
    import jax

    from linen2nnx.equivalence.mesh import device_count_needed

    return jax.device_count() >= device_count_needed(MESH) or os.environ.get("L2N_BENCH_CHILD") == "1"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", action="store_true", help="the tiny config (a smoke test)")
    parser.add_argument("--variants", default="plain,circular", help="comma-separated: plain, circular")
    parser.add_argument("--steps", type=int, default=20, help="timed warm steps per side (median)")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    if not _enough_devices():
        return _rerun_with_devices(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; expected {', '.join(VARIANTS)}")
    try:
        numbers = measure("tiny" if args.small else "bench", variants, args.steps)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    report(numbers)
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
