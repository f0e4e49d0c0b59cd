"""The ``crc32`` of an array's C-order bytes from parts checksummed out of order, on other threads.

The read-back of ``--verify`` fills an array a stored chunk at a time, and a chunk that splits the
inner axes is not one run of the array's bytes: the array's checksum could only be taken once it is
complete, one more pass over it after the decoding, on one core. But the crc32 of ``A + B``
follows from the crc32 of each and the length of ``B`` (zlib's ``crc32_combine``, which Python's
``zlib`` does not offer: :func:`combine`), so :class:`Parts` checksums each run of the array's
bytes as soon as the chunks covering it are in place, on a worker thread while the next chunks
decode, and combines the parts, in their order, at the end. The result is the same ``crc32``.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

_POLY = 0xEDB88320  # crc32's polynomial, bits reversed (zlib's convention)


def _multmodp(a: int, b: int) -> int:
    """``a * b`` modulo the polynomial (bit-reversed, as zlib's ``multmodp``)."""
    m, p = 1 << 31, 0
    while a:
        if a & m:
            p ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    """``x^(2^k)`` modulo the polynomial, k = 0..31."""
    out = [1 << 30]  # x^1
    for _ in range(31):
        out.append(_multmodp(out[-1], out[-1]))
    return out


_X2N = _powers()


def combine(crc1: int, crc2: int, len2: int) -> int:
    """The ``crc32`` of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's
    ``crc32_combine``)."""
    p, n, k = 1 << 31, len2, 3  # x^0; the shift is len2 * 8 bits, x^(len2 * 2^3)
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


class Parts:
    """The crc32 of ``dest``'s bytes (C-contiguous), taken a run of them at a time, in any order:
    :meth:`add` checksums ``[start, stop)`` (on any thread; zlib lets go of the GIL), :meth:`total`
    combines the parts in their order and checks that they cover the array exactly."""

    def __init__(self, dest: Any) -> None:
        self.bytes = dest.reshape(-1).view("uint8")
        self._parts: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def add(self, start: int, stop: int) -> None:
        crc = zlib.crc32(self.bytes[start:stop])
        with self._lock:
            self._parts[start] = (stop, crc)

    def total(self) -> int:
        at, crc = 0, 0
        for start in sorted(self._parts):
            stop, part = self._parts[start]
            if start != at:
                raise ValueError(f"checksummed parts leave bytes {at} to {start} out")
            crc, at = combine(crc, part, stop - start), stop
        if at != self.bytes.size:
            raise ValueError(f"checksummed parts cover {at} of {self.bytes.size} bytes")
        return crc
