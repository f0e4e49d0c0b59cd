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


def test_architecture_doc_names_every_module_and_only_real_ones():
    """docs/architecture.md matches the code: each migrate / equivalence / checkpoint_convert module is
    placed somewhere in it, and every ``linen2nnx/...`` or ``foo.py`` it names exists."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "linen2nnx"
    for folder in ("migrate", "migrate/training", "migrate/rules", "equivalence", "checkpoint_convert"):
        for module in sorted((package / folder).glob("*.py")):
            if module.name in ("__init__.py", "__main__.py"):
                continue
            assert module.name in doc, f"docs/architecture.md does not place {folder}/{module.name}"
    known = {p.name for p in package.rglob("*.py")} | {p.name for p in (ROOT / "bench").glob("*.py")}
    known |= {p.name for p in (ROOT / "tests").glob("*.py")} | {
        "linen2nnx_spec.py"
    }  # the spec migrate writes
    for name in set(re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", doc)):
        assert name in known, f"docs/architecture.md names {name}, which does not exist"
    for path in set(re.findall(r"`(linen2nnx/[\w/]+\.py)`", doc)):
        assert (ROOT / path).is_file(), f"docs/architecture.md names {path}, which does not exist"


def test_no_document_outside_the_repository_is_cited():
    cited = re.compile(r"reference §|shared/reference|shared/docs|nnx_mapping\.md")
    for path in [
        *ROOT.glob("linen2nnx/**/*.py"),
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("bench/**/*.py"),
        ROOT / "README.md",
    ]:
        text = path.read_text()
        assert not cited.search(text), f"{path.relative_to(ROOT)} cites a document outside this repository"


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 60


def test_modules_and_functions_stay_small():
    """Every module of the package one job (at most 600 lines), every function readable at a glance
    (at most 60 lines, its docstring not counted): a new rule lands in a small, obvious place."""
    import ast

    too_long = []
    for path in sorted((ROOT / "linen2nnx").rglob("*.py")):
        source = path.read_text()
        rel = path.relative_to(ROOT)
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    length -= first.end_lineno - first.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)
