"""``linen2nnx check``: its options, running the parity check, and writing every report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linen2nnx.errors import EXIT_FINDINGS, EXIT_OK, L2NError
from linen2nnx.reports.console import make_console

err_console = make_console()


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def mesh_arg(text: str) -> dict[str, int]:
    """``--mesh data=2,fsdp=2,tensor=2`` (check, demo) -> ``{"data": 2, "fsdp": 2, "tensor": 2}`` (order kept),
    parsed by :func:`linen2nnx.equivalence.mesh.parse_mesh`; a malformed mesh is a usage error (exit 2)."""
    from linen2nnx.equivalence.mesh import MeshError, parse_mesh

    try:
        return parse_mesh(text)
    except MeshError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def tolerance_arg(text: str) -> tuple[str, float]:
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


def add_check_parser(sub: argparse._SubParsersAction) -> None:
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
        type=non_negative_int,
        metavar="N",
        help="also train both sides side by side for N optimizer steps",
    )
    k.add_argument(
        "--mesh",
        type=mesh_arg,
        metavar="AXIS=SIZE,...",
        help="run sharded on a device mesh, e.g. data=2,fsdp=2,tensor=2",
    )
    k.add_argument(
        "--tolerance",
        action="append",
        type=tolerance_arg,
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
    _check_targets(args, spec, summary_path)
    if args.html:
        from linen2nnx.reports.plots import require_matplotlib

        require_matplotlib()  # fail in a second, not after the whole check
    result = _run_check(args, spec, options)

    from linen2nnx.reports import parity_data
    from linen2nnx.reports.console import render_parity

    data = parity_data.parity_dict(result)
    render_parity(data, console=err_console, all_leaves=args.all_leaves)
    reports = _rendered_reports(args, data)  # every report rendered before the first is written
    for target, text in reports:
        _write_report(target, text)
    if summary_path is not None:
        _append_summary(summary_path, data)
    return EXIT_OK if data.get("passed") else EXIT_FINDINGS


def _check_targets(args: argparse.Namespace, spec: str, summary_path: Path | None) -> None:
    """Before the check runs: no report may replace the spec, a checkpoint or the name map, or share a
    path with another report, and the step summary must take an append (report_targets.py)."""
    from linen2nnx.report_targets import check_appendable, check_report_targets, spec_files

    taken: dict[str | Path, str] = spec_files(spec)
    inputs = (
        (args.ckpt, "the Linen checkpoint"),
        (args.nnx_ckpt, "the NNX checkpoint"),
        (args.map, "the name map"),
    )
    taken.update({path: what for path, what in inputs if path})
    flags = {f"--{flag}": getattr(args, flag) for flag in ("json", "markdown", "junit", "html")}
    check_report_targets(flags, taken)
    if summary_path is not None:
        check_appendable(summary_path, "$GITHUB_STEP_SUMMARY")


def _rendered_reports(args: argparse.Namespace, data: dict) -> list[tuple[str, str]]:
    """``(target, text)`` for each report the flags ask for (``-``: standard output)."""
    from linen2nnx.reports.json_report import dumps

    outputs: list[tuple[str, str]] = []
    if args.json:
        outputs.append((args.json, dumps(data)))
    if args.markdown:
        from linen2nnx.reports.parity_markdown import render_parity_markdown

        outputs.append((args.markdown, render_parity_markdown(data)))
    if args.junit:
        from linen2nnx.reports.junit import render_junit

        outputs.append((args.junit, render_junit(data)))
    if args.html:
        from linen2nnx.reports.html_report import render_parity_html

        outputs.append((args.html, render_parity_html(data)))
    return outputs


def _write_report(target: str, text: str) -> None:
    from linen2nnx.io_utils import atomic_write_text, encodable

    text = encodable(text)
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        atomic_write_text(Path(target), text)
    except OSError as e:
        raise L2NError(f"{target}: cannot write the report: {e.strerror or e}") from e
    err_console.print(f"wrote {target}", markup=False, soft_wrap=True)


def _append_summary(summary_path: Path, data: dict) -> None:
    """The Markdown report appended to ``$GITHUB_STEP_SUMMARY`` (one append: other steps share the file)."""
    from linen2nnx.reports.parity_markdown import render_parity_markdown

    try:
        with open(summary_path, "a", encoding="utf-8") as f:
            f.write(render_parity_markdown(data) + "\n")
    except OSError as e:
        raise L2NError(f"$GITHUB_STEP_SUMMARY ({summary_path}): cannot append: {e.strerror or e}") from e
    err_console.print(f"appended the Markdown report to {summary_path}", markup=False, soft_wrap=True)
