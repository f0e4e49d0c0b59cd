"""Builds of a class of the run outside NNX classes that no name of the class spells at the call.

:mod:`.verify_outside` checks ``nets.Net(depth=1)``; these four spellings of the same build went
unchecked, and each raised TypeError (missing the sizes and ``rngs`` the NNX ``__init__`` requires)
once the class was NNX: ``REGISTRY[name]()`` of a module-level dict whose values are classes of the
run, ``functools.partial(Net, depth=3)()``, ``getattr(nets, name)()`` of a module of the run, and
``nets.Net(**kw)`` where ``kw`` is a literal dict or ``dict(...)`` without ``rngs`` (any other
mapping may hold them: not reported). Each is L2N-VERIFY-002 when neither the call nor the partial
passes ``rngs``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import IS_STATEMENT, syntax_children
from linen2nnx.migrate.cst_utils import absolute_qualname, code
from linen2nnx.migrate.rules import verify as verify_rules
from linen2nnx.migrate.sites import one_line


def check_indirect_builds(verifier: Any) -> None:
    """Report the builds above in the statements outside the file's NNX classes (``verifier``: the
    :class:`.verify._Verifier`, whose resolver and run summaries this reads)."""
    if not verifier.external:
        return
    tables = _tables(verifier)
    for call, stmt in _calls(verifier.module, set(verifier.nnx_classes.values())):
        how = _indirect(verifier, call, tables)
        if how is not None:
            verifier._report(
                verify_rules.VERIFY_002,
                call,
                stmt,
                f"{one_line(code(call))} builds {how} without the rngs its NNX __init__ requires",
            )


def _calls(module: cst.Module, skipped: set[cst.ClassDef]) -> Iterator[tuple[cst.Call, cst.CSTNode]]:
    stack: list[tuple[cst.CSTNode, cst.CSTNode]] = [(s, s) for s in reversed(module.body) if s not in skipped]
    while stack:
        node, stmt = stack.pop()
        if IS_STATEMENT[type(node)]:
            stmt = node
        if type(node) is cst.Call:
            yield node, stmt
        stack += [(c, stmt) for c in reversed(syntax_children(node)) if c not in skipped]


def _run_class(verifier: Any, node: cst.BaseExpression) -> str | None:
    """The key of the converted class of another file of the run ``node`` names, or None."""
    if type(node) not in (cst.Name, cst.Attribute):
        return None
    for q in verifier.names.qualnames(node):
        summary = verifier._external(q)
        if summary is not None and not summary.kept_linen:
            return summary.key
    return None


def _tables(verifier: Any) -> dict[str, list[str]]:
    """Module-level ``NAME = {...}`` dicts, bound once, with a converted class of the run among their values."""
    found: dict[str, list[str]] = {}
    bound: dict[str, int] = {}
    for line in verifier.module.body:
        for small in line.body if type(line) is cst.SimpleStatementLine else ():
            if (
                type(small) is cst.Assign
                and len(small.targets) == 1
                and type(small.targets[0].target) is cst.Name
            ):
                name = small.targets[0].target.value
                bound[name] = bound.get(name, 0) + 1
                if type(small.value) is cst.Dict:
                    keys = [
                        _run_class(verifier, e.value)
                        for e in small.value.elements
                        if type(e) is cst.DictElement
                    ]
                    if any(keys):
                        found[name] = [k for k in keys if k]
    return {n: keys for n, keys in found.items() if bound[n] == 1}


def _indirect(verifier: Any, call: cst.Call, tables: dict[str, list[str]]) -> str | None:
    """What ``call`` builds without rngs through one of the spellings of the module docstring, or None."""
    args = list(call.args)
    func = call.func
    if type(func) is cst.Subscript and type(func.value) is cst.Name and func.value.value in tables:
        how = f"a class of the run ({', '.join(tables[func.value.value])})"
    elif type(func) is cst.Call and func.args and func.args[0].keyword is None:
        names = verifier.names.qualnames(func.func) if type(func.func) in (cst.Name, cst.Attribute) else set()
        first = func.args[0].value
        if "functools.partial" in names and (key := _run_class(verifier, first)) is not None:
            how, args = f"{key} (through functools.partial)", [*func.args[1:], *args]
        elif "builtins.getattr" in names and _run_module(verifier, first):
            how = f"a class of the run's module {code(first)} (through getattr)"
        else:
            return None
    elif (key := _run_class(verifier, func)) is not None and _splat_without_rngs(verifier, args):
        return f"{key} from a mapping that holds no rngs,"
    else:
        return None
    if any(a.star == "**" or (a.keyword is not None and a.keyword.value == "rngs") for a in args):
        return None
    return how


def _run_module(verifier: Any, node: cst.BaseExpression) -> bool:
    """Does ``node`` name a module of the run (one whose converted classes the summaries hold)?"""
    if type(node) not in (cst.Name, cst.Attribute):
        return False
    modules = {absolute_qualname(q, verifier.module_name) for q in verifier.names.qualnames(node)}
    return any(s.key.rpartition(".")[0] in modules and not s.kept_linen for s in verifier.external.values())


def _splat_without_rngs(verifier: Any, args: list[cst.Arg]) -> bool:
    """The call passes ``**mapping`` of a literal dict or ``dict(...)`` (also through a name bound once to
    one) and neither it nor the call passes ``rngs``."""
    splats = [a.value for a in args if a.star == "**"]
    if len(splats) != 1 or any(a.keyword is not None and a.keyword.value == "rngs" for a in args):
        return False
    value = splats[0]
    if type(value) is cst.Name:
        binding = verifier.names.sole_binding(value)  # the target Name of its one assignment, if any
        assign = _assignment_of(verifier.module, binding) if type(binding) is cst.Name else None
        if assign is None:
            return False
        value = assign.value
    if type(value) is cst.Dict:
        return all(
            type(e) is cst.DictElement and type(e.key) is cst.SimpleString and "rngs" not in e.key.value
            for e in value.elements
        )
    if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "dict":
        return all(a.keyword is not None and a.keyword.value != "rngs" for a in value.args)
    return False


def _assignment_of(module: cst.Module, target: cst.Name) -> cst.Assign | None:
    """The ``target = value`` statement (one target) whose target is the node ``target``."""
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.Assign and len(node.targets) == 1 and node.targets[0].target is target:
            return node
        if not isinstance(node, cst.BaseExpression):  # statements and blocks; never an expression
            stack += syntax_children(node)
    return None
