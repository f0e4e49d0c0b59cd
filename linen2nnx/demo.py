"""``linen2nnx demo``: the whole chain on a bundled zoo model, leaving every artefact on disk.

1. train the Linen model a few dozen steps on its synthetic task and save an Orbax checkpoint;
2. migrate the zoo model's source into ``OUT/nnx`` (traced, so every size is resolved), which also
   writes the name map and a model pair spec;
3. convert the Linen checkpoint into an NNX checkpoint;
4. check parity (forward, loss, gradients, BatchNorm stats, then 10 training steps side by side) and
   write the JSON report;
5. train the converted NNX model a few steps from the converted checkpoint: its first loss must be
   the Linen loss at that step;

then print a summary and the commands that rerun each stage by hand (also in ``OUT/README.md``).

With ``mesh={"data": 2, "fsdp": 2, "tensor": 2}`` (``--mesh data=2,fsdp=2,tensor=2``) the Linen
training runs under that mesh and the model's logical axis rules, and the parity check runs sharded
on it, adding a ``partition_spec`` comparison of every parameter. A process only sees the devices
it started with, so when this one has fewer than the mesh needs, the demo runs itself again in a
child process with ``XLA_FLAGS=--xla_force_host_platform_device_count=N JAX_PLATFORMS=cpu`` (N fake
CPU devices) and returns the child's exit code.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from rich.table import Table

from linen2nnx.errors import L2NError
from linen2nnx.io_utils import atomic_write_text
from linen2nnx.reports.console import make_console

# Zoo models whose whole chain runs today (the decoder since migrate converts nn.scan / nn.remat, the
# pipeline since it converts vmapped stages and scans of functions).
DEMO_MODELS = ("cnn", "mlp", "encoder", "decoder", "rnn", "pipeline")

console = make_console()

# Set in the child the demo starts for a mesh, so a child that still lacks devices fails instead of looping.
_CHILD_ENV = "LINEN2NNX_DEMO_MESH_CHILD"


def run_demo(
    model: str, out: Path, *, steps: int = 50, force: bool = False, mesh: Mapping[str, int] | None = None
) -> int:
    """Run the whole chain on zoo ``model`` into ``out``; 0 if parity holds, 1 if not.

    ``mesh``: axis name -> size; run the Linen training and the parity check sharded on it.
    """
    from linen2nnx import zoo

    if mesh is not None:
        child = _rerun_with_host_devices(model, out, steps, force, dict(mesh))
        if child is not None:
            return child
    if model not in DEMO_MODELS:
        known = ", ".join(DEMO_MODELS)
        raise L2NError(f"--model {model!r}: the demo runs the zoo models {known}")
    out = _fresh_folder(Path(out), force)
    timings: dict[str, float] = {}
    spec_ref = zoo.spec_ref(model)
    linen_ckpt = _train_stage(model, out, spec_ref, steps, mesh, timings)
    spec_path = _migrate_stage(model, out, spec_ref, timings)

    nnx_ckpt = out / "nnx_ckpt"
    with _stage("convert", timings):
        from linen2nnx.checkpoint_convert import convert
        from linen2nnx.spec import load_pair

        pair = load_pair(str(spec_path))
        conversion = convert(linen_ckpt, nnx_ckpt, pair)
    console.print(f"  {conversion.summary()} -> {nnx_ckpt}")

    with _stage("check" + (f" (sharded on {_fmt_mesh(mesh)})" if mesh else ""), timings):
        from linen2nnx.reports.json_report import write_json

        result = _check(pair, linen_ckpt, nnx_ckpt, mesh)
        write_json(result, out / "parity.json")

    from linen2nnx.reports.console import render_parity

    render_parity(result, console=console)
    with _stage("train (NNX, from the converted checkpoint)", timings):
        from linen2nnx.train.demo_stage import train_stage

        trained = train_stage(pair, linen_ckpt, nnx_ckpt, out, mesh)
    console.print(f"  {trained.summary()}")
    _summary(model, out, timings, result.passed and trained.continues_linen)
    _write_readme(
        out, model, spec_ref, zoo.model_source(model), spec_path, linen_ckpt, nnx_ckpt, mesh, trained
    )
    return 0 if result.passed and trained.continues_linen else 1


def _fresh_folder(out: Path, force: bool) -> Path:
    """``out``, created empty; an existing one is replaced only with ``force``."""
    if out.exists():
        if not force:
            raise L2NError(f"{out}: already exists (pass --force to replace it)")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def _train_stage(
    model: str,
    out: Path,
    spec_ref: str,
    steps: int,
    mesh: Mapping[str, int] | None,
    timings: dict[str, float],
) -> Path:
    """Train the zoo model in Linen (on ``mesh`` if given) and save its checkpoint; its path."""
    from linen2nnx import zoo
    from linen2nnx.spec import load_linen_side

    train_mod = zoo.load_train_module(model)
    with _stage("train (Linen)" + (f" on mesh {_fmt_mesh(mesh)}" if mesh else ""), timings):
        with _mesh_scope(load_linen_side(spec_ref), mesh):
            state, losses = train_mod.train("tiny", steps=steps, seed=0)
            linen_ckpt = out / "linen_ckpt"
            train_mod.save_checkpoint(state, linen_ckpt)
    console.print(
        f"  loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps; checkpoint {linen_ckpt}"
    )
    return linen_ckpt


def _migrate_stage(model: str, out: Path, spec_ref: str, timings: dict[str, float]) -> Path:
    """Migrate the zoo model's source with a trace into ``out/nnx``; the pair spec it wrote."""
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.reports.migration import render_json, render_text, summary_line
    from linen2nnx.spec import load_linen_side

    nnx_dir = out / "nnx"
    with _stage("migrate", timings):
        trace = trace_linen(load_linen_side(spec_ref), spec_ref=spec_ref)
        migration = migrate_paths([zoo.model_source(model)], Mode.OUT_DIR, out_dir=nnx_dir, trace=trace)
        spec_path = write_pair_spec(nnx_dir, trace, migration)
        atomic_write_text(out / "migration-report.json", render_json(migration))
        atomic_write_text(out / "migration-report.txt", render_text(migration, verbose=True))
    console.print(f"  {summary_line(migration)}")
    if migration.exit_code() != 0:
        console.print(render_text(migration), markup=False)
        raise L2NError(f"migration of the zoo {model} left findings; see {out / 'migration-report.txt'}")
    return spec_path


def _fmt_mesh(mesh: Mapping[str, int] | None) -> str:
    from linen2nnx.equivalence.mesh import format_mesh

    return format_mesh(mesh or {})


def _mesh_scope(side: object, mesh: Mapping[str, int] | None) -> contextlib.AbstractContextManager:
    if not mesh:
        return contextlib.nullcontext()
    from linen2nnx.equivalence.mesh import mesh_scope

    return mesh_scope(side, mesh)


CHECK_STEPS = 10  # the parity check also trains both sides side by side this many steps


def _check(pair: object, linen_ckpt: Path, nnx_ckpt: Path, mesh: Mapping[str, int] | None) -> object:
    """``check`` with ``CHECK_STEPS`` training steps, sharded on ``mesh`` when given."""
    from linen2nnx.equivalence import check

    return check(pair, linen_ckpt, nnx_ckpt, steps=CHECK_STEPS, mesh=dict(mesh) if mesh else None)


def _rerun_with_host_devices(
    model: str, out: Path, steps: int, force: bool, mesh: dict[str, int]
) -> int | None:
    """``None`` if this process has the devices ``mesh`` needs; else the exit code of the demo rerun
    in a child process that has them (as fake CPU devices)."""
    import jax

    from linen2nnx.equivalence.mesh import MeshError, device_count_needed, format_mesh, host_device_env

    needed = device_count_needed(mesh)
    have = jax.device_count()
    if have >= needed:
        return None
    if os.environ.get(_CHILD_ENV):
        raise MeshError(
            f"--mesh {format_mesh(mesh)} needs {needed} devices; even with XLA_FLAGS set this process "
            f"has {have}"
        )
    console.print(
        f"[dim]--mesh {format_mesh(mesh)} needs {needed} devices, this process has {have}: rerunning the "
        f"demo with {needed} host CPU devices[/]"
    )
    argv = [
        sys.executable,
        "-m",
        "linen2nnx",
        "demo",
        "--model",
        model,
        "--out",
        str(out),
        "--steps",
        str(steps),
        "--mesh",
        format_mesh(mesh),
        *(["--force"] if force else []),
    ]
    env = {**host_device_env(needed), _CHILD_ENV: "1"}
    return subprocess.run(argv, env=env, check=False).returncode


class _stage:
    """Time a stage and print its name; errors propagate untouched."""

    def __init__(self, name: str, timings: dict[str, float]) -> None:
        self.name, self.timings = name, timings

    def __enter__(self) -> None:
        console.print(f"[bold]▶ {self.name}[/]")
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = time.perf_counter() - self.start


def _summary(model: str, out: Path, timings: dict[str, float], passed: bool) -> None:
    table = Table(title=f"linen2nnx demo: {model}", show_edge=False)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, seconds in timings.items():
        table.add_row(name, f"{seconds:.1f}")
    table.add_row("[bold]total[/]", f"[bold]{sum(timings.values()):.1f}[/]")
    console.print(table)
    verdict = "[bold green]PARITY PASS[/]" if passed else "[bold red]PARITY FAIL[/]"
    console.print(f"{verdict} — artefacts in {out} (see {out / 'README.md'} to rerun each stage)")


def _write_readme(
    out: Path,
    model: str,
    spec_ref: str,
    source: Path,
    spec_path: Path,
    linen_ckpt: Path,
    nnx_ckpt: Path,
    mesh: Mapping[str, int] | None = None,
    trained: object = None,
) -> None:
    q = shlex.quote
    env, mesh_opt = "", ""
    if mesh:
        from linen2nnx.equivalence.mesh import device_count_needed

        # the Linen checkpoint was saved sharded over that many devices: Orbax restores it only there
        env = (
            f"XLA_FLAGS=--xla_force_host_platform_device_count={device_count_needed(mesh)} JAX_PLATFORMS=cpu "
        )
        mesh_opt = f" --mesh {_fmt_mesh(mesh)}"
    text = f"""# linen2nnx demo output: zoo `{model}`

| path | what |
|---|---|
| `linen_ckpt/` | Linen `TrainState` checkpoint (Orbax) after training |
| `nnx/` | migrated NNX source, `linen2nnx-map.json` (name map), `linen2nnx_spec.py` (model pair spec) |
| `nnx_ckpt/` | the converted NNX checkpoint (Orbax, full `nnx.state`) |
| `migration-report.txt/.json` | every finding of the migration |
| `parity.json` | the parity report |

Rerun each stage by hand:

```bash
linen2nnx migrate {q(str(source))} --out-dir {q(str(out / "nnx"))} --trace {spec_ref}
{env}linen2nnx convert {q(str(linen_ckpt))} {q(str(nnx_ckpt))} --spec {q(str(spec_path))} --force
{env}linen2nnx check --spec {q(str(spec_path))} --ckpt {q(str(linen_ckpt))} --nnx-ckpt {q(str(nnx_ckpt))}{mesh_opt} --steps {CHECK_STEPS} --json {q(str(out / "parity.json"))}
```
"""
    if trained is not None:
        text += trained.readme(spec_path, nnx_ckpt, env, mesh_opt)  # type: ignore[attr-defined]
    atomic_write_text(out / "README.md", text)
