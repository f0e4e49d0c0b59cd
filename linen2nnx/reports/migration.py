"""Renderers for migration reports: text, JSON, SARIF 2.1.0 and Markdown.

- **text**: compiler style (``file:line:col: RULE [severity] message``) after a tf_upgrade_v2-style
  summary line, one block per file;
- **json**: the stable ``linen2nnx-migration/1`` schema (summary, files, findings, by_rule, outputs);
- **sarif**: SARIF 2.1.0 for code-scanning UIs (one run; the rule catalogue as ``tool.driver.rules``);
- **markdown**: for a pull-request comment or ``$GITHUB_STEP_SUMMARY``: the summary, counts by
  severity and by rule, then a collapsible ``<details>`` block per file.

Every renderer is a pure function of a :class:`~linen2nnx.migrate.engine.MigrationResult`.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections import Counter
from collections.abc import Callable
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from linen2nnx.reports.markdown_text import md_cell as _md_cell

if TYPE_CHECKING:
    from linen2nnx.migrate.engine import FileResult, MigrationResult
    from linen2nnx.migrate.findings import Finding

SCHEMA = "linen2nnx-migration/1"
FORMATS = ("text", "json", "sarif", "markdown")
SEVERITIES = ("error", "manual", "unsafe", "converted")
_ATTENTION = ("error", "manual", "unsafe")

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
# severity -> SARIF level: a failure is an error, work left to a person a warning, a fix that rests on
# an assumption a note, and a plain conversion no problem at all.
SARIF_LEVEL = {"error": "error", "manual": "warning", "unsafe": "note", "converted": "none"}


def summary_line(result: MigrationResult) -> str:
    counts = result.counts()
    changed = sum(r.changed for r in result.files)
    attention = sum(counts[s] for s in _ATTENTION)
    return (
        f"Converted {changed} of {len(result.files)} files; detected {attention} issues that require attention "
        f"({counts['error']} errors, {counts['manual']} manual, {counts['unsafe']} unsafe; "
        f"{counts['converted']} conversions)."
    )


def by_rule(result: MigrationResult) -> dict[str, int]:
    """Finding count per rule id, sorted by id."""
    return dict(sorted(Counter(f.rule for f in result.findings).items()))


# ---- text ------------------------------------------------------------------------------------------
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


# ---- JSON ------------------------------------------------------------------------------------------
def to_json(result: MigrationResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": result.mode.value,
        "summary": {
            "files": len(result.files),
            "changed": sum(r.changed for r in result.files),
            "failed": sum(r.failed for r in result.files),
            **dict(result.counts()),
        },
        "files": [
            {"path": r.rel, "changed": r.changed, "failed": r.failed, "skipped": r.skipped}
            for r in result.files
        ],
        "findings": [f.to_json() for f in result.findings],
        "by_rule": by_rule(result),
        "outputs": [str(p) for p in (*result.written, *result.extra_outputs)],
    }


def render_json(result: MigrationResult) -> str:
    return json.dumps(to_json(result), indent=2) + "\n"


# ---- SARIF -----------------------------------------------------------------------------------------
def _artifact_uri(path: str) -> str:
    """A URI reference for a finding's path: relative paths stay relative (POSIX separators, quoted),
    absolute ones become ``file://`` URIs."""
    if PureWindowsPath(path).drive:
        return PureWindowsPath(path).as_uri()
    posix = PurePosixPath(path.replace("\\", "/"))
    if posix.is_absolute():
        return posix.as_uri()
    return urllib.parse.quote(posix.as_posix(), errors="surrogateescape")  # a file name's raw bytes


def sarif_rules() -> list[dict[str, Any]]:
    """``tool.driver.rules``, generated from the rule catalogue (ids never change meaning)."""
    from linen2nnx.migrate.rules import RULES

    return [
        {
            "id": r.id,
            "name": r.id.replace("-", ""),
            "shortDescription": {"text": r.summary},
            "help": {
                "text": f"{r.summary} See docs/rules.md.",
                "markdown": f"`{r.id}` ({r.severity.value}): {r.summary}",
            },
            "defaultConfiguration": {"level": SARIF_LEVEL[r.severity.value]},
            "properties": {"severity": r.severity.value, "tags": ["flax", "linen-to-nnx", r.severity.value]},
        }
        for r in RULES.values()
    ]


def _sarif_result(f: Finding, index: dict[str, int]) -> dict[str, Any]:
    message = f.message + (f" (hint: {f.hint})" if f.hint else "")
    out: dict[str, Any] = {"ruleId": f.rule}
    if f.rule in index:
        out["ruleIndex"] = index[f.rule]
    out.update(
        {
            "level": SARIF_LEVEL[f.severity.value],
            "kind": "informational" if f.severity.value == "converted" else "fail",
            "message": {"text": message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _artifact_uri(f.path)},
                        "region": {"startLine": max(1, f.line), "startColumn": max(1, f.col)},
                    }
                }
            ],
            "properties": {"severity": f.severity.value},
        }
    )
    return out


def to_sarif(result: MigrationResult) -> dict[str, Any]:
    """One SARIF 2.1.0 log with one run: the driver's rule catalogue and one result per finding."""
    from linen2nnx import __version__

    rules = sarif_rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "linen2nnx",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "invocations": [
                    {
                        # an error finding (a file not parsed or not written) is a run that failed: exit 2
                        "executionSuccessful": result.exit_code() != 2,
                        "properties": {"mode": result.mode.value, "summary": summary_line(result)},
                    }
                ],
                "columnKind": "unicodeCodePoints",
                "results": [_sarif_result(f, index) for f in result.findings],
            }
        ],
    }


def render_sarif(result: MigrationResult) -> str:
    return json.dumps(to_sarif(result), indent=2) + "\n"


# ---- Markdown --------------------------------------------------------------------------------------
def _file_counts(r: FileResult) -> str:
    counts = Counter(f.severity.value for f in r.findings)
    parts = [f"{counts[s]} {s}" for s in SEVERITIES if counts[s]]
    state = "failed" if r.failed else ("changed" if r.changed else "unchanged")
    return f"{state}; " + (", ".join(parts) if parts else "no findings")


def render_markdown(
    result: MigrationResult, *, max_rows_per_file: int = 200, title: str = "linen2nnx migration report"
) -> str:
    """A report for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.

    The summary line, a counts table by severity, one by rule, then a collapsible block per file
    that changed or has findings (at most ``max_rows_per_file`` rows each; the rest is counted).
    """
    from linen2nnx.migrate.rules import RULES

    counts = result.counts()
    lines = [f"## {title}", "", f"**{summary_line(result)}**", ""]
    lines += ["| severity | findings |", "|---|---:|"]
    lines += [f"| {s} | {counts[s]} |" for s in SEVERITIES]
    rules = by_rule(result)
    if rules:
        lines += ["", "| rule | severity | findings | what it means |", "|---|---|---:|---|"]
        for rule_id, n in rules.items():
            known = RULES.get(rule_id)
            severity = known.severity.value if known else "?"
            lines.append(f"| `{rule_id}` | {severity} | {n} | {_md_cell(known.summary) if known else ''} |")
    for r in result.files:
        if not r.findings and not r.changed:
            continue
        lines += [
            "",
            "<details>",
            f"<summary><code>{html.escape(r.rel)}</code>: {_file_counts(r)}</summary>",
            "",
        ]
        if r.findings:
            lines += ["| line:col | rule | severity | message |", "|---|---|---|---|"]
            for f in r.findings[:max_rows_per_file]:
                hint = f" (hint: {f.hint})" if f.hint else ""
                lines.append(
                    f"| {f.line}:{f.col} | `{f.rule}` | {f.severity.value} | {_md_cell(f.message + hint)} |"
                )
            if len(r.findings) > max_rows_per_file:
                lines.append(
                    f"\n… and {len(r.findings) - max_rows_per_file} more (see the JSON or SARIF report)."
                )
        else:
            lines.append("Changed with no findings.")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[..., str]] = {
    "text": render_text,
    "json": render_json,
    "sarif": render_sarif,
    "markdown": render_markdown,
}


def render(result: MigrationResult, fmt: str, *, verbose: bool = False) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "text":
        return render_text(result, verbose=verbose)
    try:
        return RENDERERS[fmt](result)
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})") from None
