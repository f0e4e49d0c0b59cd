"""Where the verifier looks outside NNX classes: calls anywhere else in the file (its other classes,
its functions, its module-level statements) that build a class the run turned into NNX.

Linen code often builds its modules outside any module: a config's ``make()`` returns
``Transformer(self, name=name)``, a class kept as Linen builds a converted block with ``parent=``, a
script or a config file builds the model (``model = gm.nn.Gemma3_4B(tokens="batch.input")``) and
hands it to a trainer. Once the class is NNX, such a call fails (no ``name=``, no ``rngs``), and
nothing in the module pass sees it: the calls found here are checked against the NNX ``__init__`` as
calls inside NNX classes are. A call whose module is applied at once (``Scale()(x)`` in a
function) is not: such a function works only inside a Linen module's method, where the module pass
replays it into its callers or the verifier reports the call of it from an NNX class.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import IS_STATEMENT, syntax_children
from linen2nnx.migrate.cst_utils import assigned_names, callee_name


def calls_outside(
    module: cst.Module, skipped: Collection[cst.ClassDef], names: Collection[str], classes_only: bool = False
) -> Iterator[tuple[cst.Call, cst.CSTNode]]:
    """Each call of ``Name(...)`` or ``module.Name(...)`` with ``Name`` in ``names`` outside the
    ``skipped`` classes (those checked already), with the statement that holds it; none when
    ``names`` is empty. ``classes_only``: in the file's other classes only (the file's training code,
    left in its Linen form, is reported as a whole)."""
    if not names:
        return
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None, tuple[cst.FunctionDef, ...]]] = [
        (s, s, ())
        for s in reversed(module.body)
        if s not in skipped and (not classes_only or type(s) is cst.ClassDef)
    ]
    applied: set[int] = set()  # `Scale()(x)`: built and applied at once (see the module docstring)
    while stack:
        node, stmt, scopes = stack.pop()
        if IS_STATEMENT[type(node)]:
            stmt = node
        if type(node) is cst.FunctionDef:  # `def f(Block): Block()` builds whatever f is handed
            scopes = (*scopes, node)
        elif type(node) is cst.Call:
            if type(node.func) is cst.Call:
                applied.add(id(node.func))
            elif id(node) not in applied and callee_name(node) in names:
                shadowed = type(node.func) is cst.Name and any(
                    node.func.value in assigned_names(fn) for fn in scopes
                )
                if not shadowed:
                    assert stmt is not None
                    yield node, stmt
        stack += [(c, stmt, scopes) for c in reversed(syntax_children(node)) if c not in skipped]


_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")


def builds_run_class(text: str, external: Mapping[str, Any]) -> bool:
    """Cheap test: does ``text`` call a name that is the name of a class of the run (its summaries)?"""
    if not external:
        return False
    names = {summary.name for summary in external.values()}
    return not names.isdisjoint(_CALLED.findall(text))


def check_builds_outside(verifier: Any, classes_only: bool = False) -> None:
    """Check, as the verifier checks calls in NNX classes, the builds of this file's NNX classes and of
    the run's classes found by :func:`calls_outside` (``verifier``: the :class:`.verify._Verifier`)."""
    local = {n for n in verifier.nnx_classes if n in verifier.defs and verifier._signature(n) is not None}
    of_run = {summary.name for summary in verifier.external.values()}
    checked = set(verifier.nnx_classes.values())
    for call, stmt in calls_outside(verifier.module, checked, local | of_run, classes_only=classes_only):
        if type(call.func) is cst.Name and call.func.value in local:
            verifier._check_signature(call, set(), stmt)
            continue
        qualnames = verifier.names.qualnames(call.func)
        if any(verifier._external(q) is not None for q in qualnames):
            verifier._check_signature(call, qualnames, stmt)
