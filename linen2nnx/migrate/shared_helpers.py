"""Which helper methods some other file of the run names: those must not be replayed away.

Replaying a helper (helper_calls.py) inlines its calls and removes the method from its class. A
subclass in another file may still call it (its own ``setup`` calling ``self._setup_mlp()``) or
override it, which that file's class could then not do: the method is gone, or the override is never
called. The file replaying the helper cannot see the other files, so the engine scans the run once:
the names a method calls on ``self`` at the start of a statement (``self._setup_mlp()``,
``x = self._block(x, ...)``), the only ones the replay removes, are candidates, and a candidate that
two or more files spell after a dot or ``def`` (a call, an override) is *shared*. Every file gets the answer as one fact, :data:`KEY`. The scan
over-approximates (the same name on another class is counted too), which only keeps a helper.
"""

from __future__ import annotations

import dataclasses
import re

from linen2nnx.migrate.discovery import RunSources

KEY = "helpers:run-shared"
_ATTRIBUTE_OR_DEF = re.compile(rb"(?:\.|\bdef[ \t]+)([A-Za-z_][A-Za-z_0-9]*)")
_STATEMENT_CALL = re.compile(
    rb"^[ \t]*(?:[A-Za-z_][A-Za-z_0-9]*[ \t]*=[ \t]*)?self\.([A-Za-z_][A-Za-z_0-9]*)\(", re.M
)


@dataclasses.dataclass(frozen=True)
class SharedHelpers:
    """The candidate helper names two or more files of the run spell; ``complete`` is False when a file
    could not be read, and then every candidate counts as shared."""

    names: frozenset[str]
    complete: bool = True

    def shared(self, name: str) -> bool:
        return not self.complete or name in self.names


def run_shared_helpers(run: RunSources) -> SharedHelpers:
    """The fact for the files of ``run`` (see the module docstring)."""
    candidates: set[bytes] = set()
    for data in run.sources:
        candidates.update(_STATEMENT_CALL.findall(data))
    if not candidates:
        return SharedHelpers(frozenset(), run.complete)
    files: dict[bytes, int] = {}
    for data in run.sources:  # a call or an override spells the name after a dot or `def`
        for name in set(_ATTRIBUTE_OR_DEF.findall(data)) & candidates:
            files[name] = files.get(name, 0) + 1
    return SharedHelpers(frozenset(n.decode() for n, count in files.items() if count > 1), run.complete)


def is_shared(facts: object, name: str) -> bool:
    """Whether the run's fact among ``facts`` (a mapping, or None for a file migrated alone) says
    another file may name the helper ``name``."""
    fact = facts.get(KEY) if isinstance(facts, dict) else None
    return isinstance(fact, SharedHelpers) and fact.shared(name)
