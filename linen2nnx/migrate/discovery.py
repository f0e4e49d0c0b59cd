"""Which files a run migrates, under which module names, and in which order.

Kept apart from the engine because it is about the file system and imports, not about code: the
engine asks for the files (``discover``), their dotted names (``module_name_for``, for relative
imports and name-map keys), and an order in which every file comes after the files of the run it
imports (``import_levels``), so that a file sees the classes and factories of those files.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from linen2nnx.errors import L2NError

SKIP_DIRS = frozenset(
    {".git", "__pycache__", ".venv", "venv", "build", "dist", ".tox", ".mypy_cache", "node_modules"}
)


def _matches(path: PurePath, patterns: Sequence[str]) -> bool:
    """``PurePath.match`` (globs matched from the right: ``tests/*.py``, ``*_pb2.py``, ``build``)."""
    return any(path.match(pattern) for pattern in patterns)


def is_excluded(path: Path, exclude: Sequence[str], base: Path | None) -> bool:
    """A path is excluded when it, or any folder above it (up to ``base``), matches a glob."""
    if not exclude:
        return False
    resolved = path.resolve()
    candidates: list[PurePath] = [path, resolved]
    if base is not None:
        try:
            rel = resolved.relative_to(base.resolve())
        except ValueError:
            pass
        else:
            candidates += [PurePath(*rel.parts[:i]) for i in range(1, len(rel.parts) + 1)]
    return any(_matches(c, exclude) for c in candidates)


def relative_to_root(f: Path, root: Path) -> Path:
    """Where ``f`` (a file :func:`discover` found under ``root``) goes below an output folder: its
    place in the tree given, also for a link to a file elsewhere (written where the link is)."""
    for place in (f.parent.resolve() / f.name, f.resolve()):  # the link's own place first
        try:
            return place.relative_to(root)
        except ValueError:
            continue
    raise L2NError(f"{f}: is not below {root}, the folder its output is placed from")


def discover(
    paths: Sequence[str | Path],
    exclude: Sequence[str] = (),
    include: Sequence[str] = ("*.py",),
    base: str | Path | None = None,
) -> list[tuple[Path, Path]]:
    """``(file, root)`` for every file under ``paths`` that matches ``include`` and no ``exclude`` glob.

    Globs follow ``PurePath.match`` (matched from the right); a folder that matches ``exclude`` is
    skipped whole, and ``exclude`` also applies to files named directly (so a pre-commit hook that
    passes file names honours it). ``base`` (the config's folder) anchors relative matching. Files
    named directly need not match ``include``. The result is sorted and deterministic.

    ``root`` anchors relative output paths: the folder itself for one folder, a file's folder for
    one file, and the deepest common folder of all inputs otherwise (so outputs never collide).
    """
    out: list[tuple[Path, Path]] = []
    anchors = []
    base_path = Path(base) if base is not None else None
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise L2NError(f"{p}: no such file or directory")
        anchors.append(p.resolve().parent if p.is_file() else p.resolve())
    root = Path(os.path.commonpath(anchors)) if anchors else Path.cwd()
    seen: set[Path] = set()

    def add(f: Path) -> None:
        # one file named twice (a folder and a file in it) once; a link to another file of the tree is a
        # module of its own name (`compat.py -> layers.py` is imported as `pkg.compat`): kept
        key = f.parent.resolve() / f.name
        if key not in seen:
            seen.add(key)
            out.append((f, root))

    for raw in paths:
        p = Path(raw)
        if p.is_file():
            if not is_excluded(p, exclude, base_path):
                add(p)
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d
                for d in dirnames
                if d not in SKIP_DIRS
                and not d.startswith(".")
                and not is_excluded(here / d, exclude, base_path)
            )
            for name in sorted(filenames):
                f = here / name
                if _matches(PurePath(name), include) or _matches(f, include):
                    if not is_excluded(f, exclude, base_path):
                        add(f)
    return out


def module_name_for(path: Path) -> str:
    """The dotted name Python would import ``path`` under: climb while folders are packages (a link
    is imported under its own name, wherever it points)."""
    path = path.parent.resolve() / path.name
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def unique_module_names(work: list[tuple[Path, str, str]]) -> list[tuple[Path, str, str]]:
    """``work`` (path, display, module name) with each module name that several files of the run share
    (``_modules`` of ``gemma4/_modules.py`` and of ``gemma4/vision/_modules.py``, folders with no
    ``__init__.py`` inside the package ``gemma``) replaced by the shortest of the file's longer names
    through the package no other file has (``gemma.gm.nn.gemma4.vision._modules``): one name, one file,
    or the name map's classes of one would silently overwrite the other's."""
    counts: dict[str, int] = {}
    for _, _, module in work:
        counts[module] = counts.get(module, 0) + 1
    if all(n == 1 for m, n in counts.items() if m):
        return work
    # only names through a package's own folders: scripts of sibling folders (`lm1b/models.py` and
    # `wmt/models.py`, each imported as `models` by the script beside it) keep their one name
    longer = {
        i: _namespace_parts(path)[0] for i, (path, _, module) in enumerate(work) if counts.get(module, 0) > 1
    }
    others = {m for m, n in counts.items() if n == 1}
    seen: dict[str, int] = {}
    for names in longer.values():
        for name in set(names):
            seen[name] = seen.get(name, 0) + 1
    out = list(work)
    for i, names in longer.items():
        free = [n for n in names if seen[n] == 1 and n not in others]
        if free:
            out[i] = (work[i][0], work[i][1], min(free, key=lambda n: (n.count("."), n)))
    return out


NAMESPACE_GAP = 2
"""How many folders without ``__init__.py`` in a row :func:`namespace_names` climbs between packages."""


def namespace_names(path: Path) -> tuple[str, ...]:
    """The longer dotted names a file may also be imported under, through folders without
    ``__init__.py`` inside a package (namespace portions): ``gemma/research/t5gemma/modules.py`` with
    no ``research/__init__.py`` is ``t5gemma.modules`` to a script beside it, and
    ``gemma.research.t5gemma.modules`` to ``from gemma.research.t5gemma import modules``. At most
    :data:`NAMESPACE_GAP` such folders in a row: a stray ``__init__.py`` far above names nothing. So
    too the folders above the top package (``ns.sub.layers`` for ``ns/sub/layers.py``, ``ns`` with no
    ``__init__.py``), and above a file in no package."""
    inside, above = _namespace_parts(path)
    return (*inside, *above)


def _namespace_parts(path: Path) -> tuple[list[str], list[str]]:
    """:func:`namespace_names`, as the names through folders inside a package and those through the
    folders above the top package (or above a file in no package: a script's)."""
    path = path.parent.resolve() / path.name
    parts = [] if path.stem == "__init__" else [path.stem]
    folder, gap, names = path.parent, [], []
    while folder.name.isidentifier() and len(gap) <= NAMESPACE_GAP:
        gap.append(folder.name)
        if (folder / "__init__.py").is_file():  # a package: the folders climbed to it are too
            parts[:0], crossed, gap = reversed(gap), len(gap) > 1 or bool(names), []
            if crossed:
                names.append(".".join(parts))
        folder = folder.parent
    # namespace folders above the top package (`src/ns/sub/layers.py`, `sub` a package, `ns` none):
    # `from ns.sub.layers import Blk` with `src` on the path
    above = [".".join([*reversed(gap[:k]), *parts]) for k in range(1, min(len(gap), NAMESPACE_GAP) + 1)]
    return names, above


def package_suffixes(work: list[tuple[Path, str, str]]) -> list[tuple[str, ...]]:
    """For each file of ``work`` (path, display, module name), the shorter names it may be imported
    under when a folder inside its top package is the one on the path: a research project whose every
    folder is a package (its root too, for a monorepo) imports ``from transformer import position``
    when run from the project's root, which Python resolves to ``<root>.transformer.position``. Each
    dotted suffix of at least two parts of the file's names (:func:`module_name_for`, its run name,
    :func:`namespace_names`), kept only where no other file of the run has it, as a suffix or as one of
    its names (an import that two files could answer resolves to neither), and never one under the
    package of an installed distribution (a vendored ``flax/linen/...`` does not answer ``flax.linen``)."""
    names = [
        {n for n in (module_name_for(path), module, *namespace_names(path)) if n} if module else set()
        for path, _, module in work
    ]
    suffixes = [
        {".".join(p[k:]) for n in own for p in [n.split(".")] for k in range(1, len(p) - 1)} for own in names
    ]
    if not any(suffixes):
        return [() for _ in work]
    counts: dict[str, int] = {}
    for found in suffixes:
        for suffix in found:
            counts[suffix] = counts.get(suffix, 0) + 1
    taken = set().union(*names)
    installed = _installed_top_level()  # `flax.linen.x` of a vendored copy stays the installed flax's
    return [
        tuple(
            sorted(s for s in found if counts[s] == 1 and s not in taken and s.split(".")[0] not in installed)
        )
        for found in suffixes
    ]


@functools.cache
def _installed_top_level() -> frozenset[str]:
    """The top-level import names of the installed distributions (not the folders of the run)."""
    return frozenset(importlib.metadata.packages_distributions())


@dataclasses.dataclass(frozen=True)
class RunSources:
    """The bytes of every file of a run, read once for the scans that look at the whole run before any
    file is migrated (table_changes.py, shared_helpers.py); ``complete`` is False when a file could not
    be read, and then those scans trust nothing."""

    sources: tuple[bytes, ...]
    complete: bool = True


def read_run(paths: Iterable[Path]) -> RunSources:
    sources: list[bytes] = []
    complete = True
    for path in paths:
        try:
            sources.append(path.read_bytes())
        except OSError:
            complete = False
    return RunSources(tuple(sources), complete)


def import_levels(work: list[tuple[Path, str, str]]) -> list[list[int]]:
    """Group files so that each comes after the files of the run it imports (cross-file pre-pass order).

    Imports are read with ``ast`` (cheap); a cycle or an unparsable file just lands in the last level.
    """
    return [level for level, _ in _levels(_dependencies(work))]


def _dependencies(work: list[tuple[Path, str, str]]) -> list[set[int]]:
    """For each file, the files of the run it imports."""
    by_module = {module_name_for(path): i for i, (path, _, module) in enumerate(work) if module}
    by_module.update({module: i for i, (_, _, module) in enumerate(work) if module})
    by_module.update({alias: i for i, (path, _, _) in enumerate(work) for alias in namespace_names(path)})
    by_module.update({alias: i for i, found in enumerate(package_suffixes(work)) for alias in found})
    last_parts = {module.rsplit(".", 1)[-1].encode(errors="surrogateescape") for module in by_module}
    deps: list[set[int]] = []
    for path, _, module in work:
        wanted: set[str] = set()
        try:
            data = path.read_bytes()
            # an import of a module of the run names its last part, or is relative (`from .. import x`):
            # a file with neither (most of them) has no dependency to find, and needs no parse
            tree = ast.parse(data) if _may_import(data, last_parts) else None
        except (SyntaxError, ValueError, OSError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                wanted.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = import_base(node, module, path.name == "__init__.py")
                # `from pkg import sub` needs the module pkg.sub, not pkg/__init__.py (which often imports
                # the package's modules back: a cycle that would put them all in one level)
                subs = {f"{base}.{a.name}" for a in node.names} & by_module.keys()
                wanted.update(subs)
                if len(subs) < len(node.names):
                    wanted.add(base)
        deps.append({by_module[m] for m in wanted if m in by_module} - {len(deps)})
    return deps


def import_graph(work: list[tuple[Path, str, str]]) -> tuple[list[tuple[list[int], list[int]]], set[int]]:
    """:func:`import_levels`, each level with its files that import another file of the same level
    (a cycle): those see none of their level's classes on a first pass, so the engine runs them twice;
    and the files another file of the run imports (only theirs are summaries anyone reads)."""
    deps = _dependencies(work)
    return _levels(deps), set().union(*deps)


def _levels(deps: list[set[int]]) -> list[tuple[list[int], list[int]]]:
    """Levels of the import graph's strongly connected components: a file comes after every file it
    imports, and the files of one cycle share a level (they are the level's cyclic files). A file that
    only imports a cycle comes after it, in a later level, so it sees the cycle's classes on its
    single pass (lumping every file left once a cycle appears hid them from it)."""
    components = _components(deps)
    owner = {i: c for c, members in enumerate(components) for i in members}
    depth: list[int] = []
    for members in components:  # Tarjan yields a component after every component it imports
        imported = {owner[j] for i in members for j in deps[i]} - {owner[members[0]]}
        depth.append(1 + max((depth[c] for c in imported), default=-1))
    levels: list[tuple[list[int], list[int]]] = [([], []) for _ in range(max(depth, default=-1) + 1)]
    for c, members in enumerate(components):
        files, cyclic = levels[depth[c]]
        files += members
        if len(members) > 1:
            cyclic += members
    return [(sorted(files), sorted(cyclic)) for files, cyclic in levels]


def _components(deps: list[set[int]]) -> list[list[int]]:
    """Strongly connected components of the graph ``i -> deps[i]`` (Tarjan's, iterative: a long
    chain of imports must not hit the recursion limit), each after the components it reaches."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    components: list[list[int]] = []
    for root in range(len(deps)):
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while not members or members[-1] != node:
                        members.append(stack.pop())
                        on_stack.discard(members[-1])
                    components.append(sorted(members))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(deps[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def import_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module ``from <...> import`` reads in ``module``: a relative import counts from
    the module's package, which is ``module`` itself for a package's ``__init__.py``."""
    base = node.module or ""
    if not node.level:
        return base
    parts = module.split(".") if module else []
    package = parts[: max(0, len(parts) - node.level + is_package)]
    return ".".join([*package, *([base] if base else [])])


_WORD = re.compile(rb"\w+")
_RELATIVE_IMPORT = re.compile(rb"\bfrom[\s\\]*\.")


def _may_import(data: bytes, last_parts: set[bytes]) -> bool:
    """Cheap test for :func:`import_levels`: False only when ``data`` cannot import a module of the run."""
    if not last_parts:
        return False
    if not data.isascii() or _RELATIVE_IMPORT.search(data):
        return True
    return not last_parts.isdisjoint(_WORD.findall(data))


def reexported(source: str, module: str, known: Mapping[str, Any]) -> dict[str, Any]:
    """The classes of the run a package's ``__init__.py`` imports, under the package's names:
    ``from gemma.gm.nn._gemma import Gemma3_4B`` in ``gemma/gm/nn/__init__.py`` makes
    ``gemma.gm.nn.Gemma3_4B`` (what ``gm.nn.Gemma3_4B(...)`` resolves to) the class
    ``gemma.gm.nn._gemma.Gemma3_4B``. Imports anywhere but in a function or class body count (a
    ``with lazy_imports():`` or ``try`` block re-exports too); ``known`` maps class keys to facts."""
    if not module or " import " not in source:
        return {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, Any] = {}
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.ImportFrom):
            base = import_base(node, module, is_package=True)
            for alias in node.names:
                fact = known.get(f"{base}.{alias.name}")
                if fact is not None:
                    found[f"{module}.{alias.asname or alias.name}"] = fact
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found
