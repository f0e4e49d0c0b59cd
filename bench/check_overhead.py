"""How much does ``check`` cost over the floor: running both models' jitted forward+backward once?

    python bench/check_overhead.py [--model decoder] [--config tiny|bench] [--twin] [--json FILE] [--max-ratio 2.0]

The model is the zoo decoder (scan over remat'd layers, RoPE, sown values). Its NNX side is the
migrated decoder (``migrate --trace`` into a temporary folder) when its migration has no manual
finding, else the hand-written twin ``tests/fixtures/nnx_twins/decoder.py`` (``--twin`` forces it);
the output says which. Both sides get the same perturbed weights. ``--model`` measures another
zoo model (its migrated code).

- floor: ``jax.jit(jax.value_and_grad(loss))`` of the Linen model plus the same for the NNX model
  (split / merge), each compiled and run once on the example batch (cold, as ``check`` is);
- check: ``linen2nnx.equivalence.check(pair, weights)`` wall time (forward eval / train, loss, grads,
  sown values, the long batch, precision; no divergence replay since it passes).

``check`` compiles its programs with XLA's backend optimisations off on CPU (compiling dominates a
one-shot check); the floor is plain ``jax.jit``, what a hand-written comparison would run. The
floor compiled with the same options is printed too, for the like-for-like ratio.

Prints ``ratio = check / floor`` (goal <= 2.0). Exit 1 with ``--max-ratio`` exceeded, or if the check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TWINS = ROOT / "tests" / "fixtures" / "nnx_twins"


def _mutations() -> Any:
    """The sibling script ``bench/mutations.py`` (its ``migrate_zoo``), loaded by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_mutations", Path(__file__).with_name("mutations.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def zoo_pair(model: str, config: str, work: Path, force_twin: bool = False) -> tuple[Any, str]:
    """``(ModelPair, description of the NNX side)`` for a zoo model in ``config``."""
    from linen2nnx import zoo
    from linen2nnx.spec import ModelPair, import_file, linen_ctor_kwargs

    linen = zoo.load_train_module(model).spec(config)
    twin_file = TWINS / f"{model}.py"
    reason = "--twin"
    if not force_twin or not twin_file.exists():
        spec_path, manual = _mutations().migrate_zoo(model, work / f"{model}-migrated")
        if not manual:
            spec = import_file(spec_path)  # written for the traced config; rebuilt here for `config`
            cls = getattr(spec.migrated_module(), spec.NNX_CLASS)
            args, _ = linen.call_args(False)
            kwargs = {
                **linen_ctor_kwargs(linen.model),
                **{name: int(args[i].shape[-1]) for name, i in spec.INPUT_FEATURE_ARGS.items()},
            }
            return (
                ModelPair(
                    linen, lambda rngs: cls(**kwargs, rngs=rngs), spec_path.parent / "linen2nnx-map.json"
                ),
                "migrated by `linen2nnx migrate --trace`",
            )
        reason = f"its migration left {len(manual)} manual finding(s)"
        if not twin_file.exists():
            raise SystemExit(f"{model}: {reason} and there is no hand-written twin {twin_file}")
    twin = import_file(twin_file)
    if model != "decoder":
        raise SystemExit("--twin is wired for the decoder only (its twin takes the zoo DecoderConfig)")
    cfg = linen.model.config
    return (
        ModelPair(linen, lambda rngs: twin.Decoder(cfg, rngs=rngs)),
        f"hand-written twin {twin_file.relative_to(ROOT)} ({reason})",
    )


def floor_seconds(pair: Any, weights: Any, compiler_options: dict[str, Any] | None = None) -> float:
    """Cold jitted value_and_grad of the loss on both sides (compile + one run each)."""
    import jax
    from flax import nnx

    from linen2nnx.equivalence.build import build_sides, linen_dropout_off, nnx_dropout_off

    sides = build_sides(pair, weights)
    side = pair.linen
    args, kwargs = side.call_args(True)
    rngs = {k: v for k, v in side.init_rngs().items() if k != "params"}
    variables = sides.linen_variables
    model = nnx_dropout_off(sides.nnx_model)
    gdef, params, rest = nnx.split(model, nnx.Param, ...)

    def linen_loss(p: Any, batch: Any) -> Any:
        with linen_dropout_off():
            out = side.model.apply({**variables, "params": p}, *args, **kwargs, rngs=rngs)
        return side.loss(out, batch)

    def nnx_loss(p: Any, batch: Any) -> Any:
        return side.loss(nnx.merge(gdef, p, rest, copy=True)(*args, **kwargs), batch)

    opts = {"compiler_options": compiler_options} if compiler_options else {}
    t0 = time.perf_counter()
    jax.block_until_ready(jax.jit(jax.value_and_grad(linen_loss), **opts)(variables["params"], side.batch))
    jax.block_until_ready(jax.jit(jax.value_and_grad(nnx_loss), **opts)(params, side.batch))
    return time.perf_counter() - t0


def measure(model: str = "decoder", config: str = "tiny", force_twin: bool = False) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from linen2nnx.equivalence import check
    from linen2nnx.equivalence.jitting import compile_options
    from linen2nnx.equivalence.perturb import perturbed_init

    with tempfile.TemporaryDirectory() as tmp:
        pair, nnx_side = zoo_pair(model, config, Path(tmp), force_twin)
        weights = perturbed_init(pair)
        jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((4, 4))))  # backend warm-up
        floor = floor_seconds(pair, weights)
        floor_same = floor_seconds(pair, weights, compile_options())
        t0 = time.perf_counter()
        result = check(pair, weights)
        check_s = time.perf_counter() - t0
    return {
        "model": model,
        "config": config,
        "nnx_side": nnx_side,
        "floor_s": floor,
        "check_s": check_s,
        "ratio": check_s / floor,
        "floor_same_options_s": floor_same,
        "ratio_same_options": check_s / floor_same,
        "passed": result.passed,
        "check_timings_s": {k: round(v, 3) for k, v in result.timings.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="decoder", help="zoo model (default: decoder, the goal's model)")
    parser.add_argument("--config", default="tiny", help="zoo config (tiny | bench)")
    parser.add_argument(
        "--twin",
        action="store_true",
        help="decoder: use the hand-written NNX twin even if the migration is clean",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON")
    parser.add_argument("--max-ratio", type=float, help="exit 1 if check / floor exceeds this")
    args = parser.parse_args(argv)
    numbers = measure(args.model, args.config, args.twin)
    print(f"{args.model} ({args.config}), NNX side: {numbers['nnx_side']}")
    print(f"  floor: jitted fwd+bwd, Linen + NNX (cold)  {numbers['floor_s']:8.2f} s")
    print(
        f"  check: linen2nnx.equivalence.check         {numbers['check_s']:8.2f} s  "
        f"({'PASS' if numbers['passed'] else 'FAIL'}; "
        + ", ".join(f"{k} {v:.2f}s" for k, v in numbers["check_timings_s"].items())
        + ")"
    )
    print(f"  ratio check / floor: {numbers['ratio']:.2f} (goal <= 2.0)")
    print(
        f"  (floor compiled with check's XLA options {numbers['floor_same_options_s']:.2f} s: "
        f"ratio {numbers['ratio_same_options']:.2f})"
    )
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
    if not numbers["passed"]:
        return 1
    if args.max_ratio is not None and numbers["ratio"] > args.max_ratio:
        print(f"ratio {numbers['ratio']:.2f} exceeds --max-ratio {args.max_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
