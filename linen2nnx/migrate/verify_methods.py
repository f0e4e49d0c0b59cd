"""The verifier's checks of an NNX class's methods as wholes: a ``__post_init__`` that nothing calls, an
``__init__`` that reads an attribute before it binds it, and an ``__init__`` whose parameter defaults,
or a class attribute, read a name the file does not bind (evaluated when the class is defined: a
NameError at import).

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

from linen2nnx.migrate.annotation_names import BOUND_EVERYWHERE, module_names, outer_names
from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import (
    code,
    is_super_call,
    names_in,
    self_attr,
    self_targets,
)
from linen2nnx.migrate.rules import verify as verify_rules
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.verify_syntax import bound_by, class_body_names

DEFERRED = frozenset({cst.Lambda, cst.FunctionDef, cst.ClassDef})  # code that runs later, not where it stands


def method_notes(
    cls: cst.ClassDef, fn: cst.FunctionDef, module: cst.Module | None = None
) -> list[tuple[Rule, cst.CSTNode, cst.CSTNode, str]]:
    """The leftovers of one method ``fn`` of an NNX class the run rewrote: (rule, node, its statement,
    message); ``module``: the file, whose top-level names ``fn``'s defaults may read (None: not checked)."""
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
    ] + [
        (
            verify_rules.VERIFY_008,
            default,
            fn,
            f"the default of {param} reads {name}, which this file does not bind",
        )
        for param, default, name in unbound_defaults(cls, fn, module_names(module.body) if module else None)
    ]


def unbound_defaults(
    cls: cst.ClassDef, init: cst.FunctionDef, top_names: frozenset[str] | None
) -> list[tuple[str, cst.BaseExpression, str]]:
    """(parameter, its default, a name it reads) for each name a default of ``init`` reads that neither
    the module (``top_names``) nor the class body above binds, nor Python."""
    if top_names is None:
        return []
    found = []
    bound = top_names | BOUND_EVERYWHERE | names_above(cls, init)
    params = init.params
    for param in [*params.params, *params.kwonly_params, *params.posonly_params]:
        if param.default is None:
            continue
        unbound = outer_names(param.default) - bound
        found += [(param.name.value, param.default, name) for name in sorted(unbound)]
    return found


def reads_before_binding(
    cls: cst.ClassDef, init: cst.FunctionDef
) -> list[tuple[cst.CSTNode, cst.Attribute, str]]:
    """Each ``self.X`` an ``__init__`` of ``cls`` reads on a statement above the one that binds ``X``
    (the statement, the read, ``X``)."""
    if [code(b.value) for b in cls.bases] != ["nnx.Module"]:
        return []
    statements = list(init.body.body)
    facts = [_facts(stmt) for stmt in statements]
    first = {}  # attribute -> the first statement that binds it
    for i, (bound, _, _) in enumerate(facts):
        for attr in bound:
            first.setdefault(attr, i)
    found: list[tuple[cst.CSTNode, cst.Attribute, str]] = []
    defined: set[str] | None = None  # the class body's names, found on first need
    for i, (_, reads, calls_self) in enumerate(facts):
        late = [(node, a) for node, a in reads if first.get(a, i) > i]
        if late:
            defined = _class_body_names(cls) if defined is None else defined
            found += [(statements[i], node, a) for node, a in late if a not in defined and "*" not in defined]
        if calls_self:  # a method of self (or super()) may bind anything from here on
            break
    return found


def _class_body_names(cls: cst.ClassDef) -> set[str]:
    """:func:`class_body_names`, with ``"*"`` for a body that binds under an ``if`` (anything may be)."""
    compound = any(
        not isinstance(s, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)) for s in cls.body.body
    )
    return class_body_names(cls) | ({"*"} if compound else set())


def _facts(stmt: cst.CSTNode) -> tuple[set[str], list[tuple[cst.Attribute, str]], bool]:
    """What a statement does with ``self`` now (outside deferred code): the attributes it binds, the
    ``self.X`` it reads (not as a target), and whether it calls a method of ``self`` or ``super()``.
    One walk over the verifier's memoised children: a libcst visitor would rebuild every node."""
    bound: set[str] = set()
    reads: list[tuple[cst.Attribute, str]] = []
    stores: set[int] = set()
    calls_self = False
    stack: list[cst.CSTNode] = [stmt]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in DEFERRED:
            continue
        for target, attr in self_targets(node):
            bound.add(attr)
            if kind is not cst.AugAssign:  # `self.n += 1` reads self.n too
                stores.add(id(target))
        if kind is cst.Call:
            func = node.func  # type: ignore[attr-defined]
            calls_self = (
                calls_self
                or self_attr(func) is not None
                or (type(func) is cst.Attribute and is_super_call(func.value))
            )
        elif kind is cst.Attribute and id(node) not in stores and (attr := self_attr(node)) is not None:
            reads.append((node, attr))  # type: ignore[arg-type]
        stack.extend(syntax_children(node))
    return bound, reads, calls_self


def class_attribute_notes(
    cls: cst.ClassDef, module: cst.Module
) -> list[tuple[Rule, cst.CSTNode, cst.CSTNode, str]]:
    """A class attribute of an NNX class the run rewrote that reads a name neither the file nor the
    class body above it binds (``rot = Rotary(hidden_dim // heads)`` had the fields it read become
    ``__init__``'s parameters): evaluated when the class is defined, a NameError at import."""
    if not any(_attributes(stmt) for stmt in cls.body.body):
        return []
    top_names = module_names(module.body)
    if top_names is None:
        return []
    message = "the class attribute {} reads {}, which neither this file nor the class binds above it"
    found = []
    bound = top_names | BOUND_EVERYWHERE | CLASS_BODY_NAMES
    for stmt in cls.body.body:
        for small in _attributes(stmt):
            target = code(small.targets[0].target if isinstance(small, cst.Assign) else small.target)
            found += [
                (verify_rules.VERIFY_008, small.value, stmt, message.format(target, name))
                for name in sorted(outer_names(small.value) - bound)  # type: ignore[arg-type]
            ]
        bound |= _binds(stmt)
    return found


def _attributes(stmt: cst.BaseStatement) -> list[cst.Assign | cst.AnnAssign]:
    """The assignments with a value on a plain statement line of a class body."""
    smalls = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ()
    return [s for s in smalls if isinstance(s, (cst.Assign, cst.AnnAssign)) and s.value is not None]


CLASS_BODY_NAMES = frozenset({"__qualname__", "__module__"})
"""What Python binds in every class body before its first statement."""


def names_above(cls: cst.ClassDef, stmt: cst.BaseStatement) -> set[str]:
    """The names the statements of ``cls``'s body above ``stmt`` bind (what ``stmt`` may read there)."""
    found = set(CLASS_BODY_NAMES)
    for other in cls.body.body:
        if other is stmt:
            break
        found |= _binds(other)
    return found


def _binds(stmt: cst.BaseStatement) -> set[str]:
    """What a statement of a class body binds there; of one under an ``if`` / ``try``: any name it holds."""
    compound = not isinstance(stmt, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef))
    return names_in(stmt) if compound else bound_by(stmt)
