"""Atomic writes: a file or folder is either the old version or the complete new one, never partial."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from linen2nnx.errors import L2NError


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (the raw byte of a file name that is not UTF-8, as Python
    decodes it) spelled ``\\udcff``: a report that names such a file can then be written as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8", follow_symlinks: bool = True) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and ``os.replace``.

    The file keeps what a plain write would keep: a symlink is written through (the link stays and
    its target changes, never the link replaced by a copy; with ``follow_symlinks=False`` the link
    itself is replaced, for an output tree whose links may point into the sources), an existing
    file's mode stays, a new one gets the umask's mode (not the temp file's 0600), and a file the
    process may not write is refused (``PermissionError``) where the rename would get past its
    protection."""
    path = Path(path)
    if follow_symlinks and path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_symlink() and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as f:
            f.write(text)
        if path.exists() and not path.is_symlink():
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)  # read by setting it: set back at once
    os.umask(mask)
    return mask


def atomic_write_dir(dst: Path, fill: Callable[[Path], None], overwrite: bool = False) -> None:
    """Build a folder with ``fill(tmp_dir)`` next to ``dst`` and move it into place only when complete."""
    dst = Path(dst).absolute()
    if dst.exists() and not overwrite:
        raise L2NError(f"{dst}: already exists (pass --force to replace it)")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent))
    try:
        fill(tmp / "payload")
        if dst.exists():
            old = tmp / "old"
            os.replace(dst, old)
        os.replace(tmp / "payload", dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
