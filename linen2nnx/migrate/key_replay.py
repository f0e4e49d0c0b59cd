"""A chain of PRNG key splits whose keys a compact method hands to the submodules it builds, replayed
by ``__init__``.

StyleGAN2's blocks hand every layer its own initialisation key: ``init_rng = self.rng``, then
``init_rng, init_key = random.split(init_rng)`` before each layer, ``Layer(..., rng=init_key)``.
The keys depend on where the chain starts alone, but the chain rebinds its locals at every split
(often in a loop), which ``__init__``'s replay of the method's locals (bound once, all before the
builds) cannot follow. Here the chain is replayed whole, before the builds: its statements in the
method's order, inside the same loops, each key a constructor reads kept in a local of its own as it
is read (``key_0 = init_key``, or appended to ``keys_0`` in a loop), which the construction then
takes (``rng=key_0``, ``rng=keys_0.pop(0)``: the loop's builds take its keys in order). A split is a
pure function of keys, so every submodule gets the very key Linen hands it.

Only where that is provably so: every binding of a chain local is a plain ``a, b = f(...)`` of
``jax.random`` key functions over keys, fields, literals, static locals and loop indices; the chain
runs at the method's top level or in ``for`` loops over static values (no ``else``, ``break`` or
``continue``, the loop variable never rebound); its keys are read by its own splits and by arguments
of the submodules it builds, outside any ``if`` or other block, and nowhere else. Any other chain
keeps its L2N-MOD-004 finding, which names why (:func:`refusal`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import file_memo, nodes_of
from linen2nnx.migrate.cst_utils import NOT_LOCAL, assigned_names, code, name_counts, names_in, rebound_names
from linen2nnx.migrate.element_loops import MAYBE_SKIPPED
from linen2nnx.migrate.rebound_locals import SEPARATOR
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import ClassPlan, compact_only
from linen2nnx.migrate.static_locals import static_everywhere

CHAIN_FUNCTIONS = frozenset({"jax.random.split", "jax.random.fold_in"})
KEY_FUNCTIONS = CHAIN_FUNCTIONS | {
    "jax.random.PRNGKey",
    "jax.random.key",
    "jax.random.clone",
    "jax.random.key_data",
    "jax.random.wrap_key_data",
}
_OPAQUE = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_BLOCKS = {
    cst.If: "an `if`",
    cst.While: "a `while`",
    cst.With: "a `with`",
    cst.Try: "a `try`",
    cst.FunctionDef: "a `def`",
}
_REFUSED = file_memo()  # id(method) -> (method, {chain local: why __init__ does not replay it})


@dataclasses.dataclass
class Item:
    """One step of the replay: a chain statement (``line``), a key a build reads (``record``, kept in
    ``var``), or a loop (``header``, with its ``body``)."""

    group: int = -1  # the chain it belongs to (a loop: -1)
    text: str = ""
    var: str = ""
    listed: bool = False  # a record in a loop: appended to the list ``var``
    arg: int = 0  # id of the argument a record is taken for
    header: str = ""
    body: list[Item] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class KeyReplay:
    """The chains of a compact method ``__init__`` may replay, and what it hands each build."""

    fn: cst.FunctionDef  # the compact method
    groups: dict[str, int]  # chain local -> its chain
    items: list[Item]
    sources: dict[int, str]  # id(argument) -> the value ``__init__`` hands it
    args: dict[int, cst.BaseExpression]  # id(argument) -> the argument
    used: set[int] = dataclasses.field(default_factory=set)  # the arguments the site planner took

    def source(self, arg: cst.Arg) -> str | None:
        """What ``__init__`` hands the build's argument ``arg`` (a key of a replayed chain), noted as
        taken: None when ``arg`` reads no such key."""
        found = self.sources.get(id(arg.value))
        if found is not None:
            self.used.add(id(arg.value))
        return found

    def chains(self) -> set[int]:
        return {item.group for item in _records(self.items) if item.arg in self.used}

    def names(self) -> set[str]:
        """The locals of the chains ``__init__`` replays (one of whose keys a build took)."""
        chains = self.chains()
        return {name for name, group in self.groups.items() if group in chains}

    def source_lines(self) -> list[str]:
        """The replay as source lines (empty when no build takes a key of it)."""
        chains = self.chains()
        lists = [f"{r.var} = []" for r in _records(self.items) if r.arg in self.used and r.listed]
        return lists + _render(self.items, chains, self.used, "") if chains else []


def _records(items: list[Item]) -> list[Item]:
    found = []
    for item in items:
        found += _records(item.body) if item.header else [item] if item.var else []
    return found


def _render(items: list[Item], chains: set[int], used: set[int], indent: str) -> list[str]:
    lines: list[str] = []
    for item in items:
        if item.header:
            body = _render(item.body, chains, used, indent + "    ")
            lines += [f"{indent}{item.header}", *body] if body else []
        elif item.var and item.arg in used:
            lines.append(
                indent + (f"{item.var}.append({item.text})" if item.listed else f"{item.var} = {item.text}")
            )
        elif not item.var and item.group in chains:
            lines.append(indent + item.text)
    return lines


def check_key_replay(ctx: FileContext, plan: ClassPlan) -> tuple[set[str], set[str]]:
    """The locals of the chains ``plan``'s ``__init__`` replays, and the other names the replay reads
    (its config locals replay before it). A build that reads a key of such a chain but took no kept key
    (one the site planner did not ask about) would read the chain's last binding there: a finding."""
    replay = plan.key_replay
    if replay is None or not replay.chains():
        return set(), set()
    chains = replay.chains()
    for item in _records(replay.items):
        if item.group in chains and item.arg not in replay.used:
            ctx.report(
                MOD_004,
                replay.args[item.arg],
                f"`{item.text}` is a key of a split chain __init__ replays, read where the build cannot take it",
                "build the module in __init__ by hand, with the key the chain gives it there",
            )
    names = replay.names()
    block = cst.parse_module("\n".join([*replay.source_lines(), ""]))
    return names, set(names_in(block)) - names


def refusal(fn: cst.FunctionDef | None, name: str) -> str | None:
    """Why ``__init__`` does not replay the chain of local ``name`` of ``fn`` (None: not known)."""
    entry = _REFUSED.get(id(fn))
    return entry[1].get(name) if entry is not None and entry[0] is fn else None


def plan_key_replay(ctx: FileContext, plan: ClassPlan, fn: cst.FunctionDef, planner: Any) -> KeyReplay | None:
    """The replay of ``fn``'s split chains whose keys only builds read (None when it has none)."""
    chains = _Chains(ctx, plan, fn, planner.has_side_effects)
    if not chains.find():
        return None
    if not compact_only(fn, ctx.qualnames):  # a lifted method (`nn.scan` of a step) runs it otherwise
        chains.bad.update({chains.root(g): "its method is lifted" for g in chains.group.values()})
    items = chains.walk(list(fn.body.body), set())
    _REFUSED[id(fn)] = (
        fn,
        {n: chains.bad[chains.root(g)] for n, g in chains.group.items() if chains.root(g) in chains.bad},
    )
    good = {n: chains.root(g) for n, g in chains.group.items() if chains.root(g) not in chains.bad}
    rebound = {group for name, group in good.items() if name not in chains.config}
    good = {n: g for n, g in good.items() if g in rebound}  # a chain bound once replays as config locals do
    sources = {arg: src for arg, (name, src, _) in chains.sources.items() if name in good}
    if not sources:
        return None
    _regroup(items, chains.root)
    return KeyReplay(fn, good, items, sources, {arg: node for arg, (_, _, node) in chains.sources.items()})


def _regroup(items: list[Item], root: Callable[[int], int]) -> None:
    for item in items:
        item.group = root(item.group) if item.group >= 0 else item.group
        _regroup(item.body, root)


class _Chains:
    """The split chains of one method: their locals grouped into chains (a union-find over the
    statements binding them), then walked in order (:meth:`walk`), each problem refusing its chain."""

    def __init__(self, ctx: FileContext, plan: ClassPlan, fn: cst.FunctionDef, pure: Callable) -> None:
        self.ctx, self.plan, self.fn, self.has_side_effects = ctx, plan, fn, pure
        self.counts = assigned_names(fn)
        self.params = {
            p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)
        }
        special = set(plan.mode_partials) | set(plan.shape_locals) | set(plan.input_shape_locals)
        self.config = {n for n in static_everywhere(plan) if SEPARATOR not in n} - special
        self.config -= {n.split(SEPARATOR)[0] for n in plan.pure_locals if SEPARATOR in n}
        self.group: dict[str, int] = {}  # chain local -> its group
        self.parent: list[int] = []
        self.bad: dict[int, str] = {}  # root group -> why it is not replayed
        self.lines: dict[int, str] = {}  # id(chain statement) -> its first target
        self.sources: dict[int, tuple[str, str, cst.BaseExpression]] = {}  # id(argument) -> (key, source, it)
        self.taken = names_in(ctx.state.tree) | set(plan.field_names)

    def root(self, group: int) -> int:
        while self.parent[group] != group:
            group = self.parent[group]
        return group

    def _union(self, a: str, b: str) -> None:
        for name in (a, b):
            if name not in self.group:
                self.group[name] = len(self.parent)
                self.parent.append(len(self.parent))
        ra, rb = self.root(self.group[a]), self.root(self.group[b])
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.bad:
                self.bad.setdefault(ra, self.bad.pop(rb))

    def refuse(self, name: str, why: str) -> None:
        self.bad.setdefault(self.root(self.group[name]), why)

    def find(self) -> bool:
        """Group the chain locals from the statements that split a key (False when there is none)."""
        plain: dict[str, list[cst.SimpleStatementLine]] = {}
        for line in nodes_of(self.fn.body, (cst.SimpleStatementLine,), opaque=_OPAQUE):
            targets = _plain_targets(line)  # type: ignore[arg-type]
            for name in targets or ():
                plain.setdefault(name, []).append(line)  # type: ignore[arg-type]
        walrus = {n for w in nodes_of(self.fn.body, (cst.NamedExpr,)) for n in names_in(w.target)}  # type: ignore[attr-defined]
        todo = [line for lines in plain.values() for line in lines if self._splits(line.body[0].value)]  # type: ignore[attr-defined]
        while todo:
            line = todo.pop()
            if id(line) in self.lines:
                continue
            targets = _plain_targets(line) or []
            self.lines[id(line)] = targets[0]
            value = line.body[0].value  # type: ignore[attr-defined]
            reads = {n for n in names_in(value) - NOT_LOCAL if n in self.counts and n not in self.config}
            for name in [*targets, *sorted(reads - self._loop_names())]:
                self._union(targets[0], name)
                if name in self.params:
                    self.refuse(name, f"{name} is an argument of {self.fn.name.value}, a call-time value")
                elif len(plain.get(name, [])) != self.counts.get(name, 0) or name in walrus:
                    self.refuse(name, f"{name} is bound otherwise than by a plain assignment")
                todo += [other for other in plain.get(name, []) if id(other) not in self.lines]
        return bool(self.lines)

    def _splits(self, value: cst.BaseExpression) -> bool:
        """``random.split(k)`` / ``random.split(k)[0]`` / ``random.fold_in(k, i)``: a new key of a chain."""
        value = value.value if isinstance(value, cst.Subscript) else value
        return isinstance(value, cst.Call) and bool(self.ctx.qualnames(value.func) & CHAIN_FUNCTIONS)

    def _loop_names(self) -> set[str]:
        """The names ``for`` loops of the method alone bind (a loop index)."""
        loops: dict[str, int] = {}
        for loop in nodes_of(self.fn.body, (cst.For,), opaque=_OPAQUE):
            for name in names_in(loop.target):  # type: ignore[attr-defined]
                loops[name] = loops.get(name, 0) + 1
        return {n for n, k in loops.items() if k == self.counts.get(n)}

    def _chain_reads(self, node: cst.CSTNode) -> set[str]:
        return set(names_in(node)) & set(self.group)

    def walk(self, body: list[cst.BaseStatement], indices: set[str]) -> list[Item]:
        """The replay of ``body`` (inside loops binding ``indices``), refusing the chains it cannot."""
        items: list[Item] = []
        for stmt in body:
            touched = self._chain_reads(stmt)
            if id(stmt) in self.lines:
                first = self.lines[id(stmt)]
                why = self._value_problem(stmt.body[0].value, indices, calls=True)  # type: ignore[attr-defined]
                if why:
                    self.refuse(first, why)
                items.append(Item(group=self.group[first], text=code(stmt.body[0])))  # type: ignore[attr-defined]
            elif touched and isinstance(stmt, cst.For):
                targets = names_in(stmt.target)
                body_items = self.walk(list(stmt.body.body), indices | targets)  # type: ignore[attr-defined]
                why = self._loop_problem(stmt, indices, targets)
                for name in touched if why else ():
                    self.refuse(name, why)  # type: ignore[arg-type]
                header = f"for {code(stmt.target)} in {code(stmt.iter)}:"
                items.append(Item(header=header, body=body_items))
            elif touched and isinstance(stmt, cst.SimpleStatementLine):
                items += self._builds(stmt, touched, indices)
            elif touched:
                kind = _BLOCKS.get(type(stmt), f"a `{type(stmt).__name__.lower()}`")
                for name in touched:
                    self.refuse(name, f"{', '.join(sorted(touched))} split or read inside {kind} block")
        return items

    def _loop_problem(self, loop: cst.For, indices: set[str], targets: set[str]) -> str | None:
        if loop.orelse is not None or loop.asynchronous is not None:
            return "the loop around it has an `else` or is asynchronous"
        if any(not isinstance(n, (cst.Name, cst.Tuple, cst.List, cst.Element)) for n in _target_parts(loop)):
            return "the loop around it binds no plain names"
        if nodes_of(loop.body, (cst.Break, cst.Continue), opaque=_OPAQUE):
            return "the loop around it may `break` or `continue`, which skips splits"
        if rebound_names(loop.body) & targets:
            return "the loop around it rebinds its index"
        taken = {"rngs", *self.plan.field_names, *(n.split(SEPARATOR)[0] for n in self.plan.pure_locals)}
        if targets & taken:
            return "the loop's index is also a name __init__ binds otherwise"
        if self.has_side_effects(loop.iter, self.plan.field_names) or self._chain_reads(loop.iter):
            return "the loop around it runs over a value __init__ cannot compute"
        return self._value_problem(loop.iter, indices, calls=False)

    def _value_problem(self, value: cst.BaseExpression, indices: set[str], calls: bool) -> str | None:
        """Why ``__init__`` cannot compute ``value`` where the method does (None: it can): a local not
        static there, a call of anything but a key function (``calls``), ``self`` other than a field."""
        if nodes_of(value, (cst.NamedExpr, cst.Yield, cst.Await, *MAYBE_SKIPPED)):
            return f"`{code(value)}` holds a conditional, a function or an assignment"
        for call in nodes_of(value, (cst.Call,)) if calls else ():
            if not self.ctx.qualnames(call.func) & KEY_FUNCTIONS:  # type: ignore[attr-defined]
                return f"`{code(value)}` calls {code(call.func)}, not a jax.random key function"  # type: ignore[attr-defined]
        fields = set(self.plan.field_names)
        attrs = [a for a in nodes_of(value, (cst.Attribute,)) if code(a.value) == "self"]  # type: ignore[attr-defined]
        if name_counts(value).get("self", 0) != len(attrs) or any(a.attr.value not in fields for a in attrs):  # type: ignore[attr-defined]
            return f"`{code(value)}` reads self otherwise than by a field"
        for name in sorted(names_in(value) - NOT_LOCAL):
            local = name in self.counts
            if local and name not in self.group and name not in self.config and name not in indices:
                return f"`{code(value)}` reads {name}, which __init__ does not have there"
        return None

    def _builds(self, stmt: cst.SimpleStatementLine, touched: set[str], indices: set[str]) -> list[Item]:
        """The keys the builds of ``stmt`` read, kept for them; a key read otherwise refuses its chain."""
        items: list[Item] = []
        counted = {name: name_counts(stmt).get(name, 0) for name in touched}
        for call in nodes_of(stmt, (cst.Call,)):
            if not (self.ctx.layer_rule_of(call.func) or self.ctx.user_class_of(call.func)):  # type: ignore[attr-defined]
                continue
            for arg in call.args:  # type: ignore[attr-defined]
                reads = self._chain_reads(arg.value)
                if (
                    not reads
                    or arg.star
                    or self._conditional_between(call, stmt)
                    or self._builds_in(arg.value)
                ):
                    continue  # a build inside the argument (`Outer(inner=Inner(rng=key))`) takes its own key
                first = sorted(reads)[0]
                for name in reads:
                    self._union(first, name)
                    counted[name] -= name_counts(arg.value).get(name, 0)
                why = self._value_problem(arg.value, indices, calls=True)
                if why:
                    self.refuse(first, why)
                var = self._fresh("keys" if indices else "key")
                self.sources[id(arg.value)] = (first, f"{var}.pop(0)" if indices else var, arg.value)
                text = code(arg.value)
                items.append(Item(self.group[first], text, var, bool(indices), id(arg.value)))
        for name, left in counted.items():
            if left:
                self.refuse(name, f"{name} is read otherwise than as a constructor argument")
        return items

    def _builds_in(self, value: cst.BaseExpression) -> bool:
        calls = nodes_of(value, (cst.Call,))
        return any(self.ctx.layer_rule_of(c.func) or self.ctx.user_class_of(c.func) for c in calls)  # type: ignore[attr-defined]

    def _conditional_between(self, node: cst.CSTNode, stmt: cst.CSTNode) -> bool:
        cur = self.ctx.parent_of(node)
        while cur is not None and cur is not stmt:
            if isinstance(cur, MAYBE_SKIPPED):
                return True
            cur = self.ctx.parent_of(cur)
        return False

    def _fresh(self, stem: str) -> str:
        k = 0
        while f"{stem}_{k}" in self.taken:
            k += 1
        self.taken.add(f"{stem}_{k}")
        return f"{stem}_{k}"


def _plain_targets(line: cst.SimpleStatementLine) -> list[str] | None:
    """The names of ``a = v`` / ``a, b = v`` on a line of its own (None for any other statement)."""
    if len(line.body) != 1 or type(line.body[0]) is not cst.Assign or len(line.body[0].targets) != 1:
        return None
    target = line.body[0].targets[0].target
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)) and all(
        isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements
    ):
        return [e.value.value for e in target.elements]  # type: ignore[attr-defined]
    return None


def _target_parts(loop: cst.For) -> list[cst.CSTNode]:
    parts, stack = [], [loop.target]
    while stack:
        node = stack.pop()
        parts.append(node)
        if isinstance(node, (cst.Tuple, cst.List)):
            stack += list(node.elements)
        elif isinstance(node, cst.Element):
            stack.append(node.value)
    return parts


def without_chains(fn: cst.FunctionDef, names: set[str]) -> cst.FunctionDef:
    """``fn`` (the rewritten method) without the statements of the chains of ``names``, which
    ``__init__`` replays, and the loops only they filled, when nothing else in it reads them any more."""
    lines = [
        line
        for line in nodes_of(fn.body, (cst.SimpleStatementLine,), opaque=_OPAQUE)
        if set(_plain_targets(line) or ["?"]) <= names  # type: ignore[arg-type]
    ]
    everywhere = {n: c for n, c in name_counts(fn.body).items() if n in names}
    inside = {n: sum(name_counts(line).get(n, 0) for line in lines) for n in everywhere}
    if not lines or everywhere != inside:
        return fn

    class Drop(cst.CSTTransformer):
        def leave_IndentedBlock(
            self, original: cst.IndentedBlock, updated: cst.IndentedBlock
        ) -> cst.IndentedBlock:
            kept: list[cst.BaseStatement] = []
            comments: list[cst.EmptyLine] = []  # a dropped line's comments go to the next line
            for after in updated.body:
                if (
                    isinstance(after, cst.SimpleStatementLine)
                    and set(_plain_targets(after) or ["?"]) <= names
                ):
                    comments += [c for c in after.leading_lines if c.comment is not None]
                    continue
                if comments and hasattr(after, "leading_lines"):
                    after = after.with_changes(leading_lines=[*comments, *after.leading_lines])  # type: ignore[attr-defined]
                    comments = []
                kept.append(after)
            return updated.with_changes(body=kept)

        def leave_For(self, original: cst.For, updated: cst.For) -> cst.For | cst.RemovalSentinel:
            return cst.RemovalSentinel.REMOVE if not updated.body.body else updated  # type: ignore[attr-defined]

    return fn.visit(Drop())  # type: ignore[return-value]
