"""Does the NNX decoder train step need more device memory than the Linen one?

    python bench/memory_decoder.py [--config bench|tiny] [--nnx auto|migrated|twin] [--json FILE]
                                   [--max-ratio 1.05]

Compiles one train step of the zoo decoder (forward, backward, ``clip_by_global_norm`` + AdamW
update; ``nn.scan`` over ``nn.remat`` layers) on each side and reads XLA's own accounting,
``jax.jit(step).lower(...).compile().memory_analysis()``: ``temp_size_in_bytes`` is the scratch
the step needs beyond its arguments and outputs, which is where a costlier scan or remat shows up
(e.g. an NNX scan body that returns the Params makes XLA write a second copy of the layer stack).
Printed as the ratio NNX / Linen; the goal is <= 1.05.

The Linen side is the zoo's own ``train_step`` on its ``TrainState``. The NNX side is the same step
written the recommended way (``nnx.split`` of model + ``nnx.Optimizer``, ``nnx.merge`` inside
``jax.jit``, ``nnx.value_and_grad``, ``opt.update``) on

- ``migrated``: the decoder as ``linen2nnx migrate --trace`` writes it (only once that migration has
  no manual finding);
- ``twin``: the hand-written twin ``bench/nnx_decoder_twin.py`` (``nnx.vmap`` +
  ``nnx.transform_metadata`` stack, ``nnx.scan`` over ``nnx.remat`` with the Linen policy);
- ``auto`` (default): ``migrated`` when the migration is clean, else ``twin``. The output says which.

Exit status: 0; 1 with ``--max-ratio R`` when the temp ratio exceeds ``R``; 2 when ``--nnx migrated``
is asked for but the migration still has manual findings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIELDS = (
    "temp_size_in_bytes",
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "generated_code_size_in_bytes",
)


@dataclasses.dataclass
class NNXSide:
    """How the NNX decoder was obtained: ``kind`` is ``migrated`` or ``twin``; ``why`` says why."""

    kind: str
    why: str
    factory: Any  # () -> nnx.Module


def migrated_decoder(config: str, workdir: Path) -> tuple[Any | None, str]:
    """``(make_nnx, why)``: the migrated decoder's factory, or ``None`` and the findings that block it."""
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.findings import Severity
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    ref = zoo.spec_ref("decoder") if config == "tiny" else f"{Path(__file__).resolve()}:bench_side"
    side = load_linen_side(ref)
    trace = trace_linen(side, spec_ref=ref)
    result = migrate_paths([zoo.model_source("decoder")], Mode.OUT_DIR, out_dir=workdir / "nnx", trace=trace)
    manual = [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    if manual:
        rules = sorted({f.rule for f in manual})
        return None, (
            f"`linen2nnx migrate` on linen2nnx/zoo/decoder/model.py still reports {len(manual)} manual "
            f"finding(s) ({', '.join(rules)})"
        )
    spec_path = write_pair_spec(workdir / "nnx", trace, result)
    return load_pair(
        str(spec_path)
    ).make_nnx, "migrated by `linen2nnx migrate --trace` with no manual finding"


def bench_side() -> Any:
    """The decoder's ``bench`` config as a spec function (``migrate --trace`` takes a spec reference)."""
    from linen2nnx import zoo

    return zoo.load_train_module("decoder").spec("bench")


def twin_decoder(config: str) -> Any:
    """A factory for the hand-written twin, built like ``ModelPair.make_nnx`` builds any twin."""
    sys.path.insert(0, str(HERE))
    import nnx_decoder_twin

    from linen2nnx import zoo
    from linen2nnx.spec import ModelPair

    train = zoo.load_train_module("decoder")
    side = train.spec(config)
    cfg = side.model.config
    return ModelPair(linen=side, nnx_factory=lambda rngs: nnx_decoder_twin.make_twin(cfg, rngs)).make_nnx


def pick_nnx(config: str, want: str, workdir: Path) -> NNXSide:
    if want in ("auto", "migrated"):
        factory, why = migrated_decoder(config, workdir)
        if factory is not None:
            return NNXSide("migrated", why, factory)
        if want == "migrated":
            raise SystemExit(f"error: --nnx migrated: {why}")
        return NNXSide("twin", f"bench/nnx_decoder_twin.py, because {why}", twin_decoder(config))
    return NNXSide("twin", "bench/nnx_decoder_twin.py (asked for with --nnx twin)", twin_decoder(config))


def memory(compiled: Any) -> dict[str, int]:
    stats = compiled.memory_analysis()
    return {f: int(getattr(stats, f, 0) or 0) for f in FIELDS}


def linen_memory(config: str) -> dict[str, int]:
    import jax

    from linen2nnx import zoo

    train = zoo.load_train_module("decoder")
    state = train.create_train_state(config)
    batch = train.example_batch(config)
    return memory(train.train_step.lower(state, batch, jax.random.key(1)).compile())


def nnx_memory(config: str, factory: Any) -> dict[str, int]:
    """The NNX train step (split/merge + ``jax.jit``, docs/nnx_facts.md#the-train-step) compiled for the zoo batch."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from linen2nnx import zoo

    train = zoo.load_train_module("decoder")
    model = factory()
    opt = nnx.Optimizer(model, train.make_optimizer(train.CONFIGS[config]["learning_rate"]), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))
    batch = train.example_batch(config)

    @jax.jit
    def train_step(state: Any, batch: Any) -> Any:
        model, opt = nnx.merge(graphdef, state)

        def compute_loss(model: Any) -> Any:
            # like Linen's apply without mutable=['intermediates']: sown values are captured, then dropped
            logits, _ = nnx.capture(model, nnx.Intermediate)(batch["inputs"], train=True)
            return train.loss_fn(logits, batch), logits

        (loss, logits), grads = nnx.value_and_grad(compute_loss, has_aux=True)(model)
        opt.update(model, grads)
        accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["targets"])
        return nnx.state((model, opt)), {"loss": loss, "accuracy": accuracy}

    return memory(train_step.lower(state, batch).compile())


def measure(config: str = "bench", nnx_side: str = "auto") -> dict[str, Any]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="l2n-memory-") as tmp:
        side = pick_nnx(config, nnx_side, Path(tmp))
        linen = linen_memory(config)
        nnx_stats = nnx_memory(config, side.factory)
    ratio = nnx_stats["temp_size_in_bytes"] / max(linen["temp_size_in_bytes"], 1)
    return {
        "config": config,
        "nnx_side": side.kind,
        "nnx_side_why": side.why,
        "linen": linen,
        "nnx": nnx_stats,
        "temp_ratio": ratio,
        "goal": 1.05,
        "seconds": time.perf_counter() - t0,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:10.3f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="bench", choices=("tiny", "bench"), help="zoo decoder config")
    parser.add_argument(
        "--nnx",
        default="auto",
        choices=("auto", "migrated", "twin"),
        help="which NNX decoder to measure (default: migrated if clean, else the twin)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.add_argument(
        "--max-ratio",
        type=float,
        default=None,
        metavar="R",
        help="exit 1 if the NNX/Linen temp-memory ratio exceeds R",
    )
    args = parser.parse_args(argv)
    try:
        numbers = measure(args.config, args.nnx)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print(f"decoder train step, config {args.config!r}: XLA compiled memory analysis")
    print(f"NNX side: {numbers['nnx_side']} — {numbers['nnx_side_why']}")
    print(f"{'':30}{'Linen':>14}{'NNX':>14}")
    for field in FIELDS:
        print(f"{field:30}{_mib(numbers['linen'][field])}{_mib(numbers['nnx'][field])}")
    verdict = "OK" if numbers["temp_ratio"] <= numbers["goal"] else "ABOVE GOAL"
    print(f"ratio NNX / Linen (temp): {numbers['temp_ratio']:.4f}  (goal <= {numbers['goal']}: {verdict})")
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    if args.max_ratio is not None and numbers["temp_ratio"] > args.max_ratio:
        print(
            f"--max-ratio {args.max_ratio}: the ratio {numbers['temp_ratio']:.4f} is above it",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
