"""Import a migrated package beside its Linen original, in one process.

A migrated tree keeps its module names: ``pkg.layers`` is still ``pkg.layers``, and its files import
each other by those names (``from pkg import layers``) or relatively (``from . import ops``). Loaded
as loose files, a migrated module either fails (``attempted relative import with no known parent
package``) or, worse, silently gets the *Linen* copy of a sibling that the Linen side imported first.

:func:`import_migrated` imports the migrated modules under their real names in an isolated
``sys.modules``: the entries of the run's modules are set aside, a finder maps them to their migrated
files, the module is imported, and then the Linen entries are put back while the NNX ones stay
reachable under a private alias. The rest of the package, which the run did not rewrite (a config
module, its enums, utilities), is shared by both copies, as it must be: a config built on the Linen
side holds those very enum members. Each copy keeps the references its imports bound, so the Linen
and NNX copies of the run's modules live side by side.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from linen2nnx.errors import SpecError


class _MigratedFinder(importlib.abc.MetaPathFinder):
    """Finds the run's modules at their migrated files (a package at its ``__init__.py``)."""

    def __init__(self, files: Mapping[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: object = None):
        file = self.files.get(fullname)
        if file is None:
            return None
        is_package = file.name == "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname, file, submodule_search_locations=[str(file.parent)] if is_package else None
        )


_ALIAS_PREFIX = "_linen2nnx_nnx_"  # the private package the NNX copies stay under in sys.modules
_RUNS: dict[str, tuple[dict[str, Path], tuple[str | Path, ...]]] = {}  # alias -> its files, search paths


def migrated_sibling(module: ModuleType, name: str) -> ModuleType | None:
    """The NNX copy of module ``name`` imported together with ``module`` (one :func:`import_migrated`
    returned), under the same private alias, imported now if nothing imported it yet (``Net(block_cls=
    a.Block)`` where the NNX ``nets`` never imports ``a``); None where the run did not rewrite ``name``."""
    alias = next(
        (
            key[: -len(module.__name__) - 1]
            for key, loaded in list(sys.modules.items())
            if loaded is module and key.startswith(_ALIAS_PREFIX)
        ),
        None,
    )
    if alias is None or alias not in _RUNS or name not in _RUNS[alias][0]:
        return sys.modules.get(f"{alias}.{name}") if alias else None
    files, search_paths = _RUNS[alias]
    return import_migrated(name, files, search_paths=search_paths)


def import_migrated(
    module: str, files: Mapping[str, str | Path], *, search_paths: Sequence[str | Path] = ()
) -> ModuleType:
    """Import ``module`` from the migrated ``files`` (dotted module name -> file), isolated from any
    copy of the same package already imported (see the module docstring). ``search_paths``: where
    the rest of the package (modules the run did not migrate) is found."""
    resolved = {name: Path(path).resolve() for name, path in files.items()}
    if module not in resolved:
        raise SpecError(f"{module}: not a module of the migrated tree")
    alias = _ALIAS_PREFIX + hashlib.sha1(repr(sorted(resolved.items())).encode()).hexdigest()[:10]
    if f"{alias}.{module}" in sys.modules:
        return sys.modules[f"{alias}.{module}"]
    _RUNS[alias] = (resolved, tuple(search_paths))
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k in resolved}
    sys.modules.update({k: sys.modules[f"{alias}.{k}"] for k in resolved if f"{alias}.{k}" in sys.modules})
    hidden = _hide_from_parents(resolved)  # `from pkg import layers` reads the parent's attribute first
    finder = _MigratedFinder(resolved)
    sys.meta_path.insert(0, finder)
    added = [str(p) for p in search_paths if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        loaded = importlib.import_module(module)
    except Exception as e:
        raise SpecError(f"{resolved[module]}: import failed: {type(e).__name__}: {e}") from e
    finally:
        sys.meta_path.remove(finder)
        for p in added:
            sys.path.remove(p)
        for k in [k for k in sys.modules if k in resolved]:
            sys.modules[f"{alias}.{k}"] = sys.modules.pop(k)  # the NNX copy stays, under a private name
        sys.modules.update(saved)
        for k in resolved:  # a shared parent package points at its original submodules again
            parent, _, child = k.rpartition(".")
            if parent in sys.modules:
                if k in saved:
                    setattr(sys.modules[parent], child, saved[k])
                elif getattr(sys.modules[parent], child, None) is not None:
                    delattr(sys.modules[parent], child)
        for parent_module, child, value in hidden:
            if not hasattr(parent_module, child):
                setattr(parent_module, child, value)
    return loaded


def _hide_from_parents(resolved: Mapping[str, Path]) -> list[tuple[ModuleType, str, Any]]:
    """Take the run's modules off the already-imported packages that hold them as attributes (a Linen
    ``pkg`` whose ``__init__.py`` the run left alone, imported by the Linen side first): ``from pkg import
    layers`` would find the Linen ``pkg.layers`` there and never ask the migrated files' finder."""
    hidden = []
    for name in resolved:
        parent, _, child = name.rpartition(".")
        parent_module = sys.modules.get(parent) if parent else None
        if parent_module is not None and parent not in resolved and hasattr(parent_module, child):
            hidden.append((parent_module, child, getattr(parent_module, child)))
            delattr(parent_module, child)
    return hidden
