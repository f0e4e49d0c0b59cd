"""What is written keeps what a plain write keeps: a symlink is written through, a file's mode stays, a
new file gets the umask's mode, and a file the process may not write is refused, not replaced."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from linen2nnx.io_utils import atomic_write_text

LINEN = "import flax.linen as nn\n\n\nclass A(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(2)(x)\n"


def _migrate(*args: object) -> subprocess.CompletedProcess:
    """``linen2nnx migrate ARGS`` in a process of its own, its output captured."""
    command = [sys.executable, "-m", "linen2nnx", "migrate", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True)


def test_a_symlink_is_written_through(tmp_path):
    target = tmp_path / "target.py"
    target.write_text("old\n")
    link = tmp_path / "link.py"
    link.symlink_to(target.name)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == "target.py"
    assert target.read_text() == "new\n"


def test_modes_are_kept_or_follow_the_umask(tmp_path):
    script = tmp_path / "run.py"
    script.write_text("old\n")
    script.chmod(0o750)
    atomic_write_text(script, "new\n")
    assert script.stat().st_mode & 0o777 == 0o750
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "report.json", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o640  # not the temp file's 0600


def test_a_file_the_process_may_not_write_is_refused_and_left_alone(tmp_path, monkeypatch):
    locked = tmp_path / "locked.py"
    locked.write_text("old\n")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    with pytest.raises(PermissionError, match="read-only"):
        atomic_write_text(locked, "new\n")
    assert locked.read_text() == "old\n" and not list(tmp_path.glob(".locked.py.*"))


def test_migrate_write_through_a_symlink_keeps_the_link(tmp_path):
    (tmp_path / "model.py").write_text(LINEN)
    (tmp_path / "link.py").symlink_to("model.py")
    done = _migrate("--write", tmp_path / "link.py")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "link.py").is_symlink()
    assert "nnx.Module" in (tmp_path / "model.py").read_text()


def test_a_resumed_run_drops_a_torn_last_metrics_line(tmp_path):
    """A run killed while writing ``metrics.jsonl`` leaves half a line: resuming drops it (and the
    steps at or after the resumed one) instead of failing on it."""
    from linen2nnx.train.metrics import METRICS_FILE, MetricsLog

    lines = '{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n{"step": 2, "loss": 0.8}\n{"step": 3, "lo'
    (tmp_path / METRICS_FILE).write_text(lines)
    log = MetricsLog(tmp_path, resume_from=2, tensorboard=False)
    log.write({"step": 2, "loss": 0.7})
    log.close()
    kept = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert kept == ['{"step": 0, "loss": 1.0}', '{"step": 1, "loss": 0.9}', '{"step": 2, "loss": 0.7}']


def test_out_dir_replaces_a_link_into_the_sources_instead_of_writing_through_it(tmp_path):
    """An output tree holding a link back into the sources (``out/model.py -> ../src/model.py``): the
    link is replaced by the migrated file and the Linen source stays as it was."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text(LINEN)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.py").symlink_to("../src/model.py")
    done = _migrate(tmp_path / "src", "--out-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "src" / "model.py").read_text() == LINEN
    assert not (tmp_path / "out" / "model.py").is_symlink()
    assert "nnx.Module" in (tmp_path / "out" / "model.py").read_text()


def test_out_dir_never_writes_through_a_folder_that_links_into_the_sources(tmp_path):
    """``out/pkg -> ../src/pkg``: writing ``out/pkg/model.py`` would land on the Linen source. The file
    is refused (IO-003, exit 2) and the source stays as it was."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "model.py").write_text(LINEN)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "pkg").symlink_to("../src/pkg")
    done = _migrate(tmp_path / "src", "--out-dir", tmp_path / "out")
    assert done.returncode == 2 and "links out of the output folder" in done.stdout + done.stderr
    assert (tmp_path / "src" / "pkg" / "model.py").read_text() == LINEN
