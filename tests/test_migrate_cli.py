"""The migrate command end to end: modes, exit codes, reports, and bad input that must not spread."""

import json
import os
import shutil
from pathlib import Path

import pytest
from fixture_paths import fixture

from linen2nnx.cli import main


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    shutil.copy(fixture("setup_mlp_in.py"), src / "pkg" / "mlp.py")
    shutil.copy(fixture("import_alias_in.py"), src / "norms.py")
    shutil.copy(fixture("not_flax_in.py"), src / "util.py")
    return src


def test_out_dir_writes_tree_map_and_report(tree, tmp_path, capsys):
    out = tmp_path / "out"
    report = tmp_path / "report.json"
    code = main(["migrate", str(tree), "--out-dir", str(out), "--report", str(report), "--format", "json"])
    assert code == 0
    assert (out / "pkg" / "mlp.py").read_text() == fixture("setup_mlp_out.py").read_text()
    assert (out / "util.py").read_text() == (tree / "util.py").read_text()  # unchanged files are copied
    name_map = json.loads((out / "linen2nnx-map.json").read_text())
    mlp = next(v for k, v in name_map["classes"].items() if k.endswith("MLP"))
    assert mlp["children"]["fc1"] == {"attr": "fc1", "linen_class": "flax.linen.Dense"}
    assert mlp["new_args"] == {"in_features": "input:0"}
    data = json.loads(report.read_text())
    assert data["schema"] == "linen2nnx-migration/1"
    assert data["summary"]["files"] == 3 and data["summary"]["changed"] == 2
    assert "Converted 2 of 3 files" in capsys.readouterr().err


def test_diff_and_check_change_nothing(tree, capsys):
    before = {p: p.read_text() for p in tree.rglob("*.py")}
    assert main(["migrate", str(tree)]) == 1  # default --diff: would change
    assert "+class MLP(nnx.Module):" in capsys.readouterr().out
    assert main(["migrate", "--check", str(tree)]) == 1
    assert {p: p.read_text() for p in tree.rglob("*.py")} == before


def test_write_in_place_then_check_is_clean(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["migrate", "--write", str(tree)]) == 0
    assert (tree / "pkg" / "mlp.py").read_text() == fixture("setup_mlp_out.py").read_text()
    assert (tree / "linen2nnx-map.json").is_file()  # at the root of the migrated tree, not the cwd
    assert not (tmp_path / "linen2nnx-map.json").exists()
    assert main(["migrate", "--check", str(tree)]) == 0  # idempotent: nothing left to change


def test_syntax_error_is_named_and_others_still_migrate(tree, tmp_path, capsys):
    bad = tree / "broken.py"
    bad.write_text("import flax.linen as nn\nclass X(nn.Module:\n    pass\n")
    before = bad.read_bytes()
    out = tmp_path / "out"
    assert main(["migrate", str(tree), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "broken.py:2:" in err and "L2N-IO-001" in err
    assert bad.read_bytes() == before
    assert not (out / "broken.py").exists()
    assert (out / "pkg" / "mlp.py").read_text() == fixture("setup_mlp_out.py").read_text()


def test_syntax_error_with_write_leaves_file_untouched(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tree / "broken.py"
    bad.write_text("import flax.linen as nn\ndef f(:\n")
    before = bad.read_bytes()
    assert main(["migrate", "--write", str(tree)]) == 2
    assert bad.read_bytes() == before
    assert "nnx.Module" in (tree / "pkg" / "mlp.py").read_text()


def test_undecodable_file_is_named(tree, tmp_path, capsys):
    (tree / "latin.py").write_bytes(b"# caf\xe9\nimport flax.linen as nn\n")
    assert main(["migrate", str(tree), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "latin.py:1:1: L2N-IO-002" in err
    assert (tmp_path / "out" / "norms.py").is_file()


@pytest.mark.skipif(os.name != "posix", reason="needs POSIX permissions")
def test_unwritable_output_is_named(tree, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "pkg").mkdir(parents=True)
    (out / "pkg" / "mlp.py").mkdir()  # a folder where the file must go: the write fails
    assert main(["migrate", str(tree), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "L2N-IO-003" in err and "mlp.py" in err
    assert (out / "norms.py").read_text() == fixture("import_alias_out.py").read_text()
    assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize("out", [".", "pkg/.."])
def test_an_out_dir_that_would_write_over_the_sources_is_refused(out, tree, capsys):
    before = {f: f.read_bytes() for f in tree.rglob("*.py")}
    assert main(["migrate", str(tree), "--out-dir", str(tree / out)]) == 2
    assert "would write its output over it" in capsys.readouterr().err
    assert {f: f.read_bytes() for f in tree.rglob("*.py")} == before


def test_a_name_map_that_cannot_be_written_stops_write_before_any_source_changes(tree, capsys):
    (tree / "linen2nnx-map.json").mkdir()
    before = {f: f.read_bytes() for f in tree.rglob("*.py")}
    assert main(["migrate", str(tree), "--write"]) == 2
    assert "linen2nnx-map.json: is a folder; the name map is a file" in capsys.readouterr().err
    assert {f: f.read_bytes() for f in tree.rglob("*.py")} == before


def test_a_link_to_a_file_outside_the_tree_is_written_where_the_link_is(tree, tmp_path):
    """It crashed (``relative_to`` of the link's target), leaving a half-written output folder."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(fixture("import_alias_in.py"), outside / "shared.py")
    (tree / "pkg" / "shared.py").symlink_to(outside / "shared.py")
    out = tmp_path / "out"
    assert main(["migrate", str(tree), "--out-dir", str(out)]) == 0
    assert (out / "pkg" / "shared.py").read_text() == fixture("import_alias_out.py").read_text()
    assert (out / "linen2nnx-map.json").is_file()


def test_missing_path_is_a_usage_error(tmp_path, capsys):
    assert main(["migrate", str(tmp_path / "nope")]) == 2
    assert "nope: no such file or directory" in capsys.readouterr().err


def test_jobs_gives_the_same_result(tree, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["migrate", str(tree), "--out-dir", str(a)]) == 0
    assert main(["migrate", str(tree), "--out-dir", str(b), "-j", "2"]) == 0
    for f in a.rglob("*"):
        if f.is_file():
            assert f.read_bytes() == (b / f.relative_to(a)).read_bytes()


# ---- rule selection and fix safety --------------------------------------------------------------------
@pytest.fixture
def cnn(tmp_path):
    src = tmp_path / "cnn"
    src.mkdir()
    shutil.copy(fixture("compact_cnn_in.py"), src / "cnn.py")
    return src


def _report(tmp_path, argv):
    report = tmp_path / "r.json"
    code = main(["migrate", *argv, "--report", str(report), "--format", "json", "--isolated"])
    return code, json.loads(report.read_text())


def test_ignore_drops_the_finding_and_its_marker(cnn, tmp_path):
    out = tmp_path / "out"
    _, before = _report(tmp_path, [str(cnn), "--out-dir", str(tmp_path / "before")])
    assert "L2N-SHAPE-003" in before["by_rule"]  # the fixture has one: the test means something
    assert "# TODO(linen2nnx): L2N-SHAPE-003" in (tmp_path / "before" / "cnn.py").read_text()
    _, after = _report(tmp_path, [str(cnn), "--out-dir", str(out), "--ignore", "L2N-SHAPE-003"])
    assert "L2N-SHAPE-003" not in after["by_rule"]
    assert not any(f["rule"] == "L2N-SHAPE-003" for f in after["findings"])
    assert "TODO(linen2nnx): L2N-SHAPE-003" not in (out / "cnn.py").read_text()


def test_select_keeps_only_matching_prefixes(cnn, tmp_path):
    _, data = _report(tmp_path, [str(cnn), "--check", "--select", "L2N-MOD,L2N-LAYER-001"])
    assert data["by_rule"] and all(r.startswith(("L2N-MOD", "L2N-LAYER-001")) for r in data["by_rule"])


@pytest.mark.parametrize("flag", ["--select", "--ignore"])
def test_unknown_rule_prefix_is_a_usage_error(cnn, capsys, flag):
    assert main(["migrate", str(cnn), "--check", flag, "L2N-SHAPE-03X"]) == 2
    err = capsys.readouterr().err
    assert flag in err and "L2N-SHAPE-03X" in err and "matches no rule" in err


def test_unsafe_fixes_and_selection_reach_migrate_source(cnn, monkeypatch):
    from linen2nnx.migrate import engine
    from linen2nnx.migrate.file_state import IMPORTED_KEY

    seen = []
    real = engine.migrate_source

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "migrate_source", spy)
    main(
        [
            "migrate",
            str(cnn),
            "--check",
            "--isolated",
            "--unsafe-fixes",
            "--select",
            "L2N-MOD",
            "--ignore",
            "L2N-MOD-004",
        ]
    )
    assert seen == [
        {
            "select": ("L2N-MOD",),
            "ignore": ("L2N-MOD-004",),
            "unsafe_fixes": True,
            "external": {},
            "factories": {IMPORTED_KEY: frozenset()},  # a lone file: no other file reads its summaries
        }
    ]


# ---- config ------------------------------------------------------------------------------------------
def _pyproject(root: Path, body: str) -> Path:
    p = root / "pyproject.toml"
    p.write_text("[project]\nname = 'x'\n\n[tool.linen2nnx]\n" + body)
    return p


def test_config_is_read_from_the_nearest_pyproject(cnn, tmp_path):
    _pyproject(tmp_path, 'ignore = ["L2N-SHAPE-003"]\nexclude = ["skipped"]\n')
    (cnn / "skipped").mkdir()
    shutil.copy(fixture("setup_mlp_in.py"), cnn / "skipped" / "mlp.py")
    report = tmp_path / "r.json"
    main(["migrate", str(cnn), "--check", "--report", str(report), "--format", "json"])
    data = json.loads(report.read_text())
    assert len(data["files"]) == 1 and data["files"][0]["path"].endswith("cnn.py")
    assert "L2N-SHAPE-003" not in data["by_rule"]
    # flags override the config: --ignore replaces its ignore list, --exclude its exclude list
    main(
        [
            "migrate",
            str(cnn),
            "--check",
            "--report",
            str(report),
            "--format",
            "json",
            "--ignore",
            "L2N-MOD-004",
            "--exclude",
            "nothing",
        ]
    )
    data = json.loads(report.read_text())
    assert "L2N-SHAPE-003" in data["by_rule"] and len(data["files"]) == 2


def test_config_include_and_unsafe_fixes_and_jobs(tmp_path):
    from linen2nnx.migrate.config import load_config

    _pyproject(tmp_path, 'include = ["*.py", "*.pyw"]\nselect = ["L2N-MOD"]\nunsafe-fixes = true\njobs = 0\n')
    (tmp_path / "sub").mkdir()
    cfg = load_config(tmp_path / "sub")
    assert cfg.source == tmp_path / "pyproject.toml"
    assert cfg.include == ("*.py", "*.pyw") and cfg.select == ("L2N-MOD",)
    assert cfg.unsafe_fixes is True and cfg.jobs == 0


def test_pyproject_without_our_table_is_skipped(tmp_path):
    from linen2nnx.migrate.config import MigrateConfig, load_config

    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    _pyproject(outer, 'ignore = ["L2N-API"]\n')
    (inner / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    assert load_config(inner).ignore == ("L2N-API",)
    assert load_config(tmp_path) == MigrateConfig()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('selec = ["L2N-MOD"]\n', "unknown key 'selec' (did you mean 'select'?)"),
        ('select = "L2N-MOD"\n', "select: expected a list of strings"),
        ('ignore = ["L2N-NOPE"]\n', "ignore: 'L2N-NOPE' matches no rule"),
        ('unsafe-fixes = "yes"\n', "unsafe-fixes: expected true or false"),
        ("jobs = -1\n", "jobs: expected a whole number >= 0"),
        ("jobs = [\n", "not valid TOML"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path, cnn, capsys, body, named):
    pyproject = _pyproject(tmp_path, body)
    assert main(["migrate", str(cnn), "--check"]) == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert str(pyproject) in err and named in err


def test_explicit_config_and_isolated(tmp_path, cnn, capsys):
    bad = _pyproject(tmp_path, "nope = 1\n")
    good = tmp_path / "l2n.toml"
    good.write_text('ignore = ["L2N-SHAPE-003"]\n')
    assert main(["migrate", str(cnn), "--check", "--isolated"]) == 1
    report = tmp_path / "r.json"
    code = main(
        ["migrate", str(cnn), "--check", "--config", str(good), "--report", str(report), "--format", "json"]
    )
    data = json.loads(report.read_text())
    assert code == 1 and "L2N-SHAPE-003" not in data["by_rule"]
    assert main(["migrate", str(cnn), "--check", "--config", str(bad)]) == 2
    assert "unknown key 'nope'" in capsys.readouterr().err


# ---- jobs --------------------------------------------------------------------------------------------
def test_jobs_zero_means_one_per_cpu():
    from linen2nnx.errors import L2NError
    from linen2nnx.migrate.engine import resolve_jobs

    assert resolve_jobs(0) == (os.cpu_count() or 1)
    assert resolve_jobs(None) == 1 and resolve_jobs(3) == 3
    with pytest.raises(L2NError, match="--jobs must be >= 0"):
        resolve_jobs(-2)


def test_parallel_results_keep_discovery_order(tmp_path):
    from linen2nnx.migrate.engine import Mode, migrate_paths

    src = tmp_path / "many"
    for i in range(9):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture("setup_mlp_in.py" if i % 2 else "not_flax_in.py"), src / f"d{i % 3}" / f"m{i}.py")
    seen = []
    serial = migrate_paths([src], Mode.CHECK, jobs=1)
    parallel = migrate_paths([src], Mode.CHECK, jobs=0, on_file=lambda r: seen.append(r.rel))
    assert [r.rel for r in parallel.files] == [r.rel for r in serial.files] == seen
    assert [r.rel for r in serial.files] == sorted(r.rel for r in serial.files)
    assert [r.output for r in parallel.files] == [r.output for r in serial.files]
    assert [r.findings for r in parallel.files] == [r.findings for r in serial.files]


# ---- stdin / stdout ----------------------------------------------------------------------------------
def _stdin(monkeypatch, data: bytes) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_stdin_to_stdout(monkeypatch, capsys):
    _stdin(monkeypatch, fixture("setup_mlp_in.py").read_bytes())
    assert main(["migrate", "-", "--isolated", "--stdin-filename", "pkg/mlp.py"]) == 0
    out, err = capsys.readouterr()
    assert out == fixture("setup_mlp_out.py").read_text()
    assert "Converted 1 of 1 files" in err


def test_stdin_findings_go_to_stderr_under_the_given_name(monkeypatch, capsys):
    _stdin(monkeypatch, fixture("compact_cnn_in.py").read_bytes())
    assert main(["migrate", "-", "--isolated", "--stdin-filename", "models/cnn.py"]) == 1  # a manual finding
    out, err = capsys.readouterr()
    assert "class CNN(nnx.Module):" in out and "# TODO(linen2nnx): L2N-SHAPE-003" in out
    assert "models/cnn.py:" in err and "L2N-SHAPE-003 [manual]" in err


def test_stdin_syntax_error_echoes_the_input(monkeypatch, capsys):
    bad = b"import flax.linen as nn\nclass X(nn.Module:\n"
    _stdin(monkeypatch, bad)
    assert main(["migrate", "-", "--isolated"]) == 2
    out, err = capsys.readouterr()
    assert out == bad.decode() and "-:2:" in err and "L2N-IO-001" in err


def test_stdin_check_and_diff(monkeypatch, capsys):
    _stdin(monkeypatch, fixture("setup_mlp_in.py").read_bytes())
    assert main(["migrate", "-", "--check", "--isolated"]) == 1
    assert capsys.readouterr().out == ""
    _stdin(monkeypatch, fixture("setup_mlp_in.py").read_bytes())
    assert main(["migrate", "-", "--diff", "--isolated"]) == 1
    assert "+class MLP(nnx.Module):" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["-", "--write"],
        ["-", "--out-dir", "x"],
        ["-", "src"],
        ["src", "--stdin-filename", "a.py"],
        ["-", "--report", "-"],
    ],
)
def test_stdin_usage_errors(monkeypatch, capsys, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    _stdin(monkeypatch, b"")
    assert main(["migrate", *argv]) == 2
    assert "error:" in capsys.readouterr().err


# ---- report formats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["json", "sarif", "markdown", "text"])
def test_report_to_stdout_in_each_format(cnn, capsys, fmt):
    assert main(["migrate", str(cnn), "--isolated", "--report", "-", "--format", fmt]) == 1
    out, err = capsys.readouterr()
    assert "--- a/" not in out  # --report - turns the default diff into a check
    if fmt == "json":
        data = json.loads(out)
        assert data["schema"] == "linen2nnx-migration/1" and data["by_rule"]["L2N-SHAPE-003"] == 1
    elif fmt == "sarif":
        data = json.loads(out)
        assert data["version"] == "2.1.0" and data["runs"][0]["results"]
    elif fmt == "markdown":
        assert out.startswith("## linen2nnx migration report") and "<details>" in out
    else:
        assert out.startswith("Converted 1 of 1 files") and "L2N-SHAPE-003" in out
        assert "Converted" not in err  # not printed twice
    if fmt != "text":
        assert "Converted 1 of 1 files" in err


def test_report_file_in_sarif_and_markdown(cnn, tmp_path):
    for fmt, name in (("sarif", "r.sarif"), ("markdown", "r.md")):
        assert (
            main(
                [
                    "migrate",
                    str(cnn),
                    "--check",
                    "--isolated",
                    "--report",
                    str(tmp_path / name),
                    "--format",
                    fmt,
                ]
            )
            == 1
        )
    assert json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["tool"]["driver"]["name"] == "linen2nnx"
    assert "| `L2N-SHAPE-003` | manual | 1 |" in (tmp_path / "r.md").read_text()


def test_report_dash_with_explicit_diff_is_a_usage_error(cnn, capsys):
    assert main(["migrate", str(cnn), "--diff", "--report", "-"]) == 2
    assert "--report -" in capsys.readouterr().err


# ---- progress ----------------------------------------------------------------------------------------
@pytest.fixture
def terminal(monkeypatch):
    import io

    from rich.console import Console

    from linen2nnx import cli_migrate

    buf = io.StringIO()
    monkeypatch.setattr(cli_migrate, "err_console", Console(file=buf, force_terminal=True, width=100))
    return buf


def _many(root: Path, n: int) -> Path:
    root.mkdir()
    for i in range(n):
        shutil.copy(fixture("not_flax_in.py"), root / f"f{i:02d}.py")
    return root


def test_progress_bar_on_a_terminal_for_long_runs(tmp_path, terminal):
    assert main(["migrate", str(_many(tmp_path / "big", 21)), "--check", "--isolated"]) == 0
    assert "migrating" in terminal.getvalue()


def test_no_progress_for_short_runs_or_when_asked(tmp_path, terminal):
    assert main(["migrate", str(_many(tmp_path / "small", 20)), "--check", "--isolated"]) == 0
    assert main(["migrate", str(_many(tmp_path / "big", 25)), "--check", "--isolated", "--no-progress"]) == 0
    assert "migrating" not in terminal.getvalue()


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path, capsys):
    assert main(["migrate", str(_many(tmp_path / "big", 25)), "--check", "--isolated"]) == 0
    assert "migrating" not in capsys.readouterr().err


# ---- pre-commit --------------------------------------------------------------------------------------
def test_pre_commit_hook_definition():
    import yaml

    hooks = yaml.safe_load((Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "linen2nnx-migrate")
    assert hook["entry"] == "linen2nnx migrate --check"
    assert hook["language"] == "python" and hook["types"] == ["python"]


def test_pre_commit_style_file_arguments_honour_config_exclude(tmp_path, cnn, monkeypatch):
    _pyproject(tmp_path, 'exclude = ["cnn.py"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["migrate", "--check", str(cnn / "cnn.py")]) == 0  # excluded even when named


def test_stdin_file_excluded_by_config_is_echoed(monkeypatch, capsys, tmp_path):
    _pyproject(tmp_path, 'exclude = ["legacy/*"]\n')
    src = fixture("setup_mlp_in.py").read_bytes()
    _stdin(monkeypatch, src)
    assert main(["migrate", "-", "--stdin-filename", str(tmp_path / "legacy" / "m.py")]) == 0
    assert capsys.readouterr().out == src.decode()


def test_stdin_undecodable_bytes_are_echoed(monkeypatch, capsys):
    import io
    import sys

    _stdin(monkeypatch, b"import flax.linen as nn\n\xe9\n")
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8"))
    assert main(["migrate", "-", "--isolated", "-q"]) == 2
    sys.stdout.flush()
    assert raw.getvalue() == b"import flax.linen as nn\n\xe9\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--check", "--report", "{src}/pkg/mlp.py"], "is a source file of this run"),
        (["--write", "--report", "{src}/pkg/mlp.py", "--format", "markdown"], "is a source file of this run"),
        (["--out-dir", "{tmp}/out", "--report", "{tmp}/out/pkg/mlp.py"], "is an output file of this run"),
        (["--out-dir", "{tmp}/out", "--report", "{tmp}/out/linen2nnx-map.json"], "is the name map"),
        (["--check", "--report", "{src}"], "is a folder"),
    ],
)
def test_a_report_that_would_replace_a_file_of_the_run_is_refused_before_it(
    argv, message, tree, tmp_path, capsys
):
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    filled = [a.format(src=tree, tmp=tmp_path) for a in argv]
    assert main(["migrate", str(tree), *filled]) == 2
    assert message in capsys.readouterr().err
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before
    assert not (tmp_path / "out").exists()


def test_a_report_that_cannot_be_written_is_an_error_not_findings(tree, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["migrate", str(tree), "--check", "--report", str(blocker / "r.json")]) == 2
    assert "cannot write the report" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["json", "markdown", "sarif", "text"])
def test_a_file_name_that_is_not_utf8_is_migrated_and_reported(fmt, tmp_path, capsys):
    """A name Python can only decode with surrogates (byte 0xff): migrated like any file; every report
    names it (a SARIF URI by its raw byte) instead of a traceback."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(fixture("class_value_in.py"), src / os.fsdecode(b"bad\xffname.py"))  # with findings
    report = tmp_path / f"r.{fmt}"
    assert main(["migrate", str(src), "--check", "--report", str(report), "--format", fmt]) == 1
    text = report.read_text(encoding="utf-8")
    assert ("bad%FFname.py" if fmt == "sarif" else "bad\\udcffname.py") in text
    assert "Traceback" not in capsys.readouterr().err


def test_a_report_may_not_replace_the_trace_spec_but_may_share_a_map_path_no_mode_writes(
    tree, tmp_path, capsys
):
    spec = tmp_path / "side.py"
    spec.write_text("SIDE = 1\n")
    assert main(["migrate", str(tree), "--check", "--trace", f"{spec}:side", "--report", str(spec)]) == 2
    assert "is the --trace spec" in capsys.readouterr().err and spec.read_text() == "SIDE = 1\n"
    m = tmp_path / "m.json"  # diff / check mode writes no name map: the report may go there
    assert (
        main(["migrate", str(tree), "--check", "--map", str(m), "--report", str(m), "--format", "json"]) == 1
    )
    assert json.loads(m.read_text())["schema"] == "linen2nnx-migration/1"


def test_a_link_to_another_file_of_the_tree_is_a_module_of_its_own_name(tree, tmp_path):
    """``compat.py -> norms.py``: Python imports it as ``compat``; it was dropped from the output (the
    same file as ``norms.py``), so a module importing from ``compat`` had nothing to import."""
    (tree / "compat.py").symlink_to(tree / "norms.py")
    out = tmp_path / "out"
    assert main(["migrate", str(tree), "--out-dir", str(out)]) == 0
    assert not (out / "compat.py").is_symlink()
    assert (
        (out / "compat.py").read_text()
        == (out / "norms.py").read_text()
        == fixture("import_alias_out.py").read_text()
    )


def test_a_coding_declaration_and_a_byte_order_mark_are_honoured(tmp_path):
    """Python reads a file in its PEP 263 coding (or UTF-8 after a BOM): so does migrate, and it writes
    the output back in it (a latin-1 file was refused with exit 2; a BOM was dropped)."""
    src = tmp_path / "src"
    src.mkdir()
    body = "import flax.linen as nn\n\n\nclass M(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(3)(x)\n"
    (src / "lat.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + body.encode())
    (src / "bom.py").write_bytes(b"\xef\xbb\xbf" + body.encode())
    out = tmp_path / "out"
    assert main(["migrate", str(src), "--out-dir", str(out)]) == 0
    assert (out / "lat.py").read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert b"nnx.Linear" in (out / "lat.py").read_bytes()
    assert (out / "bom.py").read_bytes().startswith(b"\xef\xbb\xbffrom flax import nnx")


def test_a_finding_on_line_100_prints_its_line_number(tmp_path, capsys):
    """``file.py:100:13`` holds the emoji code ``:100:``, which the console used to print as one."""
    source = "\n" * 93 + "import flax.linen as nn\n\n\nclass M(nn.Module):\n    @nn.compact\n"
    source += "    def __call__(self, x):\n        return x * self.scope.path[0]\n"
    (tmp_path / "far.py").write_text(source)
    main(["migrate", str(tmp_path / "far.py")])
    err = capsys.readouterr().err
    assert "far.py:100:" in err and "\U0001f4af" not in err, err
