"""Crash-safe publication of a converted checkpoint: one rename commits, the next run cleans up.

A conversion is written into a *fixed* hidden sibling, ``.DST.linen2nnx-partial``, and published by
renaming it to ``DST``. Because the names are fixed (not random), a run killed at any point leaves
only paths the next run knows: :func:`recover` removes a stale partial folder and finishes or
undoes an interrupted replacement.

Replacing an existing ``DST`` (``--force``) is one atomic ``renameat2(RENAME_EXCHANGE)`` on Linux:
after it the old checkpoint sits at the partial path and is deleted; a kill before or after the
swap leaves either the old or the new checkpoint at ``DST``. Where the exchange is not available,
the old checkpoint is first renamed to ``.DST.linen2nnx-old``; a kill between the two renames leaves
it there, and :func:`recover` (run first by every conversion to ``DST``) moves it back.

For tests, ``LINEN2NNX_ABORT_AT=<point>`` kills the process (SIGKILL) at a named point:
``staged`` (payload complete, nothing renamed), ``renamed-old`` (fallback path: old moved aside, new
not yet in place) and ``committed`` (new in place, old not yet deleted).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import shutil
import signal
import sys
from pathlib import Path

ABORT_ENV = "LINEN2NNX_ABORT_AT"
NO_EXCHANGE_ENV = "LINEN2NNX_NO_RENAME_EXCHANGE"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def partial_dir(dst: Path) -> Path:
    """Where a conversion to ``dst`` is built."""
    return dst.parent / f".{dst.name}.linen2nnx-partial"


def old_dir(dst: Path) -> Path:
    """Where the fallback path parks the replaced checkpoint between its two renames."""
    return dst.parent / f".{dst.name}.linen2nnx-old"


def abort_point(name: str) -> None:
    """Die like ``kill -9`` here when ``LINEN2NNX_ABORT_AT`` names this point (crash tests)."""
    if os.environ.get(ABORT_ENV) == name:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def is_primary() -> bool:
    """Process 0 of a multi-host job (or the only process) owns the folders; the others wait."""
    import jax

    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait for every process of a multi-host job (nothing to wait for in a single process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"linen2nnx:{name}")


def recover_all(dst: Path) -> list[str]:
    """:func:`recover` on the primary process, the others waiting for it."""
    done = recover(dst) if is_primary() else []
    barrier("recover")
    return done


def recover(dst: Path) -> list[str]:
    """Undo what an interrupted conversion to ``dst`` left; returns what was done, for the report."""
    done: list[str] = []
    old = old_dir(dst)
    if old.exists():
        if dst.exists():  # killed after the commit: the old copy is garbage
            shutil.rmtree(old)
            done.append(f"removed {old.name} (a replaced checkpoint an interrupted run left)")
        else:  # killed between the two renames: put the old checkpoint back
            os.replace(old, dst)
            done.append(f"restored {dst.name} from {old.name} (an interrupted --force)")
    # this destination's own leftovers only: a name with glob characters (`out?`) matches no other's
    for part in sorted(dst.parent.glob(f"{glob.escape(partial_dir(dst).name)}*")):  # + Orbax's *-tmp*
        _remove(part)
        done.append(f"removed {part.name} (an interrupted run's output)")
    for legacy in dst.parent.glob(f".{glob.escape(dst.name)}.*.partial"):  # older releases used random names
        _remove(legacy)
        done.append(f"removed {legacy.name}")
    return done


def _remove(path: Path) -> None:
    """Delete a leftover folder, or the link a leftover is (``rmtree`` refuses links)."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def publish(staged: Path, dst: Path) -> None:
    """Move the complete ``staged`` folder to ``dst``, replacing it if it exists, crash-safely."""
    abort_point("staged")
    if not dst.exists():
        os.replace(staged, dst)
        abort_point("committed")
        return
    if _exchange(staged, dst):  # staged now holds the old checkpoint
        abort_point("committed")
        shutil.rmtree(staged)
        return
    old = old_dir(dst)
    os.replace(dst, old)
    abort_point("renamed-old")
    os.replace(staged, dst)
    abort_point("committed")
    shutil.rmtree(old)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); False where that is not available."""
    if os.environ.get(NO_EXCHANGE_ENV) or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0
