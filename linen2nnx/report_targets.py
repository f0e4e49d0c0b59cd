"""Where a command may write its reports, decided before it runs.

A report path is the user's to choose, so a slip (``--json spec.py``, ``--report src/model.py``,
``--json ckpt.msgpack``) would replace an input or an output of the same run with a report -- and the
next run would fail on it, far from the cause. Every report target is therefore checked against the
run's inputs and outputs before anything runs or is written: one that is one of them (or lies inside
a checkpoint folder), two reports given one path, or a folder, is a usage error (exit 2) that names
the flag. Checking first also means an error found here never leaves some reports written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from linen2nnx.errors import L2NError


def _key(path: str | Path) -> str:
    """One spelling per file: absolute, links resolved, case as the file system keeps it."""
    return os.path.normcase(os.path.realpath(os.fspath(path)))


def check_report_targets(
    targets: Mapping[str, str | None], taken: Mapping[str | Path, str], folders: Mapping[str | Path, str] = {}
) -> None:
    """Refuse report ``targets`` (flag -> path; ``-`` and None are skipped) that are a folder, share a
    path, are a ``taken`` path (path -> what it is, e.g. "the spec"; one that is a folder, a checkpoint
    given as a directory, protects everything inside it) or lie inside one of ``folders`` (those that
    need not exist yet: the checkpoint a run writes)."""
    seen: dict[str, str] = {}
    taken_keys = {_key(p): what for p, what in taken.items()}
    inside = {**{p: what for p, what in taken.items() if os.path.isdir(p)}, **folders}
    folder_keys = {_key(p): what for p, what in inside.items()}
    for flag, target in targets.items():
        if not target or target == "-":
            continue
        key = _key(target)
        if os.path.isdir(target):
            raise L2NError(f"{flag} {target}: is a folder; give a file name for the report")
        if key in seen:
            raise L2NError(f"{flag} {target}: {seen[key]} writes there too; give each report its own file")
        seen[key] = flag
        if key in taken_keys:
            raise L2NError(
                f"{flag} {target}: is {taken_keys[key]}; the report would replace it (give another file name)"
            )
        for folder, what in folder_keys.items():
            if key.startswith(folder.rstrip(os.sep) + os.sep):
                raise L2NError(f"{flag} {target}: lies inside {what} ({folder}); write the report elsewhere")


def check_appendable(path: Path, what: str) -> None:
    """A file a command appends to at its end (``$GITHUB_STEP_SUMMARY``): refused before the run when
    it is a folder or cannot be opened for appending, so no report is written by a run that then fails."""
    if path.is_dir():
        raise L2NError(f"{what} ({path}): is a folder")
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise L2NError(f"{what} ({path}): cannot append: {e.strerror or e}") from e


def spec_files(spec: str | None, what: str = "the spec") -> dict[str | Path, str]:
    """The files a model pair spec names, for :func:`check_report_targets`: ``file.py[:fn]`` or
    ``module[:fn]`` (found on the import path; only its parent packages are imported), and the name
    map a written spec reads from its own folder (``linen2nnx-map.json``)."""
    import importlib.util

    from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME

    if not spec:
        return {}
    target = spec.rsplit(":", 1)[0] if ":" in spec and not spec.endswith(".py") else spec
    if target.endswith(".py"):
        path: Path | None = Path(target)
    else:
        try:
            found = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            found = None
        path = Path(found.origin) if found is not None and found.origin else None
    if path is None:
        return {}
    return {path: what, path.parent / NAME_MAP_FILENAME: "the name map beside the spec"}
