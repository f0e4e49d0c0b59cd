"""Stable JSON for CI: ``schema`` first (``linen2nnx-parity/N`` / ``linen2nnx-conversion/1``),
leaves in a fixed order, non-finite numbers spelled as strings so the output is standard JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from linen2nnx.io_utils import atomic_write_text


def parity_json(result: Any) -> str:
    """A ``ParityResult`` as JSON text (``schema: linen2nnx-parity/N``, see docs/schemas/)."""
    return dumps(result.to_json())


def conversion_json(report: Any) -> str:
    """A ``ConversionReport`` as JSON text (``schema: linen2nnx-conversion/1``)."""
    return dumps(report.to_json())


def write_json(obj: Any, path: str | Path) -> Path:
    """Write a result or report (anything with ``to_json()``) atomically; returns the path."""
    path = Path(path)
    atomic_write_text(path, dumps(obj.to_json()))
    return path


def dumps(data: dict[str, Any]) -> str:
    """A JSON dict as stable, standard JSON text (no NaN literals; non-finite values are strings)."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
