"""Helper methods that build layers, called from ``@nn.compact``: each call replayed where it is made.

Linen lets a compact method call an ordinary method that builds submodules in the caller's scope::

    @nn.compact
    def __call__(self, x):
        x = self._block(x, features=64, n=2, idx=1)
        ...

    def _block(self, x, features, n, idx):
        for i in range(n):
            x = nn.Conv(features, (3, 3), name=f'conv{idx}_{i + 1}')(x)
        return x

NNX builds every submodule in ``__init__``, so each call's submodules (their number, names and
arguments) must be known without running the model. Every call site names its static arguments, so
the call can be replayed: the helper's body takes the place of the call with the arguments bound
(:mod:`~linen2nnx.migrate.helper_replay`), a loop over a literal count is unrolled and a computed name
folds to the literal Linen gives it (``'conv1_1'``). The class is then an ordinary compact class, which
the module pass plans as any other: each layer becomes an attribute named after its Linen name (a
name that is no identifier gets a valid attribute, and the name map keeps the Linen one), sizes flow
through, and anything not static stays a finding.

The replay is all or nothing per class: a helper is replayed only when every reference to it is a
call statement in a compact method (or in another replayed helper) and its body can stand in the
caller's place (one final ``return``, no clash of names, a parameter it rebinds passed by the very name
the result goes to). :func:`replay_helper_calls` returns None when no class of the file qualifies; the
engine then migrates the file exactly as before, and it falls back to the original source for a class
the module pass still keeps as Linen, so a bridged class keeps the code its author wrote.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import code, names_in, self_attr
from linen2nnx.migrate.function_replay import (
    ReplayableFunction,
    calls_to_replay,
    prepared,
    replayable_functions,
    top_level_imports,
)
from linen2nnx.migrate.helper_replay import Replayer, ReplayError, result_names
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.nested_locals import inline_nested_locals, may_inline
from linen2nnx.migrate.param_helpers import KEY_PREFIX as PARAM_HELPER_KEY
from linen2nnx.migrate.param_helpers import (
    missing_imports,
    param_helper_functions,
    replay_param_helpers,
    with_imports,
)
from linen2nnx.migrate.rules import MOD_001, MOD_007
from linen2nnx.migrate.shared_helpers import is_shared


@dataclasses.dataclass
class Replayed:
    """A file whose helper calls were replayed: the text the module pass reads, and how its lines map
    back to the original's."""

    source: str
    classes: list[str]  # the classes whose helper calls were replayed
    line_map: list[int]  # line of ``source`` (index - 1) -> line of the original
    moved: set[int] = dataclasses.field(default_factory=set)  # lines of ``source`` the replay wrote
    original: str = ""

    def place(self, finding: Any) -> Any:
        """``finding`` (on a line of ``source``) on the original's line; on a line the replay wrote, at
        the start of the call it stands for."""
        line = finding.line
        if not 1 <= line <= len(self.line_map):
            return finding
        new = self.line_map[line - 1]
        if line not in self.moved:
            return dataclasses.replace(finding, line=new)
        text = self.original.splitlines()[new - 1] if new <= len(self.original.splitlines()) else ""
        return dataclasses.replace(finding, line=new, col=len(text) - len(text.lstrip()) + 1)


UNREPLAYED = "whose calls could not be replayed in place"


def unreplayed_message(layer: str, helper: str) -> str:
    """The finding of a layer a helper method (``Class.method``) builds whose calls were not replayed
    (rewrite_attrs.py); :func:`unreplayed_class` reads the class back out of it (replay_migration.py)."""
    return f"{layer} built in {helper}, a method that is neither setup nor @nn.compact, {UNREPLAYED}"


def unreplayed_class(message: str) -> str | None:
    """The class of the helper an :func:`unreplayed_message` names; None for any other message."""
    if UNREPLAYED not in message:
        return None
    return message.split(" built in ", 1)[-1].split(",", 1)[0].partition(".")[0]


def _is_compact(fn: cst.FunctionDef, resolver: NameResolver) -> bool:
    return any("flax.linen.compact" in resolver.qualnames(d.decorator) for d in fn.decorators)


class _Refs(FastVisitor):
    """Every ``self.<helper>`` of a class, and whether it is the callee of a call statement."""

    def __init__(self, helpers: set[str]) -> None:
        self.helpers = helpers
        self.refs: dict[str, int] = {}
        self.statement_calls: dict[str, int] = {}

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if (
            isinstance(node.value, cst.Name)
            and node.value.value == "self"
            and node.attr.value in self.helpers
        ):
            self.refs[node.attr.value] = self.refs.get(node.attr.value, 0) + 1

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for small in node.body:
            call = _statement_call(small)
            if call is not None and isinstance(call.func, cst.Attribute):
                name = call.func.attr.value
                if (
                    name in self.helpers
                    and isinstance(call.func.value, cst.Name)
                    and call.func.value.value == "self"
                ):
                    self.statement_calls[name] = self.statement_calls.get(name, 0) + 1


def _statement_call(small: cst.BaseSmallStatement) -> cst.Call | None:
    """The call of ``x = self.h(...)`` (one plain name target, or a tuple of them: ``x, aux =
    self.h(...)``) or of ``self.h(...)``."""
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return small.value
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and result_names(small.targets[0].target) is not None
        and isinstance(small.value, cst.Call)
    ):
        return small.value
    return None


def _plain_method(fn: cst.FunctionDef, resolver: NameResolver | None = None) -> bool:
    """A method with no decorator but ``@nn.nowrap``, which only keeps Linen from wrapping it: called
    from a compact method, what it builds is the caller's either way. Without ``resolver`` (the cheap
    test before names are resolved) any decorator spelled ``nowrap`` passes."""
    return all(
        _NOWRAP & resolver.qualnames(d.decorator)
        if resolver is not None
        else code(d.decorator).rsplit(".", 1)[-1] == "nowrap"
        for d in fn.decorators
    )


_NOWRAP = {"flax.linen.nowrap", "flax.linen.module.nowrap"}


class _Builds(FastVisitor):
    """Whether a function body builds a submodule or a variable: an applied constructor of a Linen
    layer or of a class of this file (``nn.Conv(...)(x)``), a constructor given ``name=``, or
    ``self.param`` / ``self.variable``."""

    def __init__(self, resolver: NameResolver, classes: set[str]) -> None:
        self.resolver = resolver
        self.classes = classes
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        api = self_attr(func)
        if api is not None:
            self.found |= api in ("param", "variable")
            return
        if any(a.keyword is not None and a.keyword.value == "name" for a in node.args):
            self.found = True
        if isinstance(func, cst.Call) and isinstance(func.func, (cst.Name, cst.Attribute)):
            ctor = func.func
            if isinstance(ctor, cst.Name) and ctor.value in self.classes:
                self.found = True
            leaf = ctor.value if isinstance(ctor, cst.Name) else ctor.attr.value
            if leaf[:1].isupper() and any(q.startswith("flax.linen.") for q in self.resolver.qualnames(ctor)):
                self.found = True


def _returns_constructor(fn: cst.FunctionDef) -> bool:
    """``return nn.Dense(...)``: a layer factory method, which factories.py plans."""
    last = fn.body.body[-1] if fn.body.body else None
    if not isinstance(last, cst.SimpleStatementLine):
        return False
    ret = last.body[-1]
    if not (isinstance(ret, cst.Return) and isinstance(ret.value, cst.Call)):
        return False
    func = ret.value.func
    leaf = (
        func.value
        if isinstance(func, cst.Name)
        else func.attr.value
        if isinstance(func, cst.Attribute)
        else ""
    )
    return leaf[:1].isupper()  # a class built, not applied


def _helpers_of(cls: cst.ClassDef, resolver: NameResolver, classes: set[str]) -> tuple[set[str], set[str]]:
    """(methods whose helper calls are replayed: the compact ones and ``setup``, helpers to replay) of
    ``cls``: undecorated methods that build something (or, for ``setup``, bind attributes of ``self``:
    ``self._setup_dense()`` building the block's layers), every reference to which is a call statement."""
    methods = [m for m in cls.body.body if isinstance(m, cst.FunctionDef)]
    compact = {m.name.value for m in methods if _is_compact(m, resolver)}
    callers = compact | (
        {"setup"} if any(m.name.value == "setup" and not m.decorators for m in methods) else set()
    )
    if not callers:
        return callers, set()
    candidates = set()
    for m in methods:
        if m.name.value in ("setup", "__call__") or not _plain_method(m, resolver) or m.name.value in compact:
            continue
        builds = _Builds(resolver, classes)
        builds.walk(m.body)
        if (builds.found and not _returns_constructor(m)) or ("setup" in callers and _binds_self(m)):
            candidates.add(m.name.value)
    if not candidates:
        return callers, set()
    refs = _Refs(candidates)
    refs.walk(cls.body)
    helpers = {h for h in candidates if refs.refs.get(h) and refs.refs[h] == refs.statement_calls.get(h)}
    while True:  # a method that stays (not a caller, not replayed) must not call a helper that goes
        kept = [m for m in methods if m.name.value not in callers | helpers]
        used = _Refs(helpers)
        for m in kept:
            used.walk(m)
        if not set(used.refs) & helpers:
            return callers, helpers
        helpers -= set(used.refs)


def _binds_self(fn: cst.FunctionDef) -> bool:
    """Whether ``fn`` assigns an attribute of ``self`` (``self.mlp = FeedForward(...)``): called from
    ``setup``, it is part of ``setup``, and ``__init__`` must build what it binds."""

    class Binds(FastVisitor):
        found = False

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self.found |= self_attr(node.target) is not None

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self.found |= self_attr(node.target) is not None

    binds = Binds()
    binds.walk(fn.body)
    return binds.found


def replay_helper_calls(
    tree: cst.Module,
    source: str,
    module_name: str = "",
    functions: Mapping[str, Any] | None = None,
    names: Callable[[], NameResolver] | None = None,
    skip: frozenset[str] = frozenset(),
) -> Replayed | None:
    """The file with every qualifying helper call replayed in place (see the module docstring), and every
    call statement of a replayable module-level function (function_replay.py; ``functions``: those of
    the files this one imports, by their ``replay:`` keys), and every ``target = f(self, ...)`` of a
    function that creates a parameter on the module it is handed (param_helpers.py, ``param_helper:``
    keys), in ``setup`` too; None when no class has one. ``names``: the resolver of ``tree``, built on first
    use (the module pass reads the same one when nothing is replayed); the classes in ``skip`` stay as
    written (the module pass kept them as Linen after a replay: kept_after_replay)."""
    names = names or functools.cache(lambda: NameResolver(tree))
    run_facts = dict(functions or {})
    functions = {**(functions or {}), **replayable_functions(tree, module_name)}
    new_body, replayed = with_param_helpers_replayed(
        tree, module_name, {**functions, **param_helper_functions(tree, module_name)}, skip
    )
    if "compact" not in source and "def setup" not in source and not replayed:
        return None
    if may_inline(source):
        replayed += _with_nested_locals_inlined(new_body, names, skip)
    functions = {k: v for k, v in functions.items() if not k.startswith(PARAM_HELPER_KEY)}
    resolver: NameResolver | None = None
    classes = {s.name.value for s in tree.body if isinstance(s, cst.ClassDef)}
    for index, stmt in enumerate(new_body):
        if (
            not isinstance(stmt, cst.ClassDef)
            or not _may_replay(stmt, bool(functions))
            or stmt.name.value in skip
        ):
            continue
        resolver = resolver or names()  # for a class calling its own helpers
        callers, helpers = _helpers_of(stmt, resolver, classes)
        helpers -= _overridden(tree, stmt.name.value) | _named_elsewhere(tree, stmt, helpers)
        helpers -= _reached_by_getattr(stmt, helpers)
        helpers = {h for h in helpers if not is_shared(run_facts, h)}  # another file may call it
        compact = callers - {"setup"}  # module-level functions build *and apply*: compact methods only
        calls = calls_to_replay(stmt, compact, resolver, module_name, functions) if functions else {}
        if not helpers and not calls:
            continue
        try:
            new_body[index] = _replay_class(stmt, callers, helpers, _prepared(tree, module_name, calls))
        except ReplayError:
            continue
        except Exception:  # a bug here must not cost the file: the class is migrated as written
            if os.environ.get("LINEN2NNX_RAISE"):
                raise
            continue
        if stmt.name.value not in replayed:
            replayed.append(stmt.name.value)
    if not replayed:
        return None
    new_source = tree.with_changes(body=new_body).code
    line_map, moved = _line_map(source, new_source)
    return Replayed(new_source, replayed, line_map, moved, source)


def _with_nested_locals_inlined(
    body: list[cst.BaseStatement], names: Callable[[], NameResolver], skip: frozenset[str]
) -> list[str]:
    """Write in place, in ``body``, each local of a compact method that only carries a layer into the
    next statement's layer (nested_locals.py); the names of the classes changed. Not in ``setup``,
    where the module pass builds no layer inside another's arguments (a finding either way)."""
    changed = []
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.ClassDef) or stmt.name.value in skip:
            continue
        members = [
            inline_nested_locals(m, names())
            if isinstance(m, cst.FunctionDef) and _is_compact(m, names())
            else m
            for m in stmt.body.body
        ]
        if any(new is not old for new, old in zip(members, stmt.body.body)):
            body[index] = stmt.with_changes(body=stmt.body.with_changes(body=members))
            changed.append(stmt.name.value)
    return changed


def with_param_helpers_replayed(
    tree: cst.Module, module_name: str, functions: Mapping[str, Any], skip: frozenset[str] = frozenset()
) -> tuple[list[cst.BaseStatement], list[str]]:
    """The file's statements with each class's parameter-helper assignments replayed in its ``setup``
    and compact methods (param_helpers.py), and the names of the classes that had one."""
    body = list(tree.body)
    if not any(k.startswith(PARAM_HELPER_KEY) for k in functions):
        return body, []
    resolver = NameResolver(tree)
    imports = top_level_imports(tree, module_name)
    extra = missing_imports(tree, imports, functions)
    imports = {**imports, **extra}
    replayed = []
    linen = _linen_classes(tree, resolver)
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.ClassDef) or stmt.name.value not in linen or stmt.name.value in skip:
            continue
        members = []
        for member in stmt.body.body:
            if isinstance(member, cst.FunctionDef) and (
                member.name.value == "setup" or _is_compact(member, resolver)
            ):
                try:
                    member = replay_param_helpers(member, resolver, module_name, functions, imports)
                except Exception:  # a bug here must not cost the file: the method stays as written
                    if os.environ.get("LINEN2NNX_RAISE"):
                        raise
            members.append(member)
        new = stmt.with_changes(body=stmt.body.with_changes(body=members))
        if not new.deep_equals(stmt):
            body[index] = new
            replayed.append(stmt.name.value)
    if replayed and extra:
        body = with_imports(
            body,
            extra,
            names_in(cst.Module(body=[body[i] for i, s in enumerate(tree.body) if s is not body[i]])),
        )
    return body, replayed


def _linen_classes(tree: cst.Module, resolver: NameResolver) -> set[str]:
    """Classes of the file that derive from ``flax.linen.Module`` through bases the file itself shows
    (``nn.Module``, or a class of the file that does): the ones the module pass surely rewrites."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for stmt in tree.body:
            if not isinstance(stmt, cst.ClassDef) or stmt.name.value in found:
                continue
            for base in stmt.bases:
                value = base.value
                if (isinstance(value, cst.Name) and value.value in found) or (
                    isinstance(value, (cst.Name, cst.Attribute))
                    and "flax.linen.Module" in resolver.qualnames(value)
                ):
                    found.add(stmt.name.value)
                    changed = True
                    break
    return found


def _prepared(
    tree: cst.Module, module_name: str, calls: dict[str, ReplayableFunction]
) -> dict[str, cst.FunctionDef]:
    """The module-level functions to replay, as they read in this file (function_replay.prepared)."""
    if not calls:
        return {}
    imports = top_level_imports(tree, module_name)
    return {
        callee: prepared(callee, fact, imports, fact.key.rpartition(".")[0] == module_name)
        for callee, fact in calls.items()
    }


def _overridden(tree: cst.Module, name: str) -> set[str]:
    """Methods a subclass of ``name`` in this file defines again: ``self.h(...)`` dispatches to the
    subclass's ``h``, so the base's body must not be replayed."""
    found: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, cst.ClassDef) and any(name in names_in(b.value) for b in stmt.bases):
            found |= {m.name.value for m in stmt.body.body if isinstance(m, cst.FunctionDef)}
            found |= _overridden(tree, stmt.name.value) if stmt.name.value != name else set()
    return found


def _named_elsewhere(tree: cst.Module, cls: cst.ClassDef, helpers: set[str]) -> set[str]:
    """Helpers that code outside ``cls`` names (``self._block(x, ...)`` in a subclass's method):
    replaying removes the method, so such a helper stays."""
    if not helpers:
        return set()

    class Named(FastVisitor):
        def __init__(self) -> None:
            self.found: set[str] = set()

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return node is not cls

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if node.attr.value in helpers:
                self.found.add(node.attr.value)

    named = Named()
    named.walk(tree)
    return named.found


def _reached_by_getattr(cls: cst.ClassDef, helpers: set[str]) -> set[str]:
    """Helpers the class reaches by name (``getattr(self, '_setup_' + kind)()``): all of them when the
    name is computed, the one named when it is a literal. Replaying would remove what it reaches."""
    if not helpers:
        return set()

    class Reached(FastVisitor):
        def __init__(self) -> None:
            self.found: set[str] = set()

        def visit_Call(self, node: cst.Call) -> None:
            args = node.args
            if not (isinstance(node.func, cst.Name) and node.func.value in ("getattr", "hasattr")):
                return
            if len(args) < 2 or not (isinstance(args[0].value, cst.Name) and args[0].value.value == "self"):
                return
            name = args[1].value
            literal = name.evaluated_value if isinstance(name, cst.SimpleString) else None
            self.found |= {literal} & helpers if isinstance(literal, str) else set(helpers)

    reached = Reached()
    reached.walk(cls)
    return reached.found


def _may_replay(cls: cst.ClassDef, functions: bool = False) -> bool:
    """A cheap test before names are resolved: a method decorated with something ``compact``, and a
    call statement of an undecorated method of the class (or any, when ``functions`` may be called)."""
    methods = [m for m in cls.body.body if isinstance(m, cst.FunctionDef)]
    compact = any("compact" in code(d.decorator) for m in methods for d in m.decorators)
    if not compact and not any(m.name.value == "setup" for m in methods):
        return False
    if functions and compact:
        return True
    plain = {m.name.value for m in methods if _plain_method(m)} - {"setup", "__call__"}
    if not plain:
        return False
    refs = _Refs(plain)
    refs.walk(cls.body)
    return bool(refs.statement_calls)


def _replay_class(
    cls: cst.ClassDef, callers: set[str], helpers: set[str], functions: dict[str, cst.FunctionDef]
) -> cst.ClassDef:
    """``cls`` with each helper call of its compact methods and ``setup`` replayed and the helpers
    removed; each call statement of ``functions`` (callee's code -> function) replayed too, in the
    compact methods only (such a function applies what it builds)."""
    methods = {m.name.value: m for m in cls.body.body if isinstance(m, cst.FunctionDef)}
    replayer = Replayer({h: methods[h] for h in helpers}, functions)
    in_setup = Replayer({h: methods[h] for h in helpers})
    body = []
    for member in cls.body.body:
        if isinstance(member, cst.FunctionDef) and member.name.value in helpers:
            continue
        if isinstance(member, cst.FunctionDef) and member.name.value in callers:
            member = (in_setup if member.name.value == "setup" else replayer).replay_method(member)
        body.append(member)
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _line_map(old: str, new: str) -> tuple[list[int], set[int]]:
    """For each line of ``new``, a line of ``old``: the same line where the text is unchanged, else the
    first line of the replaced stretch (the call a replayed body stands for)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    out, moved = [1] * len(new_lines), set()
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            out[j] = (i1 + (j - j1) + 1) if tag == "equal" else min(i1 + 1, max(len(old_lines), 1))
            if tag != "equal":
                moved.add(j + 1)
    return out, moved


def kept_after_replay(result: Any, replayed: Replayed) -> frozenset[str]:
    """The replayed classes the module pass still keeps as Linen in ``result``, or does not rewrite at
    all (a base it cannot tell is a Linen module): written as their author wrote them instead, such a
    class keeps its author's code."""
    # an earlier run's Linen copy (`BlockLinen`) is reported by the name of its NNX wrapper (`Block`)
    kept = set()
    for name in replayed.classes:
        heads = tuple(f"{n} kept as Linen" for n in {name, name.removesuffix("Linen")})
        if any(f.rule == MOD_007.id and f.message.startswith(heads) for f in result.findings):
            kept.add(name)
        elif not any(f.rule == MOD_001.id and f.message.startswith(f"{name} -> ") for f in result.findings):
            kept.add(name)
    return frozenset(kept)


def replayed_result(result: Any, replayed: Replayed, source: str) -> Any:
    """The module pass's ``result`` on the replayed text, told in terms of the original ``source`` (its
    findings on the original's lines); None when a replayed class is still kept as Linen or the file
    failed (then the original is migrated instead, so a bridged class keeps its author's code)."""
    if result.failed or kept_after_replay(result, replayed):
        return None
    findings = [replayed.place(f) for f in result.findings]
    return dataclasses.replace(
        result, source=source, findings=sorted(findings, key=lambda f: (f.line, f.col, f.rule))
    )
