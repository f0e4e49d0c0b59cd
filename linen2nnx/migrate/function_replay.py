"""Module-level functions that build and apply a module, called from ``@nn.compact``: replayed in place.

Real Linen code wraps a layer of its own in a module-level function that chooses its arguments and
applies it at once, often in another file of the package::

    def norm(x, train, eps=1e-5, params=None):
        if params is None:
            x = Norm(epsilon=eps, use_running_average=not train)(x)
        else:
            x = Norm(epsilon=eps, scale_init=lambda *_: params['scale'], use_running_average=not train)(x)
        return x

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, train=True):
            x = ops.norm(x, train=train, params=None if self.weights is None else self.weights['n1'])

Linen names what such a function builds in the *caller's* scope (``Norm_0``), as if the layer were
written there; NNX must build it in the caller's ``__init__``, where ``train`` does not exist. So each
call statement is replayed as a helper method's is (:mod:`~linen2nnx.migrate.helper_calls`): the
function's body takes the place of the call, its parameters bound to the arguments, and the module
pass plans what it builds like any layer of the class (its mode flags move to the call, an ``if`` on
config builds in the branch the config takes).

The function's module-level names are qualified as the call reaches the function (``Norm`` ->
``ops.Norm`` for ``ops.norm(...)``); a name its module imports is read in the caller only when the caller
imports the same thing under the same name. A function reading anything else (a global the caller
cannot reach), or whose body cannot stand in the caller's place, is not replayed: its calls stay, and
the verifier reports each one an NNX class makes. The facts are text, so that the files of a run that
import the function learn of it as they learn of its classes; they travel beside the run's factory
facts under a ``replay:`` key, which no reader of those looks up.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor, calls_in
from linen2nnx.migrate.cst_utils import absolute_qualname, code, names_in, parse_expression
from linen2nnx.migrate.helper_fold import ReplayError, bound_names, substitute
from linen2nnx.migrate.names import NameResolver

KEY_PREFIX = "replay:"
_BUILTINS = frozenset(dir(builtins))


@dataclasses.dataclass(frozen=True)
class ReplayableFunction:
    """A module-level function that applies a module it builds (see the module docstring)."""

    key: str  # absolute dotted name: pkg.ops.norm
    source: str  # the function as written
    own_names: tuple[str, ...]  # names of its module it reads: qualified by the caller's path to it
    imports: tuple[tuple[str, str], ...]  # names its module imports that it reads -> absolute qualname


def replayable_functions(tree: cst.Module, module_name: str) -> dict[str, ReplayableFunction]:
    """The replayable functions ``tree`` defines, under their ``replay:`` keys."""
    functions = [s for s in tree.body if isinstance(s, cst.FunctionDef) and not s.decorators]
    candidates = [fn for fn in functions if _applies_capitalised(fn)]
    if not candidates:
        return {}
    resolver = NameResolver(tree)
    classes = {s.name.value for s in tree.body if isinstance(s, cst.ClassDef)}
    own = top_level_names(tree)
    imports = top_level_imports(tree, module_name)
    found: dict[str, ReplayableFunction] = {}
    for fn in candidates:
        if not _applies_module(fn, resolver, classes):
            continue
        free = free_names(fn)
        if not free <= own | set(imports) | _BUILTINS or "self" in free:
            continue
        fact = replayable(fn, module_name, free, own, imports)
        found[KEY_PREFIX + fact.key] = fact
    return found


def replayable(
    fn: cst.FunctionDef, module_name: str, free: set[str], own: set[str], imports: Mapping[str, str]
) -> ReplayableFunction:
    """The fact of ``fn``, which reads the names ``free``: those of its module (``own``) qualified by a
    caller's path to it, those it imports by their absolute names."""
    key = f"{module_name}.{fn.name.value}" if module_name else fn.name.value
    return ReplayableFunction(
        key,
        code(fn),
        tuple(sorted(free & own)),
        tuple((n, imports[n]) for n in sorted(free & set(imports) - own)),
    )


def free_names(fn: cst.FunctionDef) -> set[str]:
    """The names ``fn`` reads that it does not bind: not its (or its lambdas') parameters or locals."""
    params: set[str] = set()

    class Params(FastVisitor):
        def visit_Param(self, node: cst.Param) -> None:
            params.add(node.name.value)

    Params().walk(fn)
    return (names_in(fn.body) - params - bound_names(fn.body)) | _default_names(fn)


def _default_names(fn: cst.FunctionDef) -> set[str]:
    params = fn.params
    plain = [*params.posonly_params, *params.params, *params.kwonly_params]
    return set().union(*(names_in(p.default) for p in plain if p.default is not None))


def top_level_names(tree: cst.Module) -> set[str]:
    """Names a module binds at its top level other than by import: classes, functions, assignments."""
    found: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            found.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if not isinstance(small, (cst.Import, cst.ImportFrom)):
                    found |= bound_names(cst.SimpleStatementLine(body=[small]))
        elif not isinstance(stmt, cst.SimpleStatementLine):
            found |= bound_names(stmt)
    return found


def top_level_imports(tree: cst.Module, module_name: str) -> dict[str, str]:
    """Name -> absolute qualname of what a module's top-level imports bind (``jnp`` -> ``jax.numpy``);
    a name bound twice is left out."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for stmt in tree.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            for name, qualname in _bindings(small, module_name):
                if name in seen:
                    found.pop(name, None)
                else:
                    found[name] = qualname
                seen.add(name)
    return found


def _bindings(small: cst.BaseSmallStatement, module_name: str) -> list[tuple[str, str]]:
    if isinstance(small, cst.Import):
        out = []
        for alias in small.names:
            full = code(alias.name)
            if alias.asname is not None:
                out.append((code(alias.asname.name), full))
            else:
                out.append((full.split(".")[0], full.split(".")[0]))
        return out
    if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
        base = "." * len(small.relative) + (code(small.module) if small.module is not None else "")
        out = []
        for alias in small.names:
            name = code(alias.asname.name) if alias.asname is not None else code(alias.name)
            sep = "" if base.endswith(".") else "."
            out.append((name, absolute_qualname(f"{base}{sep}{code(alias.name)}", module_name)))
        return out
    return []


def _applies_capitalised(fn: cst.FunctionDef) -> bool:
    """A cheap test before names are resolved: an applied constructor ``C(...)(...)`` of a capitalised
    name in the body."""
    for node in calls_in(fn.body):
        func = node.func
        if isinstance(func, cst.Call) and isinstance(func.func, (cst.Name, cst.Attribute)):
            leaf = func.func.value if isinstance(func.func, cst.Name) else func.func.attr.value
            if leaf[:1].isupper():
                return True
    return False


def _applies_module(fn: cst.FunctionDef, resolver: NameResolver, classes: set[str]) -> bool:
    """An applied constructor of a class of the module or of a ``flax.linen`` class in ``fn``'s body."""
    for node in calls_in(fn.body):
        func = node.func
        if not (isinstance(func, cst.Call) and isinstance(func.func, (cst.Name, cst.Attribute))):
            continue
        ctor = func.func
        if isinstance(ctor, cst.Name) and ctor.value in classes:
            return True
        if any(q.startswith("flax.linen.") for q in resolver.qualnames(ctor)):
            return True
    return False


def calls_to_replay(
    cls: cst.ClassDef,
    compact: set[str],
    resolver: NameResolver,
    module_name: str,
    functions: Mapping[str, Any],
) -> dict[str, ReplayableFunction]:
    """``code(callee)`` -> function, for each call statement of a compact method of ``cls`` whose callee
    is a replayable function (of this file or of another file of the run)."""
    found: dict[str, ReplayableFunction] = {}

    class V(FastVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            for small in node.body:
                value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
                if not (isinstance(value, cst.Call) and isinstance(value.func, (cst.Name, cst.Attribute))):
                    continue
                for q in resolver.qualnames(value.func):
                    keys = [absolute_qualname(q, module_name)]
                    if module_name and isinstance(value.func, cst.Name):
                        keys.append(f"{module_name}.{q}")  # a function of this file
                    for key in keys:
                        fact = functions.get(KEY_PREFIX + key)
                        if isinstance(fact, ReplayableFunction):
                            found[code(value.func)] = fact

    for member in cls.body.body:
        if isinstance(member, cst.FunctionDef) and member.name.value in compact:
            V().walk(member.body)
    return found


def prepared(
    callee: str, fact: ReplayableFunction, caller_imports: Mapping[str, str], same_module: bool
) -> cst.FunctionDef:
    """The function as it reads in the caller: its module's names reached the way the call reaches the
    function (``Norm`` -> ``ops.Norm``); raises :class:`ReplayError` when a name it imports is not the
    caller's same import."""
    fn = cst.parse_statement(fact.source)
    assert isinstance(fn, cst.FunctionDef)
    for name, qualname in fact.imports:
        if caller_imports.get(name) != qualname:
            raise ReplayError(f"{name} is not imported as {qualname} where {callee} is called")
    if same_module or not fact.own_names:
        return fn
    prefix = callee.rpartition(".")[0]
    if not prefix:
        raise ReplayError(f"{callee} is imported by name: its module's names are not reachable")
    values = {n: parse_expression(f"{prefix}.{n}") for n in fact.own_names}
    return substitute(fn, values)  # type: ignore[return-value]
