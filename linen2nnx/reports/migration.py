"""Renderers for migration reports: compiler-style text (with a per-file summary) and JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from linen2nnx.migrate.engine import MigrationResult

SCHEMA = "linen2nnx-migration/1"
_ATTENTION = ("error", "manual", "unsafe")


def summary_line(result: MigrationResult) -> str:
    counts = result.counts()
    changed = sum(r.changed for r in result.files)
    attention = sum(counts[s] for s in _ATTENTION)
    return (f"Converted {changed} of {len(result.files)} files; detected {attention} issues that require attention "
            f"({counts['error']} errors, {counts['manual']} manual, {counts['unsafe']} unsafe; "
            f"{counts['converted']} conversions).")


def render_text(result: MigrationResult, verbose: bool = False) -> str:
    """tf_upgrade_v2-style: the summary, then one block per file listing what needs attention."""
    lines = [summary_line(result)]
    for r in result.files:
        shown = [f for f in r.findings if verbose or f.severity.value in _ATTENTION]
        if not shown:
            continue
        lines.append("")
        lines.append(f"{r.rel}:")
        lines.extend(f"  {f.format_text()}" for f in shown)
    return "\n".join(lines) + "\n"


def to_json(result: MigrationResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": result.mode.value,
        "summary": {"files": len(result.files), "changed": sum(r.changed for r in result.files),
                    "failed": sum(r.failed for r in result.files), **dict(result.counts())},
        "files": [{"path": r.rel, "changed": r.changed, "failed": r.failed, "skipped": r.skipped}
                  for r in result.files],
        "findings": [f.to_json() for f in result.findings],
        "outputs": [str(p) for p in (*result.written, *result.extra_outputs)],
    }


def render_json(result: MigrationResult) -> str:
    return json.dumps(to_json(result), indent=2) + "\n"
