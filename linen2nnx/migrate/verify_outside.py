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
) -> Iterator[tuple[cst.Call, cst.CSTNode, bool]]:
    """Each call of ``Name(...)`` or ``module.Name(...)`` with ``Name`` in ``names`` outside the
    ``skipped`` classes (those checked already), with the statement that holds it and whether a
    function around it binds ``Name`` (``def f(Block): Block()`` builds whatever ``f`` is handed:
    only its resolved name can tell); none when ``names`` is empty. ``classes_only``: in the file's
    other classes only (the file's training code, left in its Linen form, is reported as a whole)."""
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
                assert stmt is not None
                yield node, stmt, shadowed
        stack += [(c, stmt, scopes) for c in reversed(syntax_children(node)) if c not in skipped]


_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")
_AS = re.compile(r"([A-Za-z_]\w*)\s+as\s+([A-Za-z_]\w*)")
_REBOUND = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)[ \t]*$", re.M)


def run_class_names(external: Mapping[str, Any]) -> frozenset[str]:
    """Every name a class of the run goes by in the summaries' keys: its own (``pkg.models.Block``)
    and each name a package re-exports it under (``pkg.PublicBlock``), which its summary does not
    know. One answer for the engine's pre-filter and for the verifier; the files of one level share
    one mapping, which only grows, so the answer is kept while it is the same mapping of the same
    size (the cache holds the mapping itself: its id cannot be reused meanwhile)."""
    held, size, names = _RUN_NAMES
    if held is external and size == len(external):
        return names
    names = frozenset(key.rpartition(":")[2].rpartition(".")[2] for key in external)
    _RUN_NAMES[:] = [external, len(external), names]
    return names


_RUN_NAMES: list[Any] = [None, 0, frozenset()]


def _aliases(pairs: Iterator[tuple[str, str]], names: Collection[str]) -> set[str]:
    return {alias for name, alias in pairs if name in names}


def builds_run_class(text: str, external: Mapping[str, Any]) -> bool:
    """Cheap test: does ``text`` call a name that is the name of a class of the run, or a name it
    imports such a class as (``from pkg.models import Block as B``) or binds it to (``Alias =
    pkg.models.Block``)?"""
    if not external:
        return False
    names = run_class_names(external)
    rebound = ((name, alias) for alias, name in _REBOUND.findall(text))
    names = names | _aliases(_AS.findall(text), names) | _aliases(rebound, names)
    return not names.isdisjoint(_CALLED.findall(text))


def import_aliases(
    module: cst.Module, names: Collection[str]
) -> dict[str, list[tuple[cst.Name, cst.BaseExpression]]]:
    """The names this file binds a class of ``names`` to, at module level or in any block: ``B`` of
    ``from pkg.models import Block as B`` (no assignment: the import resolves it), and ``Alias`` of
    ``Alias = pkg.models.Block`` with each such assignment's target and value (the resolver does not
    follow an assignment: a read whose one binding is that target reads the value). Conservative (a
    class is matched by its last name only): the calls found under these names are resolved before
    they are checked."""
    found: dict[str, list[tuple[cst.Name, cst.BaseExpression]]] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.SimpleStatementLine:
            for small in node.body:
                if type(small) is cst.ImportFrom and not isinstance(small.names, cst.ImportStar):
                    for alias in _aliases(_import_pairs(small), names):
                        found.setdefault(alias, [])
                elif type(small) is cst.Assign and len(small.targets) == 1:
                    target, value = small.targets[0].target, small.value
                    last = value.attr.value if type(value) is cst.Attribute else getattr(value, "value", None)
                    if (
                        type(target) is cst.Name
                        and type(value) in (cst.Name, cst.Attribute)
                        and last in names
                    ):
                        found.setdefault(target.value, []).append((target, value))
        elif not isinstance(node, cst.BaseExpression):  # statements and blocks; never an expression
            stack += syntax_children(node)
    return found


def _import_pairs(node: cst.ImportFrom) -> Iterator[tuple[str, str]]:
    assert not isinstance(node.names, cst.ImportStar)
    for alias in node.names:
        if alias.asname is not None and type(alias.name) is cst.Name and type(alias.asname.name) is cst.Name:
            yield alias.name.value, alias.asname.name.value


def check_builds_outside(verifier: Any, classes_only: bool = False) -> None:
    """Check, as the verifier checks calls in NNX classes, the builds of this file's NNX classes and of
    the run's classes found by :func:`calls_outside` (``verifier``: the :class:`.verify._Verifier`)."""
    local = {n for n in verifier.nnx_classes if n in verifier.defs and verifier._signature(n) is not None}
    of_run = run_class_names(verifier.external) if verifier.external else frozenset()
    aliases = import_aliases(verifier.module, of_run)
    checked = set(verifier.nnx_classes.values())
    found = calls_outside(
        verifier.module, checked, local | of_run | aliases.keys(), classes_only=classes_only
    )
    for call, stmt, shadowed in found:
        if type(call.func) is cst.Name and call.func.value in local:
            if not shadowed:
                verifier._check_signature(call, set(), stmt)
            continue
        qualnames = verifier.names.qualnames(call.func)
        if type(call.func) is cst.Name and aliases.get(call.func.value):
            qualnames = qualnames | _assigned_value_names(verifier.names, call.func, aliases[call.func.value])
        if any(verifier._external(q) is not None for q in qualnames):
            verifier._check_signature(call, qualnames, stmt)
    if not classes_only:
        from linen2nnx.migrate.verify_builders import check_indirect_builds

        check_indirect_builds(verifier)


def _assigned_value_names(
    names: Any, read: cst.Name, assignments: list[tuple[cst.Name, cst.BaseExpression]]
) -> set[str]:
    """What ``read`` resolves to through ``Alias = pkg.Block``: the value's names when the one binding
    the read sees is such an assignment's target (another scope's ``Alias``, a parameter of that name,
    or a second binding are not this class)."""
    bindings = names.bindings_of(read) or []
    if len(bindings) != 1:
        return set()
    return next((names.qualnames(value) for target, value in assignments if target is bindings[0]), set())
