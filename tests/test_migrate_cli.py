"""The migrate command end to end: modes, exit codes, reports, and bad input that must not spread."""

import json
import os
import shutil
from pathlib import Path

import pytest

from linen2nnx.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "migrate"


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    shutil.copy(FIXTURES / "setup_mlp_in.py", src / "pkg" / "mlp.py")
    shutil.copy(FIXTURES / "import_alias_in.py", src / "norms.py")
    shutil.copy(FIXTURES / "not_flax_in.py", src / "util.py")
    return src


def test_out_dir_writes_tree_map_and_report(tree, tmp_path, capsys):
    out = tmp_path / "out"
    report = tmp_path / "report.json"
    code = main(["migrate", str(tree), "--out-dir", str(out), "--report", str(report), "--format", "json"])
    assert code == 0
    assert (out / "pkg" / "mlp.py").read_text() == (FIXTURES / "setup_mlp_out.py").read_text()
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
    assert (tree / "pkg" / "mlp.py").read_text() == (FIXTURES / "setup_mlp_out.py").read_text()
    assert (tmp_path / "linen2nnx-map.json").is_file()
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
    assert (out / "pkg" / "mlp.py").read_text() == (FIXTURES / "setup_mlp_out.py").read_text()


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
    assert (out / "norms.py").read_text() == (FIXTURES / "import_alias_out.py").read_text()
    assert not list(out.rglob("*.tmp"))


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
