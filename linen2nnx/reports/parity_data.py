"""Read a parity result the way every parity renderer needs it — from its JSON dict only.

Renderers take the dict of ``ParityResult.to_json()`` (``linen2nnx-parity/1`` or ``/2``) so they
depend on the published contract, not on the result classes, and so a saved ``parity.json`` can be
rendered again later. Nothing here computes a metric: these helpers only look values up, spell
them, and fill the keys that an older schema version does not have.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SCHEMA_PREFIX = "linen2nnx-parity/"
SUPPORTED_SCHEMAS = ("linen2nnx-parity/1", "linen2nnx-parity/2")
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def parity_dict(result: Any) -> dict[str, Any]:
    """The parity dict of ``result``: a ``ParityResult`` (anything with ``to_json()``) or the dict itself.

    Refuses a dict of another schema (e.g. a migration report) with a message naming what it got,
    since rendering it would print a confident but empty verdict.
    """
    data = result.to_json() if hasattr(result, "to_json") else result
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a parity result or its JSON dict, got {type(result).__name__}")
    schema = str(data.get("schema", ""))
    if not schema.startswith(SCHEMA_PREFIX):
        raise ValueError(
            f"not a parity result: schema {schema!r} (expected {' or '.join(SUPPORTED_SCHEMAS)})"
        )
    return dict(data)


def num(value: Any) -> float:
    """A JSON number or its string spelling (``"inf"``, ``"-inf"``, ``"nan"``) as a float; ``None`` is nan."""
    if value is None:
        return math.nan
    if isinstance(value, str):
        return _NON_FINITE.get(value, math.nan)
    return float(value)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a person: ``3.1e-06``, ``0``, ``inf``, ``nan``; ``—`` when absent."""
    if value is None or value == "":
        return "—"
    x = num(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def check_names(data: Mapping[str, Any]) -> list[str]:
    """Every check, in the order of ``checks`` (sorted by the producer), then any only seen in leaves."""
    names = list(data.get("checks") or {})
    for leaf in data.get("leaves") or []:
        if leaf.get("check") not in names:
            names.append(leaf.get("check"))
    return names


def check_summary(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``{passed, leaves, failed, max_abs}`` of one check, looked up in ``checks``."""
    summary = dict((data.get("checks") or {}).get(name) or {})
    leaves = leaves_of(data, name)
    summary.setdefault("leaves", len(leaves))
    summary.setdefault("failed", sum(not lf.get("passed") for lf in leaves))
    summary.setdefault("passed", summary["failed"] == 0)
    return summary


def leaves_of(data: Mapping[str, Any], check: str | None = None) -> list[dict[str, Any]]:
    """The leaves of one check (or all), in the producer's order."""
    return [lf for lf in data.get("leaves") or [] if check is None or lf.get("check") == check]


def failing_leaves(data: Mapping[str, Any], check: str | None = None) -> list[dict[str, Any]]:
    return [lf for lf in leaves_of(data, check) if not lf.get("passed")]


def group_of(check: str) -> str:
    """A check's group: ``forward/eval`` -> ``forward``, ``grad`` -> ``grad``."""
    return str(check).split("/", 1)[0]


def tolerance_text(data: Mapping[str, Any]) -> str:
    """How leaves were judged, from ``tolerances`` (/2) or ``atol_factor`` (/1).

    /2 carries the tolerance table (``formula``, ``base`` per dtype, ``depth_exponent``,
    ``overrides`` per pattern); any other key is shown as ``key=value``.
    """
    tolerances = data.get("tolerances")
    if isinstance(tolerances, Mapping) and tolerances:
        parts = []
        for key, value in tolerances.items():
            if key == "formula":
                parts.append(str(value))
            elif isinstance(value, Mapping):
                inner = ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
                parts.append(f"{key}: {inner or 'none'}")
            else:
                parts.append(f"{key}={_plain(value)}")
        return "; ".join(parts)
    if "atol_factor" in data:
        return f"max|Δ| ≤ {fmt(data['atol_factor'])}·(1 + max|ref|)"
    return "per-leaf tol"


def extra_text(leaf: Mapping[str, Any]) -> str:
    """A leaf's extra metrics (KL, top-k agreement, norm ratio, ...) as ``name=value`` pairs."""
    extra = leaf.get("extra") or {}
    return ", ".join(f"{k}={fmt(v, 4)}" for k, v in extra.items())


def shape_text(leaf: Mapping[str, Any]) -> str:
    return (
        "("
        + ", ".join(map(str, leaf.get("shape") or []))
        + ("," if len(leaf.get("shape") or []) == 1 else "")
        + ")"
    )


def leaves_text(n: int) -> str:
    """``1 leaf`` / ``3 leaves``."""
    return f"{n} leaf" if n == 1 else f"{n} leaves"


def counts(data: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(checks, leaves, failed leaves)`` for a headline."""
    leaves = leaves_of(data)
    return len(check_names(data)), len(leaves), sum(not lf.get("passed") for lf in leaves)


def module_name(path: Any) -> str:
    """A module path for a person: the top-level module's empty path reads ``(root)``."""
    return str(path) if path else "(root)"


def divergence(data: Mapping[str, Any]) -> dict[str, Any] | None:
    return data.get("divergence") or None


def training(data: Mapping[str, Any]) -> dict[str, Any] | None:
    return data.get("training") or None


def last(values: Any) -> Any:
    """The last element of a loss list, or ``None`` for an empty one."""
    return values[-1] if values else None


def _plain(value: Any) -> str:
    return fmt(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
