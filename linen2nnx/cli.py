"""The ``linen2nnx`` command: a thin layer over the stage APIs.

Exit codes (every subcommand): 0 clean / parity holds; 1 findings / parity fails / files would
change; 2 usage, input or internal error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from linen2nnx import __version__
from linen2nnx.errors import L2NError
from linen2nnx.reports.console import make_console

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

err_console = make_console()


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors, which is our convention too; keep its message short."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="linen2nnx", description="Move Flax Linen code and checkpoints to Flax NNX, with evidence.")
    parser.add_argument("--version", action="version", version=f"linen2nnx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = sub.add_parser("migrate", help="rewrite Linen source as NNX source (+ name map + report)")
    m.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to migrate")
    mode = m.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_const", dest="mode", const="diff", help="print a diff (default)")
    mode.add_argument("--check", action="store_const", dest="mode", const="check",
                      help="change nothing; exit 1 if any file would change")
    mode.add_argument("--write", action="store_const", dest="mode", const="write", help="rewrite files in place")
    mode.add_argument("--out-dir", metavar="DIR", help="write the migrated tree under DIR")
    m.add_argument("--report", metavar="FILE", help="write the findings report to FILE")
    m.add_argument("--format", choices=("text", "json"), default="text", help="report format (default: text)")
    m.add_argument("--trace", metavar="SPEC", help="trace the Linen model of SPEC to resolve input feature sizes")
    m.add_argument("--map", metavar="FILE", help="where to write the name map (default: next to the output)")
    m.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default: 1)")
    m.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files matching GLOB")
    m.add_argument("-v", "--verbose", action="store_true", help="list converted items too")

    c = sub.add_parser("convert", help="convert a Linen checkpoint into an NNX checkpoint")
    c.add_argument("src", help="Linen checkpoint (Orbax folder or msgpack file)")
    c.add_argument("dst", help="NNX checkpoint folder to create")
    c.add_argument("--spec", required=True, help="model pair spec (module:function or file.py[:function])")
    c.add_argument("--map", metavar="FILE", help="name map (default: the spec's)")
    c.add_argument("--force", action="store_true", help="replace an existing DST")
    c.add_argument("--json", metavar="FILE", help="write the conversion report as JSON")

    k = sub.add_parser("check", help="prove the NNX model matches the Linen original")
    k.add_argument("--spec", required=True, help="model pair spec")
    k.add_argument("--ckpt", help="Linen checkpoint (default: a fresh Linen init)")
    k.add_argument("--nnx-ckpt", help="converted NNX checkpoint (default: convert --ckpt in memory)")
    k.add_argument("--map", metavar="FILE", help="name map (default: the spec's)")
    k.add_argument("--json", metavar="FILE", help="write the parity report as JSON")

    d = sub.add_parser("demo", help="train a zoo model in Linen, migrate, convert and check it end to end")
    d.add_argument("--model", default="cnn", help="zoo model (default: cnn)")
    d.add_argument("--out", default="linen2nnx-demo", help="output folder (default: ./linen2nnx-demo)")
    d.add_argument("--steps", type=int, default=50, help="Linen training steps (default: 50)")
    d.add_argument("--force", action="store_true", help="replace an existing output folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(_COMMANDS[args.command](args))
    except L2NError as e:
        err_console.print(f"[bold red]error:[/] {e}", markup=True, soft_wrap=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return EXIT_ERROR


def cmd_migrate(args: argparse.Namespace) -> int:
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.reports.migration import render_json, render_text

    mode = Mode.OUT_DIR if args.out_dir else Mode(args.mode or "diff")
    trace = None
    if args.trace:
        from linen2nnx.migrate.trace import trace_linen
        from linen2nnx.spec import load_linen_side

        trace = trace_linen(load_linen_side(args.trace), spec_ref=args.trace)
    result = migrate_paths(args.paths, mode, out_dir=args.out_dir, trace=trace, jobs=args.jobs,
                           exclude=args.exclude, name_map_path=args.map)
    if trace is not None and mode is Mode.OUT_DIR:
        from linen2nnx.migrate.spec_writer import write_pair_spec

        write_pair_spec(Path(args.out_dir), trace, result)
    if mode is Mode.DIFF:
        for r in result.files:
            if r.changed:
                sys.stdout.write(r.diff())
    text = render_text(result, verbose=args.verbose)
    if args.report:
        from linen2nnx.io_utils import atomic_write_text

        atomic_write_text(Path(args.report), render_json(result) if args.format == "json" else text)
    err_console.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)
    for p in (*result.written, *result.extra_outputs):
        err_console.print(f"wrote {p}", markup=False, soft_wrap=True)
    return result.exit_code()


def cmd_convert(args: argparse.Namespace) -> int:
    from linen2nnx.checkpoint_convert import convert
    from linen2nnx.spec import load_pair

    pair = load_pair(args.spec)
    report = convert(args.src, args.dst, pair, args.map, force=args.force)
    from linen2nnx.reports.console import render_conversion

    render_conversion(report, console=err_console)
    if args.json:
        from linen2nnx.reports.json_report import write_json

        write_json(report, args.json)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from linen2nnx.equivalence import check
    from linen2nnx.spec import load_pair

    pair = load_pair(args.spec)
    result = check(pair, args.ckpt, args.nnx_ckpt, name_map=args.map)
    from linen2nnx.reports.console import render_parity

    render_parity(result, console=err_console)
    if args.json:
        from linen2nnx.reports.json_report import write_json

        write_json(result, args.json)
    return EXIT_OK if result.passed else EXIT_FINDINGS


def cmd_demo(args: argparse.Namespace) -> int:
    from linen2nnx.demo import run_demo

    return run_demo(args.model, Path(args.out), steps=args.steps, force=args.force)


_COMMANDS = {"migrate": cmd_migrate, "convert": cmd_convert, "check": cmd_check, "demo": cmd_demo}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
