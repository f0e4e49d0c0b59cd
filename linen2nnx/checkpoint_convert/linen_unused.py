"""NNX parameters the Linen model never creates: kept from init, said so, never a silent default.

Linen creates a submodule's parameters the first time it runs with its own weights. A layer that is
only applied with other weights (a tied head: ``self.lm_head.apply({'params': {'kernel': emb.T}},
h)``) has none in any Linen checkpoint, while its NNX twin, built in ``__init__``, holds a kernel of
its own that nothing reads. Such a slot is kept from init only on positive evidence: it lies under a
layer the name map marks as applied with other weights (migrate writes that mark where it converts
such a call), or under one the Linen model applies only under a test that is off for the pair's
configuration (a ``setup()`` head used only ``if self.learn_sigma:``, which ``__init__`` builds
anyway), and the Linen model's own ``init`` on the pair's example batch, in eval and in train mode,
does not create it. Each is kept with its reason in the report; any other slot the checkpoint lacks
(one the Linen init creates) stays a "not filled" problem.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from linen2nnx.checkpoint_convert.mapping import Leaf, Problem, join, map_with_name_map
from linen2nnx.checkpoint_convert.read import parse_tree
from linen2nnx.namemap import applied_with_other_weights, attr_path, flatten

NEVER_CREATED = "a layer Linen applies with other weights: the Linen model's own init never creates it"
NEVER_APPLIED = (
    "the Linen model's own init (eval and train mode, on the pair's example batch) never creates it: "
    "a layer applied only under a test that is off in this configuration, or by another method"
)


class LinenInit:
    """The Linen model's own init on the pair's example batch, in eval and in train mode, traced
    abstractly the first time it is asked for (once per plan); None when either cannot be traced."""

    def __init__(self, pair: Any) -> None:
        self.pair = pair
        self._trees: list[Any] | None = None
        self._traced = False

    def trees(self) -> list[Any] | None:
        import jax

        if not self._traced:
            self._traced = True
            try:
                self._trees = [
                    jax.eval_shape(lambda train=train: self.pair.linen.init_variables(train=train))
                    for train in (False, True)
                ]
            except Exception:  # the checks are allowances and hints: without them problems stay as they are
                self._trees = None
        return self._trees


def never_created(
    problems: list[Problem], init: LinenInit, name_map: Any, root: str | None, aliases: dict
) -> tuple[set[str], list[Problem]]:
    """(the NNX paths of "not filled" problems that the Linen model never creates, the other
    problems). Without a name map root, or when the Linen init cannot be traced, nothing moves."""
    if root is None:
        return set(), problems
    marked = {p.nnx for p in problems if p.kind == "not filled" and p.nnx}
    if not marked:
        return set(), problems
    created = _created_by_linen(init, name_map, root, aliases)
    if created is None:
        return set(), problems
    unused = marked - created
    return unused, [p for p in problems if not (p.kind == "not filled" and p.nnx in unused)]


def why_never_created(name_map: Any, root: str | None, nnx_path: str) -> str:
    """The reason a slot :func:`never_created` kept is kept, for the report."""
    if root is not None and applied_with_other_weights(name_map, root, tuple(attr_path(nnx_path))):
        return NEVER_CREATED
    return NEVER_APPLIED


def _created_by_linen(init: LinenInit, name_map: Any, root: str, aliases: dict) -> set[str] | None:
    """The NNX paths the Linen model's own (abstract) init fills through the name map, in eval mode
    and in train mode; None when either cannot be traced (then nothing is kept)."""
    trees = init.trees()
    if trees is None:
        return None
    created: set[str] = set()
    for abstract in trees:
        matches, _ = map_with_name_map(_created_leaves(abstract), name_map, root)
        created |= {join(aliases.get(m.nnx_path, m.nnx_path)) for m in matches}
    return created


def _created_leaves(variables: Any) -> list[Leaf]:
    """Every leaf of the Linen init ``variables``, those of a collection no NNX Variable type is
    registered for (``self.variable('stats', ...)`` beside an NNX twin holding ``nnx.BatchStat``) too:
    Linen creates them, so the slot they map to is not one Linen never creates."""
    ckpt = parse_tree(variables, source="<Linen init>", live=True)
    found = [(coll, path, a) for coll, path, a in ckpt.leaves()]
    found += [(coll, path, a) for coll, tree in ckpt.unregistered.items() for path, a in flatten(tree)]
    return [
        Leaf(coll, path, tuple(getattr(a, "shape", ())), getattr(a, "dtype", None)) for coll, path, a in found
    ]


def name_unregistered(
    problems: list[Problem], unregistered: dict[str, Any], name_map: Any, root: str | None, aliases: dict
) -> list[Problem]:
    """The "not filled" problems of slots that a leaf of an ignored checkpoint entry would fill (a
    collection no NNX Variable type is registered for: ``stats`` beside an NNX twin holding
    ``nnx.BatchStat``), said so: the entry was read as no collection, so nothing filled the slot.
    Placed through the name map, or (without a root) by its own or its normalised path."""
    from linen2nnx.checkpoint_convert.mapping import normalise

    leaves = [Leaf(c, path, (), None) for c, tree in unregistered.items() for path, _ in flatten(tree)]
    if not leaves or not any(p.kind == "not filled" for p in problems):
        return problems
    if root is not None:
        matches, _ = map_with_name_map(leaves, name_map, root)
        homes = {join(aliases.get(m.nnx_path, m.nnx_path)): m.leaf for m in matches}
    else:
        homes = {join(normalise(leaf.path)): leaf for leaf in leaves}
    out = []
    for p in problems:
        key = p.nnx if root is not None else join(normalise(p.nnx.split("/"))) if p.nnx else None
        leaf = homes.get(key) if p.kind == "not filled" and p.linen is None else None
        if leaf is None:
            out.append(p)
            continue
        detail = (
            f"the checkpoint holds it as {leaf.name}, but {leaf.collection!r} is no registered NNX Variable "
            "collection, so that entry was ignored: register the slot's Variable type under that name "
            f"(nnx.register_variable_name({leaf.collection!r}, ...))"
        )
        out.append(dataclasses.replace(p, linen=leaf.name, detail=detail))
    return out


def dropped_collections(problems: list[Problem], ckpt: Any, init: LinenInit) -> list[Problem]:
    """A "no NNX home" problem for every leaf of an ignored checkpoint entry that is no TrainState field
    but a collection the Linen model's own init creates (``self.variable('spectral', ...)``), not sown:
    no NNX Variable type is registered for it, so nothing of the NNX model would hold it (its state was
    dropped, the entry "ignored"). A leaf a problem names already (:func:`name_unregistered`) is left to
    it. The entry is no longer listed as ignored."""
    if not ckpt.unregistered:
        return []
    trees = init.trees()
    if trees is None:
        return []
    created = {str(k) for tree in trees for k, v in tree.items() if isinstance(v, Mapping) and not _sown(v)}
    named = {n for p in problems if p.linen for n in p.linen.split(", ")}
    out = []
    for coll in sorted(set(ckpt.unregistered) & created):
        ckpt.ignored.pop(coll, None)
        detail = (
            f"the Linen model's own init creates the collection {coll!r}, but no NNX Variable type is "
            f"registered for it, so the NNX model holds nothing of it: give the NNX model its Variables, of "
            f"a type registered under that name (nnx.register_variable_name({coll!r}, ...))"
        )
        for path, a in flatten(ckpt.unregistered[coll]):
            leaf = Leaf(coll, path, tuple(getattr(a, "shape", ())), getattr(a, "dtype", None))
            if leaf.name not in named:
                out.append(Problem("no NNX home", leaf.name, None, detail))
    return out


def _sown(tree: Any) -> bool:
    """Whether a collection of the Linen init holds sown values: ``self.sow`` keeps them in tuples."""
    if isinstance(tree, tuple):
        return True
    return isinstance(tree, Mapping) and any(_sown(v) for v in tree.values())
