"""A layer bound to a local only to be handed to the next statement's layer: written in place.

Real code often builds an RNN cell (or a ``Sequential`` element) on a line of its own::

    cell = nn.LSTMCell(self.hidden)
    y = nn.RNN(cell)(x)

which in Linen is exactly ``nn.RNN(nn.LSTMCell(self.hidden))(x)``: the cell is built first either way,
under the same auto-name (``LSTMCell_0``), and ``nn.RNN`` adopts it. The module pass plans a layer
built in another layer's argument (nest_planning.py) but not one that reaches it through a local, so
the local is written in place first, as one more text pass beside the helper replay
(helper_calls.py), whose line map places the findings back on the original's lines.

Only when it is the same program: the local is bound once and read once, by the next statement of the
same block, as a nested argument of a built-in layer (``cell`` of ``nn.RNN``, the RNNs of
``nn.Bidirectional``, an element of ``nn.Sequential``'s list), not under a condition, a lambda, a
comprehension or a loop (one cell would become one per pass), and nothing that the next statement runs before that read builds a module of the same
class as the local's value (which would take the auto-name the value had). A chain of such locals
(``cell = ...; fwd = nn.RNN(cell); bwd = ...; nn.Bidirectional(fwd, bwd)``) is written in place from
the last one up.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.layers import LayerRule, layer_rule
from linen2nnx.migrate.cst_meta import calls_in, syntax_children
from linen2nnx.migrate.cst_utils import bind_args, callee_name, code, name_counts, single_assign
from linen2nnx.migrate.names import NameResolver

Takers = dict[str, LayerRule]  # callee text -> built-in layer whose arguments take modules
_MARKERS = ("RNN(", "Bidirectional(", "Sequential(")  # the layers whose arguments take a module
# constructs under which a read may not happen, or not in the order the text shows
# (and statements: a read in a loop body would build one module per pass where Linen shares one)
_NOT_IN_ORDER = (
    cst.IfExp,
    cst.BooleanOperation,
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.GeneratorExp,
    cst.DictComp,
    cst.For,
    cst.While,
    cst.If,
    cst.Try,
    cst.Match,
)


def may_inline(source: str) -> bool:
    """Cheap test: does the file build a layer that takes a module as an argument at all?"""
    return any(marker in source for marker in _MARKERS)


def inline_nested_locals(fn: cst.FunctionDef, resolver: NameResolver) -> cst.FunctionDef:
    """``fn`` with every local that only carries a layer into the next statement's layer argument
    written in place (see the module docstring); ``fn`` itself when there is none."""
    if not _any_pair(fn.body):
        return fn
    takers = {}  # callee text -> the built-in layer it names, when its arguments take modules
    for call in calls_in(fn.body):  # resolved on the original nodes: a rewritten statement has new ones
        rule = next((r for q in resolver.qualnames(call.func) if (r := layer_rule(q)) is not None), None)
        if rule is not None and (rule.nested or rule.varargs_list):
            takers[code(call.func)] = rule
    if not takers:
        return fn
    return fn.with_changes(body=_in_block(fn.body, name_counts(fn.body), takers))


def _any_pair(block: Any) -> bool:
    return isinstance(block, cst.IndentedBlock) and len(block.body) > 1


def _in_block(block: Any, counts: dict[str, int], takers: Takers) -> Any:
    """``block`` with its own statements' locals written in place, and those of the blocks nested in
    its compound statements (not of nested functions or classes: another scope)."""
    if not isinstance(block, cst.IndentedBlock):
        return block
    stmts = [_in_compound(s, counts, takers) for s in block.body]
    i = len(stmts) - 2
    while i >= 0:
        merged = _inlined(stmts[i], stmts[i + 1], counts, takers)
        if merged is not None:
            stmts[i : i + 2] = [merged]
        i -= 1
    return block.with_changes(body=stmts)


def _in_compound(stmt: cst.BaseStatement, counts: dict[str, int], takers: Takers) -> Any:
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or not hasattr(stmt, "body"):
        return stmt
    changes: dict[str, Any] = {"body": _in_block(stmt.body, counts, takers)}
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, (cst.If, cst.Else)):
        changes["orelse"] = _in_compound(orelse, counts, takers)
    return stmt.with_changes(**changes)


def _inlined(
    stmt: cst.BaseStatement, nxt: cst.BaseStatement, counts: dict[str, int], takers: Takers
) -> cst.BaseStatement | None:
    """``nxt`` with the local ``stmt`` binds written in place of its one read; None when not the same
    program (or not a layer argument)."""
    assign = single_assign(stmt)
    if assign is None or not isinstance(assign[1], cst.Call) or counts.get(assign[0]) != 2:
        return None
    assert isinstance(stmt, cst.SimpleStatementLine)
    # a class built (a Linen layer, a module class of the run), with no comment of its own to lose
    if stmt.trailing_whitespace.comment is not None or not callee_name(assign[1])[:1].isupper():
        return None
    name, value = assign
    read = _nested_read(nxt, name, takers)
    if read is None or _same_class_first(nxt, read, value):
        return None
    merged = nxt.deep_replace(read, value)
    assert isinstance(merged, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return merged.with_changes(leading_lines=[*stmt.leading_lines, *nxt.leading_lines])


def _nested_read(stmt: cst.BaseStatement, name: str, takers: Takers) -> cst.Name | None:
    """The one read of ``name`` in ``stmt`` when it is a nested argument of a built-in layer (or an
    element of its list argument), reached in the order the text shows; None otherwise."""
    found: list[cst.Name] = []
    ok = _walk_reads(stmt, name, takers, found, in_order=True, nested_arg=False)
    return found[0] if ok and len(found) == 1 else None


def _walk_reads(
    node: Any, name: str, takers: Takers, found: list[cst.Name], *, in_order: bool, nested_arg: bool
) -> bool:
    """Collect the reads of ``name`` under ``node``; False when one is not a nested layer argument
    read in order."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return name not in name_counts(node)
    if type(node) is cst.Name:
        if node.value != name:
            return True
        found.append(node)
        return in_order and nested_arg
    in_order = in_order and not isinstance(node, _NOT_IN_ORDER)
    if type(node) is cst.Call:
        slots = _nested_slots(node, takers)
        for arg in node.args:
            value = arg.value
            direct = id(arg) in slots
            if direct and isinstance(value, (cst.List, cst.Tuple)) and slots[id(arg)] == "list":
                for element in value.elements:
                    if not _walk_reads(
                        element.value, name, takers, found, in_order=in_order, nested_arg=True
                    ):
                        return False
                continue
            if not _walk_reads(value, name, takers, found, in_order=in_order, nested_arg=direct):
                return False
        return _walk_reads(node.func, name, takers, found, in_order=in_order, nested_arg=False)
    return all(
        _walk_reads(child, name, takers, found, in_order=in_order, nested_arg=False)
        for child in syntax_children(node)
    )


def _nested_slots(call: cst.Call, takers: Takers) -> dict[int, str]:
    """id of each argument of ``call`` that takes a module (``"one"``) or a list of them (``"list"``),
    when ``call`` builds a built-in layer that has such arguments."""
    rule = takers.get(code(call.func))
    if rule is None:
        return {}
    bound, _ = bind_args(rule.linen_arg_order(), call)
    slots = {id(arg): "one" for key, arg in bound.items() if key in rule.nested}
    if rule.varargs_list in bound:
        slots[id(bound[rule.varargs_list])] = "list"
    return slots


def _same_class_first(stmt: cst.BaseStatement, read: cst.Name, value: cst.Call) -> bool:
    """Does ``stmt`` build a module of a class ``value`` builds (its own or nested constructors) before
    it reaches ``read``? Python evaluates a call's callee, then its arguments in order, then calls it:
    the order of the walk below."""
    classes = {code(c.func) for c in calls_in(value)}
    before: list[str] = []

    def walk(node: Any) -> bool:
        if node is read:
            return True
        if type(node) is cst.Call:
            if walk(node.func) or any(walk(arg.value) for arg in node.args):
                return True
            before.append(code(node.func))
            return False
        return any(walk(child) for child in syntax_children(node))

    walk(stmt)
    return bool(classes.intersection(before))
