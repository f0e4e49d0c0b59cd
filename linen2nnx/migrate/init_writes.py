"""Variables a call writes while Linen's ``init`` runs it: the state a model built from scratch starts in.

Linen's ``init`` is one forward pass with every collection writable, so a write that no test of
initialisation guards (``count.value += 1``, StyleGAN2's moving average of ``w``, a codebook's usage
counts) lands in the state ``init`` returns: it starts one update in. The NNX constructor creates the
variable and stops; it starts from the initial value. The rewrite is exact for every apply (and for a
converted checkpoint, whose values replace both), but a model trained from scratch starts elsewhere, so
each such write is a manual finding (rules.VAR_009) that does not block the rewrite.

A write needs no finding when a test of initialisation guards it: an ``if`` / conditional expression /
``and`` / ``or`` whose test calls ``self.is_initializing()``, ``self.has_variable(...)`` or
``self.is_mutable_collection(...)`` (directly or through a local bound to one), or an earlier statement of
its block that returns or raises under such a test. Writes count in ``__call__`` (what ``init`` runs
unless told otherwise) and in the methods it calls on ``self``, transitively; never in ``setup()``, which
both sides run when the module is built. A class kept as Linen behind the bridge initialises as Linen
does, so its findings are dropped with its other rewrites (``FileContext``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import code, names_in, self_attr
from linen2nnx.migrate.named_variables import literal_put, variable_attr
from linen2nnx.migrate.rules import VAR_009
from linen2nnx.migrate.sites import ClassPlan

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

_INIT_TESTS = frozenset({"is_initializing", "has_variable", "is_mutable_collection"})
_NOT_KEPT = frozenset({"intermediates"})  # Linen's init leaves this collection out of what it returns
_OPAQUE = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_HINT = (
    "to start where Linen's init does, call the NNX model once on the init batch after building it, in the "
    "mode init ran; if Linen's init was not meant to write it, nothing to do"
)


def report_init_writes(ctx: FileContext, plan: ClassPlan, methods: list[cst.FunctionDef]) -> None:
    """A VAR_009 finding for each variable write that Linen's ``init`` makes (see the module docstring)."""
    by_name = {fn.name.value: fn for fn in methods}
    if "__call__" not in by_name:
        return
    collections = {
        s.attr: s.collection for s in plan.sites.values() if s.kind == "variable" and not s.hoisted
    }
    for fn in _reached(by_name):
        tests = _init_test_names(fn)
        handles = {**{f"self.{a}": c for a, c in collections.items()}, **_variable_locals(plan, fn)}
        for node, target, collection in _writes(plan, fn, handles):
            if collection in _NOT_KEPT or _guarded(ctx, fn, node, tests):
                continue
            ctx.report(
                VAR_009,
                node,
                f"{target} is written by {plan.name}.{fn.name.value} with no test of initialisation: Linen's "
                f"init runs this call and keeps the write in the '{collection}' state it returns, the NNX model "
                "starts from the state before it, so built from scratch it is one update behind Linen's "
                "(applies and converted checkpoints are unaffected)",
                _HINT,
            )


def _reached(by_name: dict[str, cst.FunctionDef]) -> list[cst.FunctionDef]:
    """``__call__`` and the methods it calls on ``self``, transitively (not ``setup``)."""
    seen, todo = ["__call__"], ["__call__"]
    while todo:
        for call in nodes_of(by_name[todo.pop()].body, (cst.Call,)):
            callee = self_attr(call.func)  # type: ignore[attr-defined]
            if callee in by_name and callee not in seen and callee != "setup":
                seen.append(callee)
                todo.append(callee)
    return [by_name[name] for name in seen]


def _variable_locals(plan: ClassPlan, fn: cst.FunctionDef) -> dict[str, str]:
    """The locals of ``fn`` bound to a variable it creates (``ra = self.variable('stats', ...)``), with
    its collection."""
    ctors = {id(s.ctor): s.collection for s in plan.sites.values() if s.kind == "variable"}
    found: dict[str, str] = {}
    for assign in nodes_of(fn.body, (cst.Assign,), opaque=_OPAQUE):
        collection = ctors.get(id(assign.value))  # type: ignore[attr-defined]
        if collection is not None:
            found |= {t.target.value: collection for t in assign.targets if isinstance(t.target, cst.Name)}  # type: ignore[attr-defined]
    return found


def _writes(
    plan: ClassPlan, fn: cst.FunctionDef, handles: dict[str, str]
) -> list[tuple[cst.CSTNode, str, str]]:
    """(statement or call, what it writes, collection) of each write of ``fn``: ``<handle>.value = ...``
    (also ``+=`` and annotated) and ``self.put_variable`` of a variable the class declares."""
    found: list[tuple[cst.CSTNode, str, str]] = []
    for node in nodes_of(fn.body, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Call), opaque=_OPAQUE):
        if isinstance(node, cst.Call):
            put = literal_put(node) if self_attr(node.func) == "put_variable" else None
            if put is not None and variable_attr(plan, put[0], put[1]) is not None:
                found.append((node, f"{put[0]}/{put[1]}", put[0]))
            continue
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            if isinstance(target, cst.Attribute) and target.attr.value == "value":
                handle = code(target.value)
                if handle in handles:
                    found.append((node, f"{handle}.value", handles[handle]))
    return found


def _tells_init(node: cst.CSTNode, names: set[str]) -> bool:
    """``node`` calls ``self.is_initializing()`` & co., or reads a local bound to such a call."""
    if any(self_attr(c.func) in _INIT_TESTS for c in nodes_of(node, (cst.Call,), opaque=_OPAQUE)):  # type: ignore[attr-defined]
        return True
    return bool(names and names_in(node) & names)


def _init_test_names(fn: cst.FunctionDef) -> set[str]:
    """The locals of ``fn`` bound to a test of initialisation (``initializing = self.is_mutable_collection
    ('params')``, ``is_initialized = self.has_variable('cache', 'k')``), and to expressions of those."""
    names: set[str] = set()
    for assign in nodes_of(fn.body, (cst.Assign,), opaque=_OPAQUE):
        if _tells_init(assign.value, names):  # type: ignore[attr-defined]
            names |= {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}  # type: ignore[attr-defined]
    return names


def _guarded(ctx: FileContext, fn: cst.FunctionDef, node: cst.CSTNode, tests: set[str]) -> bool:
    """A test of initialisation decides whether ``node`` runs: an enclosing ``if`` / ``while`` /
    conditional expression / boolean operation tests it, or an earlier statement of an enclosing block
    returns or raises under one."""
    child: cst.CSTNode = node
    parent = ctx.parent_of(node)
    while parent is not None and child is not fn:
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and child is not parent.test:
            if _tells_init(parent.test, tests):
                return True
        if (
            isinstance(parent, cst.BooleanOperation)
            and child is parent.right
            and _tells_init(parent.left, tests)
        ):
            return True
        if isinstance(parent, (cst.IndentedBlock, cst.Module)) and _exits_before(parent, child, tests):
            return True
        child, parent = parent, ctx.parent_of(parent)
    return False


def _exits_before(block: cst.IndentedBlock | cst.Module, stmt: cst.CSTNode, tests: set[str]) -> bool:
    """An ``if <test of initialisation>:`` before ``stmt`` in ``block`` whose body ends in return / raise."""
    for earlier in block.body:
        if earlier is stmt:
            return False
        if isinstance(earlier, cst.If) and _tells_init(earlier.test, tests):
            suite = earlier.body  # `if initializing: return x` on one line is a SimpleStatementSuite
            last = suite.body[-1] if suite.body else None
            if isinstance(suite, cst.SimpleStatementSuite):
                small = suite.body
            else:  # the body's last line; a compound one (a nested `if`) is no exit
                small = last.body if isinstance(last, cst.SimpleStatementLine) else ()
            if any(isinstance(s, (cst.Return, cst.Raise)) for s in small):
                return True
    return False
