"""A staged checkpoint reaches the disk before the rename that publishes it, one ``fsync`` a file.

TensorStore's file store syncs every write by default. ``convert`` writes an array a stored chunk
at a time (:func:`.arrays.write_by_chunk`), and in an OCDBT database each of those writes is a
commit of its own: a data file, B-tree nodes and a new manifest, each synced, and the folder
(about 790 ``fsync`` for a 1.1 GB conversion, against about 40 for Orbax's own save of the same
tree), each one a wait of the write it belongs to. Nothing of a staged checkpoint is seen before
the one rename of :func:`.commit.publish`, so what crash safety needs is only that every file and
folder of it is on disk before that rename. Here the save writes without syncing
(:func:`unsynced_checkpointer`), each payload's files are synced on a thread once it is saved,
while the next payload is written and read back (:class:`Flusher`), and :func:`Flusher.finish`
syncs what is left (files written since, the folders) before the rename.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

_Stamp = tuple[int, int, int]
"""``(inode, size, mtime)`` of a file when it was synced: a file replaced or changed since differs."""


def unsynced_checkpointer() -> Any:
    """An Orbax ``PyTreeCheckpointer`` whose TensorStore writes are not synced one by one (the
    context Orbax gives every leaf of a save, with ``file_io_sync`` off); the caller syncs the files
    (:class:`Flusher`). Where this Orbax does not expose how it makes that context, a plain one."""
    import orbax.checkpoint as ocp

    handler = ocp.PyTreeCheckpointHandler()
    impl = getattr(handler, "_handler_impl", None)
    param_infos = getattr(impl, "_get_param_infos", None)
    if param_infos is None:
        return ocp.Checkpointer(handler)

    def unsynced_infos(*args: Any, **kwargs: Any) -> Any:
        import jax
        import tensorstore as ts
        from orbax.checkpoint._src.serialization.types import ParamInfo

        infos = param_infos(*args, **kwargs)
        leaves = jax.tree.leaves(infos, is_leaf=lambda x: isinstance(x, ParamInfo))
        if leaves:  # one context for the whole save, as Orbax's: one OCDBT database writer
            unsynced = ts.Context(ts.Context.Spec({"file_io_sync": False}), leaves[0].ts_context)
            for info in leaves:
                info.ts_context = unsynced
        return infos

    impl._get_param_infos = unsynced_infos
    return ocp.Checkpointer(handler)


class Flusher:
    """Syncs folders' files to disk on one thread (``fsync`` lets go of the GIL), remembering what
    it synced so that :meth:`finish` syncs only what changed since, then every folder."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="l2n-fsync")
        self._pending: list[Future[None]] = []
        self._synced: dict[str, _Stamp] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Flusher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.shutdown(wait=True)  # no thread is left writing to disk behind the caller

    def submit(self, folder: Path, skip: tuple[str, ...] = ()) -> None:
        """Start syncing every file under ``folder`` now, in the background, but for the subfolders
        whose name starts with one of ``skip`` (another payload, still being written there)."""
        self._pending.append(self._pool.submit(self._sync_files, folder, skip))

    def wait(self) -> None:
        """Wait for the background syncs; the first error is raised here."""
        for job in self._pending:
            job.result()
        self._pending = []

    def finish(self, folder: Path) -> None:
        """Every file and folder under ``folder`` (itself included) on disk: the background syncs
        waited for (their errors raised here), then files new or changed since synced, then the
        folders, deepest first, so that the names in each are on disk too."""
        self.wait()
        self._sync_files(folder)
        folders = [root for root, _, _ in os.walk(folder)]
        for path in sorted(folders, key=lambda p: p.count(os.sep), reverse=True):
            sync_path(path)

    def _sync_files(self, folder: Path, skip: tuple[str, ...] = ()) -> None:
        for root, dirs, files in os.walk(folder):
            if skip and root == str(folder):
                dirs[:] = [d for d in dirs if not d.startswith(skip)]
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # replaced meanwhile (a manifest): its successor is synced
                    continue
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                with self._lock:
                    if self._synced.get(path) == stamp:
                        continue
                sync_path(path)
                with self._lock:
                    self._synced[path] = stamp


def sync_path(path: str | Path) -> None:
    """``fsync`` a file or a folder (where a folder can be opened: not on every system)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return
    try:
        os.fsync(fd)
    except OSError:
        if not os.path.isdir(path):  # some file systems refuse to sync a folder: nothing to lose
            raise
    finally:
        os.close(fd)
