"""A local of ``@nn.compact`` bound to one of several Linen classes of the run by a config test.

ViViT-style encoders pick the block class once, then build every layer from the local::

    if self.kind == 'a':
        block = BlockA
    else:
        block = BlockB
    for i in range(self.depth):
        x = block(self.width, name=f'block_{i}')(x)

(or ``block = BlockA if self.kind == 'a' else BlockB``). NNX makes the same choice in ``__init__``:
each use is built there as ``(BlockA if self.kind == 'a' else BlockB)(self.width, in_features=...,
rngs=rngs)``, and the local's statement goes (compact_aliases.py plans each use as the first class).
That is exact only where

- every test reads the config alone (``self``'s fields and names bound outside the method, no call),
  and every branch binds the local to a Linen class of the run already planned;
- the candidates look alike to their builder: the same constructor fields, the same added
  constructor arguments from the same input (``in_features``), the same call flags, none kept as
  Linen -- else the sizes planned for the first would be wrong for another; what the builder reads
  of a use's output size is what they agree on, as for a factory field bound to several classes
  (``Sizer.layer_info``);
- an auto-named use (no ``name=``) gets the Linen name of whichever class is chosen: Linen counts
  auto-names per class (``BlockA_0`` or ``BlockB_0``), so no other module of a candidate class may be
  built in the method, and the name map then lists each class's name for the one attribute.

Otherwise the local is left as written and its class reads stay findings (L2N-MOD-004). A use named
by ``name=`` has one Linen name whichever class builds it, so the name map names one build's weights
only: L2N-MOD-013, worded as for a ``setup()`` attribute built as two classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import (
    bracketed,
    code,
    keyword_arg,
    names_in,
    parse_expression,
    single_assign,
)
from linen2nnx.migrate.name_map_entries import alike_all, report_class_choice

Choice = tuple[str, list[cst.BaseExpression], cst.BaseExpression]  # local, classes, the choice in __init__


def class_choice(
    stmt: cst.BaseStatement,
    counts: dict[str, int],
    is_class: Callable[[cst.BaseExpression], bool],
) -> Choice | None:
    """``name = A if t else B`` (at any depth of ``else``), or an ``if`` / ``elif`` / ``else`` each of
    whose branches is the one line ``name = <class>``: (name, the classes, the conditional expression
    that chooses the class); None for anything else, or where the local is bound elsewhere too."""
    assign = single_assign(stmt)
    if assign is not None:
        classes = _expression_classes(assign[1], counts, is_class)
        if classes is None or len(classes) < 2 or counts.get(assign[0]) != 1:
            return None
        return assign[0], classes, assign[1]
    if type(stmt) is not cst.If:
        return None
    branches: list[tuple[cst.BaseExpression | None, cst.BaseStatement]] = []
    cur: cst.If | cst.Else | None = stmt
    while cur is not None:
        body = cur.body.body
        if len(body) != 1:
            return None
        branches.append((cur.test if isinstance(cur, cst.If) else None, body[0]))
        cur = cur.orelse if isinstance(cur, cst.If) else None
    if branches[-1][0] is not None:
        return None  # no `else`: the local is unbound where every test fails
    bound = [single_assign(line) for _, line in branches]
    if any(b is None for b in bound) or len({b[0] for b in bound if b is not None}) != 1:
        return None
    name = bound[0][0]  # type: ignore[index]
    classes = [b[1] for b in bound if b is not None]
    if counts.get(name) != len(branches) or not all(_plain_class(c, is_class) for c in classes):
        return None
    if not all(_config_test(t, counts) for t, _ in branches if t is not None):
        return None
    text = code(classes[-1])
    for (test, _), cls in zip(reversed(branches[:-1]), reversed(classes[:-1])):
        text = f"{code(cls)} if {bracketed(code(test))} else {text}"  # type: ignore[arg-type]
    return name, classes, parse_expression(text)


def _expression_classes(
    value: cst.BaseExpression, counts: dict[str, int], is_class: Callable[[cst.BaseExpression], bool]
) -> list[cst.BaseExpression] | None:
    """The classes a conditional expression of classes on config tests chooses among."""
    if _plain_class(value, is_class):
        return [value]
    if type(value) is not cst.IfExp or not _config_test(value.test, counts):
        return None
    if not _plain_class(value.body, is_class):
        return None
    rest = _expression_classes(value.orelse, counts, is_class)
    return None if rest is None else [value.body, *rest]


def _plain_class(node: cst.BaseExpression, is_class: Callable[[cst.BaseExpression], bool]) -> bool:
    return isinstance(node, (cst.Name, cst.Attribute)) and is_class(node)


def _config_test(test: cst.BaseExpression, counts: dict[str, int]) -> bool:
    """A test ``__init__`` can repeat: no local or parameter of the method, no call."""
    return not (names_in(test) - {"self"}) & counts.keys() and not calls_in(test)


def alike_candidates(ctx: Any, classes: list[cst.BaseExpression]) -> bool:
    """Whether the candidate classes (none: not a choice) look alike to the class that builds them
    (module docstring)."""
    plans = [ctx.user_class_of(c) for c in classes]
    if not plans:
        return True
    if any(p is None or p.blocking or p.kept_linen for p in plans):
        return False

    def face(p: Any) -> tuple[Any, ...]:
        return (
            [f.name for f in p.fields],
            dict(p.new_args),
            p.first_input,
            p.state_when,
            tuple(p.call_flags),
            tuple(p.call_inputs),
            p.shape_rank_only,
            set(p.optional_inputs),
        )

    first = face(plans[0])
    return all(face(p) == first for p in plans[1:])


def auto_names_exact(
    fn: cst.FunctionDef, stmt: cst.BaseStatement, classes: list[cst.BaseExpression], calls: list[cst.Call]
) -> bool:
    """An auto-named use is named after the chosen class, counted from 0 only where the method builds
    no other module of a candidate class: no read of a candidate's name outside the choice."""
    if all(keyword_arg(c, "name") is not None for c in calls):
        return True
    spelled = {code(c) for c in classes}
    outside = [n for s in fn.body.body if s is not stmt for n in _class_reads(s)]
    return not spelled & set(outside)


def _class_reads(node: cst.CSTNode) -> list[str]:
    """The names and dotted names ``node`` reads (what a class reference is spelled as)."""
    found: list[str] = []

    class Reads(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> None:
            found.append(code(n))

    node.visit(Reads())
    return found


def finish_choice(
    ctx: Any, sites: list[Any], classes: list[cst.BaseExpression], all_named: bool = False
) -> None:
    """Each use names the classes it may build (its output size is theirs where they agree, and the
    name map lists each class's auto-name); one named by ``name=`` gets the name map's caveat
    (L2N-MOD-013), as does every use where ``all_named`` (``setup()``: the attribute names it)."""
    plans = tuple(ctx.user_class_of(cls) for cls in classes)
    for site in sites if plans else ():
        site.choice_plans = plans
        keys = [p.key or ctx.class_key(p.name) for p in plans]
        if (all_named or keyword_arg(site.ctor, "name") is not None) and not alike_all(ctx, keys):
            report_class_choice(ctx, site, keys)
