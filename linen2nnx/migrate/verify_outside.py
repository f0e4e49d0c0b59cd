"""Where the verifier looks outside NNX classes: calls in the file's other classes that build a class
of this file the run turned into NNX.

Linen code often builds its modules outside any module: a config's ``make()`` returns
``Transformer(self, name=name)``, a class kept as Linen builds a converted block with ``parent=``.
Once the block is an NNX class, such a call fails (no ``name=``, no ``rngs``), and nothing in the
module pass sees it: the calls found here are checked against the NNX ``__init__`` as calls inside
NNX classes are. Module-level functions and statements are not looked at yet: the module pass
replays many such functions into their callers, which leaves the function itself as it was.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import libcst as cst

from linen2nnx.migrate.cst_meta import IS_STATEMENT, syntax_children


def calls_outside(
    module: cst.Module, skipped: Collection[cst.ClassDef], classes: Collection[str]
) -> Iterator[tuple[cst.Call, cst.CSTNode]]:
    """Each ``Name(...)`` call of one of ``classes`` outside the ``skipped`` classes (those checked
    already), with the statement that holds it; none when ``classes`` is empty."""
    if not classes:
        return
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [
        (s, s) for s in module.body if type(s) is cst.ClassDef and s not in skipped
    ]
    while stack:
        node, stmt = stack.pop()
        if IS_STATEMENT[type(node)]:
            stmt = node
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in classes:
            assert stmt is not None
            yield node, stmt
        stack += [(c, stmt) for c in reversed(syntax_children(node)) if c not in skipped]
