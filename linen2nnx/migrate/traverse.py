"""libcst's transformer traversal, without the work that cannot change its result.

``tree.visit(transformer)`` calls ``on_visit`` / ``on_leave`` for every node, whitespace and
punctuation included, goes through a generator and two attribute callbacks per field, and rebuilds
every node it enters with its constructor, which validates the node again: the module pass's
single most expensive part. :func:`transform` gives the transformer the same calls, in the same
order, with the same arguments, and returns the same tree, but

- a node of ``kept`` (types the transformer neither enters nor changes: it answers ``False`` to
  ``on_visit`` and leaves them as they are) is used as it is, without the two calls;
- the fields that only hold whitespace, comments or punctuation (which hold ``kept`` nodes only) are
  copied, not visited;
- a node whose children all came back as they were is copied without the constructor's validation
  (the same field values passed it when the node was parsed); a node with a changed child is built
  by its constructor, as libcst does.

Like libcst's, the returned tree holds new nodes for every node the traversal entered (a handler
looking up an updated node in a table keyed by original nodes finds nothing, as before).
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Collection
from functools import cache
from typing import Any

import libcst as cst
from libcst import CSTValidationError, FlattenSentinel, MaybeSentinel, RemovalSentinel

from linen2nnx.migrate.cst_meta import IS_NODE, syntax_fields

# how libcst visits a field (see libcst._nodes.internal): what a removed or flattened child becomes
REQUIRED, OPTIONAL, SENTINEL, BODY = range(4)
_BODY_FIELDS = frozenset({(cst.Module, "body"), (cst.IndentedBlock, "body")})


@cache
def field_plan(kind: type) -> tuple[tuple[str, int], ...]:
    """(field, how libcst visits it) for the fields of ``kind`` that may hold syntax, in libcst's
    visit order. A sequence of children is told by its value; ``how`` says what a removed child
    held alone becomes (required: an error; optional: None; sentinel: ``MaybeSentinel.DEFAULT``),
    and marks the body sequences, whose emptied statements are dropped."""
    hints = typing.get_type_hints(kind)
    plan = []
    for name in syntax_fields(kind):
        allowed = typing.get_args(hints[name])
        if (kind, name) in _BODY_FIELDS:
            how = BODY
        elif type(None) in allowed:
            how = OPTIONAL
        elif MaybeSentinel in allowed:
            how = SENTINEL
        else:
            how = REQUIRED
        plan.append((name, how))
    return tuple(plan)


@cache
def _all_fields(kind: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """Every field of ``kind``: what a copy must set (libcst nodes have slots, no ``__dict__``), and a
    function that reads them all at once (one C-level call, not one ``getattr`` a field)."""
    names = tuple(f.name for f in dataclasses.fields(kind))
    if len(names) > 1:
        return names, operator.attrgetter(*names)
    return names, lambda node: tuple(getattr(node, name) for name in names)  # attrgetter gives no tuple


def copy_node(node: cst.CSTNode, changes: dict[str, Any]) -> cst.CSTNode:
    """A new node of ``node``'s type with its fields, ``changes`` applied, not validated again (for
    changes that no check of the node reads)."""
    new = object.__new__(type(node))
    names, read = _all_fields(type(node))
    set_field, changed = object.__setattr__, changes.get
    for name, value in zip(names, read(node)):
        set_field(new, name, changed(name, value))
    return new


def transform(tree: cst.Module, transformer: cst.CSTTransformer, kept: Collection[type]) -> cst.Module:
    """``tree.visit(transformer)`` for a transformer that does not enter or change nodes of the types
    ``kept``, and has no ``visit_<Type>_<field>`` / ``leave_<Type>_<field>`` handlers."""
    result = _Traversal(transformer, kept).visit(tree) if type(tree) not in kept else tree
    if isinstance(result, RemovalSentinel):
        return tree.with_changes(body=(), header=(), footer=())
    return result


class _Traversal:
    """One traversal; ``same`` says whether the last visited node came back with its fields' values."""

    def __init__(self, transformer: cst.CSTTransformer, kept: Collection[type]) -> None:
        self.on_visit: Callable[[cst.CSTNode], bool] = transformer.on_visit
        self.on_leave: Callable[[cst.CSTNode, Any], Any] = transformer.on_leave
        self.kept = kept
        self.same = True

    def visit(self, node: cst.CSTNode) -> Any:
        """``node.visit(transformer)`` for a node not of ``kept``; sets ``self.same``."""
        if self.on_visit(node):
            updated = self.children(node)
            same = self.same
        else:
            updated, same = node, True
        result = self.on_leave(node, updated)
        if not IS_NODE[type(result)] and not isinstance(result, (RemovalSentinel, FlattenSentinel)):
            raise CSTValidationError(
                "Expected a node of type CSTNode or a RemovalSentinel, "
                + f"but got a return value of {type(result).__name__}"
            )
        self.same = same and result is updated
        return result

    def children(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` with its children visited (``_visit_and_replace_children``); sets ``self.same``."""
        changes: dict[str, Any] = {}
        same = True
        kept = self.kept
        for name, how in field_plan(type(node)):
            value = getattr(node, name)
            kind = type(value)
            if kind is tuple or kind is list:
                changes[name] = self.sequence(value, how == BODY)
            elif kind in kept or not IS_NODE[kind]:  # as parsed; or None, MaybeSentinel, a string
                continue
            else:
                changes[name] = self.single(value, how)
            same = same and self.same
        self.same = same
        if same:
            return copy_node(node, changes)
        updated = copy_node(node, changes)  # = dataclasses.replace(node, **changes), without its field loop
        updated.__post_init__()  # the constructor's validation
        return updated

    def single(self, node: cst.CSTNode, how: int) -> Any:
        """A visited child held alone (``visit_required`` / ``_optional`` / ``_sentinel``)."""
        result = self.visit(node)
        if IS_NODE[type(result)]:
            return result
        if isinstance(result, FlattenSentinel):
            raise TypeError(
                f"We got a FlattenSentinel while visiting a {type(node).__name__}. This "
                + "node's parent does not allow for it to be it to be replaced with a "
                + "sequence."
            )
        self.same = False  # removed
        if how == REQUIRED:
            raise TypeError(
                f"We got a RemovalSentinel while visiting a {type(node).__name__}. This "
                + "node's parent does not allow it to be removed."
            )
        return None if how == OPTIONAL else MaybeSentinel.DEFAULT

    def sequence(self, children: Collection[cst.CSTNode], body: bool) -> tuple[Any, ...]:
        """Visited children held in a sequence (``visit_sequence`` / ``visit_body_sequence``); sets
        ``self.same``: whether each came back with its fields' values."""
        out: list[Any] = []
        same = True
        kept = self.kept
        for child in children:
            if type(child) in kept:
                out.append(child)
                continue
            result = self.visit(child)
            same = same and self.same
            if IS_NODE[type(result)]:
                if body and result._is_removable() and not child._is_removable():
                    same = False  # a statement emptied by its rewrite: dropped
                else:
                    out.append(result)
            elif isinstance(result, FlattenSentinel):
                same = False
                out.extend(
                    n for n in result if not (body and n._is_removable() and not child._is_removable())
                )
            else:  # removed
                same = False
        self.same = same
        return tuple(out)
