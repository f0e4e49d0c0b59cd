"""The migrated copy of a package imports beside the original, in one process: relative imports and
imports of the package by its own name resolve to the migrated siblings, the original stays as it was."""

import sys
from pathlib import Path

import pytest

from linen2nnx.errors import SpecError
from linen2nnx.isolated_import import import_migrated


def _package(root: Path, flavour: str) -> dict[str, Path]:
    pkg = root / "zoo_pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("import enum\n\n\nclass Kind(enum.Enum):\n    A = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "ops.py").write_text(f"FLAVOUR = {flavour!r}\n")
    (pkg / "sub" / "model.py").write_text(
        "from . import ops\nfrom zoo_pkg import config\nfrom zoo_pkg.sub import ops as absolute_ops\n\n"
        "def flavours():\n    return ops.FLAVOUR, absolute_ops.FLAVOUR\n"
    )
    return {
        "zoo_pkg.sub": pkg / "sub" / "__init__.py",
        "zoo_pkg.sub.ops": pkg / "sub" / "ops.py",
        "zoo_pkg.sub.model": pkg / "sub" / "model.py",
    }


def test_migrated_and_original_copies_coexist(tmp_path, monkeypatch):
    _package(tmp_path / "linen", "linen")
    migrated = _package(tmp_path / "nnx", "nnx")
    (tmp_path / "nnx" / "zoo_pkg" / "__init__.py").unlink()  # the run's root was zoo_pkg/sub
    monkeypatch.syspath_prepend(str(tmp_path / "linen"))
    for name in [m for m in sys.modules if m.startswith("zoo_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    import zoo_pkg.sub.model as original

    copy = import_migrated(
        "zoo_pkg.sub.model",
        {k: v for k, v in migrated.items()},
        search_paths=[tmp_path / "linen"],  # zoo_pkg/__init__.py, which the run did not include
    )
    assert copy.flavours() == ("nnx", "nnx")  # relative and absolute self-imports: the migrated siblings
    assert original.flavours() == ("linen", "linen")
    assert sys.modules["zoo_pkg.sub.model"] is original  # the original's entries are put back
    assert sys.modules["zoo_pkg"].sub.model is original  # ... and its package's attributes
    assert copy.config.Kind.A is original.config.Kind.A  # what the run did not migrate is shared
    assert import_migrated("zoo_pkg.sub.model", migrated) is copy  # imported once


def test_a_module_outside_the_migrated_files_is_refused(tmp_path):
    migrated = _package(tmp_path, "nnx")
    with pytest.raises(SpecError, match="not a module of the migrated tree"):
        import_migrated("zoo_pkg.other", migrated)
