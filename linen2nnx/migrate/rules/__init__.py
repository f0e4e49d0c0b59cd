"""Rule catalogue: every rule the migration reports, as objects (one module per family).

Ids never change meaning once published; ``docs/rules.md`` is generated from these objects
(``python -m linen2nnx.migrate.rules``). Code imports the constants (``from
linen2nnx.migrate.rules import MOD_004``) and never spells an id.
"""

from __future__ import annotations

from linen2nnx.migrate.rules import api, io, modules, training, verify
from linen2nnx.migrate.rules.api import *  # noqa: F403
from linen2nnx.migrate.rules.base import Fix, Rule
from linen2nnx.migrate.rules.io import *  # noqa: F403
from linen2nnx.migrate.rules.modules import *  # noqa: F403
from linen2nnx.migrate.rules.training import *  # noqa: F403
from linen2nnx.migrate.rules.verify import *  # noqa: F403

RULES: dict[str, Rule] = {r.id: r for family in (modules, api, training, verify, io) for r in family.RULES}
"""Every rule by id, in the order the docs list them."""

BLOCKING_IDS: frozenset[str] = frozenset(r.id for r in RULES.values() if r.blocks_rewrite)

__all__ = [
    "BLOCKING_IDS",
    "RULES",
    "Fix",
    "Rule",
    "render_rules_markdown",
    "rule",
    *(
        name
        for family in (modules, api, training, verify, io)
        for name in vars(family)
        if isinstance(getattr(family, name), Rule)
    ),
]


def rule(rule_id: str) -> Rule:
    return RULES[rule_id]


def _code_block(text: str) -> list[str]:
    return ["```python", *text.splitlines(), "```"]


def render_rules_markdown() -> str:
    """``docs/rules.md``, generated from :data:`RULES` (``python -m linen2nnx.migrate.rules``)."""
    lines = [
        "# Migration rules",
        "",
        "Generated from `linen2nnx/migrate/rules/` by `python -m linen2nnx.migrate.rules`; do not edit.",
        "",
        "Severity: `converted` (rewritten, behaviour preserved), `unsafe` (rewritten under a stated assumption,",
        "with `--unsafe-fixes`), `manual` (not rewritten; an inline `# TODO(linen2nnx): RULE` marks the spot),",
        "`error` (file untouched). A rule that *blocks* is a manual finding after which the rewritten code would",
        "not run: the class stays Linen behind `nnx.bridge.ToNNX` (module rules) or the file's training code",
        "stays in its Linen form (training rules).",
        "",
        "| id | severity | fix | blocks | what it means |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| [`{r.id}`](#{r.id.lower()}) | {r.severity.value} | {r.fix.value} | "
        f"{'yes' if r.blocks_rewrite else ''} | {r.summary} |"
        for r in RULES.values()
    ]
    for r in RULES.values():
        lines += [
            "",
            f"## {r.id}",
            "",
            r.summary,
            "",
            "Before:",
            "",
            *_code_block(r.before),
            "",
            "After:",
            "",
            *_code_block(r.after),
        ]
    return "\n".join(lines) + "\n"
