"""What bounds a conversion's memory: the bytes of arrays held at once, and the C heap let go.

Two things decide the peak resident memory of ``convert`` beyond the arrays themselves:

- how many restored arrays are alive at once. :data:`in_flight` counts them by their real
  lifetimes (a weak-reference finaliser per array gives its bytes back when the last reference
  goes), so a test can check that a group's arrays are gone before the next group is read;
- what glibc keeps of the buffers TensorStore frees. Chunks are decoded and encoded in buffers of
  a few MB on TensorStore's own threads, each with its own malloc arena; glibc returns the free
  top of such an arena only above its trim threshold, which grows with the largest buffer freed
  (up to 64 MB per arena), and ``malloc_trim`` does not trim those tops. Left alone, a 1 GB
  conversion ends up holding ~100-170 MB of free heap. :func:`heap_returned` serves buffers of
  :data:`MMAP_BYTES` and more from ``mmap`` while a conversion runs, so a freed buffer is returned
  at once; the cost is a page fault per page of each new buffer (10-25% more CPU time, measured).
  The read-back of ``--verify`` is the exception (:func:`heap_reused`): it frees and allocates
  buffers of one size, a stored chunk after another, into one reused destination, so there the
  heap keeps them (no page fault, no zeroing) and is trimmed once at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

#: Buffers this big or bigger come from ``mmap`` during a conversion (glibc ``M_MMAP_THRESHOLD``).
MMAP_BYTES = 16 << 20
#: During a conversion an arena whose free top passes this is trimmed at once (``M_TRIM_THRESHOLD``):
#: with the next array read while one is written, the two sides' chunk buffers (up to 8 MB each)
#: otherwise stay in their threads' arenas, 20-40 MB above the peak of one side at a time
#: (measured at 1.1 GB; 32 MB, twice :data:`MMAP_BYTES`, the value before, and 16 MB kept them).
TRIM_BYTES = 8 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's own limits for its sliding thresholds on 64-bit: what a process that has freed a big
# buffer runs with, and so what is set back after a conversion
_GLIBC_MMAP_MAX = 32 << 20
_LIBC: list[Any] = []
_MODE = ["glibc"]
"""How glibc serves big buffers now, what a context sets back on exit: ``glibc`` (nothing set: its
own sliding thresholds), ``returned`` (:func:`heap_returned`) or ``reused`` (:func:`heap_reused`)."""


@dataclasses.dataclass
class InFlight:
    """Bytes of restored arrays still alive (``held``) and the most there were at once (``peak``)."""

    held: int = 0
    peak: int = 0
    _lock: Any = dataclasses.field(default_factory=threading.RLock, repr=False)
    """Re-entrant: a collection inside ``track`` may run a finaliser on the same thread."""

    def track(self, values: Iterable[Any]) -> None:
        """Count ``values`` until each is garbage (arrays without weak references are not counted)."""
        for v in values:
            size = int(getattr(v, "nbytes", 0))
            try:
                weakref.finalize(v, self._release, size)
            except TypeError:
                continue
            with self._lock:
                self.held += size
                self.peak = max(self.peak, self.held)

    def _release(self, size: int) -> None:
        with self._lock:
            self.held -= size

    def reset(self) -> None:
        with self._lock:
            self.peak = self.held


in_flight = InFlight()
"""Every array :func:`~.arrays.restore_group` returns, counted while it is alive."""


def give_back() -> None:
    """Collect the cycles a group's async machinery left, then return the heap's free pages."""
    gc.collect(1)
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@contextlib.contextmanager
def heap_returned() -> Iterator[None]:
    """While the block runs, glibc serves buffers of :data:`MMAP_BYTES` or more from ``mmap``;
    afterwards its thresholds are where they were (where they settle by themselves once a big
    buffer was freed, when nothing set them)."""
    with _heap_mode("returned"):
        yield


@contextlib.contextmanager
def heap_reused() -> Iterator[None]:
    """While the block runs, buffers of up to 32 MB come from glibc's heap and are reused once
    freed: the read-back frees a chunk buffer (at most 8 MB) and the stored pieces it decodes
    (:mod:`.zstd_chunk`) and allocates the next ones of the same size, so from ``mmap`` each would
    cost a page fault per page and zeroing (half the CPU of reading back, measured with
    TensorStore's reads). What the heap keeps is bounded by the threads that free such buffers
    into their own arenas: the read-back reads one chunk at a time (:func:`.arrays.read_direct`
    into a buffer) and trims the heap between groups."""
    with _heap_mode("reused"):
        yield


_THRESHOLDS = {"glibc": _GLIBC_MMAP_MAX, "returned": MMAP_BYTES, "reused": _GLIBC_MMAP_MAX}
_TRIMS = {"glibc": 2 * _GLIBC_MMAP_MAX, "returned": TRIM_BYTES, "reused": 2 * _GLIBC_MMAP_MAX}


@contextlib.contextmanager
def _heap_mode(mode: str) -> Iterator[None]:
    libc = _libc()
    if libc is None:
        yield
        return
    before = _MODE[0]
    _set_mode(libc, mode)
    try:
        yield
    finally:
        _set_mode(libc, before)
        give_back()


def _set_mode(libc: Any, mode: str) -> None:
    libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLDS[mode])
    libc.mallopt(_M_TRIM_THRESHOLD, _TRIMS[mode])
    _MODE[0] = mode


def _libc() -> Any:
    """glibc, or None (another C library, another system): then nothing here changes anything."""
    if not _LIBC:
        found = None
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                lib = ctypes.CDLL("libc.so.6")
                if (
                    hasattr(lib, "mallopt")
                    and hasattr(lib, "malloc_trim")
                    and hasattr(lib, "gnu_get_libc_version")
                ):
                    found = lib
            except OSError:
                found = None
        _LIBC.append(found)
    return _LIBC[0]
