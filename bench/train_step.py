"""Is ``linen2nnx train``'s NNX train step as fast and as lean as the Linen one it replaces?

    python bench/train_step.py [--size tiny|small|100m] [--steps 20] [--json FILE]

The zoo decoder (``nn.scan`` over ``nn.remat`` layers, remat policy ``full``, dropout off), migrated
by ``linen2nnx migrate --trace``, at the chosen size. Both sides run the same global batch:

- Linen: the zoo's train step (``value_and_grad`` of ``model.apply``, ``TrainState.apply_gradients``
  with the zoo's clip + AdamW), ``jax.jit`` with the state donated;
- NNX: the step ``linen2nnx.train`` runs (:func:`linen2nnx.train.step.make_train_step`, split/merge
  + ``jax.jit``, state donated), the same optimizer from the spec.

Three ratios NNX / Linen, measured in one run:

- step time: warm (after two unmeasured steps), the two sides' steps interleaved, median of
  ``--steps`` (>= 20) blocked steps each; goal <= 1.02;
- compile time of ``jit(step).lower(...).compile()``, each side traced and compiled from scratch,
  median of ``--compile-rounds`` interleaved rounds; goal <= 1.10;
- XLA temp memory from ``compiled.memory_analysis()`` (what ``train --compile-only`` prints); goal <= 1.00;

plus XLA's FLOP count of each program (``cost_analysis()``), which says whether a step-time
difference is more work or noise.

``tiny`` is the zoo's tiny config, ``small`` ~8M parameters, ``100m`` ~100M parameters (12 layers,
d=768, MLP 2048, vocab 16000, sequence 256, batch 4; tens of seconds per step on a laptop CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {
    "small": dict(
        model=dict(vocab_size=4096, emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024, num_layers=6),
        seq_len=128,
        batch_size=8,
    ),
    "100m": dict(
        model=dict(vocab_size=16000, emb_dim=768, num_heads=12, head_dim=64, mlp_dim=2048, num_layers=12),
        seq_len=256,
        batch_size=4,
    ),
}
GOALS = {"step_time": 1.02, "compile_time": 1.10, "temp_memory": 1.00}


def _register_sizes() -> None:
    """Add ``small`` / ``100m`` to the zoo decoder's configs (remat full, scan on, dropout off)."""
    from linen2nnx import zoo

    train = zoo.load_train_module("decoder")
    tiny = train.CONFIGS["tiny"]
    train.CONFIGS.setdefault(
        "bench_tiny",
        {**tiny, "model": dataclasses.replace(tiny["model"], dropout_rate=0.0, remat_policy="full")},
    )
    for name, size in SIZES.items():
        model = dataclasses.replace(tiny["model"], dropout_rate=0.0, remat_policy="full", **size["model"])
        cfg = {"model": model, "seq_len": size["seq_len"], "batch_size": size["batch_size"]}
        train.CONFIGS.setdefault(f"bench_{name}", {**cfg, "learning_rate": 1e-3})


_register_sizes()


def _config_name(size: str) -> str:
    return f"bench_{size}"


def side_tiny() -> Any:
    return _side("tiny")


def side_small() -> Any:
    return _side("small")


def side_100m() -> Any:
    return _side("100m")


def _side(size: str) -> Any:
    """The Linen side of the decoder at ``size`` (a spec function: ``migrate --trace`` takes its reference)."""
    import dataclasses as dc

    from linen2nnx import zoo

    side = zoo.load_train_module("decoder").spec(_config_name(size))
    return dc.replace(side, long_batch=None)


def migrated_pair(size: str, workdir: Path) -> Any:
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    ref = f"{Path(__file__).resolve()}:side_{size}"
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source("decoder")], Mode.OUT_DIR, out_dir=workdir / "nnx", trace=trace)
    return load_pair(str(write_pair_spec(workdir / "nnx", trace, result)))


def linen_step(size: str) -> tuple[Any, Any, Any]:
    """``(jitted step, state, batch)`` of the zoo's Linen train step, state donated."""
    import jax

    from linen2nnx import zoo

    train = zoo.load_train_module("decoder")
    state = train.create_train_state(_config_name(size))
    batch = train.example_batch(_config_name(size))
    key = jax.random.key(1)
    step = jax.jit(lambda s, b: train.train_step.__wrapped__(s, b, key), donate_argnums=0)
    return step, state, batch


def nnx_step(pair: Any) -> tuple[Any, Any, Any]:
    """``(jitted step, state, batch)`` as ``linen2nnx.train`` builds them."""
    from linen2nnx.train.state import choose_tx, init_state
    from linen2nnx.train.step import JittedStep, make_train_step

    ts = init_state(pair, choose_tx(pair), deterministic=True)
    step = JittedStep(make_train_step(ts.graphdef, pair.linen), ts.state)
    return step, step.flatten(ts.state), dict(pair.linen.batch)


def _compile(steps: dict[str, tuple[Any, Any, Any]], rounds: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Median seconds of ``lower(...).compile()`` per side over ``rounds`` interleaved rounds (a
    busy machine makes one compile time noisy), and each side's compiled program."""
    import jax

    seconds: dict[str, list[float]] = {name: [] for name in steps}
    compiled: dict[str, Any] = {}
    for _ in range(rounds):
        for name, (step, state, batch) in steps.items():
            jax.clear_caches()  # a cold trace and compile each time
            t0 = time.perf_counter()
            compiled[name] = step.lower(state, batch).compile()
            seconds[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in seconds.items()}, compiled


def _flops(compiled: Any) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float((cost or {}).get("flops", 0.0))


def _timed_steps(sides: dict[str, list[Any]], steps: int) -> dict[str, list[float]]:
    """Interleaved, blocked steps of each side (after two warm-up steps each); seconds per step.

    Each side is called through its jitted function (the program is compiled once more on the first
    warm-up call, outside the measurement), as a training loop calls it."""
    import jax

    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(steps + 2):
        for name, side in sides.items():
            compiled, state, batch = side
            t0 = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready((state, metrics))
            side[1] = state
            if i >= 2:
                times[name].append(time.perf_counter() - t0)
    return times


def measure(size: str = "tiny", steps: int = 20, compile_rounds: int = 3) -> dict[str, Any]:
    import jax
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="l2n-train-bench-") as tmp:
        pair = migrated_pair(size, Path(tmp))
    l_step, l_state, batch = linen_step(size)
    n_step, n_state, n_batch = nnx_step(pair)
    compile_s, compiled = _compile(
        {"linen": (l_step, l_state, batch), "nnx": (n_step, n_state, n_batch)}, compile_rounds
    )
    batch = jax.tree.map(np.asarray, batch)
    times = _timed_steps({"linen": [l_step, l_state, batch], "nnx": [n_step, n_state, batch]}, steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    temp = {name: c.memory_analysis().temp_size_in_bytes for name, c in compiled.items()}
    flops = {name: _flops(c) for name, c in compiled.items()}
    n_params = sum(x.size for x in jax.tree.leaves(l_state.params))
    return {
        "size": size,
        "params": int(n_params),
        "steps": steps,
        "median_step_s": med,
        "compile_rounds": compile_rounds,
        "compile_s": compile_s,
        "temp_bytes": temp,
        "flops": flops,
        "ratios": {
            "step_time": med["nnx"] / med["linen"],
            "compile_time": compile_s["nnx"] / compile_s["linen"],
            "temp_memory": temp["nnx"] / max(temp["linen"], 1),
            "flops": flops["nnx"] / max(flops["linen"], 1.0),
        },
        "goals": GOALS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="tiny", choices=("tiny", "small", "100m"))
    parser.add_argument("--steps", type=int, default=20, help="measured steps per side (default: 20)")
    parser.add_argument(
        "--compile-rounds", type=int, default=3, help="compiles per side (median; default: 3)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    numbers = measure(args.size, args.steps, args.compile_rounds)
    print(f"decoder train step, size {args.size!r} ({numbers['params']:,} params), scan, remat full")
    print(f"{'':16}{'Linen':>14}{'NNX':>14}{'NNX/Linen':>12}{'goal':>8}")
    rows = (
        ("step (median)", numbers["median_step_s"], "step_time", 1e3, "ms"),
        ("compile", numbers["compile_s"], "compile_time", 1.0, "s"),
        ("XLA temp", numbers["temp_bytes"], "temp_memory", 2.0**-20, "MiB"),
    )
    for label, pair, key, scale, unit in rows:
        print(
            f"{label:16}{pair['linen'] * scale:>11.3f}{unit:>3}{pair['nnx'] * scale:>11.3f}{unit:>3}"
            f"{numbers['ratios'][key]:>12.4f}{'<= ' + str(GOALS[key]):>8}"
        )
    print(
        f"{'FLOPs (XLA)':16}{numbers['flops']['linen']:>14.4g}{numbers['flops']['nnx']:>14.4g}{numbers['ratios']['flops']:>12.4f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
