"""Read the next arrays while the current ones are written, never more than the budget at once.

Reading a source array (file reads, zstd decoding) and writing it (zstd encoding, file writes) each
keep about one core busy. Done one after the other, group by group, a conversion uses one core at
a time while Orbax's own restore and save spread over all of them. Here the arrays go through in
*units* (one array of :data:`UNIT_BYTES` or more, or a run of smaller ones read together) and a
unit is read while the units before it are still being written, as long as the bytes of the units
read and not yet let go, this one included, stay within the budget. Nothing is read past the
budget: a unit waits until enough of those before it are written and let go, and a unit bigger
than the budget is read only when nothing else is held. So small arrays overlap freely, and the
largest ones (with the default budget, the largest array) go alone, as before.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from linen2nnx.checkpoint_convert import arrays

#: A unit is one array of this size or more, or a run of smaller ones of at most this size in all
#: (read in one TensorStore call each, all at once): small enough to overlap, big enough that a
#: model's many small arrays do not cost a call each.
UNIT_BYTES = 8 << 20


def units(sizes: dict[Any, int], budget: int) -> list[list[Any]]:
    """Keys in their order, cut into units of at most :data:`UNIT_BYTES` (and ``budget``) bytes; a
    bigger key goes alone."""
    return list(arrays.groups(sizes, max(1, min(budget, UNIT_BYTES))))


class Budget:
    """Bytes held at once, laid out in one ring of ``limit`` bytes: :meth:`take` waits until ``n``
    bytes fit in a contiguous free stretch of it (or nothing is held, for a unit bigger than the
    limit) and gives their offset, or None for a unit bigger than the ring; :meth:`give` lets the
    oldest go. Units are taken and given in the same order, so the held ones are one stretch of
    the ring, possibly wrapped around its end."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: collections.deque[tuple[int, int]] = collections.deque()
        """``(offset, bytes)`` of the units held, oldest first."""
        self.peak = 0
        self._changed = asyncio.Condition()

    def _place(self, n: int) -> int | bool | None:
        """Where ``n`` bytes go now: an offset, None (bigger than the ring: alone), False (wait)."""
        if not self.held:
            return 0 if n <= self.limit else None
        if n > self.limit:
            return False
        tail = self.held[0][0]
        head = self.held[-1][0] + self.held[-1][1]
        wrapped = any(b[0] < a[0] for a, b in zip(self.held, list(self.held)[1:]))
        if not wrapped and head + n <= self.limit:
            return head
        if not wrapped:
            return 0 if n <= tail else False
        return head if head + n <= tail else False

    async def take(self, n: int) -> int | None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._place(n) is not False)
            at = self._place(n)
            self.held.append((0 if at is None else int(at), n))
            self.peak = max(self.peak, sum(b for _, b in self.held))
            return None if at is None else int(at)

    async def give(self) -> None:
        async with self._changed:
            self.held.popleft()
            self._changed.notify_all()


Read = Callable[[list[Hashable], Any], Awaitable[Any]]
Write = Callable[[list[Hashable], Any], Awaitable[None]]


async def run(
    cuts: Sequence[list[Hashable]],
    sizes: dict[Any, int],
    budget: int,
    read: Read,
    write: Write,
    ring: bool = True,
) -> None:
    """``read(unit, where)`` every unit in turn, ahead of ``write(unit, what read gave)``, which runs
    unit after unit in the same order; a unit's bytes are held from the start of its read to the
    end of its write (:class:`Budget`). With ``ring``, ``where`` is the unit's own stretch of one
    buffer of ``budget`` bytes, reused from unit to unit (None for a unit bigger than it): arrays
    read into it need no fresh pages, which the kernel would zero first. The first error stops both
    sides and is raised."""
    import numpy as np

    budget = min(budget, sum(sizes.values()))  # never a ring bigger than what goes through it
    held = Budget(budget)
    buffer = np.empty(budget, np.uint8) if ring else None
    ready: asyncio.Queue[Any] = asyncio.Queue()

    async def reader() -> None:
        for unit in cuts:
            n = sum(sizes[k] for k in unit)
            at = await held.take(n)
            where = None if buffer is None or at is None else buffer[at : at + n]
            await ready.put((unit, await read(unit, where)))
            where = None
        await ready.put(None)

    async def writer() -> None:
        while (item := await ready.get()) is not None:
            unit, got = item
            item = None
            await write(unit, got)
            del got  # the unit's arrays go before their bytes are given back
            await held.give()

    tasks = [asyncio.ensure_future(reader()), asyncio.ensure_future(writer())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # the first error, raised here
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # both stopped before anything is freed
