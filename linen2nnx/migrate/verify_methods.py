"""The verifier's checks of an NNX class's methods as wholes: a ``__post_init__`` that nothing calls, and
an ``__init__`` that reads an attribute before it binds it.

Linen's ``setup()`` may read a size that a later statement binds, on a submodule built lazily;
``__init__`` runs in order, so an output that reads ``self.width`` on a line above
``self.width = ...`` fails at construction (or reads nothing the source meant). The rewrite guards the
sizes it writes (``setup_order.py``); this check is the net under every other path, and it speaks only
where it is sure: a plain ``nnx.Module`` subclass (no base of the run that may bind the attribute), an
attribute no line above binds and nothing in the class body defines (no method, property or class
attribute), read before any call of a method of ``self`` or ``super()`` that could bind it.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code, self_attr
from linen2nnx.migrate.rules import verify as verify_rules
from linen2nnx.migrate.rules.base import Rule

DEFERRED = (cst.Lambda, cst.FunctionDef, cst.ClassDef)  # code that runs later, not where it stands


def method_notes(cls: cst.ClassDef, fn: cst.FunctionDef) -> list[tuple[Rule, cst.CSTNode, cst.CSTNode, str]]:
    """The leftovers of one method ``fn`` of an NNX class the run rewrote: (rule, node, its statement,
    message)."""
    if fn.name.value == "__post_init__":
        why = (
            "__post_init__ is the Linen dataclass's hook: nothing calls it in an NNX class, so what it sets "
        )
        return [
            (verify_rules.VERIFY_004, fn, fn, why + "is missing; run its body in __init__, after the fields")
        ]
    if fn.name.value != "__init__":
        return []
    return [
        (verify_rules.VERIFY_007, read, stmt, f"__init__ reads self.{attr} before a later line binds it")
        for stmt, read, attr in reads_before_binding(cls, fn)
    ]


def reads_before_binding(
    cls: cst.ClassDef, init: cst.FunctionDef
) -> list[tuple[cst.CSTNode, cst.Attribute, str]]:
    """Each ``self.X`` an ``__init__`` of ``cls`` reads on a statement above the one that binds ``X``
    (the statement, the read, ``X``)."""
    if [code(b.value) for b in cls.bases] != ["nnx.Module"]:
        return []
    defined = _class_body_names(cls)
    statements = list(init.body.body)
    later = [_bound(stmt) for stmt in statements]
    found: list[tuple[cst.CSTNode, cst.Attribute, str]] = []
    bound: set[str] = set(defined)
    for i, stmt in enumerate(statements):
        reads, calls_self = _reads(stmt)
        pending = set().union(*later[i + 1 :]) if i + 1 < len(later) else set()
        found += [(stmt, node, a) for node, a in reads if a not in bound and a in pending - later[i]]
        if calls_self:  # a method of self (or super()) may bind anything from here on
            break
        bound |= later[i]
    return found


def _class_body_names(cls: cst.ClassDef) -> set[str]:
    names: set[str] = set()
    for stmt in cls.body.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = (
                    [t.target for t in small.targets]
                    if isinstance(small, cst.Assign)
                    else [small.target]
                    if isinstance(small, cst.AnnAssign)
                    else []
                )
                names |= {t.value for t in targets if isinstance(t, cst.Name)}
        else:  # a class body under an `if`: anything may be defined
            names.add("*")
    return names


def _bound(stmt: cst.CSTNode) -> set[str]:
    """The attributes of ``self`` a statement assigns, anywhere in it (outside deferred code)."""
    found: set[str] = set()

    class Targets(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, DEFERRED):
                return False
            targets = (
                [t.target for t in node.targets]
                if isinstance(node, cst.Assign)
                else [node.target]
                if isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For))
                else []
            )
            while targets:
                target = targets.pop()
                if isinstance(target, (cst.Tuple, cst.List)):
                    targets += [e.value for e in target.elements]
                elif (attr := self_attr(target)) is not None:
                    found.add(attr)
            return True

    stmt.visit(Targets())
    return found


def _reads(stmt: cst.CSTNode) -> tuple[list[tuple[cst.Attribute, str]], bool]:
    """The ``self.X`` a statement reads now (not as an assignment's target), and whether it calls a
    method of ``self`` or ``super()``."""
    reads: list[tuple[cst.Attribute, str]] = []
    targets: set[int] = set()
    calls_self = False

    class Reads(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal calls_self
            if isinstance(node, DEFERRED):
                return False
            if isinstance(node, cst.AssignTarget):
                targets.add(id(node.target))
            elif isinstance(node, cst.Call) and (
                self_attr(node.func) is not None
                or (isinstance(node.func, cst.Attribute) and code(node.func.value).startswith("super("))
            ):
                calls_self = True
            elif isinstance(node, cst.Attribute) and id(node) not in targets:
                attr = self_attr(node)
                if attr is not None:
                    reads.append((node, attr))
            return True

    stmt.visit(Reads())
    return reads, calls_self
