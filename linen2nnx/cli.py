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
from linen2nnx.errors import L2NError
from linen2nnx.reports.console import make_console
from linen2nnx.reports.migration import FORMATS

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

err_console = make_console()


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors, which is our convention too; keep its message short."""


def _csv(text: str) -> list[str]:
    """``--select L2N-MOD,L2N-LAYER`` -> ``["L2N-MOD", "L2N-LAYER"]`` (blanks dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="linen2nnx", description="Move Flax Linen code and checkpoints to Flax NNX, with evidence."
    )
    parser.add_argument("--version", action="version", version=f"linen2nnx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_migrate(sub)
    _add_convert(sub)
    _add_check(sub)
    _add_demo(sub)
    return parser


def _add_migrate(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "migrate",
        help="rewrite Linen source as NNX source (+ name map + report)",
        description="Rewrite Linen source as NNX source. Defaults come from [tool.linen2nnx] in "
        "the nearest pyproject.toml; flags override them.",
    )
    m.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files or folders to migrate; '-' reads one file from stdin and writes it to stdout",
    )
    mode = m.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff", action="store_const", dest="mode", const="diff", help="print a diff (default)"
    )
    mode.add_argument(
        "--check",
        action="store_const",
        dest="mode",
        const="check",
        help="change nothing; exit 1 if any file would change",
    )
    mode.add_argument(
        "--write", action="store_const", dest="mode", const="write", help="rewrite files in place"
    )
    mode.add_argument("--out-dir", metavar="DIR", help="write the migrated tree under DIR")
    m.add_argument(
        "--report", metavar="FILE", help="write the findings report to FILE ('-': standard output)"
    )
    m.add_argument("--format", choices=FORMATS, default="text", help="report format (default: text)")
    m.add_argument(
        "--select",
        metavar="PREFIX,...",
        type=_csv,
        help="only these rule-id prefixes, comma-separated (e.g. L2N-MOD,L2N-LAYER-001)",
    )
    m.add_argument(
        "--ignore",
        metavar="PREFIX,...",
        type=_csv,
        help="switch off these rule-id prefixes, comma-separated (their TODO markers too)",
    )
    m.add_argument(
        "--unsafe-fixes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply fixes that rest on a stated assumption instead of leaving them manual",
    )
    m.add_argument(
        "--trace", metavar="SPEC", help="trace the Linen model of SPEC to resolve input feature sizes"
    )
    m.add_argument("--map", metavar="FILE", help="where to write the name map (default: next to the output)")
    m.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes; 0 = one per CPU (default: 1, or `jobs` from the config)",
    )
    m.add_argument(
        "--exclude",
        action="append",
        default=None,
        metavar="GLOB",
        help="skip files or folders matching GLOB (replaces the config's exclude; repeatable)",
    )
    m.add_argument(
        "--extend-exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip GLOB in addition to the config's exclude (repeatable)",
    )
    m.add_argument(
        "--config", metavar="FILE", help="read [tool.linen2nnx] from FILE instead of searching for it"
    )
    m.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    m.add_argument(
        "--stdin-filename", metavar="NAME", help="the file name to report for source read from stdin"
    )
    m.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    m.add_argument("-q", "--quiet", action="store_true", help="print no summary on stderr")
    m.add_argument("-v", "--verbose", action="store_true", help="list converted items too")


def _add_convert(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("convert", help="convert a Linen checkpoint into an NNX checkpoint")
    c.add_argument("src", help="Linen checkpoint (Orbax folder or msgpack file)")
    c.add_argument("dst", help="NNX checkpoint folder to create")
    c.add_argument("--spec", required=True, help="model pair spec (module:function or file.py[:function])")
    c.add_argument("--map", metavar="FILE", help="name map (default: the spec's)")
    c.add_argument("--force", action="store_true", help="replace an existing DST")
    c.add_argument("--json", metavar="FILE", help="write the conversion report as JSON")


def _add_check(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser(
        "check",
        help="prove the NNX model matches the Linen original",
        description="Run both models on the same weights and compare every output, loss, "
        "gradient and state leaf. Exit 0: parity; 1: parity fails; 2: error.",
    )
    k.add_argument(
        "spec", nargs="?", metavar="SPEC", help="model pair spec (module:function or file.py[:function])"
    )
    k.add_argument("--spec", dest="spec_option", metavar="SPEC", help="the model pair spec, as an option")
    k.add_argument("--ckpt", help="Linen checkpoint (default: a fresh Linen init)")
    k.add_argument("--nnx-ckpt", help="converted NNX checkpoint (default: convert --ckpt in memory)")
    k.add_argument("--map", metavar="FILE", help="name map (default: the spec's)")
    k.add_argument(
        "--steps",
        type=_non_negative_int,
        metavar="N",
        help="also train both sides side by side for N optimizer steps",
    )
    k.add_argument(
        "--mesh",
        type=_mesh,
        metavar="AXIS=SIZE,...",
        help="run sharded on a device mesh, e.g. data=2,fsdp=2,tensor=2",
    )
    k.add_argument(
        "--tolerance",
        action="append",
        type=_tolerance,
        metavar="PATTERN=VALUE",
        help="base tolerance for the leaves whose CHECK:PATH (or PATH) matches the glob PATTERN, "
        "e.g. 'grad:*=1e-4' (repeatable; the first matching pattern applies)",
    )
    k.add_argument(
        "--json",
        metavar="FILE",
        help="write the parity report as JSON (schema linen2nnx-parity/N); '-' for any one report "
        "writes it to standard output",
    )
    k.add_argument("--markdown", metavar="FILE", help="write the report as Markdown ('-': standard output)")
    k.add_argument("--junit", metavar="FILE", help="write the report as JUnit XML, one test per check")
    k.add_argument(
        "--html",
        metavar="FILE",
        help="write a self-contained HTML report with plots (needs matplotlib: linen2nnx[html])",
    )
    k.add_argument(
        "--github-summary",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append the Markdown report to $GITHUB_STEP_SUMMARY (default: on inside GitHub Actions)",
    )
    k.add_argument(
        "--all-leaves", action="store_true", help="list every leaf on the console, not only failures"
    )
    k.add_argument("--traceback", action="store_true", help="show the traceback of an error in the models")


def _add_demo(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="train a zoo model in Linen, migrate, convert and check it end to end")
    d.add_argument("--model", default="cnn", help="zoo model (default: cnn)")
    d.add_argument("--out", default="linen2nnx-demo", help="output folder (default: ./linen2nnx-demo)")
    d.add_argument("--steps", type=int, default=50, help="Linen training steps (default: 50)")
    d.add_argument("--force", action="store_true", help="replace an existing output folder")
    d.add_argument(
        "--mesh",
        type=_mesh,
        metavar="AXIS=SIZE,...",
        help="train and check sharded on a device mesh, e.g. data=2,fsdp=2,tensor=2, under the model's "
        "logical axis rules; adds a PartitionSpec comparison of every parameter. When this process "
        "has fewer devices than the mesh needs, the demo reruns itself with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N JAX_PLATFORMS=cpu (N fake CPU devices)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(_COMMANDS[args.command](args))
    except L2NError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, soft_wrap=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return EXIT_ERROR


PROGRESS_MIN_FILES = 20  # a progress bar only for runs longer than this, and only on a terminal


class _MigrateProgress:
    """A rich progress bar on stderr, driven by the engine's ``on_start`` / ``on_file`` callbacks."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.progress = None
        self.task = None

    def start(self, total: int) -> None:
        if not self.enabled or total <= PROGRESS_MIN_FILES:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("migrating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=err_console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task("", total=total)

    def file(self, result) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=result.rel)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _migrate_settings(args: argparse.Namespace, stdin: bool):
    """Merge ``[tool.linen2nnx]`` with the flags (flags win) and validate them."""
    from linen2nnx.migrate.config import MigrateConfig, check_rule_prefixes, load_config
    from linen2nnx.migrate.engine import resolve_jobs

    if args.isolated:
        cfg = MigrateConfig()
    elif args.config:
        cfg = load_config(config_file=args.config)
    else:
        start = (
            (Path(args.stdin_filename).parent if args.stdin_filename else None) if stdin else args.paths[0]
        )
        cfg = load_config(start)
    if args.select is not None:
        check_rule_prefixes(args.select, "--select")
    if args.ignore is not None:
        check_rule_prefixes(args.ignore, "--ignore")
    return dict(
        select=args.select if args.select is not None else cfg.select,
        ignore=args.ignore if args.ignore is not None else cfg.ignore,
        unsafe_fixes=args.unsafe_fixes if args.unsafe_fixes is not None else cfg.unsafe_fixes,
        jobs=resolve_jobs(args.jobs if args.jobs is not None else cfg.jobs),
        exclude=[*(args.exclude if args.exclude is not None else cfg.exclude), *args.extend_exclude],
        include=list(cfg.include),
        base=cfg.root,
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    from linen2nnx.migrate.engine import Mode, migrate_paths

    stdin = "-" in args.paths
    if stdin and len(args.paths) > 1:
        raise L2NError("'-' (stdin) cannot be combined with other paths")
    if stdin and (args.out_dir or args.mode == "write"):
        raise L2NError(
            "'-' reads stdin and writes the result to stdout; it cannot be combined with --write or --out-dir"
        )
    if args.stdin_filename and not stdin:
        raise L2NError("--stdin-filename needs '-' as the PATH")
    report_to_stdout = args.report == "-"
    if report_to_stdout and (args.mode == "diff" or (stdin and args.mode is None)):
        raise L2NError(
            "--report - writes the report to stdout, which already carries the "
            + ("migrated source" if args.mode is None else "diff")
            + "; use --check or --report FILE"
        )
    settings = _migrate_settings(args, stdin)

    trace = None
    if args.trace:
        from linen2nnx.migrate.trace import trace_linen
        from linen2nnx.spec import load_linen_side

        trace = trace_linen(load_linen_side(args.trace), spec_ref=args.trace)

    if stdin:
        result = _migrate_stdin(args, settings, trace)
    else:
        # --report - alone: the report is the output, so the default diff becomes a check
        mode = Mode.OUT_DIR if args.out_dir else Mode(args.mode or ("check" if report_to_stdout else "diff"))
        progress = _MigrateProgress(err_console.is_terminal and not args.no_progress and not args.quiet)
        try:
            result = migrate_paths(
                args.paths,
                mode,
                out_dir=args.out_dir,
                trace=trace,
                name_map_path=args.map,
                on_start=progress.start,
                on_file=progress.file,
                **settings,
            )
        finally:
            progress.stop()
        if trace is not None and mode is Mode.OUT_DIR:
            from linen2nnx.migrate.engine import rule_selector
            from linen2nnx.migrate.spec_writer import write_pair_spec
            from linen2nnx.migrate.verify_build import check_spec_builds

            spec_path = write_pair_spec(Path(args.out_dir), trace, result)
            # exit 0 means the output builds and runs: a failure is an L2N-VERIFY-010 finding
            check_spec_builds(spec_path, trace, result, rule_selector(settings["select"], settings["ignore"]))
        if mode is Mode.DIFF:
            for r in result.files:
                if r.changed:
                    sys.stdout.write(r.diff())
    _emit_report(args, result)
    return result.exit_code()


def _migrate_stdin(args: argparse.Namespace, settings: dict, trace):
    """``migrate -``: one file from stdin; the migrated source (or the input, if it failed) to stdout."""
    from linen2nnx.migrate.engine import (
        FileResult,
        MigrationResult,
        Mode,
        is_excluded,
        migrate_source,
        module_name_for,
    )
    from linen2nnx.migrate.findings import Finding
    from linen2nnx.migrate.rules import IO_002
    from linen2nnx.namemap import NameMap

    name = args.stdin_filename or "-"
    mode = Mode(args.mode) if args.mode else Mode.STDOUT
    data = sys.stdin.buffer.read()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as e:
        finding = Finding.of(
            IO_002,
            name,
            1,
            1,
            f"cannot decode as UTF-8 at byte {e.start}",
            "re-encode the file as UTF-8; it was left untouched",
        )
        if mode is Mode.STDOUT:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return MigrationResult(
            [FileResult(Path(name), name, None, None, [finding], NameMap())], NameMap(), mode
        )
    if args.stdin_filename and is_excluded(Path(name), settings["exclude"], settings["base"]):
        file_result = FileResult(Path(name), name, source, source, [], NameMap(), skipped=True)
    else:
        module_name = module_name_for(Path(name)) if args.stdin_filename else ""
        file_result = migrate_source(
            source,
            name,
            module_name,
            trace,
            select=settings["select"],
            ignore=settings["ignore"],
            unsafe_fixes=settings["unsafe_fixes"],
        )
    result = MigrationResult([file_result], file_result.name_map, mode)
    if mode is Mode.STDOUT:
        sys.stdout.write(file_result.output if file_result.output is not None else source)
        sys.stdout.flush()
    elif mode is Mode.DIFF and file_result.changed:
        sys.stdout.write(file_result.diff())
    if args.map and result.name_map.classes:
        result.name_map.save(Path(args.map))
        result.extra_outputs.append(Path(args.map))
    return result


def _emit_report(args: argparse.Namespace, result) -> None:
    from linen2nnx.reports.migration import render, render_text

    if args.report == "-":
        sys.stdout.write(render(result, args.format, verbose=args.verbose))
        sys.stdout.flush()
    elif args.report:
        from linen2nnx.io_utils import atomic_write_text

        atomic_write_text(Path(args.report), render(result, args.format, verbose=args.verbose))
    if args.quiet or (args.report == "-" and args.format == "text"):
        return
    text = render_text(result, verbose=args.verbose)
    err_console.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)
    for p in (*result.written, *result.extra_outputs):
        err_console.print(f"wrote {p}", markup=False, soft_wrap=True)


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


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _mesh(text: str) -> dict[str, int]:
    """``--mesh data=2,fsdp=2,tensor=2`` (check, demo) -> ``{"data": 2, "fsdp": 2, "tensor": 2}`` (order kept),
    parsed by :func:`linen2nnx.equivalence.mesh.parse_mesh`; a malformed mesh is a usage error (exit 2)."""
    from linen2nnx.equivalence.mesh import MeshError, parse_mesh

    try:
        return parse_mesh(text)
    except MeshError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _tolerance(text: str) -> tuple[str, float]:
    """``grad:*=1e-4`` -> ``("grad:*", 1e-4)``; the value follows the last ``=`` (a pattern may hold one)."""
    import math

    pattern, eq, value = text.rpartition("=")
    if not eq or not pattern.strip():
        raise argparse.ArgumentTypeError(f"expected PATTERN=VALUE like 'grad:*=1e-4', got {text!r}")
    try:
        tol = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"tolerance for {pattern!r}: {value!r} is not a number") from None
    if not math.isfinite(tol) or tol < 0:
        raise argparse.ArgumentTypeError(
            f"tolerance for {pattern!r} must be a finite number >= 0, got {value!r}"
        )
    return pattern.strip(), tol


def _check_spec(args: argparse.Namespace) -> str:
    if args.spec and args.spec_option and args.spec != args.spec_option:
        raise L2NError(f"two different specs given: {args.spec!r} and --spec {args.spec_option!r}")
    spec = args.spec or args.spec_option
    if not spec:
        raise L2NError(
            "check needs a model pair spec: linen2nnx check SPEC (module:function or file.py[:function])"
        )
    return spec


def _check_options(args: argparse.Namespace) -> dict:
    """The keyword arguments for ``equivalence.check``: only those the user set, so the CLI works with
    a ``check`` that predates an option; one it does not take is a named error, not a TypeError."""
    import inspect

    from linen2nnx.equivalence import check

    # --tolerance entries are the tolerance table's per-pattern overrides (a later duplicate replaces
    # the value but keeps the pattern's first position, so the order the user gave decides matching)
    options = {
        "steps": args.steps,
        "mesh": args.mesh,
        "tolerances": {"overrides": dict(args.tolerance)} if args.tolerance else None,
    }
    options = {k: v for k, v in options.items() if v is not None}
    params = inspect.signature(check).parameters
    flags = {"steps": "--steps", "mesh": "--mesh", "tolerances": "--tolerance"}
    missing = [flags[k] for k in options if k not in params]
    if missing and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise L2NError(f"{', '.join(missing)}: not supported by this version of linen2nnx.equivalence.check")
    return options


def _github_summary_path(args: argparse.Namespace) -> Path | None:
    """Where to append the Markdown report: ``$GITHUB_STEP_SUMMARY`` when asked, or by default inside
    GitHub Actions (``GITHUB_ACTIONS=true``); ``--no-github-summary`` switches it off."""
    import os

    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if args.github_summary is None:
        return Path(target) if target and os.environ.get("GITHUB_ACTIONS") == "true" else None
    if args.github_summary and not target:
        raise L2NError(
            "--github-summary: $GITHUB_STEP_SUMMARY is not set (it is set inside GitHub Actions jobs)"
        )
    return Path(target) if args.github_summary else None


def _named_build_errors(pair, spec: str):
    """The same pair, whose NNX factory turns an exception into a named error: "the NNX model
    failed to build", wherever inside ``check`` the twin is constructed (no extra build is made)."""
    import dataclasses

    factory = pair.nnx_factory

    def build(rngs):
        try:
            return factory(rngs)
        except L2NError:
            raise
        except Exception as e:
            raise L2NError(f"spec {spec!r}: the NNX model failed to build: {type(e).__name__}: {e}") from e

    return dataclasses.replace(pair, nnx_factory=build)


def _run_check(args: argparse.Namespace, spec: str, options: dict):
    from linen2nnx.equivalence import check
    from linen2nnx.spec import load_pair

    pair = load_pair(spec)
    if args.traceback:
        return check(pair, args.ckpt, args.nnx_ckpt, name_map=args.map, **options)
    try:
        return check(_named_build_errors(pair, spec), args.ckpt, args.nnx_ckpt, name_map=args.map, **options)
    except L2NError:
        raise
    except Exception as e:  # a model that raises while running: an error (exit 2), not a parity verdict
        raise L2NError(
            f"spec {spec!r}: check could not run the models: {type(e).__name__}: {e} "
            "(--traceback shows where)"
        ) from e


def cmd_check(args: argparse.Namespace) -> int:
    """Run the parity check, print it, write every requested report atomically; exit 0 / 1 / 2."""
    spec = _check_spec(args)
    to_stdout = [flag for flag in ("json", "markdown", "junit", "html") if getattr(args, flag) == "-"]
    if len(to_stdout) > 1:
        raise L2NError(
            f"only one report can go to standard output, got '-' for {', '.join('--' + f for f in to_stdout)}"
        )
    options = _check_options(args)
    summary_path = _github_summary_path(args)
    if args.html:
        from linen2nnx.reports.plots import require_matplotlib

        require_matplotlib()  # fail in a second, not after the whole check
    result = _run_check(args, spec, options)

    from linen2nnx.io_utils import atomic_write_text
    from linen2nnx.reports import parity_data
    from linen2nnx.reports.console import render_parity
    from linen2nnx.reports.json_report import dumps

    data = parity_data.parity_dict(result)
    render_parity(data, console=err_console, all_leaves=args.all_leaves)
    outputs: list[tuple[str, str]] = []
    if args.json:
        outputs.append((args.json, dumps(data)))
    if args.markdown or summary_path:
        from linen2nnx.reports.parity_markdown import render_parity_markdown

        markdown = render_parity_markdown(data)
        if args.markdown:
            outputs.append((args.markdown, markdown))
    if args.junit:
        from linen2nnx.reports.junit import render_junit

        outputs.append((args.junit, render_junit(data)))
    if args.html:
        from linen2nnx.reports.html_report import render_parity_html

        outputs.append((args.html, render_parity_html(data)))
    for target, text in outputs:
        if target == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            try:
                atomic_write_text(Path(target), text)
            except OSError as e:
                raise L2NError(f"{target}: cannot write the report: {e.strerror or e}") from e
            err_console.print(f"wrote {target}", markup=False, soft_wrap=True)
    if summary_path is not None:
        try:
            with open(summary_path, "a", encoding="utf-8") as f:  # one append: other steps share the file
                f.write(markdown + "\n")
        except OSError as e:
            raise L2NError(f"$GITHUB_STEP_SUMMARY ({summary_path}): cannot append: {e.strerror or e}") from e
        err_console.print(f"appended the Markdown report to {summary_path}", markup=False, soft_wrap=True)
    return EXIT_OK if data.get("passed") else EXIT_FINDINGS


def cmd_demo(args: argparse.Namespace) -> int:
    from linen2nnx.demo import run_demo

    return run_demo(args.model, Path(args.out), steps=args.steps, force=args.force, mesh=args.mesh)


_COMMANDS = {"migrate": cmd_migrate, "convert": cmd_convert, "check": cmd_check, "demo": cmd_demo}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
