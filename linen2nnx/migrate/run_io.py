"""What a run may write, decided before it writes anything, and how it reads what it migrates.

``--out-dir`` must not land on the sources; the name map's place must take a file; a source file is
read in the encoding Python reads it in (and written back in it).
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from linen2nnx.errors import L2NError
from linen2nnx.migrate.discovery import relative_to_root


def refuse_overwriting_sources(files: list[tuple[Path, Path]], out_root: Path) -> None:
    """``--out-dir`` the folder of the sources (or one whose tree lands on them) would write each
    output over its source: refused before anything runs (``--write`` is the way to rewrite in place)."""
    out_root = out_root.resolve()
    for f, root in files:
        target = out_root / relative_to_root(f, root)
        if target in (f.resolve(), f.parent.resolve() / f.name):
            raise L2NError(
                f"{f}: --out-dir {out_root} would write its output over it; give another folder, "
                "or use --write to rewrite the sources in place"
            )


def check_writable(target: Path, what: str) -> None:
    """Refuse, naming ``target``, a place ``what`` cannot be written to: a folder, or under a file."""
    if target.is_dir():
        raise L2NError(f"{target}: is a folder; {what} is a file")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise L2NError(f"{target}: cannot write {what}: {parent} is not a folder")


def source_encoding(data: bytes) -> str:
    """The encoding Python reads a source file in: its coding declaration (PEP 263), ``utf-8-sig``
    when it starts with a byte-order mark (kept when the file is written back), else UTF-8."""
    return tokenize.detect_encoding(io.BytesIO(data).readline)[0]
