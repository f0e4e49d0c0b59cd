"""Replaying one call of a helper method in its caller's place (see :mod:`~.helper_calls`).

The helper's body stands for ``x = self.h(x, features=64, n=2, idx=1)``: a parameter it only reads is
replaced by the argument (parenthesised where an operator needs it), one it rebinds must be passed
by the name the result goes to (``x``), the final ``return`` becomes the assignment. Then what the
arguments made static is folded: ``for i in range(2)`` whose layer names read ``i`` is unrolled
(a count chosen by a condition, ``3 if c else 4``, builds the last copies under that condition),
``f'conv{1}_{0 + 1}'`` becomes ``'conv1_1'``, ``if True:`` its body, a local holding a literal is
read as the literal, and a local read once right after it is computed is written at its use. What
cannot be replayed raises :class:`ReplayError` and the class is left as it was.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor, calls_in, contains
from linen2nnx.migrate.cst_utils import code, is_docstring, name_counts, names_in, single_assign
from linen2nnx.migrate.function_replay import free_names
from linen2nnx.migrate.helper_fold import (
    ReplayError,
    bound_names,
    fold,
    fold_ifs,
    is_literal,
    name_reads,
    paren,
    pure,
    statements,
    substitute,
    unparen,
)

__all__ = ["ReplayError", "Replayer"]

_MAX_UNROLL = 16


def _unroll_count(it: cst.BaseExpression) -> tuple[int, int, cst.BaseExpression | None] | None:
    """``range(3)`` -> (3, 3, None); ``range(3 if c else 4)`` -> (3, 4, c): (copies always built, copies
    in all, the condition of the others)."""
    if not (
        isinstance(it, cst.Call)
        and isinstance(it.func, cst.Name)
        and it.func.value == "range"
        and len(it.args) == 1
        and it.args[0].keyword is None
        and not it.args[0].star
    ):
        return None
    n = unparen(it.args[0].value)
    if isinstance(n, cst.Integer):
        return int(n.value), int(n.value), None
    if isinstance(n, cst.IfExp) and isinstance(n.body, cst.Integer) and isinstance(n.orelse, cst.Integer):
        a, b = int(n.body.value), int(n.orelse.value)
        if not pure(n.test):
            return None
        test = n.test if a > b else cst.UnaryOperation(cst.Not(), paren(n.test))
        return min(a, b), max(a, b), test
    return None


class _NameReadsVar(FastVisitor):
    """Whether a ``name=`` argument of a call reads ``var``."""

    def __init__(self, var: str, computed: set[str]) -> None:
        self.var, self.computed, self.found = var, computed, False

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value == "name":
            self.found |= bool(names_in(node.value) & ({self.var} | self.computed))


def unroll(stmts: list[cst.BaseStatement], rest_reads: set[str]) -> list[cst.BaseStatement]:
    """Unrolls ``for v in range(<literal>)`` whose layer names depend on ``v`` (see module docstring);
    ``rest_reads``: names read after the block."""
    out: list[cst.BaseStatement] = []
    for index, stmt in enumerate(stmts):
        count = _unroll_count(stmt.iter) if isinstance(stmt, cst.For) else None
        if count is None or not isinstance(stmt.target, cst.Name):  # type: ignore[union-attr]
            out.append(stmt)
            continue
        var = stmt.target.value  # type: ignore[union-attr]
        body = statements(stmt.body)  # type: ignore[union-attr]
        computed = set().union(*(bound_names(s) for s in body if name_reads(s, var)))
        reads = _NameReadsVar(var, computed)
        reads.walk(stmt.body)  # type: ignore[union-attr]
        later = set().union(*(names_in(s) for s in stmts[index + 1 :])) | rest_reads
        if (
            not reads.found
            or stmt.orelse is not None  # type: ignore[union-attr]
            or count[1] > _MAX_UNROLL
            or var in bound_names(stmt.body) | later  # type: ignore[union-attr]
            or _jumps(stmt)
        ):
            out.append(stmt)
            continue
        always, total, test = count
        copies = [[fold(substitute(s, {var: cst.Integer(str(k))})) for s in body] for k in range(total)]
        out.extend(s for copy in copies[:always] for s in copy)
        if total > always:  # the copies a count chosen by a test adds, under that test
            out.append(
                cst.If(test=test, body=cst.IndentedBlock(body=[s for c in copies[always:] for s in c]))
            )  # type: ignore[arg-type]
    return out


def _jumps(loop: cst.For) -> bool:
    return contains(loop.body, (cst.Break, cst.Continue, cst.Return))


def _propagate(stmts: list[cst.BaseStatement], local_names: set[str], env: dict) -> list[cst.BaseStatement]:
    """Reads of a local of ``local_names`` that holds a literal become the literal (``name=layer_name``
    -> ``name='conv1_1'``), into the branches of an ``if`` too."""
    env = dict(env)
    out: list[cst.BaseStatement] = []
    for stmt in stmts:
        bound = bound_names(stmt)
        if isinstance(stmt, cst.SimpleStatementLine):
            stmt = fold(substitute(stmt, env))
        elif isinstance(stmt, cst.If):
            stmt = _propagate_if(stmt, local_names, {k: v for k, v in env.items() if k not in bound})
        else:
            stmt = fold(substitute(stmt, {k: v for k, v in env.items() if k not in bound}))
        for name in bound:
            env.pop(name, None)
        assign = single_assign(stmt)
        if assign is not None and assign[0] in local_names and is_literal(assign[1]):
            env[assign[0]] = assign[1]
        out.append(stmt)
    return out


def _propagate_if(stmt: cst.If, local_names: set[str], env: dict) -> cst.If:
    test = fold(substitute(stmt.test, env))
    body = stmt.body.with_changes(body=_propagate(statements(stmt.body), local_names, env))
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):
        orelse = _propagate_if(orelse, local_names, env)
    elif isinstance(orelse, cst.Else):
        orelse = orelse.with_changes(
            body=orelse.body.with_changes(body=_propagate(statements(orelse.body), local_names, env))
        )
    if isinstance(stmt.body, cst.SimpleStatementSuite):
        body = cst.IndentedBlock(body=body.body)
    return stmt.with_changes(test=test, body=body, orelse=orelse)


def _forward(stmts: list[cst.BaseStatement], local_names: set[str]) -> list[cst.BaseStatement]:
    """``w = <pure>`` read once, by a later simple statement of the same block before anything it reads
    changes, is written at its use (``kernel_init=w`` -> ``kernel_init=<pure>``); a value with a call
    (``init = nn.initializers.lecun_normal()``) only when the very next statement reads it."""
    stmts = [
        s.with_changes(body=s.body.with_changes(body=_forward(statements(s.body), local_names)))
        if isinstance(s, cst.If) and isinstance(s.body, cst.IndentedBlock)
        else s
        for s in stmts
    ]
    i = 0
    while i < len(stmts):
        assign = single_assign(stmts[i])
        if assign is None or assign[0] not in local_names:
            i += 1
            continue
        name, value = assign
        end = next((j for j in range(i + 1, len(stmts)) if name in bound_names(stmts[j])), len(stmts))
        reads = [k for k in range(i + 1, end) if name_reads(stmts[k], name)]
        if end < len(stmts) and (
            not isinstance(stmts[end], cst.SimpleStatementLine) or name_reads(stmts[end], name)
        ):
            reads.append(end)  # read where it is rebound (`w = w + 1`, or in an `if` that rebinds it)
        changed = set().union(*(bound_names(stmts[m]) for m in range(i + 1, reads[0]))) if reads else set()
        if (
            len(reads) != 1
            or name_reads(stmts[reads[0]], name) != 1
            or not isinstance(stmts[reads[0]], cst.SimpleStatementLine)
            or names_in(value) & changed
            or ("self" in names_in(value) and _binds_self_attrs(stmts[i + 1 : reads[0]]))
            or (
                reads[0] != i + 1 and not pure(value)
            )  # a call is evaluated where it was, just before its use
            or (_builds_applied(value) and _builds_applied(stmts[reads[0]]))
        ):
            i += 1
            continue
        stmts[reads[0]] = substitute(stmts[reads[0]], {name: value})
        del stmts[i]
    return stmts


def _builds_applied(node: cst.CSTNode) -> bool:
    """``node`` builds and applies a module (``nn.Dense(3)(y)``). Forwarded into a statement that builds
    one too (``w = nn.Dense(3)(w)``), it would be built second (``nn.Dense(3)(nn.Dense(3)(y))`` builds
    the outer layer first), and Linen's auto-names (``Dense_0``, ``Dense_1``) would swap weights."""
    return any(isinstance(call.func, cst.Call) for call in calls_in(node))


def _binds_self_attrs(stmts: list[cst.BaseStatement]) -> bool:
    """Whether ``stmts`` assign an attribute of ``self`` (a setup helper's ``self.width = ...``): a
    value reading ``self.width`` must then stay before them."""

    class Binds(FastVisitor):
        found = False

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self.found = self.found or "self" in names_in(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self.found = self.found or "self" in names_in(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self.found = self.found or "self" in names_in(node.target)

    binds = Binds()
    for stmt in stmts:
        binds.walk(stmt)
    return binds.found


def _without_dead(stmts: list[cst.BaseStatement], local_names: set[str]) -> list[cst.BaseStatement]:
    """Drops ``n = <pure>`` of a local no statement reads any more."""
    read = set().union(*(names_in(s) - _assigned_only(s) for s in stmts)) if stmts else set()

    def keep(stmt: cst.BaseStatement) -> bool:
        assign = single_assign(stmt)
        return not (assign and assign[0] in local_names and assign[0] not in read and pure(assign[1]))

    out = []
    for stmt in stmts:
        if isinstance(stmt, cst.If):
            stmt = stmt.with_changes(
                body=stmt.body.with_changes(body=[s for s in statements(stmt.body) if keep(s)])
            )
        if keep(stmt):
            out.append(stmt)
    return out


def _assigned_only(stmt: cst.BaseStatement) -> set[str]:
    """The names ``stmt`` binds and never reads."""
    return {n for n in bound_names(stmt) if not name_reads(stmt, n)}


class Replayer:
    """Replays the calls of ``helpers`` (name -> method) in the methods given to :meth:`replay_method`."""

    def __init__(
        self, helpers: dict[str, cst.FunctionDef], functions: dict[str, cst.FunctionDef] | None = None
    ) -> None:
        self.helpers = dict(helpers)  # method name -> method; module functions by the callee's code
        self.functions = set(functions or ())
        self.helpers.update(functions or {})
        self.expanding: list[str] = []
        self.caller_bound: set[str] = set()  # names the method being replayed binds
        self.all_locals: set[str] = set()  # the locals of every helper replayed so far

    def replay_method(self, fn: cst.FunctionDef) -> cst.FunctionDef:
        """``fn`` with every helper call statement replayed (raises :class:`ReplayError`)."""
        caller_names = names_in(fn)
        self.caller_bound = bound_names(fn.body) | {p.name.value for p in fn.params.params}
        replayer = self

        class Blocks(cst.CSTTransformer):
            def leave_IndentedBlock(
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock
            ) -> cst.IndentedBlock:
                return updated.with_changes(body=replayer.replay_block(list(updated.body), caller_names))

            def leave_SimpleStatementSuite(
                self, original: cst.SimpleStatementSuite, updated: cst.BaseSuite
            ) -> cst.BaseSuite:
                if any(replayer.helper_call(s) for s in updated.body):  # type: ignore[attr-defined]
                    raise ReplayError("a helper call on the line of its `if` / `for`")
                return updated

            def leave_For(self, original: cst.For, updated: cst.For) -> Any:
                return replayer.unroll_caller_loop(fn, original, updated)

        return fn.visit(Blocks())  # type: ignore[return-value]

    def unroll_caller_loop(self, fn: cst.FunctionDef, original: cst.For, updated: cst.For) -> Any:
        """``for i in range(3): x = self.block(x, index=i)`` whose replayed layers are named from ``i``:
        unrolled as a helper's own loop is, when ``i`` is not read outside the loop."""
        var = original.target.value if isinstance(original.target, cst.Name) else None
        if var is None or name_counts(fn).get(var) != name_counts(original).get(var):
            return updated
        if not any(self.helper_call(s) for line in _lines(original.body) for s in line.body):
            return updated
        stmts = unroll([updated], set())
        if len(stmts) == 1 and stmts[0] is updated:
            return updated
        stmts = _without_dead(
            _forward(_propagate(stmts, self.all_locals, {}), self.all_locals), self.all_locals
        )
        return cst.FlattenSentinel(stmts)

    def helper_call(self, small: cst.BaseSmallStatement) -> str | None:
        call = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
        if not isinstance(call, cst.Call):
            return None
        if self.functions and isinstance(call.func, (cst.Name, cst.Attribute)):
            callee = code(call.func)
            if callee in self.functions:
                return callee
        if not isinstance(call.func, cst.Attribute):
            return None
        func = call.func
        if (
            isinstance(func.value, cst.Name)
            and func.value.value == "self"
            and func.attr.value in self.helpers
            and func.attr.value not in self.functions
        ):
            return func.attr.value
        return None

    def replay_block(self, stmts: list[cst.BaseStatement], caller_names: set[str]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for stmt in stmts:
            if not isinstance(stmt, cst.SimpleStatementLine) or not any(
                self.helper_call(s) for s in stmt.body
            ):
                out.append(stmt)
                continue
            if len(stmt.body) != 1:
                raise ReplayError("a helper call shares its line with other statements")
            out.extend(self._replay_call(stmt, caller_names))
        return out

    def _replay_call(self, line: cst.SimpleStatementLine, caller_names: set[str]) -> list[cst.BaseStatement]:
        small = line.body[0]
        call: cst.Call = small.value  # type: ignore[attr-defined]
        name = self.helper_call(small)
        assert name is not None
        if name in self.expanding:
            raise ReplayError(f"{name} calls itself")
        target: cst.BaseAssignTargetExpression | None = None
        results: set[str] = set()  # the names the result goes to
        if isinstance(small, cst.Assign):
            names = result_names(small.targets[0].target) if len(small.targets) == 1 else None
            if names is None:
                raise ReplayError("the result of a helper call is unpacked into more than names")
            target, results = small.targets[0].target, set(names)
        helper = self.helpers[name]
        values, renames = self._bind(helper, call, results, name in self.functions)
        local_names = bound_names(helper.body) - set(values) - set(renames)
        self.all_locals |= local_names
        # a local named as the result may overwrite it early: the result is assigned last, and no
        # argument reads it (_bind), so nothing of the caller's reads the value it had before; not a
        # name a rebound parameter takes (the local and the parameter would be one variable)
        clash = local_names & caller_names - (results - set(renames.values()))
        if clash:
            raise ReplayError(f"{name}'s locals {sorted(clash)} are the caller's names")
        params = {p.name.value for p in (*helper.params.params, *helper.params.kwonly_params)}
        free = names_in(helper.body) - bound_names(helper.body) - params
        if free & (self.caller_bound - params):  # `init` of the module, shadowed by a local of the caller
            raise ReplayError(f"{name} reads {sorted(free & self.caller_bound)}, which the caller binds")
        body = self._body(helper, target, renames)
        self.expanding.append(name)
        try:
            body = self.replay_block(body, caller_names | local_names)
        finally:
            self.expanding.pop()
        stmts = [fold(substitute(s, values, renames)) for s in body]
        stmts = fold_ifs(unroll(stmts, set()))
        stmts = _without_dead(_forward(_propagate(stmts, local_names, {}), local_names), local_names)
        if not stmts:
            stmts = [cst.SimpleStatementLine(body=[cst.Pass()])]
        note = cst.EmptyLine(comment=cst.Comment(f"# replayed: {' '.join(code(small).split())}"))
        first = stmts[0]
        stmts[0] = first.with_changes(leading_lines=[*line.leading_lines, note, *first.leading_lines])
        return stmts

    def _bind(
        self,
        helper: cst.FunctionDef,
        call: cst.Call,
        targets: set[str],
        function: bool = False,
    ) -> tuple[dict[str, cst.BaseExpression], dict[str, str]]:
        """(values of the parameters the helper only reads, caller names of those it rebinds: each
        must be passed by a name the result goes to, one of ``targets``)."""
        params = helper.params
        if isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None:
            raise ReplayError("a helper with *args / **kwargs")
        positional = [*params.posonly_params, *params.params]
        if function:  # a module-level function: no self, and the names of its module it reads must
            free = free_names(helper)
            if free & self.caller_bound:  # not meet the caller's locals
                raise ReplayError(f"the caller binds {sorted(free & self.caller_bound)}, which it reads")
        elif not positional or positional[0].name.value != "self":
            raise ReplayError("a helper whose first parameter is not self")
        else:
            positional = positional[1:]
        by_name = {p.name.value: p for p in [*positional, *params.kwonly_params]}
        given: dict[str, cst.BaseExpression] = {}
        for index, arg in enumerate(call.args):
            if arg.star:
                raise ReplayError("a helper called with *args / **kwargs")
            if arg.keyword is None:
                if index >= len(positional):
                    raise ReplayError("too many positional arguments")
                given[positional[index].name.value] = arg.value
            elif arg.keyword.value in by_name:
                given[arg.keyword.value] = arg.value
            else:
                raise ReplayError(f"no parameter {arg.keyword.value}")
        for pname, p in by_name.items():
            if pname not in given:
                if p.default is None or not pure(p.default) or names_in(p.default) & self.caller_bound:
                    raise ReplayError(f"{pname} is neither passed nor a plain default the caller sees")
                given[pname] = p.default
        rebound = bound_names(helper.body) & set(given)
        values: dict[str, cst.BaseExpression] = {}
        renames: dict[str, str] = {}
        for pname, value in given.items():
            if pname in rebound:
                if not (isinstance(value, cst.Name) and value.value in targets):
                    raise ReplayError(f"{pname} is rebound but not passed as the result's name")
                renames[pname] = value.value
            elif not pure(value):
                raise ReplayError(f"{pname}: an argument with a call")
            else:
                values[pname] = value
        if len(renames) > 1 or any(targets & names_in(v) for v in values.values()):
            raise ReplayError("the result's name is read by another argument")
        return values, renames

    def _body(
        self,
        helper: cst.FunctionDef,
        target: cst.BaseAssignTargetExpression | None,
        renames: dict[str, str],
    ) -> list[cst.BaseStatement]:
        """The helper's statements, each ``return`` that ends it turned into the assignment of the
        result: its final one, or one at the end of every path of a final ``if`` / ``else``
        (``if self.deterministic: return a`` / ``else: return b``)."""
        body = [s for i, s in enumerate(statements(helper.body)) if not (i == 0 and is_docstring(s))]

        def result(ret: cst.BaseExpression | None) -> list[cst.BaseSmallStatement]:
            value = substitute(ret, {}, renames) if ret is not None else cst.Name("None")
            if target is not None:
                if (
                    isinstance(value, cst.Name)
                    and isinstance(target, cst.Name)
                    and value.value == target.value
                ):
                    return []
                return [cst.Assign(targets=[cst.AssignTarget(target)], value=value)]
            return [cst.Expr(ret)] if ret is not None and not pure(ret) else []

        body = _guards_to_else(body)
        if body:
            body[-1:] = _ending(body[-1], result)
        if _returns(body):
            raise ReplayError("a return before the helper's end")
        return body


def result_names(target: cst.BaseExpression) -> list[str] | None:
    """The names a call's result goes to: ``x`` or ``x, aux`` (no starred or nested target); else None."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        names = [
            e.value.value
            for e in target.elements
            if isinstance(e, cst.Element) and isinstance(e.value, cst.Name)
        ]
        return names if len(names) == len(target.elements) else None
    return None


def _ending(stmt: cst.BaseStatement, result: Any) -> list[cst.BaseStatement]:
    """``stmt``, the helper's last, with the ``return`` that ends it replaced by ``result(value)``
    (small statements): a ``return`` line, or an ``if`` whose every path (``else`` included) ends in
    one. Anything else is kept as it is (a helper that falls off its end returns None)."""
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[-1], cst.Return):
        small = [*stmt.body[:-1], *result(stmt.body[-1].value)]
        return [stmt.with_changes(body=small)] if small else []
    if isinstance(stmt, cst.If) and stmt.orelse is not None and _ends_in_return(stmt):
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            orelse = _ending(orelse, result)[0]
        else:
            orelse = orelse.with_changes(body=_ended_block(orelse.body, result))
        return [stmt.with_changes(body=_ended_block(stmt.body, result), orelse=orelse)]
    return [stmt]


def _guards_to_else(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``if c: ...; return a`` followed by more statements (a guard) -> ``if c: ...; return a`` /
    ``else:`` the rest, which is the same program, so that every return of the helper ends it."""
    for index, stmt in enumerate(stmts[:-1]):
        if isinstance(stmt, cst.If) and stmt.orelse is None and _ends_in_return(statements(stmt.body)[-1]):
            rest = cst.IndentedBlock(body=_guards_to_else(stmts[index + 1 :]))
            return [*stmts[:index], stmt.with_changes(orelse=cst.Else(body=rest))]
    return stmts


def _ended_block(block: cst.BaseSuite, result: Any) -> cst.BaseSuite:
    stmts = statements(block)
    stmts[-1:] = _ending(stmts[-1], result)
    if not stmts:
        stmts = [cst.SimpleStatementLine(body=[cst.Pass()])]
    return (
        cst.IndentedBlock(body=stmts)
        if isinstance(block, cst.SimpleStatementSuite)
        else block.with_changes(body=stmts)
    )


def _ends_in_return(stmt: cst.BaseStatement) -> bool:
    """Every path through ``stmt`` ends in a ``return`` statement it holds last."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return isinstance(stmt.body[-1], cst.Return)
    if isinstance(stmt, cst.If):
        if stmt.orelse is None:
            return False
        last = statements(stmt.body)[-1:]
        other = stmt.orelse if isinstance(stmt.orelse, cst.If) else statements(stmt.orelse.body)[-1]
        return bool(last) and _ends_in_return(last[0]) and _ends_in_return(other)
    return False


def _lines(node: cst.CSTNode) -> list[cst.SimpleStatementLine]:
    """Every simple statement line in ``node`` (outside nested functions)."""
    found: list[cst.SimpleStatementLine] = []

    class V(FastVisitor):
        def visit_SimpleStatementLine(self, n: cst.SimpleStatementLine) -> None:
            found.append(n)

        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return False

    V().walk(node)
    return found


def _returns(stmts: list[cst.BaseStatement]) -> bool:
    found = False

    class V(FastVisitor):
        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return False

        def visit_Return(self, n: cst.Return) -> None:
            nonlocal found
            found = True

        visit_Yield = visit_Global = visit_Nonlocal = visit_Return  # type: ignore[assignment]

    for s in stmts:
        V().walk(s)
    return found
