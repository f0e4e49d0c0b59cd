"""Orbax logs what its threads raise, traceback and all, before the error reaches the CLI: records of
our own errors (a damaged checkpoint, named on one line by the CLI) are dropped, others kept."""

import logging
import sys

from linen2nnx.errors import L2NError
from linen2nnx.library_logs import OwnErrorsFilter


def _record(
    error: BaseException | None, message: str = "_SignalingThread.run() raised an exception"
) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord("absl", logging.ERROR, __file__, 1, message, None, exc_info)


def test_records_of_our_errors_are_dropped_and_others_kept():
    keep = OwnErrorsFilter().filter
    ours = L2NError("ckpt: cannot read array params/w")
    try:
        try:
            raise ours
        except L2NError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError:
        wrapped = sys.exc_info()[1]
    assert not keep(_record(ours)) and not keep(_record(wrapped))
    assert keep(_record(ValueError("a library's own failure")))
    assert keep(_record(None, "an ordinary warning"))
    assert not keep(_record(None, "Type handler registry overriding type \"<class 'linen2nnx.x.LazyLeaf'>\""))
    assert keep(_record(None, "Type handler registry overriding type \"<class 'other.Leaf'>\""))
