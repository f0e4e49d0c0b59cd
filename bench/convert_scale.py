"""Does ``convert`` keep up with Orbax, and stay within its memory budget, at real scale?

    python bench/convert_scale.py [--size MB] [--dir DIR] [--json FILE] [--mesh] [--repeat N]

Generates a MaxText-style Linen checkpoint of about ``--size`` MB (default 1100): a ``TrainState``
whose params are ``LogicallyPartitioned`` boxes over scanned (layer-stacked) weights, with an AdamW
state at step 1000 (random moments, as incompressible as a trained run's), saved through a ``CheckpointManager`` (``DIR/ckpt/1000/state`` plus a JSON
``metrics`` item). Then, each in its own child process (so one run's memory and caches do not
colour the next, and ``ru_maxrss`` is that run's peak alone):

- ``floor``: raw Orbax on the same item: ``StandardCheckpointer().restore`` + ``save``;
- ``convert``: ``linen2nnx.checkpoint_convert.convert`` of the root, params and optimizer state,
  with its default read-back verification, and again with ``verify=False``;
- ``dry-run``: the metadata-only plan of ``convert --dry-run``;
- with ``--mesh``, ``convert-mesh``: ``convert(..., mesh={"data": 1})``, the ``--mesh`` path (arrays
  restored onto the mesh as ``jax.Array`` s, written with their shardings), verify on.

``floor`` and ``convert`` run ``--repeat`` times (default 3), alternately, in pairs (which of the
two goes first alternates too), so that a machine whose load moves does not decide the verdict
through one run. Printed: each pair (wall and CPU seconds, peak RSS, its ratios); the median
pair's convert time / floor time (goal <= 1.2) and the median CPU ratio; the highest peak RSS of
the convert runs against 1.5 x the largest array + 300 MB; the dry-run time (goal < 5 s).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STEP = 1000
LAYERS = 4
#: Floor / convert pairs per run: at 1.1 GB about a minute in all on 2 cores, and the median of
#: three is not decided by one run that waited for a core.
DEFAULT_REPEAT = 3


def dims(size_mb: float) -> dict[str, int]:
    """Embed / MLP / vocab sizes whose params + adam mu + nu come to about ``size_mb``."""
    params = size_mb * 2**20 / 3
    embed = max(8, int(math.sqrt(params / 224)) // 8 * 8)  # 192 E^2 of layers + 32 E^2 of embedding
    return {"layers": LAYERS, "embed": embed, "mlp": 4 * embed, "vocab": 8 * embed}


def param_shapes(d: dict[str, int]) -> dict[str, Any]:
    """Linen path -> (shape, logical axis names), MaxText's layout with the layer axis scanned."""
    L, E, F, V = d["layers"], d["embed"], d["mlp"], d["vocab"]
    attn = {k: ((L, E, E), ("layers", "embed", "heads")) for k in ("query", "key", "value", "out")}
    return {
        "decoder": {
            "layers": {
                "mlp": {
                    "wi": ((L, E, F), ("layers", "embed", "mlp")),
                    "wo": ((L, F, E), ("layers", "mlp", "embed")),
                },
                "self_attention": attn,
                "pre_norm": {"scale": ((L, E), ("layers", "embed"))},
            },
            "decoder_norm": {"scale": ((E,), ("embed",))},
        },
        "token_embedder": {"embedding": ((V, E), ("vocab", "embed"))},
    }


def _is_spec(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], tuple)


def make_pair(d: dict[str, int]) -> Any:
    """The NNX twin: the same tree of ``nnx.Param`` stacks (structural matching, no name map)."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from linen2nnx.spec import LinenSide, ModelPair

    def build(tree: Any) -> Any:
        return nnx.Dict(
            {k: (nnx.Param(jnp.zeros(v[0])) if _is_spec(v) else build(v)) for k, v in tree.items()}
        )

    class Twin(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs):
            for k, v in param_shapes(d).items():
                setattr(self, k, build(v))

    linen = LinenSide(model=None, batch={}, loss=lambda *_: 0.0, optimizer=optax.adamw(1e-3))
    del jax
    return ModelPair(linen=linen, nnx_factory=lambda rngs: Twin(rngs=rngs))


def generate(root: Path, d: dict[str, int]) -> None:
    """Write the checkpoint (random boxed params, adamw moments, step 1000) with a CheckpointManager."""
    import flax.linen as nn
    import jax
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from flax.training.train_state import TrainState

    rng = np.random.default_rng(0)

    def box(spec: Any) -> Any:
        return nn.LogicallyPartitioned(rng.standard_normal(spec[0], dtype=np.float32), spec[1])

    params = jax.tree.map(box, param_shapes(d), is_leaf=_is_spec)
    state = TrainState.create(apply_fn=None, params=params, tx=optax.adamw(1e-3))
    # moments as a step-1000 run holds them: as incompressible as the weights (constant moments
    # would be stored in a few KB by zstd, and the benchmark would measure a third of its bytes)
    trained = _trained_moments(state.opt_state, rng)
    state = state.replace(step=STEP, opt_state=trained)
    with ocp.CheckpointManager(root) as mgr:
        mgr.save(
            STEP, args=ocp.args.Composite(state=ocp.args.StandardSave(state), metrics=ocp.args.JsonSave({}))
        )
        mgr.wait_until_finished()


def _trained_moments(opt_state: Any, rng: Any) -> Any:
    """``opt_state`` with each Adam ``mu`` random and signed and each ``nu`` random and positive."""
    import jax
    import numpy as np
    import optax

    def noise(scale: float, square: bool) -> Any:
        def fill(x: Any) -> Any:
            z = rng.standard_normal(np.shape(x), dtype=np.float32)
            return np.square(z) * scale if square else z * scale

        return fill

    def one(s: Any) -> Any:
        if isinstance(s, optax.ScaleByAdamState):
            mu = jax.tree.map(noise(1e-3, False), s.mu)
            return s._replace(mu=mu, nu=jax.tree.map(noise(1e-6, True), s.nu))
        return s

    return jax.tree.map(one, opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState))


def child(mode: str, root: Path, out: Path, d: dict[str, int]) -> dict[str, Any]:
    """One measured run; returns seconds and this process's peak RSS."""
    import orbax.checkpoint as ocp

    from linen2nnx.checkpoint_convert import convert
    from linen2nnx.checkpoint_convert.dryrun import dry_run

    pair = make_pair(d)
    item = root / str(STEP) / "state"
    ready_mb = _current_rss_mb()  # jax, flax, orbax imported and the model built: before any array
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    if mode == "floor":
        with ocp.StandardCheckpointer() as ckptr:
            tree = ckptr.restore(item)
            ckptr.save(out, tree)
            ckptr.wait_until_finished()
    elif mode in ("convert", "convert-no-verify"):
        convert(root, out, pair, verify=mode == "convert")
    elif mode == "convert-mesh":
        convert(root, out, pair, mesh={"data": 1})
    else:
        dry_run(root, pair)
    seconds = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": peak, "ready_rss_mb": ready_mb}


def _cpu_seconds() -> float:
    """CPU time of every thread of this process: on a machine shared with other work, the measure
    that other work disturbs least (wall time also waits for a core)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _current_rss_mb() -> float:
    """This process's resident memory now (Linux ``/proc``; else its peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _spawn(mode: str, root: Path, out: Path, d: dict[str, int]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, __file__, "--child", mode, str(root), str(out), json.dumps(d)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(size_mb: float, work: Path, mesh: bool = False, repeat: int = DEFAULT_REPEAT) -> dict[str, Any]:
    d = dims(size_mb)
    root = work / "ckpt"
    _spawn("generate", root, work, d)
    from linen2nnx.checkpoint_convert.arrays import flat_metadata, nbytes, read_metadata

    flat = flat_metadata(read_metadata(root / str(STEP) / "state"))
    res: dict[str, Any] = {"dims": d, "checkpoint_mb": sum(map(nbytes, flat.values())) / 2**20}
    res["largest_mb"] = max(map(nbytes, flat.values())) / 2**20
    res["pairs"] = [_pair(root, work, d, i) for i in range(max(1, repeat))]
    res["floor"], res["convert"] = _median_pair(res["pairs"])
    res["convert_no_verify"] = _spawn("convert-no-verify", root, work / "nnx-no-verify", d)
    res["dry_run"] = _spawn("dry-run", root, work / "unused", d)
    if mesh:
        res["convert_mesh"] = _spawn("convert-mesh", root, work / "nnx-mesh", d)
    res["time_ratio"] = res["convert"]["seconds"] / res["floor"]["seconds"]
    res["time_ratio_no_verify"] = res["convert_no_verify"]["seconds"] / res["floor"]["seconds"]
    res["cpu_ratio"] = statistics.median(p["cpu_ratio"] for p in res["pairs"])
    res["rss_limit_mb"] = 1.5 * res["largest_mb"] + 300
    res["peak_rss_mb"] = max(p["convert"]["peak_rss_mb"] for p in res["pairs"])  # every run within it
    res["rss_ratio"] = res["peak_rss_mb"] / res["rss_limit_mb"]
    return res


def _pair(root: Path, work: Path, d: dict[str, int], i: int) -> dict[str, Any]:
    """One floor run and one convert run, back to back, in turn first (a load that rises or falls
    during the pair does not always favour the same side); with their ratios."""
    order = ("floor", "convert") if i % 2 == 0 else ("convert", "floor")
    runs = {}
    for mode in order:
        runs[mode] = _spawn(mode, root, work / f"{mode}-{i}", d)
        shutil.rmtree(work / f"{mode}-{i}", ignore_errors=True)  # each run starts with the same disk use
    f, c = runs["floor"], runs["convert"]
    ratio, cpu_ratio = c["seconds"] / f["seconds"], c["cpu_seconds"] / f["cpu_seconds"]
    return {"floor": f, "convert": c, "time_ratio": ratio, "cpu_ratio": cpu_ratio}


def _median_pair(pairs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pair whose wall ratio is the median (the lower middle one of an even count): its floor
    and convert runs, so the headline ratio is one measured pair's, not a mix of runs."""
    ranked = sorted(pairs, key=lambda p: p["time_ratio"])
    mid = ranked[(len(ranked) - 1) // 2]
    return mid["floor"], mid["convert"]


def report(res: dict[str, Any]) -> str:
    ok = lambda good: "ok" if good else "ABOVE GOAL"  # noqa: E731
    f, c = res["floor"], res["convert"]
    n = len(res["pairs"])
    return "\n".join(
        [
            f"checkpoint: {res['checkpoint_mb']:.0f} MB, largest array {res['largest_mb']:.1f} MB, dims {res['dims']}",
            *_pair_lines(res["pairs"]),
            f"median of {n} pair{'s' * (n > 1)}:",
            f"floor (Orbax restore+save): {f['seconds']:.2f} s, peak RSS {f['peak_rss_mb']:.0f} MB",
            f"convert: {c['seconds']:.2f} s, peak RSS {c['peak_rss_mb']:.0f} MB "
            f"({c['ready_rss_mb']:.0f} MB before the first array; the arrays' part: "
            f"{(c['peak_rss_mb'] - c['ready_rss_mb']) / res['largest_mb']:.1f} x largest)",
            f"convert --no-verify: {res['convert_no_verify']['seconds']:.2f} s, "
            f"peak RSS {res['convert_no_verify']['peak_rss_mb']:.0f} MB",
            f"ratio convert / floor (time): {res['time_ratio']:.2f}  (goal <= 1.2: {ok(res['time_ratio'] <= 1.2)})",
            f"ratio convert --no-verify / floor (time): {res['time_ratio_no_verify']:.2f}",
            f"CPU seconds: floor {f['cpu_seconds']:.2f}, convert {c['cpu_seconds']:.2f}, "
            f"convert --no-verify {res['convert_no_verify']['cpu_seconds']:.2f} "
            f"(median ratio of the pairs {res['cpu_ratio']:.2f})",
            f"peak RSS / (1.5 x largest + 300 MB = {res['rss_limit_mb']:.0f} MB): {res['rss_ratio']:.2f}, "
            f"the highest of the convert runs  (goal <= 1: {ok(res['rss_ratio'] <= 1)})",
            f"dry run: {res['dry_run']['seconds']:.2f} s  (goal < 5 s: {ok(res['dry_run']['seconds'] < 5)})",
            *_mesh_line(res),
        ]
    )


def _pair_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """One line per measured pair, in the order they ran."""
    return [
        f"pair {i + 1}: floor {p['floor']['seconds']:.2f} s ({p['floor']['cpu_seconds']:.2f} CPU s), "
        f"convert {p['convert']['seconds']:.2f} s ({p['convert']['cpu_seconds']:.2f} CPU s, "
        f"peak RSS {p['convert']['peak_rss_mb']:.0f} MB): ratio {p['time_ratio']:.2f}, CPU ratio {p['cpu_ratio']:.2f}"
        for i, p in enumerate(pairs)
    ]


def _mesh_line(res: dict[str, Any]) -> list[str]:
    m = res.get("convert_mesh")
    if m is None:
        return []
    ratio = m["peak_rss_mb"] / res["rss_limit_mb"]
    return [
        f"convert --mesh data=1: {m['seconds']:.2f} s (ratio {m['seconds'] / res['floor']['seconds']:.2f}), "
        f"peak RSS {m['peak_rss_mb']:.0f} MB (/ goal {ratio:.2f})"
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=float, default=1100, help="checkpoint size in MB (default 1100)")
    p.add_argument("--dir", type=Path, help="parent of the work folder (created; default: the system's temp)")
    p.add_argument("--json", type=Path, help="write the numbers as JSON")
    p.add_argument("--mesh", action="store_true", help="also measure convert --mesh data=1")
    p.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_REPEAT,
        help=f"floor / convert pairs, run alternately; the median pair decides (default {DEFAULT_REPEAT})",
    )
    args = p.parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        res = measure(args.size, Path(work), mesh=args.mesh, repeat=args.repeat)
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, root, out, d = sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), json.loads(sys.argv[5])
        if mode == "generate":
            generate(root, d)
            print(json.dumps({}))
        else:
            print(json.dumps(child(mode, root, out, d)))
        sys.exit(0)
    sys.exit(main())
