"""A file migrated with its helper methods' calls replayed in place, and why a replayed class stays Linen.

:func:`migrate_replayed` runs the module pass on the file with each helper call replayed
(helper_calls.py); a replayed class the pass still keeps as Linen is replayed no more and the file
migrated again, so it keeps its author's code and the others their replay.

A class that builds its layers in a helper method (``gates, metrics = self._gates(inputs, n)``) is
migrated with each helper call replayed in place (helper_calls.py). When the module pass still keeps
the replayed class as Linen, the class is migrated as its author wrote it, and each layer the helper
builds is reported there (``L2N-API-002``: "whose calls could not be replayed in place", with the hint to
restructure the calls). That sends the author after calls that replayed fine. The replayed attempt's
first blocking finding in the class is the real reason (vmoe's routers: ``dtype=self.dtype or
inputs.dtype``, a call-time value): it is named in that finding and in its inline marker instead.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.helper_calls import (
    UNREPLAYED,
    kept_after_replay,
    replay_helper_calls,
    replayed_result,
    unreplayed_class,
)
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.rules import API_002, MOD_007
from linen2nnx.migrate.sites import MARKER, one_line


def migrate_replayed(
    migrate: Callable[..., Any],
    tree: cst.Module,
    source: str,
    path: str,
    module_name: str,
    trace: Any,
    options: dict[str, Any],
    names: Callable[[], NameResolver] | None = None,
    reasons: dict[str, Finding] | None = None,
) -> Any:
    """The file's result (``migrate``: the engine's ``migrate_source``, sizes unsettled) with its helper
    methods' calls replayed in place; None when there is nothing to replay. What kept a replayed class
    Linen goes into ``reasons``, and is said in the result (:func:`explained`)."""
    reasons = {} if reasons is None else reasons
    skip: frozenset[str] = frozenset()
    while True:
        replayed = replay_helper_calls(tree, source, module_name, options.get("factories"), names, skip)
        if replayed is None:
            return None
        result = migrate(
            replayed.source, path, module_name, trace, **options, replay_helpers=False, restate_axes=False
        )
        kept = kept_after_replay(result, replayed)
        if result.failed or not kept:
            placed = replayed_result(result, replayed, source)
            return explained(placed, reasons) if placed is not None else None
        reasons.update(blocking_reasons(result, replayed, kept))
        skip |= kept


def blocking_reasons(result: Any, replayed: Any, kept: frozenset[str]) -> dict[str, Finding]:
    """For each class of ``kept`` (the module pass kept it as Linen after its replay, ``result``), the
    first manual or error finding inside it other than the kept-as-Linen summary, on the original's
    lines (``replayed.place``)."""
    try:
        tree = ast.parse(replayed.source)
    except SyntaxError:
        return {}
    spans = {
        node.name: (node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name in kept
    }
    reasons: dict[str, Finding] = {}
    for finding in result.findings:
        if finding.rule == MOD_007.id or finding.severity not in (Severity.MANUAL, Severity.ERROR):
            continue
        for name, (start, end) in spans.items():
            if start <= finding.line <= end and name not in reasons:
                reasons[name] = replayed.place(finding)
    return reasons


def explained(result: Any, reasons: dict[str, Finding]) -> Any:
    """``result`` with each unreplayed-helper finding of a class of ``reasons`` saying what kept the
    replayed class Linen instead, in its message and its marker in the output."""
    if not reasons:
        return result
    findings, output = [], result.output
    for finding in result.findings:
        reason = _reason(finding, reasons)
        if reason is not None:
            message = finding.message.replace(
                UNREPLAYED,
                f"whose calls replay in place, but the class then still stays Linen: {reason.rule} at line "
                f"{reason.line}, {reason.message}",
            )
            if output is not None:
                old = one_line(f"{MARKER} {finding.rule} {finding.message}")
                output = output.replace(old, one_line(f"{MARKER} {finding.rule} {message}"))
            finding = dataclasses.replace(finding, message=message, hint=reason.hint or finding.hint)
        findings.append(finding)
    return dataclasses.replace(result, findings=findings, output=output)


def _reason(finding: Finding, reasons: dict[str, Finding]) -> Finding | None:
    """The reason for ``finding`` when it is an unreplayed helper's of a class of ``reasons``."""
    name = unreplayed_class(finding.message) if finding.rule == API_002.id else None
    return reasons.get(name) if name is not None else None
