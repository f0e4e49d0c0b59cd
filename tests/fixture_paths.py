"""Where the codemod's in/out fixture pairs live, and what each one declares.

Fixtures are grouped by the rule they are mainly about: ``fixtures/migrate/<RULE-ID>/<case>_in.py``
and ``<case>_out.py``. Case names are unique across folders, so tests name a case, not its folder.
The first line of every input declares the rule ids of all findings the case gives::

    # findings: L2N-API-001, L2N-LAYER-001, L2N-MOD-001      (or ``# findings: none``)

A case that only shows its rule with ``--unsafe-fixes`` says so on a line ``# options: unsafe-fixes``;
one that needs the trace of an example batch (``migrate --trace``) names the class to build with its
defaults and the batch's shape: ``# trace: Classifier (2, 8, 8, 3)``.
"""

from __future__ import annotations

import ast
import dataclasses
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "migrate"
NO_FINDINGS_DIR = "no-findings"
"""The one folder that is not a rule id: cases that must give no finding at all (non-Flax code)."""

_FINDINGS = "# findings:"
_OPTIONS = "# options:"
_TRACE = "# trace:"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    folder: str
    """The rule id the case is filed under (or :data:`NO_FINDINGS_DIR`)."""
    input: Path
    output: Path

    def declared(self) -> frozenset[str]:
        """The rule ids of the ``# findings:`` header (empty for ``none``)."""
        return declared_findings(self.input.read_text())

    def options(self) -> frozenset[str]:
        return _header_values(self.input.read_text(), _OPTIONS) or frozenset()

    def trace(self) -> tuple[str, Any] | None:
        """``(class name, input shape)`` of the ``# trace:`` line, if any (a dict of shapes: an input
        that is a dict of arrays)."""
        for line in _header(self.input.read_text()):
            if line.startswith(_TRACE):
                cls, _, shape = line.removeprefix(_TRACE).strip().partition(" ")
                value = ast.literal_eval(shape)
                return cls, value if isinstance(value, dict) else tuple(value)
        return None


def _header(source: str) -> list[str]:
    """The leading comment lines of a fixture input: where its declarations are."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def _header_values(source: str, prefix: str) -> frozenset[str] | None:
    for line in _header(source):
        if line.startswith(prefix):
            values = [v.strip() for v in line.removeprefix(prefix).split(",")]
            return frozenset(v for v in values if v and v != "none")
    return None


def declared_findings(source: str) -> frozenset[str]:
    """The rule ids a fixture input declares; a missing header is an error, not ``none``."""
    found = _header_values(source, _FINDINGS)
    if found is None:
        raise ValueError(f"fixture input has no leading {_FINDINGS!r} line")
    return found


@cache
def all_cases() -> dict[str, Case]:
    """Every fixture case by name, from every folder (new rule folders are picked up as they appear)."""
    cases: dict[str, Case] = {}
    for src in sorted(FIXTURES.glob("*/*_in.py")):
        name = src.name.removesuffix("_in.py")
        if name in cases:
            raise ValueError(f"fixture case {name!r} is in both {cases[name].folder} and {src.parent.name}")
        cases[name] = Case(name, src.parent.name, src, src.with_name(f"{name}_out.py"))
    return cases


def fixture(name: str) -> Path:
    """The file of a fixture by its file name (``setup_mlp_in.py``), wherever its rule folder is."""
    case, _, side = name.removesuffix(".py").rpartition("_")
    found = all_cases()[case]
    return {"in": found.input, "out": found.output}[side]
