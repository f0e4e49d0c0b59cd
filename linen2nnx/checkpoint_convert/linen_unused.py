"""NNX parameters the Linen model never creates: kept from init, said so, never a silent default.

Linen creates a submodule's parameters the first time it runs with its own weights. A layer that is
only applied with other weights (a tied head: ``self.lm_head.apply({'params': {'kernel': emb.T}},
h)``) has none in any Linen checkpoint, while its NNX twin, built in ``__init__``, holds a kernel of
its own that nothing reads. Such a slot is not a missing weight: it is one the Linen model's own
``init`` (on the pair's example batch) does not create either. Only those are kept from init, each
with that reason in the report; a slot the Linen model does create and the checkpoint lacks stays a
"not filled" problem.
"""

from __future__ import annotations

from typing import Any

from linen2nnx.checkpoint_convert.mapping import Leaf, Problem, join, map_with_name_map
from linen2nnx.checkpoint_convert.read import parse_tree

NEVER_CREATED = (
    "the Linen model's own init does not create it (a layer Linen only applies with other weights)"
)


def never_created(
    problems: list[Problem], pair: Any, name_map: Any, root: str | None, aliases: dict
) -> tuple[set[str], list[Problem]]:
    """(the NNX paths of "not filled" problems that the Linen model never creates, the other
    problems). Without a name map root, or when the Linen init cannot be traced, nothing moves."""
    unfilled = {p.nnx for p in problems if p.kind == "not filled" and p.nnx}
    if not unfilled or root is None:
        return set(), problems
    created = _created_by_linen(pair, name_map, root, aliases)
    if created is None:
        return set(), problems
    unused = unfilled - created
    return unused, [p for p in problems if not (p.kind == "not filled" and p.nnx in unused)]


def _created_by_linen(pair: Any, name_map: Any, root: str, aliases: dict) -> set[str] | None:
    """The NNX paths the Linen model's own (abstract) init fills through the name map."""
    import jax

    try:
        abstract = jax.eval_shape(pair.linen.init_variables)
    except Exception:  # the check is an allowance: without it the problems stay as they are
        return None
    ckpt = parse_tree(abstract, source="<Linen init>")
    leaves = [
        Leaf(coll, path, tuple(getattr(a, "shape", ())), getattr(a, "dtype", None))
        for coll, path, a in ckpt.leaves()
    ]
    matches, _ = map_with_name_map(leaves, name_map, root)
    return {join(aliases.get(m.nnx_path, m.nnx_path)) for m in matches}
