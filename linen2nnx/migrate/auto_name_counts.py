"""Linen's auto-name of a module built under config tests, told from the tests of the modules before it.

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.compact_collect.CompactCollector`.
Linen numbers the auto-named modules of a class (``LayerNorm_0``, ``LayerNorm_1``, ...) by how many of
that class *ran* before. BERT-style blocks build their norms under a config switch, in two separate
``if`` statements::

    x = nn.LayerNorm()(inputs) if self.pre_norm else inputs   # LayerNorm_0 when pre_norm
    ...
    if not self.pre_norm:
        x = nn.LayerNorm()(x)                                  # LayerNorm_0 when not pre_norm
    if self.pre_norm:
        y = nn.LayerNorm()(x)                                  # LayerNorm_1 when pre_norm

Each module's name is the same for every config under which it runs: the count before it is a function
of the tests that is constant wherever the module's own tests hold. :func:`static_count` finds that
constant by trying every outcome of the tests involved, or says there is none (then the name depends on
the config, and the collector's finding stands).

The tests are taken as independent booleans: two tests of one field that imply each other
(``self.n > 0``, ``self.n > 1``) are not related. A count constant over every combination is constant
over those that can occur, so the answer is never wrong, only sometimes refused. A test is one value
throughout the method only when every local it reads is bound once (``stable``); any other test is
taken as a value of its own at each place it is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import libcst as cst

from linen2nnx.migrate.cst_utils import NOT_LOCAL, code, names_in, opposite, parse_expression

MAX_TESTS = 10
"""More distinct tests than this (2**10 outcomes) is not tried: the finding stands."""


class Record(NamedTuple):
    """An auto-named module of a class: the conditions it is built under, and the ``if`` (with an
    ``else``, or an early return) whose branches the walk counted from one start that decides the
    last of them (None: another ``if``, or none)."""

    conditions: list[str]
    deciding: cst.If | None


def exclusive_branch(earlier: Record, conditions: list[str], deciding: cst.If | None) -> bool:
    """Built in the other branch of the same ``if`` as a module under ``conditions`` (the same outer
    conditions, the last one negated): the two never run together, the walk counted this branch from
    the counts before the ``if``, and the planner gives both one attribute."""
    before = earlier.conditions
    if len(before) != len(conditions) or not before or before[:-1] != conditions[:-1]:
        return False
    a, b = before[-1], conditions[-1]
    return deciding is not None and earlier.deciding is deciding and opposite(a, b)


Literal = tuple[object, bool]  # a test (its text, or a key of its own when not stable) and its outcome


def literal(test: str) -> tuple[str, bool]:
    """``test`` as the text of what it tests and whether that holds: ``not (x)`` is ``x`` failing."""
    node = parse_expression(test)
    holds = True
    while True:
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            node, holds = node.expression, not holds
        elif node.lpar:
            node = node.with_changes(lpar=[], rpar=[])
        else:
            return code(node), holds


def _literals(conditions: Sequence[str], owner: int, stable: Callable[[str], bool]) -> list[Literal]:
    """The literals of one module's ``conditions``; an unstable test keyed by ``owner`` alone."""
    found: list[Literal] = []
    for test in conditions:
        text, holds = literal(test)
        found.append(((text,) if stable(text) else (text, owner), holds))
    return found


def _outcomes(
    earlier: Sequence[Sequence[str]], conditions: Sequence[str], stable: Callable[[str], bool]
) -> tuple[list[list[Literal]], list[dict[object, bool]]] | None:
    """The literals of each earlier module, and every outcome of the tests under which ``conditions``
    hold; None when there are too many tests to try."""
    records = [_literals(c, i, stable) for i, c in enumerate(earlier)]
    own = _literals(conditions, -1, stable)
    tests = sorted({key for lits in (*records, own) for key, _ in lits}, key=repr)
    if len(tests) > MAX_TESTS:
        return None
    outcomes = []
    for values in itertools.product((False, True), repeat=len(tests)):
        outcome = dict(zip(tests, values))
        if all(outcome[key] == holds for key, holds in own):
            outcomes.append(outcome)
    return records, outcomes


def static_count(
    earlier: Sequence[Sequence[str]], conditions: Sequence[str], stable: Callable[[str], bool]
) -> int | None:
    """How many of the modules built under ``earlier`` conditions run before one built under
    ``conditions``, when that is one number wherever ``conditions`` hold; else None."""
    found = _outcomes(earlier, conditions, stable)
    if found is None or not found[1]:
        return None
    records, outcomes = found
    counts = {sum(all(o[key] == holds for key, holds in lits) for lits in records) for o in outcomes}
    return counts.pop() if len(counts) == 1 else None


def never_together(a: Sequence[str], b: Sequence[str], stable: Callable[[str], bool]) -> bool:
    """Whether no outcome of the tests makes both ``a`` and ``b`` hold (two modules that share one
    Linen name and so one attribute)."""
    found = _outcomes([a], b, stable)
    return found is not None and not any(all(o[key] == holds for key, holds in found[0][0]) for o in found[1])


def stable_tests(counts: dict[str, int]) -> Callable[[str], bool]:
    """Whether a test of a method is one value throughout it: every name it reads is bound once there
    (``counts``: :func:`~linen2nnx.migrate.cst_utils.assigned_names`, a parameter counted once), so a
    parameter bound again (``if embeds is None: embeds = ...``, after which the same test reads
    otherwise) is not."""

    def stable(test: str) -> bool:
        return all(counts.get(n, 0) <= 1 for n in names_in(parse_expression(test)) - NOT_LOCAL)

    return stable


def moved_off_record(
    before: dict[str, int | None], after: dict[str, int | None], recorded: str | None
) -> set[str]:
    """The classes whose auto-name count planning one site moved (``before`` -> ``after``) other than by
    the one module of class ``recorded`` it recorded (a layer built in another's argument, a loop, a
    nest): their records no longer tell Linen's count, so :func:`static_count` is not asked for them."""
    moved = set()
    for name in set(before) | set(after):
        if before.get(name, 0) != after.get(name, 0):
            if not (name == recorded and after.get(name) == (before.get(name) or 0) + 1):
                moved.add(name)
    return moved
