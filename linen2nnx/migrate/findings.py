"""Findings: one record per thing the migration did, could only do unsafely, or could not do.

The record shape is the report contract of ``docs/migrate.md#reports`` (JSON ``findings``): rule, severity, path, line, col,
message, hint. Renderers live in :mod:`linen2nnx.reports`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Severity(str, enum.Enum):
    CONVERTED = "converted"  # rewritten; behaviour preserved
    UNSAFE = "unsafe"  # rewritten, but relies on an assumption the finding states
    MANUAL = "manual"  # not rewritten: a person must act (an inline TODO marks the spot)
    ERROR = "error"  # the file could not be processed at all (left untouched)


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    path: str
    line: int
    col: int
    message: str
    hint: str = ""

    @classmethod
    def of(cls, rule: Any, path: str, line: int, col: int, message: str, hint: str = "") -> Finding:
        """A finding of ``rule`` (a :class:`~linen2nnx.migrate.rules.Rule`), with the rule's severity."""
        return cls(rule.id, rule.severity, path, line, col, message, hint)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["severity"] = self.severity.value
        return d

    def format_text(self) -> str:
        """Compiler style: ``file:line:col: RULE [severity] message``."""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{self.path}:{self.line}:{self.col}: {self.rule} [{self.severity.value}] {self.message}{hint}"
