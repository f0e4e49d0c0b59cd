"""Map every Linen variable leaf to the NNX state path it becomes.

Two strategies:

- **name map** (written by ``migrate``): each leaf goes through
  ``NameMap.to_nnx_path(root_class, collection, path)``; the map is the authority.
- **structural** (hand-migrated code, no map): identical paths first, then a normalised form of
  each path (``layers_3`` -> ``layers/3``, ``Dense_0`` -> ``dense_0``). Two Linen leaves that fit one
  NNX slot, or one leaf that fits two slots, is refused as ambiguous; the converter never guesses.

Matching is done per collection against NNX slots of the matching Variable type, so a
``batch_stats`` leaf can never land in a ``Param``. The optax state is mapped with the same table:
``mu`` / ``nu`` mirror the param tree (docs/nnx_facts.md#optimizer-state-layout), see :func:`map_opt_state_path`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from linen2nnx.namemap import NameMap

PathT = tuple[Any, ...]

NAME_MAP = "name map"
IDENTICAL = "identical"
NORMALISED = "normalised"


def join(path: Iterable[Any]) -> str:
    """``('dense', 0, 'kernel')`` -> ``'dense/0/kernel'``: the one way paths are shown."""
    return "/".join(map(str, path))


@dataclasses.dataclass(frozen=True)
class Slot:
    """One NNX state leaf of the target model (from the abstract model: no arrays allocated)."""

    path: PathT
    var_type: type
    shape: tuple[int, ...]
    dtype: Any

    @property
    def type_name(self) -> str:
        return self.var_type.__name__


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One Linen variable leaf: ``variables[collection][path...]``."""

    collection: str
    path: PathT
    shape: tuple[int, ...]
    dtype: Any

    @property
    def name(self) -> str:
        return join((self.collection, *self.path))


@dataclasses.dataclass(frozen=True)
class Match:
    leaf: Leaf
    nnx_path: PathT
    how: str


@dataclasses.dataclass(frozen=True)
class Problem:
    """One reason the conversion cannot proceed; every problem is reported, not just the first."""

    kind: str
    linen: str | None
    nnx: str | None
    detail: str

    def __str__(self) -> str:
        where = " -> ".join(
            p for p in (self.linen and f"Linen {self.linen}", self.nnx and f"NNX {self.nnx}") if p
        )
        return f"{self.kind}: {where}: {self.detail}"


def variable_type(collection: str) -> type:
    """The NNX Variable type a Linen collection becomes (``params`` -> ``nnx.Param`` …)."""
    from flax.nnx import variablelib

    return variablelib.variable_type_from_name(collection)


def map_with_name_map(
    leaves: list[Leaf], name_map: NameMap, root: str, slots: Mapping[PathT, Slot] | None = None
) -> tuple[list[Match], list[Problem]]:
    """Every leaf through the name map; a leaf the map cannot place is a problem.

    A module whose one parameter is named ``value`` was read as a restored partitioning box
    (``{'value': w}``, read.py): its leaf sits at the module's path, which maps to no state of the
    target (``slots``), while the path with ``value`` does; that one is taken."""
    matches: list[Match] = []
    problems: list[Problem] = []
    for leaf in leaves:
        try:
            nnx_path = tuple(name_map.to_nnx_path(root, leaf.collection, leaf.path))
        except KeyError as e:
            nnx_path, error = None, str(e.args[0] if e.args else e)
        if slots is not None and (nnx_path is None or nnx_path not in slots):
            try:
                boxed = tuple(name_map.to_nnx_path(root, leaf.collection, (*leaf.path, "value")))
            except KeyError:
                boxed = None
            nnx_path = boxed if boxed in slots else nnx_path
        if nnx_path is None:
            problems.append(Problem("no NNX home", leaf.name, None, error))
            continue
        matches.append(Match(leaf, nnx_path, NAME_MAP))
    return matches, problems


def map_structurally(leaves: list[Leaf], slots: Mapping[PathT, Slot]) -> tuple[list[Match], list[Problem]]:
    """Match leaves to slots by path: identical first, then normalised; refuse ambiguity.

    A leaf left without a slot is not a problem *here*: validation reports it together with the
    unfilled slots, so one message lists everything.
    """
    matches: list[Match] = []
    problems: list[Problem] = []
    by_coll: dict[str, list[Leaf]] = defaultdict(list)
    for leaf in leaves:
        by_coll[leaf.collection].append(leaf)
    for coll, coll_leaves in sorted(by_coll.items()):
        vtype = variable_type(coll)
        coll_slots = {p: s for p, s in slots.items() if issubclass(s.var_type, vtype)}
        m, p = _match_collection(coll_leaves, coll_slots)
        matches += m
        problems += p
    return matches, problems


def _match_collection(leaves: list[Leaf], slots: Mapping[PathT, Slot]) -> tuple[list[Match], list[Problem]]:
    matches: list[Match] = []
    by_str = {tuple(map(str, p)): p for p in slots}
    taken: set[PathT] = set()
    rest: list[Leaf] = []
    for leaf in leaves:  # 1) identical paths (int keys compare as their str form)
        hit = by_str.get(tuple(map(str, leaf.path)))
        if hit is not None and hit not in taken:
            matches.append(Match(leaf, hit, IDENTICAL))
            taken.add(hit)
        else:
            rest.append(leaf)
    # 2) normalised paths, computed on both sides; claimed slots still count for ambiguity
    leaf_groups: dict[PathT, list[Leaf]] = defaultdict(list)
    for leaf in rest:
        leaf_groups[normalise(leaf.path)].append(leaf)
    claimed: dict[PathT, list[str]] = defaultdict(list)
    for m in matches:
        claimed[normalise(m.leaf.path)].append(m.leaf.name)
    slot_groups: dict[PathT, list[PathT]] = defaultdict(list)
    for p in slots:
        slot_groups[normalise(p)].append(p)
    problems: list[Problem] = []
    for key, group in sorted(leaf_groups.items(), key=lambda kv: join(kv[0])):
        cands = slot_groups.get(key, [])
        free = [p for p in cands if p not in taken]
        if not cands:
            continue  # no home: reported by validation
        rivals = [leaf.name for leaf in group] + claimed.get(key, [])
        if len(group) > 1 or len(cands) > 1 or claimed.get(key):
            problems.append(
                Problem(
                    "ambiguous",
                    ", ".join(rivals),
                    ", ".join(join(p) for p in cands),
                    f"{len(rivals)} Linen leaf(s) and {len(cands)} NNX slot(s) have the same normalised path "
                    f"{join(key)!r}; pass a name map to say which goes where",
                )
            )
            continue
        if free:
            matches.append(Match(group[0], free[0], NORMALISED))
            taken.add(free[0])
    # a slot left empty whose path also fits an already matched leaf: one leaf, two possible homes
    for key, cands in sorted(slot_groups.items(), key=lambda kv: join(kv[0])):
        empty = [p for p in cands if p not in taken]
        if empty and claimed.get(key) and key not in leaf_groups:
            problems.append(
                Problem(
                    "ambiguous",
                    ", ".join(claimed[key]),
                    ", ".join(join(p) for p in cands),
                    f"{len(cands)} NNX slots have the normalised path {join(key)!r} of one Linen leaf; "
                    "pass a name map to say which goes where",
                )
            )
    return matches, problems


_NUM_SUFFIX = re.compile(r"^(.*?)_(\d+)$")


def normalise(path: Iterable[Any]) -> PathT:
    """A spelling-independent form of a path, used only to *find* candidates.

    Each element is split into its ``_<int>`` suffixes (Linen list children ``layers_3`` and
    auto-names ``Dense_0`` vs NNX ``layers/3`` and ``dense_0``), lower-cased with underscores
    dropped (``BatchNorm`` == ``batch_norm``; NNX ``if_`` == Linen ``if``).
    """
    out: list[str] = []
    for el in path:
        s = str(el)
        suffixes: list[str] = []
        while (m := _NUM_SUFFIX.match(s)) and m.group(1):
            s, n = m.group(1), m.group(2)
            suffixes.insert(0, str(int(n)))
        s = s.lower().replace("_", "")
        out.append(s)
        out.extend(suffixes)
    return tuple(out)


def map_opt_state_path(path: PathT, param_table: Mapping[tuple[str, ...], PathT]) -> PathT:
    """Rename the param-tree part of an optax state path (``0/mu/Dense_0/kernel`` -> ``0/mu/dense_0/kernel``).

    ``param_table`` maps a Linen ``params`` path (as str elements) to its NNX path. The longest
    suffix of ``path`` that is a Linen param path is replaced; other leaves (``count``) are kept.
    """
    spath = tuple(map(str, path))
    for i in range(len(spath)):
        hit = param_table.get(spath[i:])
        if hit is not None:
            return (*path[:i], *hit)
    return path
