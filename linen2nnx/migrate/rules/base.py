"""What a migration rule is: the one record every finding points at.

A rule is data. Code reports a finding with the rule *object* (``report(MOD_004, node, ...)``), so a
mistyped rule is a NameError at import, not a wrong id at run time; the id string exists only in
the report contract (``Finding.rule``) and in the generated ``docs/rules.md``.
"""

from __future__ import annotations

import dataclasses
import enum

from linen2nnx.migrate.findings import Severity


class Fix(str, enum.Enum):
    """What happens to the code a finding points at."""

    SAFE = "safe"  # rewritten; behaviour preserved
    UNSAFE = "unsafe"  # rewritten only with --unsafe-fixes: the fix rests on a stated assumption
    NONE = "none"  # not rewritten: a person acts on the inline TODO marker


_FIX_OF = {
    Severity.CONVERTED: Fix.SAFE,
    Severity.UNSAFE: Fix.UNSAFE,
    Severity.MANUAL: Fix.NONE,
    Severity.ERROR: Fix.NONE,
}


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: a stable id that never changes meaning once published, and what it means.

    ``blocks_rewrite``: a manual finding after which the rewritten code would not run, so the
    class is kept as Linen behind the bridge (module rules) or the file's training code is left
    in its Linen form (training rules). ``before`` / ``after`` are a short example for the docs.
    """

    id: str
    severity: Severity
    summary: str
    before: str
    after: str
    blocks_rewrite: bool = False

    @property
    def fix(self) -> Fix:
        return _FIX_OF[self.severity]

    @property
    def family(self) -> str:
        """``MOD`` for ``L2N-MOD-004``: what ``--select L2N-MOD`` picks."""
        return self.id.split("-")[1]

    def __str__(self) -> str:
        return self.id
