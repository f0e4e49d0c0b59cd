"""The work an earlier run left marked: ``# TODO(linen2nnx): RULE ...`` lines in a file migrated before.

A second run of a migrated file meets classes already rewritten -- a constructor argument added for a
size nobody knew, a marker above the layer it sizes -- and finds nothing left to do there, so it
reported nothing: ``migrate --check`` (the pre-commit hook) passed a file whose classes still needed
sizes nobody had given. Each marker of a ``manual`` or ``error`` rule that the run does not report
again at its statement is reported as that rule's finding, in the marker's words, until a person does
the work and deletes the marker.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable
from typing import Any

from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.rules import RULES

_MARKER = re.compile(r"^\s*# TODO\(linen2nnx\): (L2N-[A-Z]+-\d{3}) (.*)$")
_OWED = (Severity.MANUAL, Severity.ERROR)


def earlier_markers(
    source: str, path: str, findings: list[Finding], rule_enabled: Callable[[str], bool]
) -> list[Finding]:
    """Findings for the markers of ``source`` that ``findings`` (the run's own) do not repeat: each at
    the statement below its marker block, one per rule and statement."""
    if "TODO(linen2nnx)" not in source:
        return []  # the common case, at no cost
    lines = source.splitlines()
    comments = _comment_lines(source)  # a marker's text in a string or docstring is no marker
    reported = {(f.rule, f.line) for f in findings}
    owed: list[Finding] = []
    for i, text in enumerate(lines):
        match = _MARKER.match(text) if i + 1 in comments else None
        rule = RULES.get(match.group(1)) if match else None
        if match is None or rule is None or rule.severity not in _OWED or not rule_enabled(rule.id):
            continue
        below = next((j for j in range(i + 1, len(lines)) if lines[j].strip() and not _comment(lines[j])), i)
        at = below + 1
        if any((rule.id, line) in reported for line in range(i + 1, at + 1)):
            continue
        reported.add((rule.id, at))
        column = len(lines[below]) - len(lines[below].lstrip()) + 1
        owed.append(
            Finding.of(
                rule,
                path,
                at,
                column,
                f"{match.group(2)} (marked by an earlier run)",
                "do what the marker asks, then delete its line",
            )
        )
    return owed


def add_earlier_markers(result: Any, source: str, path: str, rule_enabled: Callable[[str], bool]) -> Any:
    """``result`` (a FileResult, changed in place) with the findings :func:`earlier_markers` owes it,
    in line order."""
    owed = earlier_markers(source, path, result.findings, rule_enabled)
    if owed:
        result.findings = sorted([*result.findings, *owed], key=lambda f: (f.line, f.col, f.rule))
    return result


def _comment_lines(source: str) -> set[int]:
    """The (1-based) lines of ``source`` that hold a comment token."""
    try:
        return {
            tok.start[0]
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        }
    except (tokenize.TokenError, SyntaxError):
        return set()


def _comment(line: str) -> bool:
    return line.lstrip().startswith("#")
