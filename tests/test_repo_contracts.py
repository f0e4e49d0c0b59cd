"""Repository contracts: CI runs the README's test command; generated docs are current."""

import re
from pathlib import Path

from linen2nnx.migrate.rules import RULES, render_rules_markdown

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("linen2nnx demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    assert _readme_commands()[1] in (ROOT / ".ci" / "run").read_text()


def test_rules_doc_is_generated_from_the_table():
    assert (ROOT / "docs" / "rules.md").read_text() == render_rules_markdown()


def test_rule_ids_are_stable_and_well_formed():
    assert all(re.fullmatch(r"L2N-[A-Z]+-\d{3}", rule_id) for rule_id in RULES)
