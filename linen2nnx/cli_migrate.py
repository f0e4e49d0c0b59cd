"""``linen2nnx migrate``: its options, the config merge, progress, stdin mode and the report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linen2nnx.errors import L2NError
from linen2nnx.reports.console import make_console
from linen2nnx.reports.migration import FORMATS

err_console = make_console()


def _csv(text: str) -> list[str]:
    """``--select L2N-MOD,L2N-LAYER`` -> ``["L2N-MOD", "L2N-LAYER"]`` (blanks dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def add_migrate_parser(sub: argparse._SubParsersAction) -> None:
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
    _add_rule_options(m)
    _add_file_options(m)


def _add_rule_options(m: argparse.ArgumentParser) -> None:
    """The report, which rules run, and how far fixes go."""
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


def _add_file_options(m: argparse.ArgumentParser) -> None:
    """Which files, how many processes, which configuration, and what is printed."""
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
    stdin = "-" in args.paths
    _check_stdin_flags(args, stdin)
    settings = _migrate_settings(args, stdin)
    _check_report_target(args, settings, stdin)
    trace = None
    if args.trace:
        from linen2nnx.migrate.trace import trace_linen
        from linen2nnx.spec import load_linen_side

        trace = trace_linen(load_linen_side(args.trace), spec_ref=args.trace)
    result = _migrate_stdin(args, settings, trace) if stdin else _migrate_tree(args, settings, trace)
    _emit_report(args, result)
    return result.exit_code()


def _check_stdin_flags(args: argparse.Namespace, stdin: bool) -> None:
    """Flags that cannot go together, named before anything runs."""
    if stdin and len(args.paths) > 1:
        raise L2NError("'-' (stdin) cannot be combined with other paths")
    if stdin and (args.out_dir or args.mode == "write"):
        raise L2NError(
            "'-' reads stdin and writes the result to stdout; it cannot be combined with --write or --out-dir"
        )
    if args.stdin_filename and not stdin:
        raise L2NError("--stdin-filename needs '-' as the PATH")
    if args.report == "-" and (args.mode == "diff" or (stdin and args.mode is None)):
        raise L2NError(
            "--report - writes the report to stdout, which already carries the "
            + ("migrated source" if args.mode is None else "diff")
            + "; use --check or --report FILE"
        )


def _check_report_target(args: argparse.Namespace, settings: dict, stdin: bool) -> None:
    """Before anything runs: ``--report`` may not replace a source, an output, the name map or the
    spec of this run (report_targets.py)."""
    if not args.report or args.report == "-":
        return
    from linen2nnx.migrate.discovery import discover, relative_to_root
    from linen2nnx.migrate.spec_writer import SPEC_FILENAME
    from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME
    from linen2nnx.report_targets import check_report_targets, spec_files

    taken: dict[str | Path, str] = spec_files(args.trace, "the --trace spec")
    files = [] if stdin else discover(args.paths, settings["exclude"], settings["include"], settings["base"])
    for f, root in files:
        taken[f] = "a source file of this run"
        if args.out_dir:
            taken[Path(args.out_dir) / relative_to_root(f, root)] = "an output file of this run"
    if args.map and (args.out_dir or args.mode == "write" or stdin):  # the modes that write a name map
        taken[args.map] = "the name map"
    if args.out_dir:
        taken[Path(args.out_dir) / NAME_MAP_FILENAME] = "the name map"
        taken[Path(args.out_dir) / SPEC_FILENAME] = "the pair spec"
    elif files and args.mode == "write":
        taken[files[0][1] / NAME_MAP_FILENAME] = "the name map"
    check_report_targets({"--report": args.report}, taken)


def _migrate_tree(args: argparse.Namespace, settings: dict, trace):
    """``migrate PATH...``: every file, with a progress bar on a terminal; the spec with ``--trace``."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    # --report - alone: the report is the output, so the default diff becomes a check
    mode = Mode.OUT_DIR if args.out_dir else Mode(args.mode or ("check" if args.report == "-" else "diff"))
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
        from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME

        name_map = Path(args.map) if args.map else Path(args.out_dir) / NAME_MAP_FILENAME
        spec_path = write_pair_spec(Path(args.out_dir), trace, result, name_map)
        # exit 0 means the output builds and runs: a failure is an L2N-VERIFY-010 finding
        check_spec_builds(spec_path, trace, result, rule_selector(settings["select"], settings["ignore"]))
    elif trace is not None and not args.quiet:
        err_console.print(  # a pair needs the Linen original beside the output: only --out-dir keeps both
            "note: --trace sized the layers, but no pair spec is written without --out-dir "
            "(convert / check need the Linen original and the NNX output side by side)"
        )
    if mode is Mode.DIFF:
        for r in result.files:
            if r.changed:
                sys.stdout.write(r.diff())
    return result


def _migrate_stdin(args: argparse.Namespace, settings: dict, trace):
    """``migrate -``: one file from stdin; the migrated source (or the input, if it failed) to stdout."""
    from linen2nnx.migrate.discovery import is_excluded, module_name_for
    from linen2nnx.migrate.engine import (
        FileResult,
        MigrationResult,
        Mode,
        migrate_source,
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
    from linen2nnx.io_utils import atomic_write_text, encodable
    from linen2nnx.reports.migration import render, render_text

    if args.report == "-":
        sys.stdout.write(encodable(render(result, args.format, verbose=args.verbose)))
        sys.stdout.flush()
    elif args.report:
        try:
            atomic_write_text(Path(args.report), encodable(render(result, args.format, verbose=args.verbose)))
        except OSError as e:
            raise L2NError(f"{args.report}: cannot write the report: {e.strerror or e}") from e
    if args.quiet or (args.report == "-" and args.format == "text"):
        return
    text = render_text(result, verbose=args.verbose)
    err_console.print(encodable(text.rstrip()), markup=False, highlight=False, soft_wrap=True)
    for p in (*result.written, *result.extra_outputs):
        err_console.print(encodable(f"wrote {p}"), markup=False, soft_wrap=True)
