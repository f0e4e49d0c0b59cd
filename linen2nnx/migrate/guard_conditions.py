"""The tests an ``@nn.compact`` construction runs under: the ``if``s around it, and the early returns
before it.

Linen builds a submodule only on the path that reaches it, so ``__init__`` builds it under the same
tests. Beside the ``if`` (or conditional expression) branches around it, an ``if`` before it whose one
branch ends in ``return`` is a test too: ``if not self.num_classes: return x`` before the head means
the head exists only where ``self.num_classes`` holds. A branch that ends in ``raise`` is none (no
path through it builds anything), and neither is one inside a loop around the construction (the
iteration it returns from is not known in ``__init__``; the sites of a loop are planned on their own).
An early return on a call-time value (``if decode and self.has_variable('cache', 'k'): return k``) is
left out by the caller: Linen's init takes the path that builds everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import libcst as cst

from linen2nnx.migrate.cst_utils import NOT_LOCAL, code, leaves_function, names_in


class Guard(NamedTuple):
    """A test a construction runs under."""

    node: cst.If | cst.IfExp  # the statement or expression that holds the test
    holds: bool  # the construction runs where the test holds (False: where it fails)
    early: bool  # an early return before the construction, not a branch around it


def guards(
    node: cst.CSTNode, fn: cst.FunctionDef, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> list[Guard]:
    """The tests ``node`` (inside ``fn``) runs under, innermost first."""
    found: list[Guard] = []
    prev, cur = node, parent_of(node)
    while cur is not None and cur is not fn:
        if type(cur) is cst.If and (prev is cur.body or prev is cur.orelse):
            found.append(Guard(cur, prev is cur.body, early=False))
        elif type(cur) is cst.IfExp and prev is not cur.test:
            found.append(Guard(cur, prev is cur.body, early=False))
        elif isinstance(cur, (cst.For, cst.While)):
            found = [g for g in found if not g.early]  # returns inside it: from an iteration of its own
        elif isinstance(cur, cst.IndentedBlock):
            at = next((i for i, stmt in enumerate(cur.body) if stmt is prev), 0)
            found.extend(g for stmt in reversed(cur.body[:at]) if (g := early_return(stmt)) is not None)
        prev, cur = cur, parent_of(cur)
    return found


def early_return(stmt: cst.CSTNode) -> Guard | None:
    """``if test: ... return`` (the code after it runs where ``test`` fails), or an ``else`` that
    returns while the body goes on; an ``elif`` chain is none."""
    if type(stmt) is not cst.If or not (stmt.orelse is None or isinstance(stmt.orelse, cst.Else)):
        return None
    returns = leaves_function(stmt.body, (cst.Return,)), leaves_function(stmt.orelse, (cst.Return,))
    if returns[0] == returns[1] or (leaves_function(stmt.body) and leaves_function(stmt.orelse)):
        return None
    return Guard(stmt, holds=returns[1], early=True)


def config_part(test: cst.BaseExpression, holds: bool, call_time: set[str]) -> str | None:
    """For a module that holds nothing, built whatever the call-time part of ``test`` says
    (stateless_classes.py): the part of the test the config decides, "" for none -- the whole of a
    test that reads no call-time local, nothing of one that reads no ``self``, the conjuncts of an
    ``and`` that read no call-time local where the test holds (``if train and self.scale is not None:``
    keeps ``self.scale is not None``: the module's arguments may need it); None where no part can
    be kept apart (``not (train and self.flag)``)."""
    if not (names_in(test) - NOT_LOCAL) & call_time:
        return code(test)
    if "self" not in names_in(test):
        return ""
    if not holds:
        return None
    parts: list[cst.BaseExpression] = []
    for cur in and_conjuncts(test):
        if isinstance(cur, cst.BooleanOperation) or (
            "self" in names_in(cur) and (names_in(cur) - NOT_LOCAL) & call_time
        ):
            return None  # `self.a or train`, or one conjunct reading both: nothing to keep apart
        if not (names_in(cur) - NOT_LOCAL) & call_time:
            parts.append(cur)
    return joined_conjuncts(parts)


def and_conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The conjuncts of an unparenthesised ``a and b and c``, in source order (``[test]`` for any other
    test; a parenthesised ``and`` is one conjunct)."""
    parts: list[cst.BaseExpression] = []
    pending = [test]
    while pending:
        cur = pending.pop()
        if isinstance(cur, cst.BooleanOperation) and isinstance(cur.operator, cst.And) and not cur.lpar:
            pending += [cur.right, cur.left]
        else:
            parts.append(cur)
    return parts


def joined_conjuncts(parts: list[cst.BaseExpression]) -> str:
    """``parts`` as one ``and`` test, each parenthesised when there are several ("" for none)."""
    return " and ".join(f"({code(p)})" if len(parts) > 1 else code(p) for p in parts)


#: Contexts that change nothing about how a module or variable is created (names for profiles, the
#: precision of the computation, warnings): a construction inside one moves to ``__init__`` unchanged.
HARMLESS_CONTEXTS = frozenset(
    {
        "jax.named_scope",
        "jax.default_matmul_precision",
        "jax.profiler.TraceAnnotation",
        "jax.profiler.StepTraceAnnotation",
        "jax.ensure_compile_time_eval",
        "jax.numpy_rank_promotion",
        "jax.numpy_dtype_promotion",
        "contextlib.nullcontext",
        "contextlib.suppress",
        "warnings.catch_warnings",
    }
)


def creation_context(
    node: cst.CSTNode, fn: cst.FunctionDef, parent_of: Callable, qualnames: Callable
) -> str | None:
    """The context manager of a ``with`` around ``node`` in ``fn`` whose effect on a construction inside
    it ``__init__`` would lose (gemma's ``initialize_param_with_dtype(...)`` patching ``param`` for the
    dtype, a mesh or axis rules for the sharding): its source, or None when every ``with`` around it is
    one of :data:`HARMLESS_CONTEXTS`."""
    cur = parent_of(node)
    while cur is not None and cur is not fn:
        if isinstance(cur, cst.With):
            for item in cur.items:
                func = item.item.func if isinstance(item.item, cst.Call) else item.item
                if not qualnames(func) & HARMLESS_CONTEXTS:
                    return code(item.item)
        cur = parent_of(cur)
    return None
