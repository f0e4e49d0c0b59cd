"""Which NNX module is which Linen module: Linen scope paths -> NNX attribute paths.

Localising a divergence and comparing sown values both need *module* paths on both sides, while
the converter only maps *variable* paths. Three sources, tried in order:

1. the name map written by ``migrate`` (``NameMap.to_nnx_path`` walks child names class by class);
2. the converter's own leaf table: a Linen module ``P`` owning the leaf ``P/s`` that went to the
   NNX path ``N`` lives at ``N`` minus as many trailing elements as ``s`` has (``pooler`` ->
   ``classifier/layers/0`` in a migrated ``nn.Sequential``, ``Dense_0`` -> ``dense_0``);
3. for modules without variables (rotary embeddings, dropout, activations wrapped as modules): the
   spelling-independent normal form the converter uses (``layers_3`` == ``layers/3``,
   ``BatchNorm_0`` == ``batch_norm_0``), accepted only when exactly one NNX module has it.

A candidate is only accepted if an NNX module really lives at that path.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from linen2nnx.checkpoint_convert.mapping import normalise

PathT = tuple[str, ...]


def _s(path: Iterable[Any]) -> PathT:
    return tuple(str(p) for p in path)


class ModuleMap:
    """Maps a Linen module path (tuple of names) to the NNX module path, or ``None``."""

    def __init__(
        self,
        leaf_table: Mapping[tuple[Any, ...], tuple[Any, ...]],
        nnx_modules: Iterable[tuple[Any, ...]],
        name_map: Any = None,
        root: str | None = None,
    ) -> None:
        self._modules = {_s(p) for p in nnx_modules}
        self._table = {_s(k): _s(v) for k, v in leaf_table.items()}
        self._name_map, self._root = name_map, root
        self._cands: dict[PathT, Counter[PathT]] = defaultdict(Counter)
        for lpath, npath in leaf_table.items():
            lp, np_ = _s(lpath), _s(npath)
            for cut in range(len(lp)):
                suffix = len(lp) - cut
                if len(np_) >= suffix:
                    self._cands[lp[:cut]][np_[: len(np_) - suffix]] += 1
        by_norm: dict[PathT, list[PathT]] = defaultdict(list)
        for m in self._modules:
            by_norm[normalise(m)].append(m)
        self._by_norm = by_norm
        self._cache: dict[PathT, PathT | None] = {}

    def __call__(self, linen_path: Iterable[Any]) -> PathT | None:
        key = _s(linen_path)
        if key not in self._cache:
            self._cache[key] = self._lookup(key)
        return self._cache[key]

    def _lookup(self, path: PathT) -> PathT | None:
        if not path:
            return ()
        if self._name_map is not None and self._root is not None:
            try:
                hit = _s(self._name_map.to_nnx_path(self._root, "params", path))
            except (KeyError, ValueError):
                hit = None
            if hit is not None and hit in self._modules:
                return hit
        for cand, _ in self._cands.get(path, Counter()).most_common():
            if cand in self._modules:
                return cand
        hits = self._by_norm.get(normalise(path), [])
        return hits[0] if len(hits) == 1 else None

    def linen_of(self, nnx_path: Iterable[Any]) -> PathT | None:
        """The Linen module path of an NNX module (the inverse, from the leaf table); ``None`` if unknown."""
        target = _s(nnx_path)
        counts: Counter[PathT] = Counter()
        for lpath, npath in self._table.items():
            if npath[: len(target)] == target and len(lpath) >= len(npath) - len(target):
                counts[lpath[: len(lpath) - (len(npath) - len(target))]] += 1
        for cand, _ in counts.most_common():
            if self(cand) == target:
                return cand
        return None

    def owner(self, linen_leaf_path: Iterable[Any]) -> PathT | None:
        """The NNX module of the deepest mappable prefix of a Linen *leaf* path (a sown value's module)."""
        path = _s(linen_leaf_path)
        for cut in range(len(path), -1, -1):
            hit = self(path[:cut])
            if hit is not None:
                return hit
        return None


def nnx_module_paths(model: Any) -> list[PathT]:
    """Every module path of an NNX model (``()`` for the root)."""
    from flax import nnx

    return [_s(p) for p, _ in nnx.iter_modules(model)]


def join(path: Iterable[Any]) -> str:
    return "/".join(map(str, path))
