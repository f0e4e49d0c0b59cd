"""``[tool.linen2nnx]`` in ``pyproject.toml``: project defaults for ``linen2nnx migrate``.

The table comes from the nearest ``pyproject.toml`` that has one, searching upward from the
first PATH (or the current folder), like ruff. Command-line flags override it::

    [tool.linen2nnx]
    include = ["*.py"]                     # globs a file must match (default: ["*.py"])
    exclude = ["tests/fixtures", "*_pb2.py"]  # globs; a folder that matches is skipped whole
    select = ["L2N-MOD", "L2N-LAYER"]      # rule-id prefixes to report (default: all)
    ignore = ["L2N-SHAPE-003"]             # rule-id prefixes to switch off
    unsafe-fixes = false                   # apply fixes that rest on a stated assumption
    jobs = 0                               # worker processes; 0 = one per CPU

A malformed file or a bad key is an :class:`~linen2nnx.errors.L2NError` naming the file and the
key (exit code 2 at the command line).
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TABLE = "tool.linen2nnx"
DEFAULT_INCLUDE = ("*.py",)


@dataclasses.dataclass(frozen=True)
class MigrateConfig:
    """Settings for one migrate run. ``None`` means "not set" (the built-in default applies)."""

    source: Path | None = None  # the pyproject.toml these came from
    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = ()
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    jobs: int | None = None

    @property
    def root(self) -> Path | None:
        """The folder of the ``pyproject.toml``: relative globs are anchored there."""
        return self.source.parent if self.source else None


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise L2NError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _rule_prefixes(value: Any, where: str) -> tuple[str, ...]:
    prefixes = _str_list(value, where)
    check_rule_prefixes(prefixes, where)
    return prefixes


def check_rule_prefixes(prefixes: Sequence[str], where: str) -> None:
    """Every prefix must select at least one rule (a typo would otherwise silently select nothing)."""
    from linen2nnx.migrate.rules import RULES

    for prefix in prefixes:
        if not prefix or not any(rule_id.startswith(prefix) for rule_id in RULES):
            near = difflib.get_close_matches(prefix, list(RULES), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else " (rule ids are listed in docs/rules.md)"
            raise L2NError(f"{where}: {prefix!r} matches no rule{hint}")


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise L2NError(f"{where}: expected true or false, got {value!r}")
    return value


def _jobs(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise L2NError(f"{where}: expected a whole number >= 0 (0 = one per CPU), got {value!r}")
    return value


_KEYS = {
    "include": ("include", _str_list),
    "exclude": ("exclude", _str_list),
    "select": ("select", _rule_prefixes),
    "ignore": ("ignore", _rule_prefixes),
    "unsafe-fixes": ("unsafe_fixes", _bool),
    "jobs": ("jobs", _jobs),
}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise L2NError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise L2NError(f"{path}: cannot read: {e.strerror or e}") from None


def _table(data: dict[str, Any]) -> Any:
    return data.get("tool", {}).get("linen2nnx") if isinstance(data.get("tool"), dict) else None


def parse_config(table: Any, source: Path | None = None) -> MigrateConfig:
    """Validate a ``[tool.linen2nnx]`` table; every error names ``source`` and the key."""
    where = f"{source or 'pyproject.toml'}: [{TABLE}]"
    if not isinstance(table, dict):
        raise L2NError(f"{where}: expected a table, got {table!r}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _KEYS:
            near = difflib.get_close_matches(key, list(_KEYS), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (known keys: {', '.join(_KEYS)})"
            raise L2NError(f"{where}: unknown key {key!r}{hint}")
        field, check = _KEYS[key]
        values[field] = check(value, f"{where} {key}")
    return MigrateConfig(source=source, **values)


def find_config_file(start: str | Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.linen2nnx]`` table at or above ``start``."""
    here = Path(start) if start is not None else Path.cwd()
    here = here.resolve()
    if not here.is_dir():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _table(_read_toml(candidate)) is not None:
            return candidate
    return None


def load_config(start: str | Path | None = None, *, config_file: str | Path | None = None) -> MigrateConfig:
    """Load the settings for a run whose first PATH is ``start`` (``None``: the current folder).

    ``config_file`` names a ``pyproject.toml`` (or a bare TOML file holding the table's keys at
    top level) explicitly; no table found means the defaults.
    """
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise L2NError(f"{path}: no such config file")
        data = _read_toml(path)
        table = _table(data)
        return parse_config(table if table is not None else data, path)
    found = find_config_file(start)
    if found is None:
        return MigrateConfig()
    return parse_config(_table(_read_toml(found)), found)
