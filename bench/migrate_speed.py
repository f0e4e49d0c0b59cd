"""How fast is ``migrate`` next to the floor it sits on?

Generates a corpus of varied Linen files (setup() and @nn.compact modules with Dense / Conv /
LayerNorm / Dropout / BatchNorm / Embed, activations, several classes a file, import aliases, some
files with no flax at all) into a temp folder, then measures two sides over the same files:

(a) the libcst floor: ``libcst.parse_module(src).code`` (parse + code generation round trip) for
    every file, over a ProcessPoolExecutor with the same ``--jobs``;
(b) ``migrate_paths(..., Mode.CHECK, jobs=N)`` over the same files.

What is measured, so that a shared, loaded machine disturbs it as little as it can:

- every measurement of a side runs in a fresh Python process of its own (``--measure SIDE``), so both
  sides start from the same process conditions: nothing the other side imported, cached or left on
  the heap (which the garbage collector would traverse) is there;
- in that process the side's one-off start-up is done first and timed apart: for the floor importing
  libcst, for migrate importing the codemod and reading the flax facts it needs (``engine._warm_up``,
  what the engine does once before forking its workers). The per-file work is timed after it, from
  reading the first file to the last result; the start-up is printed in its own column;
- the two sides are interleaved, ``--repeat`` times (default 3) in the order floor, migrate, migrate,
  floor, floor, ... , so a load that comes and goes falls on both;
- the ratio is that of the per-side minima of wall time (the repetition least disturbed by other
  processes), printed with the ratio of the medians and of the minima of CPU seconds (this process and
  its workers), which a loaded machine disturbs less. The goal (<= 2.0) is judged on the minima;
- with ``--instructions``, each side's machine instructions are also counted under valgrind (start-up
  excluded: a run that only starts up is subtracted), a count no other process changes.

    python bench/migrate_speed.py                      # 2,000 files, one process, 3 repetitions
    python bench/migrate_speed.py --files 2000 --jobs 2
    python bench/migrate_speed.py --files 300 --profile prof.txt   # + where the codemod spends its time
    python bench/migrate_speed.py --files 300 --instructions        # + instruction counts (valgrind)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

GOAL = 2.0

# ---- corpus -----------------------------------------------------------------------------------------
IMPORTS = [
    ("import flax.linen as nn", "nn"),
    ("from flax import linen as nn", "nn"),
    ("from flax import linen", "linen"),
    ("import flax.linen as fnn", "fnn"),
]
ACTS = ["relu", "gelu", "tanh", "silu", "sigmoid", "elu", "softplus", "leaky_relu"]
HEADER = '''"""{doc}"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
{imp}

Dtype = Any
'''


def _mlp_setup(rng: random.Random, nn: str, name: str) -> str:
    depth = rng.randint(1, 4)
    act = rng.choice(ACTS)
    lines = [
        f"class {name}({nn}.Module):",
        f'    """A setup()-style MLP with {depth} hidden layers."""',
        "",
        f"    hidden: int = {rng.choice([32, 64, 128, 256])}",
        f"    out: int = {rng.choice([2, 10, 100])}",
        f"    rate: float = {rng.choice([0.0, 0.1, 0.2]):.1f}",
        "",
        "    def setup(self):",
    ]
    for i in range(depth):
        lines.append(f"        self.fc{i} = {nn}.Dense(self.hidden)")
    if rng.random() < 0.5:
        lines.append(f"        self.norm = {nn}.LayerNorm()")
    lines.append(f"        self.drop = {nn}.Dropout(self.rate)")
    lines.append(
        f"        self.head = {nn}.Dense(features=self.out, use_bias={rng.choice(['True', 'False'])})"
    )
    lines += ["", "    def __call__(self, x, train: bool = False):"]
    for i in range(depth):
        lines.append(f"        x = {nn}.{act}(self.fc{i}(x))")
    if "self.norm" in "\n".join(lines):
        lines.append("        x = self.norm(x)")
    lines += ["        x = self.drop(x, deterministic=not train)", "        return self.head(x)"]
    return "\n".join(lines)


def _cnn_compact(rng: random.Random, nn: str, name: str) -> str:
    act = rng.choice(ACTS)
    convs = rng.randint(1, 3)
    lines = [
        f"class {name}({nn}.Module):",
        '    """A compact CNN."""',
        "",
        f"    num_classes: int = {rng.choice([10, 100, 1000])}",
        "    dtype: Dtype = jnp.float32",
        "",
        f"    @{nn}.compact",
        "    def __call__(self, x, train: bool = True):",
    ]
    for i in range(convs):
        feats = 2 ** (4 + i)
        lines.append(f"        x = {nn}.Conv({feats}, kernel_size=(3, 3), dtype=self.dtype)(x)")
        if rng.random() < 0.6:
            lines.append(f"        x = {nn}.BatchNorm(use_running_average=not train, momentum=0.9)(x)")
        lines.append(f"        x = {nn}.{act}(x)")
        if rng.random() < 0.5:
            lines.append(f"        x = {nn}.avg_pool(x, window_shape=(2, 2), strides=(2, 2))")
    if rng.random() < 0.5:
        lines.append("        x = jnp.mean(x, axis=(1, 2))")
    else:
        lines.append("        x = x.reshape((x.shape[0], -1))")
    lines.append(f"        x = {nn}.Dense({rng.choice([64, 128, 256])})(x)")
    lines.append(f"        x = {nn}.Dropout(rate=0.1, deterministic=not train)(x)")
    lines.append(f"        return {nn}.Dense(self.num_classes, name='head')(x)")
    return "\n".join(lines)


def _embed_compact(rng: random.Random, nn: str, name: str) -> str:
    lines = [
        f"class {name}({nn}.Module):",
        '    """Token embedding, a norm and a projection."""',
        "",
        f"    vocab_size: int = {rng.choice([256, 1000, 32000])}",
        f"    features: int = {rng.choice([64, 128])}",
        "",
        f"    @{nn}.compact",
        "    def __call__(self, tokens):",
        f"        x = {nn}.Embed(self.vocab_size, self.features)(tokens)",
        f"        x = {nn}.LayerNorm(epsilon=1e-6)(x)",
        f"        x = {nn}.Dense(self.features * 4)(x)",
        f"        x = {nn}.{rng.choice(ACTS)}(x)",
        f"        return {nn}.Dense(self.features)(x)",
    ]
    return "\n".join(lines)


def _block_setup(rng: random.Random, nn: str, name: str) -> str:
    lines = [
        f"class {name}({nn}.Module):",
        '    """A residual block built in setup()."""',
        "",
        "    features: int",
        "    dropout_rate: float = 0.1",
        "",
        "    def setup(self):",
        f"        self.ln = {nn}.LayerNorm()",
        f"        self.up = {nn}.Dense(self.features * 2)",
        f"        self.down = {nn}.Dense(self.features)",
        f"        self.drop = {nn}.Dropout(self.dropout_rate)",
        "",
        "    def __call__(self, x, *, deterministic: bool = True):",
        "        y = self.ln(x)",
        f"        y = {nn}.{rng.choice(ACTS)}(self.up(y))",
        "        y = self.drop(self.down(y), deterministic=deterministic)",
        "        return x + y",
    ]
    return "\n".join(lines)


def _param_module(rng: random.Random, nn: str, name: str) -> str:
    lines = [
        f"class {name}({nn}.Module):",
        '    """Owns a raw parameter (a manual migration)."""',
        "",
        "    features: int = 8",
        "",
        f"    @{nn}.compact",
        "    def __call__(self, x):",
        f"        scale = self.param('scale', {nn}.initializers.ones, (self.features,))",
        f"        return {nn}.Dense(self.features)(x) * scale",
    ]
    return "\n".join(lines)


def _helpers(rng: random.Random) -> str:
    out = []
    for i in range(rng.randint(1, 5)):
        out.append(f'''def helper_{i}(x, scale: float = {rng.random():.3f}):
    """Plain JAX helper #{i}: scaled, clipped and normalised."""
    y = jnp.clip(x * scale, -1.0, 1.0)
    z = jnp.sum(y ** 2, axis=-1, keepdims=True)
    return y / jnp.sqrt(z + 1e-6)''')
    return "\n\n\n".join(out)


def _plain_file(rng: random.Random, i: int) -> str:
    body = [
        f'"""Utility module {i}: no flax here."""',
        "",
        "import os",
        "import re",
        "from pathlib import Path",
        "",
    ]
    for k in range(rng.randint(3, 12)):
        body.append(f'''
def util_{k}(text: str, n: int = {rng.randint(1, 9)}) -> list[str]:
    """Split, filter and pad (#{k})."""
    parts = [p for p in re.split(r"\\s+", text) if p]
    while len(parts) < n:
        parts.append(os.sep)
    return [str(Path(p)) for p in parts]
''')
    return "\n".join(body) + "\n"


TEMPLATES = [_mlp_setup, _cnn_compact, _embed_compact, _block_setup, _param_module]


def make_file(i: int, seed: int = 0) -> str:
    rng = random.Random(seed * 1_000_003 + i)
    if rng.random() < 0.1:
        return _plain_file(rng, i)
    imp, nn = rng.choice(IMPORTS)
    parts = [HEADER.format(doc=f"Generated Linen models, file {i}.", imp=imp)]
    parts.append(_helpers(rng))
    for k in range(rng.randint(2, 5)):
        parts.append(rng.choice(TEMPLATES)(rng, nn, f"Model{i}_{k}"))
    return "\n\n\n".join(parts) + "\n"


def make_corpus(root: Path, files: int, seed: int = 0) -> list[Path]:
    """``files`` generated files under ``root`` (20 a package folder)."""
    paths = []
    for i in range(files):
        folder = root / f"pkg{i // 20:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / f"models_{i:05d}.py"
        p.write_text(make_file(i, seed))
        paths.append(p)
    return paths


# ---- the floor --------------------------------------------------------------------------------------
def _roundtrip(path: Path) -> int:
    import libcst

    src = path.read_text()
    return len(libcst.parse_module(src).code)


def _metadata_roundtrip(path: Path) -> int:
    """What any codemod that resolves names through imports pays before doing anything: parse, the
    metadata such a codemod needs (qualified names, positions), one no-op transform, code-gen."""
    import libcst
    from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

    wrapper = MetadataWrapper(libcst.parse_module(path.read_text()), unsafe_skip_copy=True)
    wrapper.resolve_many([QualifiedNameProvider, PositionProvider])
    return len(wrapper.module.visit(libcst.CSTTransformer()).code)


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its reaped children): on a loaded machine the
    CPU time still says what the work costs, where the wall time also counts the other processes."""
    cpu = os.times()
    return time.perf_counter(), cpu.user + cpu.system + cpu.children_user + cpu.children_system


def _since(start: tuple[float, float]) -> tuple[float, float]:
    now = _clock()
    return now[0] - start[0], now[1] - start[1]


def floor_time(paths: list[Path], jobs: int, fn=_roundtrip) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn`` (parse + code-gen) over every file, with the engine's process
    setup (fork, chunks)."""
    t = _clock()
    if jobs > 1:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else None)
        chunksize = max(1, len(paths) // (jobs * 8))
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            total = sum(pool.map(fn, paths, chunksize=chunksize))
    else:
        total = sum(fn(p) for p in paths)
    assert total > 0
    return _since(t)


def migrate_time(root: Path, jobs: int) -> tuple[tuple[float, float], object]:
    from linen2nnx.migrate.engine import Mode, migrate_paths

    t = _clock()
    result = migrate_paths([root], Mode.CHECK, jobs=jobs)
    return _since(t), result


def _start_up(side: str) -> None:
    """The side's one-off start-up, timed apart from its per-file work."""
    import libcst
    import libcst.metadata  # as the engine imports it before forking

    assert libcst.parse_module("x = 1\n").code  # the parser's own first-call set-up
    if side == "migrate":
        from linen2nnx.migrate import engine

        engine._warm_up()


def measure_side(side: str, root: Path, jobs: int, start_up_only: bool = False) -> dict:
    """One measurement of one side, in this (fresh) process: start-up, then the work."""
    t = _clock()
    _start_up(side)
    start_up = _since(t)[0]
    paths = sorted(root.rglob("*.py"))
    out: dict = {"side": side, "start_up_s": start_up}
    if start_up_only:
        return out
    if side == "migrate":
        (out["wall_s"], out["cpu_s"]), result = migrate_time(root, jobs)
        out["changed"] = sum(r.changed for r in result.files)  # type: ignore[attr-defined]
        out["skipped"] = sum(r.skipped for r in result.files)  # type: ignore[attr-defined]
        out["findings"] = dict(result.counts())  # type: ignore[attr-defined]
    else:
        fn = _metadata_roundtrip if side == "metadata" else _roundtrip
        out["wall_s"], out["cpu_s"] = floor_time(paths, jobs, fn)
    return out


def _measure_in_child(side: str, root: Path, jobs: int) -> dict:
    """``measure_side`` in a fresh interpreter; its numbers come back as JSON on stdout."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", side, "--keep", str(root)]
    done = subprocess.run([*cmd, "--jobs", str(jobs)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"measuring {side} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def instructions(side: str, root: Path) -> int | None:
    """Machine instructions one process executes for ``side``'s per-file work (one process, jobs=1):
    under valgrind's instruction counter, a run with the work minus a run with the start-up only.
    Other processes do not change the count, so it compares the two sides on a loaded machine as no
    clock does (though it weighs a cache miss like any instruction). None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    counts = []
    for extra in ([], ["--start-up-only"]):
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        cmd += [sys.executable, str(Path(__file__).resolve()), "--measure", side, "--keep", str(root)]
        done = subprocess.run([*cmd, "--jobs", "1", *extra], capture_output=True, text=True, check=False)
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode or found is None:
            raise RuntimeError(f"counting the instructions of {side} failed:\n{done.stderr[-2000:]}")
        counts.append(int(found.group(1).replace(",", "")))
    return counts[0] - counts[1]


def _count_instructions(root: Path, files: int, numbers: dict) -> str:
    """Both sides' :func:`instructions`, added to ``numbers``; the line that reports them."""
    floor_i, migrate_i = instructions("floor", root), instructions("migrate", root)
    if not (floor_i and migrate_i):
        return "instructions: valgrind not found"
    numbers.update(floor_instructions=floor_i, migrate_instructions=migrate_i)
    numbers["instruction_ratio"] = migrate_i / floor_i
    return (
        f"instructions (valgrind, one process, start-up excluded): floor {floor_i / files / 1e6:.1f} "
        f"M/file, migrate {migrate_i / files / 1e6:.1f} M/file, ratio {numbers['instruction_ratio']:.2f}"
    )


def measure(root: Path, jobs: int, repeat: int, sides: tuple[str, ...]) -> dict[str, list[dict]]:
    """Every side ``repeat`` times, interleaved (ABBA order: a drifting load falls on all sides)."""
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for k in range(repeat):
        for side in sides if k % 2 == 0 else reversed(sides):
            runs[side].append(_measure_in_child(side, root, jobs))
    return runs


def profile_migrate(root: Path, out: Path, limit: int = 40) -> str:
    """cProfile of a one-process migrate of the corpus (after the start-up); the top of the
    cumulative and own-time lists."""
    import cProfile
    import io
    import pstats

    from linen2nnx.migrate.engine import Mode, migrate_paths

    _start_up("migrate")
    prof = cProfile.Profile()
    prof.enable()
    migrate_paths([root], Mode.CHECK, jobs=1)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("tottime").print_stats(limit)
    out.write_text(buf.getvalue())
    return buf.getvalue()


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Minima, medians and ratios of the measured runs (the goal is judged on the wall minima)."""
    floor, migrate = runs["floor"], runs["migrate"]

    def stat(rows: list[dict], key: str, how) -> float:
        return how(r[key] for r in rows)

    numbers = {
        "repeat": len(floor),
        "floor_s": stat(floor, "wall_s", min),
        "migrate_s": stat(migrate, "wall_s", min),
        "floor_median_s": stat(floor, "wall_s", lambda v: statistics.median(list(v))),
        "migrate_median_s": stat(migrate, "wall_s", lambda v: statistics.median(list(v))),
        "floor_cpu_s": stat(floor, "cpu_s", min),
        "migrate_cpu_s": stat(migrate, "cpu_s", min),
        "floor_start_up_s": stat(floor, "start_up_s", min),
        "migrate_start_up_s": stat(migrate, "start_up_s", min),
        "floor_runs_s": [r["wall_s"] for r in floor],
        "migrate_runs_s": [r["wall_s"] for r in migrate],
    }
    numbers["ratio"] = numbers["migrate_s"] / numbers["floor_s"]
    numbers["median_ratio"] = numbers["migrate_median_s"] / numbers["floor_median_s"]
    numbers["cpu_ratio"] = numbers["migrate_cpu_s"] / numbers["floor_cpu_s"]
    if "metadata" in runs:
        numbers["metadata_floor_s"] = stat(runs["metadata"], "wall_s", min)
    last = migrate[-1]
    numbers.update(changed=last["changed"], skipped=last["skipped"], findings=last["findings"])
    return numbers


def _table(numbers: dict, files: int, jobs: int):
    from rich.table import Table

    table = Table(
        title=f"migrate vs libcst floor — {files} files, jobs={jobs}, cpus={os.cpu_count()}, "
        f"best of {numbers['repeat']} interleaved runs each",
        title_justify="left",
    )
    for col in ("measure", "wall s", "median s", "files/s", "ms/file", "CPU s", "start-up s"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    for name, key in (("libcst floor (parse + codegen)", "floor"), ("migrate_paths(CHECK)", "migrate")):
        secs = numbers[f"{key}_s"]
        table.add_row(
            name,
            f"{secs:.2f}",
            f"{numbers[f'{key}_median_s']:.2f}",
            f"{files / secs:.0f}",
            f"{1000 * secs / files:.2f}",
            f"{numbers[f'{key}_cpu_s']:.2f}",
            f"{numbers[f'{key}_start_up_s']:.2f}",
        )
    meta = numbers.get("metadata_floor_s")
    if meta is not None:
        table.add_row("libcst metadata floor (context)", f"{meta:.2f}", "", "", f"{1000 * meta / files:.2f}")
    ratio = numbers["ratio"]
    verdict = "[green]within goal[/]" if ratio <= GOAL else "[red]above goal[/]"
    table.add_row(
        "ratio migrate / floor",
        f"{ratio:.2f}",
        f"{numbers['median_ratio']:.2f}",
        "",
        f"goal <= {GOAL} ({verdict})",
        f"{numbers['cpu_ratio']:.2f}",
    )
    if meta is not None:
        table.add_row("ratio migrate / metadata floor", f"{numbers['migrate_s'] / meta:.2f}")
    return table


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=2000, help="corpus size (default: 2000)")
    ap.add_argument(
        "-j", "--jobs", type=int, default=1, help="processes for both sides; 0 = one per CPU (default: 1)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--repeat", type=int, default=3, help="measure each side this many times, interleaved (default: 3)"
    )
    ap.add_argument("--keep", metavar="DIR", help="write the corpus to DIR (kept) instead of a temp folder")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    ap.add_argument("--profile", metavar="FILE", help="also cProfile a one-process migrate; stats to FILE")
    ap.add_argument(
        "--metadata-floor",
        action="store_true",
        help="also time parse + QualifiedName/Position metadata + no-op transform + code-gen "
        "(the floor of any import-resolving libcst codemod), for context",
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count each side's machine instructions under valgrind (one process; slow: about "
        "30x, so on a few hundred files), a measure other processes on the machine do not disturb",
    )
    ap.add_argument("--start-up-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--measure",
        choices=("floor", "migrate", "metadata"),
        help=argparse.SUPPRESS,  # internal: one measurement of the corpus in --keep, as JSON
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    jobs = args.jobs or os.cpu_count() or 1
    if args.measure:
        print(json.dumps(measure_side(args.measure, Path(args.keep), jobs, args.start_up_only)))
        return 0

    from rich.console import Console

    console = Console(highlight=False, width=None if Console().is_terminal else 140)
    tmp = None
    if args.keep:
        root = Path(args.keep)
        if root.exists():
            shutil.rmtree(root)
    else:
        tmp = tempfile.mkdtemp(prefix="l2n-speed-")
        root = Path(tmp) / "corpus"
    try:
        t = time.perf_counter()
        paths = make_corpus(root, args.files, args.seed)
        nbytes = sum(p.stat().st_size for p in paths)
        lines = sum(p.read_text().count("\n") for p in paths)
        console.print(
            f"corpus: {len(paths)} files, {lines} lines, {nbytes / 1e6:.1f} MB in {root} "
            f"({time.perf_counter() - t:.1f}s to generate)"
        )
        sides = ("floor", "migrate", *(("metadata",) if args.metadata_floor else ()))
        numbers = summarize(measure(root, jobs, max(1, args.repeat), sides))
        console.print(_table(numbers, len(paths), jobs))
        if args.instructions:
            console.print(_count_instructions(root, len(paths), numbers))
        counts = numbers["findings"]
        console.print(
            f"migrate: {numbers['changed']} changed, {numbers['skipped']} skipped by the pre-filter; findings "
            + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("error", "manual", "unsafe", "converted"))
        )
        console.print(
            "runs (wall s, in order): floor "
            + " ".join(f"{s:.2f}" for s in numbers["floor_runs_s"])
            + "; migrate "
            + " ".join(f"{s:.2f}" for s in numbers["migrate_runs_s"])
        )
        numbers.update(files=len(paths), lines=lines, bytes=nbytes, jobs=jobs, cpus=os.cpu_count(), goal=GOAL)
        if args.json:
            Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
        if args.profile:
            text = profile_migrate(root, Path(args.profile))
            console.print(f"profile written to {args.profile}")
            console.print(text[:4000], markup=False)
        return 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
