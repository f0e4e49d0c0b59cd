"""Locals an ``@nn.compact`` method binds more than once, each time from config or the input's shape.

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.local_planning.LocalPlanner`. Real
normalisation layers canonicalise an axis in two steps (``axis = self.axis if isinstance(self.axis,
tuple) else (self.axis,)``, then ``axis = _absolute_dims(x.ndim, axis)``) before the shapes of their
parameters read it; a local bound once is replayed by ``__init__`` as written, but a rebound one was
a call-time value, and the class fell back to Linen. When *every* binding of the name is a top-level
``name = value`` line that is itself replayable, replaying all of them in source order gives every
reader the value it read in the method, whichever binding that was: the earlier bindings are kept
under keys that are no Python name (``axis@0``), and needing the name needs them too. When one
binding is not replayable, none is (the planner runs again without the name), as before. So too a
name bound once in each branch of an ``if`` on config and nowhere else (:func:`exclusive_bindings`).

``__init__`` replays the bindings before it builds any submodule, so a statement that is not itself
replayed and reads the name before its last binding (``a = nn.Dense(nout)(x)`` between ``nout =
self.n`` and ``nout = nout * 2``) would see the last value there: such a chain is not replayed
(:func:`read_before_last`), and the layers reading it get the findings of a call-time size.

A binding nothing reads before the next one (:func:`dead_bindings`: ViT code unpacks ``n, h, w, c =
x.shape`` of the images for ``h`` and ``w``, then again of the patch embedding, and only the second
``c`` is read), or after it when it is the last (ViT code unpacks ``n, l, c = x.shape`` once more
after the class token and reads only ``n``), is not a binding any reader sees: it is left out of the
count, so the name is bound once, by its live line, for the planner. So too when the second
unpacking sits in an ``if`` on config whose branches bind the name before they read it, and nothing
after the ``if`` reads it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import assigned_in, names_in, single_assign
from linen2nnx.migrate.replayed_lines import replayed_assign

SEPARATOR = "@"


def rebinding_chains(fn: cst.FunctionDef, counts: dict[str, int], params: set[str]) -> set[str]:
    """The names ``fn`` binds more than once, every time by a top-level ``name = value`` line."""
    top: dict[str, int] = {}
    for stmt in fn.body.body:
        assign = single_assign(stmt)
        if assign is not None:
            top[assign[0]] = top.get(assign[0], 0) + 1
    return {name for name, n in top.items() if n > 1 and counts.get(name) == n and name not in params}


def dead_bindings(fn: cst.FunctionDef, counts: dict[str, int]) -> tuple[dict[str, int], set[tuple[str, int]]]:
    """``counts`` less the top-level replayable bindings of a name that no statement reads before the
    name's next top-level replayable binding, and those bindings as ``(name, id(statement))``. Only
    names every binding of which is such a line are counted so, or whose last such line an ``if``
    right after binds anew in its branches (:func:`_branch_rebindings`); a binding inside any other
    block is not followed. The static-locals pass is told too (a dead ``c = self.a`` must never be replayed in
    place of the live binding)."""
    lines: dict[str, list[int]] = {}
    body = fn.body.body
    for i, stmt in enumerate(body):
        assign = replayed_assign(stmt)
        if assign is not None:
            lines.setdefault(assign[0], []).append(i)
    live = dict(counts)
    dead: set[tuple[str, int]] = set()
    functions = None  # the body's functions and lambdas, found once when a last binding is asked about
    for name, at in lines.items():
        shadow = _branch_rebindings(body, at[-1], name) if counts.get(name, 0) > len(at) else 0
        if counts.get(name) != len(at) + shadow or len(at) + shadow < 2:
            continue
        for here, following in itertools.pairwise(at):
            between = [*body[here + 1 : following], replayed_assign(body[following])[1]]  # type: ignore[index]
            unread = not any(name in names_in(node) for node in between)
            if unread:
                dead.add((name, id(body[here])))
                live[name] -= 1
        # ViT unpacks `n, l, c = x.shape` once more after the class token, never reading c
        last_unread = False
        if not shadow and not any(name in names_in(stmt) for stmt in body[at[-1] + 1 :]):
            if functions is None:
                functions = nodes_of(fn.body, _FUNCTIONS, opaque=_FUNCTIONS)
            # unread after it, unless a function or lambda defined earlier may run later and read it
            last_unread = not any(name in names_in(inner) for inner in functions)
        if shadow or last_unread:
            dead.add((name, id(body[at[-1]])))
            live[name] -= 1
    return live, dead


_FUNCTIONS = (cst.FunctionDef, cst.Lambda)


def _branch_rebindings(body: Sequence[cst.BaseStatement], at: int, name: str) -> int:
    """How many times an ``if`` right after the top-level binding of ``name`` at ``body[at]`` binds it
    anew so that no statement reads that binding (0 when none does): the next statement that mentions
    the name is an ``if`` whose branches each bind it (a replayable line, once) before reading it, or
    never mention it, and nothing after that ``if`` mentions it (ViT code unpacks ``n, h, w, c =
    x.shape`` of the images, then again under ``if self.transformer is not None:``)."""
    rest = body[at + 1 :]
    index = next((i for i, stmt in enumerate(rest) if name in names_in(stmt)), None)
    if index is None or not isinstance(rest[index], cst.If):
        return 0
    if any(name in names_in(stmt) for stmt in rest[index + 1 :]):
        return 0
    bindings = 0
    branch: cst.If | cst.Else | None = rest[index]  # type: ignore[assignment]
    while branch is not None:
        if isinstance(branch, cst.If) and name in names_in(branch.test):
            return 0
        statements = branch.body.body
        first = next((stmt for stmt in statements if name in names_in(stmt)), None)
        if first is not None:
            assign = replayed_assign(first)
            if assign is None or assign[0] != name or name in names_in(assign[1]):
                return 0
            if sum(name in assigned_in(stmt) for stmt in statements) != 1:
                return 0
            bindings += 1
        branch = branch.orelse if isinstance(branch, cst.If) else None
    return bindings


def earlier_key(name: str, index: int) -> str:
    """The key an earlier binding of ``name`` is kept under (no Python name can collide with it)."""
    return f"{name}{SEPARATOR}{index}"


def bound_name(key: str) -> str:
    """The local a key of :func:`earlier_key` binds (``h@0`` -> ``h``; a plain name is itself)."""
    return key.split(SEPARATOR)[0]


def earlier_keys(pure: dict[str, cst.BaseStatement], name: str) -> list[str]:
    """The keys of the earlier bindings of ``name`` in ``pure``."""
    return [k for k in pure if k.startswith(name + SEPARATOR)]


def keep_earlier(pure: dict[str, cst.BaseStatement], name: str) -> None:
    """A new binding of ``name`` comes: keep the one ``pure`` holds under its own key."""
    if name in pure:
        pure[earlier_key(name, len(earlier_keys(pure, name)))] = pure.pop(name)


def incomplete_chains(
    pure: dict[str, cst.BaseStatement], chains: set[str], counts: dict[str, int], special: set[str]
) -> set[str]:
    """The chain names not every binding of which is replayable as written (``special``: mode
    partials and shape locals, which ``__init__`` replays rewritten)."""
    bad = set()
    for name in chains:
        held = len(earlier_keys(pure, name)) + (name in pure)
        if held != counts[name] or name in special:
            bad.add(name)
    return bad


def read_before_last(pure: dict[str, cst.BaseStatement], chains: set[str], fn: cst.FunctionDef) -> set[str]:
    """The chain names a top-level statement of ``fn`` that ``pure`` does not replay reads before the
    name's last binding: there it read an earlier value, which ``__init__`` (all bindings first) loses."""
    replayed = {id(stmt) for stmt in pure.values()}
    bad: set[str] = set()
    for name in chains:
        lines = [i for i, stmt in enumerate(fn.body.body) if (single_assign(stmt) or ("",))[0] == name]
        for stmt in fn.body.body[: lines[-1]] if lines else ():
            if id(stmt) not in replayed and name in names_in(stmt):
                bad.add(name)
                break
    return bad


def in_source_order(pure: dict[str, cst.BaseStatement], fn: cst.FunctionDef) -> dict[str, cst.BaseStatement]:
    """``pure`` ordered as its statements are in ``fn``'s body (an earlier binding was re-keyed late)."""
    position = {id(stmt): i for i, stmt in enumerate(fn.body.body)}
    return dict(sorted(pure.items(), key=lambda item: position.get(id(item[1]), -1)))


def exclusive_bindings(stmt: cst.If, counts: dict[str, int]) -> set[str]:
    """The names an ``if`` / ``elif`` / ``else`` binds once in each of several of its branches and
    nowhere else in the method (``if pretrained: n = 1000`` / ``else: n = self.classes``): whichever
    branch runs, the name holds that branch's value after it, so each binding replays under its tests."""
    per_branch: list[dict[str, int]] = []
    branch: cst.BaseSuite | cst.If | cst.Else | None = stmt
    while branch is not None:
        body = branch.body.body if isinstance(branch, (cst.If, cst.Else)) else ()
        seen: dict[str, int] = {}
        for child in body:
            for name in assigned_in(child):
                seen[name] = seen.get(name, 0) + 1
        per_branch.append(seen)
        branch = branch.orelse if isinstance(branch, cst.If) else None
    total: dict[str, int] = {}
    for seen in per_branch:
        for name, n in seen.items():
            total[name] = total.get(name, 0) + n
    return {
        name
        for name, n in total.items()
        if n > 1 and counts.get(name) == n and all(seen.get(name, 0) <= 1 for seen in per_branch)
    }


def add_binding(added: dict[str, cst.BaseStatement], name: str, stmt: cst.BaseStatement) -> None:
    """``added[name] = stmt``, an earlier binding of ``name`` kept under its own key in its place (the
    order of ``added`` is the order ``__init__`` replays in)."""
    if name not in added:
        added[name] = stmt
        return
    key = earlier_key(name, len(earlier_keys(added, name)))
    items = [(key if k == name else k, v) for k, v in added.items()]
    added.clear()
    added.update(items)
    added[name] = stmt
