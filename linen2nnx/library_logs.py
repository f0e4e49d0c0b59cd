"""What the libraries under the CLI log about our own errors, kept off the terminal.

Orbax reads and writes arrays on threads of its own and logs what such a thread raises (absl
``ERROR`` with the whole traceback) before the error reaches the CLI. When it is an
:class:`~linen2nnx.errors.L2NError` (a damaged checkpoint named leaf by leaf), the CLI prints that error
on one line and exits 2, so the logged tracebacks, several per read, are only noise. So is absl's
warning that the converter's own Orbax type handlers override the stock ones, printed on every run.
Anything else is logged as the libraries log it.
"""

from __future__ import annotations

import logging

_OWN_HANDLERS = "Type handler registry overriding type"


class OwnErrorsFilter(logging.Filter):
    """Drops a log record of an :class:`L2NError` (raised, or the cause of what was raised) and absl's
    note on the converter's own type handlers; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        from linen2nnx.errors import L2NError

        error = record.exc_info[1] if record.exc_info else None
        while error is not None:
            if isinstance(error, L2NError):
                return False
            error = error.__cause__
        message = record.getMessage()
        return not (message.startswith(_OWN_HANDLERS) and "linen2nnx." in message)


def quiet_own_errors() -> None:
    """Install :class:`OwnErrorsFilter` on absl's logger (Orbax logs through it), once."""
    logger = logging.getLogger("absl")
    if not any(isinstance(f, OwnErrorsFilter) for f in logger.filters):
        logger.addFilter(OwnErrorsFilter())
