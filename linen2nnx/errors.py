"""The one error type every stage raises for bad input.

The CLI turns an ``L2NError`` into a message naming the file / path / key and exit code 2, so
user-facing failures never surface as tracebacks.
"""

from __future__ import annotations

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
"""Every subcommand's exit codes: clean / parity holds; findings / parity fails / files would change;
usage, input or internal error (an :class:`L2NError`). The convention of ruff and ESLint, so CI can gate on it."""


class L2NError(Exception):
    """Bad input or an unrecoverable condition: exit code 2 at the CLI."""


class SpecError(L2NError):
    """A model pair spec cannot be loaded or is malformed."""


class ConversionError(L2NError):
    """A checkpoint cannot be mapped onto the target model; the message lists every bad path."""


class ModelBuildError(L2NError):
    """A model of a pair (Linen init or the NNX constructor) fails to build or to run its example batch."""
