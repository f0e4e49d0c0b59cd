"""Locals of an ``@nn.compact`` method bound by a tuple unpacking, by an ``if`` on config, or before
the method rebinds them at call time: static where they are read, so ``__init__`` replays them.

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.local_planning.LocalPlanner`, which
plans the locals bound once by ``name = expr`` itself. Real code also computes a parameter's initial
value from config in several statements (StyleGAN's ``w, b = get_weight(...)`` under
``if self.use_bias:``, then ``w = self.param('weight', lambda *_: w)``): a local is static when every
value it is computed from is static (fields, literals, module-level names, other static locals), also
through tuple unpacking and through ``if`` / ``else`` branches whose test is static. A name the method
rebinds at call time later is static only up to that binding, so what counts as a call-time value
depends on where it is read (:meth:`StaticLocals.call_time_at`). Once ``__init__`` replays such a
statement, the method drops it where nothing reads what it bound any more (:func:`without_dead_statements`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

import libcst as cst

from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_in,
    code,
    comprehension_names,
    names_in,
)
from linen2nnx.migrate.loop_carry import carried_binding, read_before
from linen2nnx.migrate.rebound_locals import add_binding, exclusive_bindings, incomplete_chains
from linen2nnx.migrate.replayed_lines import replayed_assign
from linen2nnx.migrate.sites import ClassPlan, shape_last_refs


class StaticLocals:
    """The static statements of one method, found after the ``name = expr`` locals bound once."""

    def __init__(
        self,
        fn: cst.FunctionDef,
        counts: dict[str, int],
        side_effects: Callable[[cst.BaseExpression], bool],
        excluded: set[str],
        dead: Collection[tuple[str, int]] = (),
        pure: Callable[[cst.BaseExpression], bool] | None = None,
    ) -> None:
        self.fn = fn
        self.pure = pure  # a value calls nothing but pure functions (a loop's carried local: loop_carry.py)
        self.dead = set(dead)  # (name, id(top statement)): a binding nothing reads (rebound_locals.py)
        self.counts = counts  # local name -> how many times the method binds it (parameters once)
        self.side_effects = side_effects
        self.excluded = excluded  # names never static (lift aliases, parameters)
        self.static_at: dict[cst.BaseStatement, frozenset[str]] = {}  # top statement -> static at its start
        self.rebound: set[str] = set()  # static names the method rebinds at call time later
        self.replay_tests: dict[cst.BaseStatement, list[cst.BaseExpression]] = {}  # under `if`s on config
        self.exclusive: set[str] = set()  # bound once in each of several branches of the current `if`
        self.shape_refs: dict[
            str, list[str]
        ] = {}  # a branch's shape local -> the locals it reads the size of

    def extend(self, pure: dict[str, cst.BaseStatement], plain: set[str]) -> dict[str, cst.BaseStatement]:
        """``pure`` (name -> the statement binding it) with the static statements added, in source
        order; ``plain`` are the names of ``pure`` a new static statement may read."""
        known = {id(stmt) for stmt in pure.values()}
        current: set[str] = set()  # names whose binding here is static
        dynamic: set[str] = set()  # names bound at call time so far
        added: dict[str, cst.BaseStatement] = {}
        position = {id(stmt): float(i) for i, stmt in enumerate(self.fn.body.body)}
        for index, stmt in enumerate(self.fn.body.body):
            self.static_at[stmt] = frozenset(current)
            if id(stmt) in known:
                current |= {n for n, s in pure.items() if s is stmt and n in plain}
                continue
            targets = {name for name in bound_by(stmt) if (name, id(stmt)) not in self.dead}
            if targets and not targets & (dynamic | current | self.excluded) and self._static(stmt, current):
                current |= targets
                added.update(dict.fromkeys(sorted(targets), stmt))
                continue
            if isinstance(stmt, cst.If):
                before = set(added)
                self.exclusive = exclusive_bindings(stmt, self.counts)
                self._conditional(stmt, current, [], added, known)
                self._drop_partial_exclusive(added, before)
                for k, inner in enumerate(s for s in added.values() if id(s) not in position):
                    position[id(inner)] = index + (k + 1) / (k + 2)  # after the top statement, in order
                targets -= set(added) - before  # bound once, to a static value: static wherever read
            carried = self._carried(stmt, index, targets & current & set(added), current, known, added)
            for name, line in carried.items():  # `filters` after a loop that rebinds it: its last value
                add_binding(added, name, line)
                position[id(line)] = index + 0.5
            self.rebound |= targets & set(added)
            current = (current - targets) | set(carried)
            dynamic |= targets
        if not added:
            return pure
        return dict(sorted({**pure, **added}.items(), key=lambda item: position.get(id(item[1]), -1.0)))

    def _carried(
        self,
        stmt: cst.BaseStatement,
        index: int,
        names: set[str],
        current: set[str],
        known: set[int],
        added: dict[str, cst.BaseStatement],
    ) -> dict[str, cst.SimpleStatementLine]:
        """The names static before the ``for`` loop ``stmt`` that it rebinds from config and its own
        variable, with the line ``__init__`` replays after it for their last value (loop_carry.py)."""
        if not isinstance(stmt, cst.For) or self.pure is None:
            return {}
        replayed = known | {id(s) for s in added.values()}
        body = self.fn.body.body
        pure, side_effects = self.pure, self.side_effects
        quiet = lambda value: pure(value) and not side_effects(value)  # noqa: E731
        found = {}
        for name in sorted(names):
            line = carried_binding(stmt, name, current, self.counts, quiet)
            if line is not None and not read_before(body, index, name, replayed):
                found[name] = line
        return found

    def _conditional(
        self,
        stmt: cst.If,
        current: set[str],
        tests: list[cst.BaseExpression],
        added: dict[str, cst.BaseStatement],
        known: set[int],
    ) -> None:
        """In an ``if`` on config that also does call-time work (``if self.use_bias: init = zeros()``, then
        ``b = self.param('bias', init, ...)``): the names bound once there to static values, replayed
        under the same tests (``self.replay_tests``)."""
        if not self._static_value(stmt.test, current):
            return
        negated = cst.UnaryOperation(cst.Not(), cst.parse_expression(f"({code(stmt.test)})"))
        for branch, branch_tests in ((stmt.body, [*tests, stmt.test]), (stmt.orelse, [*tests, negated])):
            if isinstance(branch, cst.If):
                self._conditional(branch, current, branch_tests, added, known)
                continue
            inner = set(current)
            for child in branch.body.body if isinstance(branch, cst.Else) else getattr(branch, "body", []):
                targets = bound_by(child)
                if (
                    targets
                    and all(self.counts.get(n) == 1 or n in self.exclusive for n in targets)
                    and not targets & self.excluded
                    and id(child) not in known
                    and self._static(child, inner)
                ):
                    for name in sorted(targets):
                        self._bind(added, name, child)
                    self.replay_tests[child] = branch_tests
                    inner |= targets
                elif (shape := self._shape_local(child, inner, known)) is not None:
                    name, refs = shape  # `n, h, w, c = x.shape`: c replays as x's size, under the tests
                    self._bind(added, name, child)
                    self.replay_tests[child] = branch_tests
                    self.shape_refs[name] = refs
                    inner = (inner - bound_by(child)) | {name}
                elif isinstance(child, cst.If):
                    self._conditional(child, inner, branch_tests, added, known)
                    inner -= bound_by(child)
                else:
                    inner -= bound_by(child)

    def _bind(self, added: dict[str, cst.BaseStatement], name: str, child: cst.BaseStatement) -> None:
        """:func:`add_binding`, a shape local's sizes following its binding to the key it moves to
        (``if self.hidden is None: h = x.shape[-1]`` / ``else: h = self.hidden``: the first is ``h@0``)."""
        earlier = added.get(name)
        add_binding(added, name, child)
        if earlier is not None and name in self.shape_refs:
            key = next(k for k, stmt in added.items() if stmt is earlier and k != name)
            self.shape_refs[key] = self.shape_refs.pop(name)

    def _shape_local(
        self, child: cst.BaseStatement, inner: set[str], known: set[int]
    ) -> tuple[str, list[str]] | None:
        """``c = x.shape[-1]`` / ``n, h, w, c = x.shape`` in a branch, bound once there (or once in
        each branch): the name and the call-time locals whose last axis it reads, which the dataflow
        sizes; None for anything else."""
        assign = replayed_assign(child)
        if assign is None or id(child) in known:
            return None
        name, value = assign
        if not (self.counts.get(name) == 1 or name in self.exclusive) or name in self.excluded:
            return None
        call_time = {n for n in names_in(value) - NOT_LOCAL if n in self.counts and n not in inner}
        refs = shape_last_refs(value, call_time) if call_time else None
        return None if refs is None or self.side_effects(value) else (name, refs)

    def _drop_partial_exclusive(self, added: dict[str, cst.BaseStatement], before: set[str]) -> None:
        """A name each branch of the ``if`` binds (``self.exclusive``) is static after it only when
        every one of those bindings is: with one branch's ``k = x.shape[1]`` left out, ``__init__``
        would replay the other branch alone and have no ``k`` when the first runs. Then nothing the
        ``if`` binds replays (a later binding there may read ``k``)."""
        new = set(added) - before
        if not incomplete_chains(added, self.exclusive & new, self.counts, set()):
            return
        for name in new:
            self.replay_tests.pop(added.pop(name), None)

    def _static(self, stmt: cst.BaseStatement, current: set[str]) -> bool:
        """Does ``stmt`` only bind names to static values (``current`` are static before it)?"""
        if isinstance(stmt, cst.FunctionDef):  # `def nf(stage): return ... self.fmap_base ...`
            return not stmt.decorators and self._static_function(stmt, current)
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if _config_warning(small) and self._static_value(small.value, current):  # type: ignore[attr-defined]
                    continue  # `warnings.warn(...)` about the config: warned when __init__ replays it
                if not isinstance(small, cst.Assign) or not all(
                    _plain_target(t.target) for t in small.targets
                ):
                    return False
                if not self._static_value(small.value, current):
                    return False
                current = current | assigned_in(small)
            return True
        if isinstance(stmt, cst.If):
            if not self._static_value(stmt.test, current):
                return False
            branches = [stmt.body] if stmt.orelse is None else [stmt.body, stmt.orelse]
            for branch in branches:
                if isinstance(branch, cst.If):
                    if not self._static(branch, current):
                        return False
                    continue
                inner = set(current)
                for child in branch.body.body if isinstance(branch, cst.Else) else branch.body:
                    if not isinstance(child, cst.BaseStatement) or not self._static(child, inner):
                        return False
                    inner |= bound_by(child)
            return True
        return False

    def _static_function(self, fn: cst.FunctionDef, current: set[str]) -> bool:
        """A local function whose free locals are static and bound once (it reads them when called)."""
        params = fn.params
        own = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
        own |= {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
        own |= assigned_in(fn.body) | comprehension_names(fn) | {fn.name.value}
        free = {n for n in names_in(fn) - NOT_LOCAL - own if n in self.counts}
        quiet = not self.side_effects(fn)  # type: ignore[arg-type]  # no self.param, no layer built in it
        return quiet and free <= current and all(self.counts.get(n) == 1 for n in free)

    def _static_value(self, value: cst.BaseExpression, current: set[str]) -> bool:
        used = names_in(value) - NOT_LOCAL - comprehension_names(value)
        local = {n for n in used if n in self.counts}
        return local <= current and not self.side_effects(value)

    def call_time_at(
        self, node: cst.CSTNode, base: set[str], parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]
    ) -> set[str]:
        """The locals that hold a call-time value where ``node`` reads them: ``base`` (every local not
        static everywhere) less those static at the start of its top statement, plus what that
        statement binds before ``node`` (in a loop: anywhere in the loop)."""
        if not self.rebound:
            return base
        before: set[str] = set()
        cur: cst.CSTNode | None = node
        while cur is not None:
            parent = parent_of(cur)
            if parent is self.fn.body:
                return (base - self.static_at.get(cur, frozenset())) | (before & base)  # type: ignore[arg-type]
            if isinstance(parent, (cst.For, cst.While)):
                before |= assigned_in(parent)
            siblings = getattr(parent, "body", None)
            if isinstance(siblings, (list, tuple)) and any(s is cur for s in siblings):
                for sibling in siblings:
                    if sibling is cur:
                        break
                    before |= assigned_in(sibling)
            cur = parent
        return base


def bound_by(stmt: cst.CSTNode) -> set[str]:
    """The names a statement binds in the method's scope (a local function: its name only)."""
    return {stmt.name.value} if isinstance(stmt, cst.FunctionDef) else assigned_in(stmt)


def _config_warning(small: cst.BaseSmallStatement) -> bool:
    """``warnings.warn(...)``, alone on its line: a note about the config, no value computed."""
    return (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and code(small.value.func) in ("warnings.warn", "warn")
    )


def _plain_target(target: cst.BaseExpression) -> bool:
    """``name`` or ``a, b`` / ``[a, b]`` of names."""
    if isinstance(target, cst.Name):
        return True
    return isinstance(target, (cst.Tuple, cst.List)) and all(
        isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements
    )


def _read_first(stmts: Iterable[cst.BaseStatement], name: str) -> tuple[bool, bool]:
    """(is ``name`` read in ``stmts`` before a binding of it, is it bound on every path)."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    if name in names_in(small.value) or any(
                        not _plain_target(t.target) and name in names_in(t.target) for t in small.targets
                    ):
                        return True, False
                    if name in assigned_in(small):
                        return False, True
                elif name in names_in(small):
                    return True, False
        elif isinstance(stmt, cst.If):
            if name in names_in(stmt.test):
                return True, False
            read, bound = _read_first(stmt.body.body, name)  # type: ignore[arg-type]
            orelse: list[cst.BaseStatement] = []
            if isinstance(stmt.orelse, cst.If):
                orelse = [stmt.orelse]
            elif isinstance(stmt.orelse, cst.Else):
                orelse = list(stmt.orelse.body.body)  # type: ignore[arg-type]
            read_else, bound_else = _read_first(orelse, name) if orelse else (False, False)
            if read or read_else:
                return True, False
            if bound and bound_else:
                return False, True
        elif name in names_in(stmt):
            return True, False
    return False, False


def without_dead_statements(fn: cst.FunctionDef, statements: list[cst.BaseStatement]) -> cst.FunctionDef:
    """``fn`` without its top statements equal to one of ``statements`` (replayed in ``__init__``) whose
    every bound name is rebound before anything in ``fn`` reads it again; the last statement stays."""
    body = list(fn.body.body)
    dead = set()
    for i, stmt in enumerate(body):
        if not any(stmt.deep_equals(s) for s in statements) or i == len(body) - 1:
            continue
        if not any(_read_first(body[i + 1 :], n)[0] for n in bound_by(stmt)):
            dead.add(i)
    if not dead:
        return fn
    kept = [stmt for i, stmt in enumerate(body) if i not in dead]
    return fn.with_changes(body=fn.body.with_changes(body=kept))


def static_everywhere(plan: ClassPlan) -> set[str]:
    """The replayable locals of ``plan`` that no statement rebinds at call time: static wherever read."""
    rebound = plan.static_flow.rebound if plan.static_flow is not None else set()
    return set(plan.pure_locals) - rebound
