"""Rules of files the engine could not process at all (IO): the file is left untouched."""

from __future__ import annotations

from linen2nnx.migrate.findings import Severity
from linen2nnx.migrate.rules.base import Rule

E = Severity.ERROR

IO_001 = Rule(
    "L2N-IO-001", E, "File could not be parsed (syntax error); left untouched.", "def f(:", "(unchanged)"
)
IO_002 = Rule(
    "L2N-IO-002",
    E,
    "File could not be decoded as text; left untouched.",
    "b'\\xff\\xfe...' (not UTF-8)",
    "(unchanged)",
)
IO_003 = Rule(
    "L2N-IO-003",
    E,
    "Output could not be written; nothing partial was left.",
    "--out-dir /read-only",
    "(nothing written)",
)
IO_004 = Rule(
    "L2N-IO-004",
    E,
    "Internal error while migrating this file; left untouched.",
    "(a bug in the codemod)",
    "(unchanged; please report the file)",
)

RULES = (IO_001, IO_002, IO_003, IO_004)
