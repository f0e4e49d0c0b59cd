"""Module-level functions handed the module that create a parameter on it: each assignment replayed.

Real Linen code shares a parameter recipe between classes as a function of the module::

    def get_posemb(self, typ, seqshape, width, name, dtype=jnp.float32):
        if typ == "learn":
            return self.param(name, nn.initializers.normal(stddev=1 / np.sqrt(width)),
                              (1, np.prod(seqshape), width), dtype)
        elif typ == "sincos2d":
            return posemb_sincos_2d(*seqshape, width, dtype=dtype)
        else:
            raise ValueError(typ)

    class Encoder(nn.Module):
        def setup(self):
            self.pos = vit.get_posemb(self, self.posemb, self.grid, self.width, "pos")

An NNX module has no ``param``, so the call cannot stay. Linen creates the parameter in the caller's
scope under ``name``, exactly as ``self.param(name, ...)`` written in the caller would. So an
assignment ``target = f(self, ...)`` in ``setup`` (to ``self.<attr>``) or in a compact method (to a
local) is replaced by the function's body with its parameters bound to the call's arguments and each
``return value`` turned into ``target = value``: the module pass then plans that parameter like any
other (an ``if`` on config creates it in the branch the config takes; a size read at call time stays
a finding). The replay is exact only when the body is a chain of ``if`` branches that each end in one
``return`` or ``raise`` (nothing runs after a branch), ``self`` is read only as ``self.param``, and every
argument is pure (no call: substituting it for each read evaluates the same value); and only when the
call's name is the module-level function (not a local of the caller), no default reads a module-level
name the file binds twice (a default is the value when the ``def`` ran), every parameter is named by a
string literal, and the body binds no local that the caller or an earlier replay in the same method
binds (``__init__`` computes the replayed locals before the parameters). Anything else keeps the call,
which the verifier reports.

The facts travel like :mod:`~linen2nnx.migrate.function_replay`'s, under a ``param_helper:`` key.
"""

from __future__ import annotations

import builtins
import functools
import keyword
from collections.abc import Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor, contains
from linen2nnx.migrate.cst_utils import absolute_qualname, code, names_in
from linen2nnx.migrate.function_replay import (
    ReplayableFunction,
    free_names,
    prepared,
    replayable,
    top_level_imports,
    top_level_names,
)
from linen2nnx.migrate.helper_fold import (
    ReplayError,
    bound_names,
    fold,
    fold_ifs,
    pure,
    statements,
    substitute,
)
from linen2nnx.migrate.names import NameResolver

KEY_PREFIX = "param_helper:"
_BUILTINS = frozenset(dir(builtins))


def param_helper_functions(tree: cst.Module, module_name: str) -> dict[str, ReplayableFunction]:
    """The functions of ``tree`` whose first parameter ``self`` is read only as ``self.param(...)``
    and whose body is a chain of branches each ending in one ``return`` or ``raise``."""
    candidates = [
        s
        for s in tree.body
        if isinstance(s, cst.FunctionDef) and not s.decorators and _shape_ok(s) and "self.param" in code(s)
    ]
    if not candidates:
        return {}
    own = top_level_names(tree)
    imports = top_level_imports(tree, module_name)
    rebound = _rebound_top_level(tree)
    found: dict[str, ReplayableFunction] = {}
    for fn in candidates:
        free = free_names(fn)
        if not free <= own | set(imports) | _BUILTINS:
            continue
        defaults = [p.default for p in (*fn.params.params, *fn.params.kwonly_params) if p.default is not None]
        if any(names_in(d) & rebound for d in defaults):
            continue  # evaluated when the def ran: a replay would read the name's last value
        fact = replayable(fn, module_name, free, own, imports)
        found[KEY_PREFIX + fact.key] = fact
    return found


def _rebound_top_level(tree: cst.Module) -> set[str]:
    """Module-level names bound by more than one statement of the file's top level."""
    counts: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names = {stmt.name.value}
        else:
            names = bound_names(stmt)
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return {name for name, n in counts.items() if n > 1}


def _shape_ok(fn: cst.FunctionDef) -> bool:
    """``self`` first, no ``*args`` / ``**kwargs``, ``self`` read only as ``self.param``, a body of
    branches that each end in one return or raise."""
    params = fn.params
    plain = [*params.posonly_params, *params.params]
    if not plain or plain[0].name.value != "self" or params.star_kwarg is not None:
        return False
    if isinstance(params.star_arg, cst.Param):
        return False
    if any(p.name.value == "self" for p in [*plain[1:], *params.kwonly_params]):
        return False
    return _only_param_uses(fn.body) and _ends(statements(fn.body))


def _only_param_uses(body: cst.CSTNode) -> bool:
    """Every read of ``self`` under ``body`` is the object of a ``self.param(...)`` call (none in a
    nested function or lambda, where it could escape)."""
    counts = {"self": 0, "param": 0, "nested": 0}

    class V(FastVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            counts["self"] += node.value == "self"

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                counts["param"] += func.value.value == "self" and func.attr.value == "param"

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            counts["nested"] += 1

        visit_Lambda = visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

    V().walk(body)
    return counts["nested"] == 0 and counts["self"] == counts["param"] > 0


def _ends(stmts: list[cst.BaseStatement]) -> bool:
    """Only the last statement may return or raise, and it must: one ``return`` / ``raise``, or an
    ``if`` whose every branch (an ``else`` required) ends so; nothing else in the body returns."""
    if not stmts:
        return False
    *head, last = stmts
    if any(_jumps(s) for s in head):
        return False
    if isinstance(last, cst.SimpleStatementLine):
        *before, final = last.body
        return isinstance(final, (cst.Return, cst.Raise)) and not any(
            isinstance(b, (cst.Return, cst.Raise)) for b in before
        )
    if isinstance(last, cst.If):
        orelse = last.orelse
        if orelse is None:
            return False
        rest = [orelse] if isinstance(orelse, cst.If) else statements(orelse.body)
        return _ends(statements(last.body)) and _ends(rest)
    return False


def _jumps(stmt: cst.CSTNode) -> bool:
    return contains(stmt, (cst.Return, cst.Yield), opaque=(cst.FunctionDef, cst.Lambda))


def helper_of(call: cst.Call, resolver: NameResolver, module_name: str, facts: Mapping[str, Any]) -> Any:
    """The param-helper fact ``call`` calls with ``self`` as its first argument, or None."""
    func = call.func
    if not isinstance(func, (cst.Name, cst.Attribute)) or not call.args:
        return None
    first = call.args[0]
    if (
        first.keyword is not None
        or first.star
        or not (isinstance(first.value, cst.Name) and first.value.value == "self")
    ):
        return None
    qualnames = resolver.qualnames(func)
    keys = [absolute_qualname(q, module_name) for q in qualnames]
    if isinstance(func, cst.Name):  # a function of this file, unless the caller binds the name itself
        if qualnames != {func.value}:  # a local, a parameter, an import in the function, ...
            return None
        keys.append(f"{module_name}.{func.value}" if module_name else func.value)
    for key in keys:
        fact = facts.get(KEY_PREFIX + key)
        if isinstance(fact, ReplayableFunction):
            return fact
    return None


def replay_assignment(
    target: cst.BaseAssignTargetExpression,
    call: cst.Call,
    fact: ReplayableFunction,
    caller_imports: Mapping[str, str],
    module_name: str,
) -> list[cst.BaseStatement]:
    """``target = f(self, ...)`` as the statements of ``f``'s body with its parameters bound and each
    ``return v`` turned into ``target = v``; raises :class:`ReplayError` when that is not exact."""
    callee = code(call.func)
    fn = prepared(callee, fact, caller_imports, fact.key.rpartition(".")[0] == module_name)
    values = _bind(fn, call)
    body = substitute(fn.body, values)
    out = fold_ifs([fold(s) for s in statements(body)])
    return [_assigning(s, target) for s in out]


def _bind(fn: cst.FunctionDef, call: cst.Call) -> dict[str, cst.BaseExpression]:
    params = fn.params
    positional = [*params.posonly_params, *params.params][1:]
    by_name = {p.name.value: p for p in [*positional, *params.kwonly_params]}
    given: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args[1:]):
        if arg.star:
            raise ReplayError("called with *args / **kwargs")
        if not pure(arg.value):
            raise ReplayError(f"argument {code(arg.value)} is not pure")
        if arg.keyword is None:
            if index >= len(positional):
                raise ReplayError("too many positional arguments")
            given[positional[index].name.value] = arg.value
        elif arg.keyword.value in by_name and arg.keyword.value not in given:
            given[arg.keyword.value] = arg.value
        else:
            raise ReplayError(f"no parameter {arg.keyword.value}")
    for pname, p in by_name.items():
        if pname not in given:
            if p.default is None or not pure(p.default):
                raise ReplayError(f"{pname} is neither passed nor a plain default")
            given[pname] = p.default
    if bound_names(fn.body) & (set(given) | {"self"}):
        raise ReplayError("the function rebinds a parameter")
    return {k: cst.ensure_type(v, cst.BaseExpression) for k, v in given.items()}


def _assigning(stmt: cst.BaseStatement, target: cst.BaseAssignTargetExpression) -> cst.BaseStatement:
    """``stmt`` with its (final) ``return v`` written ``target = v``."""
    if isinstance(stmt, cst.SimpleStatementLine):
        body = list(stmt.body)
        last = body[-1]
        if isinstance(last, cst.Return):
            if last.value is None:
                raise ReplayError("a bare return")
            body[-1] = cst.Assign(targets=[cst.AssignTarget(target=target)], value=last.value)
        return stmt.with_changes(body=body)
    if isinstance(stmt, cst.If):
        new_body = [_assigning(s, target) for s in statements(stmt.body)]
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            orelse = _assigning(orelse, target)
        elif isinstance(orelse, cst.Else):
            orelse = orelse.with_changes(
                body=cst.IndentedBlock(body=[_assigning(s, target) for s in statements(orelse.body)])
            )
        return stmt.with_changes(body=cst.IndentedBlock(body=new_body), orelse=orelse)
    return stmt


def replay_param_helpers(
    fn: cst.FunctionDef,
    resolver: NameResolver,
    module_name: str,
    facts: Mapping[str, Any],
    caller_imports: Mapping[str, str],
) -> cst.FunctionDef:
    """``fn`` (a ``setup`` or compact method) with each ``target = helper(self, ...)`` statement
    replayed; an assignment that cannot be replayed exactly is left as written."""
    replay = _MethodReplay(fn, resolver, module_name, facts, caller_imports)

    class T(cst.CSTTransformer):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn

        def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> Any:
            body: list[cst.BaseStatement] = []
            for before, stmt in zip(original.body, updated.body):
                # a statement line holds no block: the original, whose names the resolver knows
                body.extend(
                    replay.statement(before) if isinstance(before, cst.SimpleStatementLine) else [stmt]
                )
            return updated.with_changes(body=body)

    return fn.visit(T())  # type: ignore[return-value]


class _MethodReplay:
    """The replays of one method's statements, and the names they must keep clear of."""

    def __init__(
        self,
        fn: cst.FunctionDef,
        resolver: NameResolver,
        module_name: str,
        facts: Mapping[str, Any],
        caller_imports: Mapping[str, str],
    ) -> None:
        self.setup = fn.name.value == "setup"
        self.resolver, self.module_name, self.facts, self.imports = (
            resolver,
            module_name,
            facts,
            caller_imports,
        )
        self.caller_bound = bound_names(fn.body) | {p.name.value for p in fn.params.params}
        self.caller_names = names_in(fn) | self.caller_bound
        self.replayed_bound: set[str] = set()  # the locals earlier replays bind: one more would rebind them

    def helper(self, call: cst.Call) -> Any:
        return helper_of(call, self.resolver, self.module_name, self.facts)

    def statement(self, stmt: cst.BaseStatement) -> list[cst.BaseStatement]:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return [stmt]
        small = stmt.body[0]
        if not (
            isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call)
        ):
            return [stmt] if self.setup else self.hoisted(stmt)
        target = small.targets[0].target
        attr_target = (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        )
        if not (attr_target if self.setup else isinstance(target, cst.Name)):
            return [stmt] if self.setup else self.hoisted(stmt)
        fact = self.helper(small.value)
        new = None if fact is None else self.replay(target, small.value, fact)
        if new is None:
            return [stmt]
        if new:
            new[0] = new[0].with_changes(leading_lines=stmt.leading_lines)
        return new

    def replay(
        self, target: cst.BaseAssignTargetExpression, call: cst.Call, fact: ReplayableFunction
    ) -> list[cst.BaseStatement] | None:
        """``target = call`` replayed, or None where that is not exact."""
        try:
            new = replay_assignment(target, call, fact, self.imports, self.module_name)
        except ReplayError:
            return None
        if not _literal_names(new):
            return None  # a name made at call time: kept, so the other calls still replay
        helper = fact_function(fact)
        if free_names(helper) & self.caller_bound:
            return None  # the body would read the caller's local, not its module's name
        own = bound_names(helper.body)
        if own & (self.caller_names | names_in(call) | self.replayed_bound | names_in(target)):
            return None  # a local of the body would clobber the caller's or an earlier replay's
        self.replayed_bound.update(own)
        return new

    def hoisted(self, stmt: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        """A compact method's statement that reads ``helper(self, ...)`` inside an expression
        (``x = x + get_posemb(self, ...)``): the call first, into a local of its own, then the
        statement reading that local. Exact where the call runs whenever the statement does (not under
        a conditional expression, a short-circuit or a lambda) and its arguments are pure, so reading
        them before the rest of the statement gives the same values; the helper only creates a
        parameter, which names it, so the order of creation changes no name."""
        small = stmt.body[0]
        if not isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr, cst.Return)):
            return [stmt]
        calls: list[tuple[cst.Call, ReplayableFunction]] = []
        _run_once_calls(small, calls, self.helper)
        if len(calls) != 1 or contains(small, (cst.NamedExpr,)):
            return [stmt]
        call, fact = calls[0]
        taken = self.caller_names | self.replayed_bound | free_names(fact_function(fact))
        try:  # the local is named after the parameter the helper creates, where it creates one
            probe = replay_assignment(cst.Name("_"), call, fact, self.imports, self.module_name)
        except ReplayError:
            return [stmt]
        local = _fresh_local(call, _param_names(probe), taken)
        new = self.replay(cst.Name(local), call, fact)
        if new is None:
            return [stmt]
        self.caller_names.add(local)
        self.caller_bound.add(local)
        rest = stmt.deep_replace(call, cst.Name(local))
        if new:
            new[0] = new[0].with_changes(leading_lines=stmt.leading_lines)
        return [*new, cst.ensure_type(rest, cst.SimpleStatementLine).with_changes(leading_lines=())]


_DEFERRED = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _run_once_calls(node: cst.CSTNode, found: list, helper: Any) -> None:
    """The calls under ``node`` that ``helper`` knows (with its fact) and that run exactly once
    whenever ``node`` runs: none under a lambda or comprehension, a conditional expression's branches
    or a short-circuit's right side."""
    if isinstance(node, _DEFERRED):
        return
    if isinstance(node, cst.IfExp):
        _run_once_calls(node.test, found, helper)
        return
    if isinstance(node, cst.BooleanOperation):
        _run_once_calls(node.left, found, helper)
        return
    if isinstance(node, cst.Call) and (fact := helper(node)) is not None:
        found.append((node, fact))
        return
    for child in node.children:
        _run_once_calls(child, found, helper)


def fact_function(fact: ReplayableFunction) -> cst.FunctionDef:
    """The helper's definition, parsed once per text (a hoisted call reads it twice)."""
    return _parsed_function(fact.source)


@functools.lru_cache(maxsize=256)
def _parsed_function(source: str) -> cst.FunctionDef:
    return cst.ensure_type(cst.parse_statement(source), cst.FunctionDef)


def _param_names(stmts: list[cst.BaseStatement]) -> set[str]:
    """The literal names of the ``self.param(...)`` calls of a replayed body."""
    found: set[str] = set()

    class V(FastVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if (
                code(node.func) == "self.param"
                and node.args
                and isinstance(node.args[0].value, cst.SimpleString)
            ):
                found.add(str(node.args[0].value.evaluated_value))

    for stmt in stmts:
        V().walk(stmt)
    return found


def _fresh_local(call: cst.Call, params: set[str], taken: set[str]) -> str:
    """A local for the value of ``get_posemb(self, ..., "pos_embedding")``: the parameter's name where
    the helper creates one (``pos_embedding``), else the helper's name less a ``get_`` / ``make_`` /
    ``_`` prefix (``posemb``); with ``_value`` or a number where that is taken."""
    func = call.func
    name = func.value if isinstance(func, cst.Name) else cst.ensure_type(func, cst.Attribute).attr.value
    for prefix in ("_", "get_", "make_", "create_", "init_"):
        if name.startswith(prefix) and name[len(prefix) :].isidentifier():
            name = name[len(prefix) :]
    if len(params) == 1 and (only := next(iter(params))).isidentifier():
        name = only
    if keyword.iskeyword(name) or name in _BUILTINS or name == "self":
        name = f"{name}_value"
    candidates = [name, f"{name}_value", *(f"{name}_{i}" for i in range(1, 100))]
    return next(c for c in candidates if c not in taken)


def _literal_names(stmts: list[cst.BaseStatement]) -> bool:
    """Every ``self.param(...)`` of a replayed body names its parameter by a string literal."""
    ok = True

    class V(FastVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal ok
            if code(node.func) == "self.param":
                first = node.args[0] if node.args else None
                ok = (
                    ok
                    and first is not None
                    and first.keyword is None
                    and isinstance(first.value, cst.SimpleString)
                )

    for stmt in stmts:
        V().walk(stmt)
    return ok


def missing_imports(tree: cst.Module, imports: Mapping[str, str], facts: Mapping[str, Any]) -> dict[str, str]:
    """Name -> absolute qualname of what the param helpers of ``facts`` import that the caller's file
    neither imports nor uses at all (``np`` for ``numpy``): importing it there changes nothing else,
    so a replayed body may read it once the import is added (:func:`with_imports`)."""
    used = names_in(tree) | top_level_names(tree) | set(imports)
    found: dict[str, str] = {}
    clash: set[str] = set()
    for key, fact in facts.items():
        if not (key.startswith(KEY_PREFIX) and isinstance(fact, ReplayableFunction)):
            continue
        for name, qualname in fact.imports:
            if name in used or qualname.startswith("."):
                continue
            if found.get(name, qualname) != qualname:
                clash.add(name)
            found[name] = qualname
    return {n: q for n, q in found.items() if n not in clash}


def with_imports(
    body: list[cst.BaseStatement], extra: Mapping[str, str], read: set[str]
) -> list[cst.BaseStatement]:
    """``body`` with an import of each name of ``extra`` that ``read`` holds, after its last leading
    import statement (``from numpy import ...`` reaches a module or a name alike)."""
    wanted = sorted(n for n in extra if n in read)
    if not wanted:
        return body
    lines = []
    for name in wanted:
        parent, _, leaf = extra[name].rpartition(".")
        alias = "" if leaf == name else f" as {name}"
        text = f"from {parent} import {leaf}{alias}" if parent else f"import {leaf}{alias}"
        lines.append(cst.parse_statement(text + "\n"))
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            at = i + 1
        elif not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)):
            break  # past the docstring and the leading imports
    return [*body[:at], *lines, *body[at:]]
