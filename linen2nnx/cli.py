"""The ``linen2nnx`` command: a thin layer over the stage APIs.

Exit codes (every subcommand): 0 clean / parity holds; 1 findings / parity fails / files would
change; 2 usage, input or internal error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape

from linen2nnx import __version__
from linen2nnx.cli_check import add_check_parser, cmd_check, mesh_arg
from linen2nnx.cli_migrate import add_migrate_parser, cmd_migrate
from linen2nnx.cli_train import add_train_parser, cmd_train
from linen2nnx.errors import EXIT_ERROR, EXIT_OK, L2NError
from linen2nnx.reports.console import make_console

err_console = make_console()


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors, which is our convention too; keep its message short."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="linen2nnx", description="Move Flax Linen code and checkpoints to Flax NNX, with evidence."
    )
    parser.add_argument("--version", action="version", version=f"linen2nnx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_migrate_parser(sub)
    _add_convert(sub)
    add_check_parser(sub)
    add_train_parser(sub)
    _add_demo(sub)
    return parser


def _add_convert(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("convert", help="convert a Linen checkpoint into an NNX checkpoint")
    c.add_argument(
        "src", help="Linen checkpoint: Orbax item, CheckpointManager step or root folder, or msgpack file"
    )
    c.add_argument("dst", help="NNX checkpoint folder to create")
    c.add_argument("--spec", required=True, help="model pair spec (module:function or file.py[:function])")
    c.add_argument("--map", metavar="FILE", help="name map (default: the spec's)")
    c.add_argument("--force", action="store_true", help="replace an existing DST")
    c.add_argument(
        "--step", type=int, metavar="N", help="step N of a CheckpointManager root (default: newest)"
    )
    c.add_argument("--json", metavar="FILE", help="write the conversion report as JSON")
    c.add_argument(
        "--mesh",
        type=mesh_arg,
        metavar="AXIS=SIZE,...",
        help="write the NNX checkpoint sharded on this device mesh under the spec's logical axis rules "
        "(with --dry-run: show each leaf's target sharding; with --to linen: write the Linen checkpoint sharded)",
    )
    c.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip reading the written arrays back against their checksums before DST is published",
    )
    c.add_argument(
        "--to",
        choices=("nnx", "linen"),
        default="nnx",
        help="nnx (default); linen: SRC is an NNX checkpoint written by convert, DST the Linen one to write back",
    )
    c.add_argument(
        "--memory-budget",
        type=float,
        metavar="MB",
        help="host memory for arrays in flight (default: the largest array, at least 16 MB)",
    )
    c.add_argument(
        "--dry-run",
        action="store_true",
        help="print the mapping table and every problem from metadata alone; write nothing (exit 1 on problems)",
    )


def _add_demo(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="train a zoo model in Linen, migrate, convert and check it end to end")
    d.add_argument("--model", default="cnn", help="zoo model (default: cnn)")
    d.add_argument("--out", default="linen2nnx-demo", help="output folder (default: ./linen2nnx-demo)")
    d.add_argument("--steps", type=int, default=50, help="Linen training steps (default: 50)")
    d.add_argument("--force", action="store_true", help="replace an existing output folder")
    d.add_argument(
        "--mesh",
        type=mesh_arg,
        metavar="AXIS=SIZE,...",
        help="train and check sharded on a device mesh, e.g. data=2,fsdp=2,tensor=2, under the model's "
        "logical axis rules; adds a PartitionSpec comparison of every parameter. When this process "
        "has fewer devices than the mesh needs, the demo reruns itself with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N JAX_PLATFORMS=cpu (N fake CPU devices)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    from linen2nnx.library_logs import quiet_own_errors

    args = build_parser().parse_args(argv)
    quiet_own_errors()
    try:
        return int(_COMMANDS[args.command](args))
    except L2NError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, soft_wrap=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return EXIT_ERROR


def cmd_convert(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.measure import Measurement

    from linen2nnx.checkpoint_convert import convert
    from linen2nnx.errors import EXIT_FINDINGS
    from linen2nnx.spec import load_pair

    _check_convert_report(args)
    pair = load_pair(args.spec)
    if args.to == "linen":
        from linen2nnx.checkpoint_convert.to_linen import convert_to_linen

        budget = int(args.memory_budget * 2**20) if args.memory_budget else None
        done = convert_to_linen(args.src, args.dst, pair, force=args.force, mesh=args.mesh, budget=budget)
        err_console.print(
            f"wrote {escape(done['destination'])}: {done['leaves']} leaves, step {done['step']}"
        )
        return EXIT_OK
    if args.dry_run:
        from linen2nnx.checkpoint_convert.dryrun import dry_run, render

        plan = dry_run(args.src, pair, args.map, step=args.step, mesh=args.mesh)
        sys.stdout.write(render(plan))
        return EXIT_FINDINGS if plan.problems else EXIT_OK
    from linen2nnx.checkpoint_convert.progress import progress_bar

    budget = int(args.memory_budget * 2**20) if args.memory_budget else None
    with progress_bar(err_console) as progress:
        report = convert(
            args.src,
            args.dst,
            pair,
            args.map,
            force=args.force,
            step=args.step,
            budget=budget,
            progress=progress,
            verify=args.verify,
            mesh=args.mesh,
        )
    from linen2nnx.reports.console import conversion_table

    table = conversion_table(report)
    console = err_console
    if not console.is_terminal:  # a pipe or CI log: as wide as the table, so paths stay whole
        wide = console.options.update(max_width=1 << 16)
        console = Console(
            stderr=True, highlight=False, emoji=False, width=Measurement.get(console, wide, table).maximum
        )
    console.print(table)
    if args.json:
        from linen2nnx.reports.json_report import write_json

        write_json(report, args.json)
    return EXIT_OK


def _check_convert_report(args: argparse.Namespace) -> None:
    """``--json`` may not replace the source checkpoint, the spec or the name map, nor land inside the
    checkpoint being written (report_targets.py)."""
    from linen2nnx.report_targets import check_report_targets, spec_files

    taken: dict[str | Path, str] = {**spec_files(args.spec), args.src: "the source checkpoint"}
    if args.map:
        taken[args.map] = "the name map"
    folders: dict[str | Path, str] = {args.dst: "the checkpoint this run writes"}
    check_report_targets({"--json": getattr(args, "json", None)}, taken, folders)


def cmd_demo(args: argparse.Namespace) -> int:
    from linen2nnx.demo import run_demo

    return run_demo(args.model, Path(args.out), steps=args.steps, force=args.force, mesh=args.mesh)


_COMMANDS = {"migrate": cmd_migrate, "convert": cmd_convert, "check": cmd_check, "demo": cmd_demo}
_COMMANDS["train"] = cmd_train


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
