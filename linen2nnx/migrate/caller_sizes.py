"""A size a class cannot compute needs a person only where nobody passes it: at the top of the run.

When the dataflow cannot tell a layer's input size, its class gains a required constructor argument
for it (``L2N-SHAPE-003``, a ``manual`` finding). A class of the run that builds that class passes
the size: an expression it knows, or an argument of its own (its own ``L2N-SHAPE-003``), and so on
up the chain. Only where the chain ends, at a class no class of the run builds, must a person (or
the training script that builds the model) supply numbers. So once the run is known, the
``L2N-SHAPE-003`` findings of a class that NNX classes of the run build with every argument its
``__init__`` requires (the verifier sees those calls, :func:`.verify.verify_output`) become
``L2N-SHAPE-005`` (``converted``) and their TODO markers go; the top classes keep theirs.

A class is settled only when the evidence is exact: it is the only class of its name in its file
(input and output), every ``L2N-SHAPE-003`` finding inside it adds such an argument (an ambiguous
trace does not), none of its findings keeps it as Linen, and the output without the markers parses.
:func:`settle_file` does it with the builders of one file (:func:`.engine.migrate_source`),
:func:`settle` with those of the whole run (:func:`.engine.migrate_paths`).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import re
from typing import TYPE_CHECKING

from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.rules import BLOCKING_IDS, SHAPE_003, SHAPE_005
from linen2nnx.migrate.sites import MARKER, one_line

if TYPE_CHECKING:
    from linen2nnx.migrate.engine import FileResult

#: The three ways :meth:`.sizing.SizingMixin._required_arg` words an argument it adds.
ADDS_ARGUMENT = re.compile(r"constructor argument \w+ (?:\([^)]*\) )?added")


def settle(results: list[FileResult]) -> None:
    """Settle every file's sizes with the builders of the whole run."""
    built = frozenset().union(*(r.built for r in results))
    for result in results:
        settle_file(result, built)


def settle_file(result: FileResult, built: frozenset[str]) -> FileResult:
    """Turn the size findings of the classes in ``built`` (class keys) into ``L2N-SHAPE-005`` and
    drop their markers from ``result.output``; anything uncertain is left as it is. Returns ``result``."""
    if not built or result.output is None or result.source is None:
        return result
    sizes = [f for f in result.findings if f.rule == SHAPE_003.id]
    spans = _spans(result.source) if sizes else {}
    owners = _owners(spans, sizes)
    if not owners:
        return result
    settled: dict[str, list[Finding]] = {}
    for name, findings in owners.items():
        key = f"{result.module}.{name}" if result.module else name
        if key in built and all(ADDS_ARGUMENT.search(f.message) for f in findings):
            settled[name] = findings
    blocked = {_innermost(spans, f.line) for f in result.findings if f.rule in BLOCKING_IDS}
    settled = {n: fs for n, fs in settled.items() if n not in blocked}
    output = _without_markers(result.output, settled) if settled else None
    if output is None:
        return result
    replaced = {id(f): _settled(f, name) for name, fs in settled.items() for f in fs}
    result.output = output
    result.findings = sorted(
        (replaced.get(id(f), f) for f in result.findings), key=lambda f: (f.line, f.col, f.rule)
    )
    return result


def _settled(finding: Finding, name: str) -> Finding:
    return dataclasses.replace(
        finding,
        rule=SHAPE_005.id,
        severity=SHAPE_005.severity,
        message=f"{finding.message}; every class of this run that builds {name} passes it",
        hint=f"build {name} elsewhere with this argument, or run `linen2nnx migrate --trace SPEC`",
    )


def _spans(text: str) -> dict[str, list[tuple[int, int]]]:
    """Line spans of the classes ``text`` defines, by name (nested ones too)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    spans: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            spans[node.name].append((node.lineno, node.end_lineno or node.lineno))
    return spans


def _innermost(spans: dict[str, list[tuple[int, int]]], line: int) -> str | None:
    inside = [(start, name) for name, found in spans.items() for start, end in found if start <= line <= end]
    return max(inside)[1] if inside else None


def _owners(spans: dict[str, list[tuple[int, int]]], findings: list[Finding]) -> dict[str, list[Finding]]:
    """``findings`` by the class (of ``spans``) they lie in, for classes that are alone with their name."""
    owners: dict[str, list[Finding]] = collections.defaultdict(list)
    for finding in findings:
        name = _innermost(spans, finding.line) if finding.line else None
        if name is not None:
            owners[name].append(finding)
    return {n: fs for n, fs in owners.items() if len(spans[n]) == 1}


def _without_markers(output: str, settled: dict[str, list[Finding]]) -> str | None:
    """``output`` without the settled findings' markers, each removed only inside its own class;
    None when a class is not alone with its name there or the result does not parse."""
    spans = _spans(output)
    lines = output.splitlines(True)
    drop: set[int] = set()
    for name, findings in settled.items():
        if len(spans.get(name, ())) != 1:
            return None
        start, end = spans[name][0]
        markers = {one_line(f"{MARKER} {SHAPE_003.id} {f.message}") for f in findings}
        drop.update(i for i in range(start - 1, end) if lines[i].strip() in markers)
    text = "".join(line for i, line in enumerate(lines) if i not in drop)
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return text
