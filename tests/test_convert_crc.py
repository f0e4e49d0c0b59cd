"""``crc.combine`` and ``crc.Parts``: the crc32 of an array's bytes from runs checksummed in any
order is zlib's crc32 of the whole, and parts that leave bytes out are an error, not a checksum."""

from __future__ import annotations

import itertools
import random
import zlib

import numpy as np
import pytest

from linen2nnx.checkpoint_convert.crc import Parts, combine


def test_combine_is_the_crc32_of_the_concatenation():
    rng = random.Random(0)
    for _ in range(200):
        a = rng.randbytes(rng.randint(0, 3000))
        b = rng.randbytes(rng.choice([0, 1, 7, rng.randint(0, 3000)]))
        assert combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_parts_in_any_order_give_the_whole_checksum():
    value = np.random.default_rng(0).standard_normal((6, 10, 12)).astype(np.float32)
    cuts = [0, 4, 100, 101, 480, value.nbytes]
    order = list(itertools.pairwise(cuts))
    random.Random(1).shuffle(order)
    parts = Parts(value)
    for start, stop in order:
        parts.add(start, stop)
    assert parts.total() == zlib.crc32(value.tobytes())


def test_parts_that_leave_bytes_out_are_an_error():
    value = np.arange(100, dtype=np.uint8)
    parts = Parts(value)
    parts.add(0, 40)
    parts.add(50, 100)
    with pytest.raises(ValueError, match="leave bytes 40 to 50 out"):
        parts.total()
    short = Parts(value)
    short.add(0, 60)
    with pytest.raises(ValueError, match="cover 60 of 100 bytes"):
        short.total()
