"""Snapshot what ``migrate`` produces, so a refactor can prove it changed nothing.

Migrates every corpus given (each folder as one run, so cross-file summaries are exercised) plus
the codemod fixtures and a generated corpus, and writes, for every file, the migrated text and
its findings (one ``file:line:col: RULE [severity] message (hint)`` line each) under ``OUT``:

    python bench/migrate_snapshot.py /tmp/before --corpus <flax-sdist>/examples --corpus <flax-sdist>/flax/linen
    ... change the codemod ...
    python bench/migrate_snapshot.py /tmp/after  --corpus <flax-sdist>/examples --corpus <flax-sdist>/flax/linen
    diff -r /tmp/before /tmp/after                # nothing printed: byte-identical

It also prints one digest line per corpus (files, findings, sha256 of everything), so two runs
can be compared at a glance.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_speed import make_corpus  # noqa: E402

from linen2nnx.migrate.engine import Mode, migrate_paths, migrate_source  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "migrate"


def snapshot(name: str, paths: list[Path], out: Path) -> tuple[int, int, str]:
    """Migrate ``paths`` as one run; write outputs and findings under ``out/name``; return a digest."""
    here = Path.cwd()
    os.chdir(paths[0])  # file names in outputs and findings relative to the corpus, wherever it lies
    try:
        result = migrate_paths(["."], Mode.CHECK, jobs=0)
    finally:
        os.chdir(here)
    digest = hashlib.sha256()
    findings = 0
    for r in result.files:
        rel = Path(name) / r.rel
        text = r.output if r.output is not None else "<no output>\n"
        lines = "".join(f.format_text() + "\n" for f in r.findings)
        findings += len(r.findings)
        for suffix, body in ((".out", text), (".findings", lines)):
            target = out / f"{rel}{suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            digest.update(str(rel).encode() + suffix.encode() + b"\0" + body.encode() + b"\0")
    return len(result.files), findings, digest.hexdigest()[:16]


def _without_header(source: str) -> str:
    """A fixture's input less its ``# findings:`` header lines (its declared findings, not code)."""
    return "".join(line for line in source.splitlines(True) if not line.startswith("# findings:"))


def snapshot_fixtures(out: Path) -> tuple[int, int, str]:
    """Each codemod fixture on its own, keyed by its file name (wherever the rule folders put it)."""
    digest = hashlib.sha256()
    count = findings = 0
    for src in sorted(FIXTURES.rglob("*_in.py"), key=lambda p: p.name):
        result = migrate_source(_without_header(src.read_text()), src.name)
        lines = "".join(f.format_text() + "\n" for f in result.findings)
        count += 1
        findings += len(result.findings)
        for suffix, body in ((".out", result.output or "<no output>\n"), (".findings", lines)):
            target = out / "fixtures" / f"{src.name}{suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            digest.update(target.name.encode() + b"\0" + body.encode() + b"\0")
    return count, findings, digest.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder to write the snapshot to (replaced)")
    ap.add_argument(
        "--corpus", action="append", type=Path, default=[], help="a Linen source tree (repeatable)"
    )
    ap.add_argument("--generated", type=int, default=300, help="generated files (default: 300; 0 = none)")
    args = ap.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    args.out = args.out.resolve()
    runs: list[tuple[str, list[Path]]] = []
    runs += [(f"corpus{i}_{c.name}", [c.resolve()]) for i, c in enumerate(args.corpus)]
    files, findings, digest = snapshot_fixtures(args.out)
    print(f"{'fixtures':32s} files={files:5d} findings={findings:6d} sha256={digest}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.generated:
            make_corpus(Path(tmp), args.generated)
            runs.append(("generated", [Path(tmp)]))
        for name, paths in runs:
            files, findings, digest = snapshot(name, paths, args.out)
            print(f"{name:32s} files={files:5d} findings={findings:6d} sha256={digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
