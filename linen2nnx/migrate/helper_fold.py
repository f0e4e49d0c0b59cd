"""Substituting and folding the source of a replayed helper call (see :mod:`~.helper_replay`).

What binding a call's arguments makes constant is computed here, on libcst trees: reads of names
replaced by expressions (parenthesised where an operator needs it), integer arithmetic, f-strings of
literals, ``not`` of a constant, ``if`` on a constant. Nothing here knows Linen.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import names_in

_ATOMS = (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.SimpleString, cst.Integer, cst.Float)
_LITERALS = (cst.SimpleString, cst.Integer, cst.Float)


class ReplayError(Exception):
    """A helper call that cannot stand in its caller's place."""


def is_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, _LITERALS) or (
        isinstance(node, cst.Name) and node.value in ("True", "False", "None")
    )


def pure(node: cst.CSTNode) -> bool:
    """No call, assignment expression, await or yield outside a lambda body: evaluating it twice, or
    later, gives the same value."""
    found = False

    class V(FastVisitor):
        def visit_Lambda(self, n: cst.Lambda) -> bool:
            return False

        def visit_Call(self, n: cst.Call) -> None:
            nonlocal found
            found = True

        visit_NamedExpr = visit_Await = visit_Yield = visit_Call  # type: ignore[assignment]

    V().walk(node)
    return not found


class _Subst(cst.CSTTransformer):
    """Replaces reads of names (not attribute names, keywords or assignment targets, unless renamed)."""

    def __init__(self, values: dict[str, cst.BaseExpression], renames: dict[str, str] | None = None) -> None:
        self.values = values
        self.renames = renames or {}
        self.skip: set[int] = set()  # names bound here: renamed, never replaced by a value
        self.never: set[int] = set()  # attribute names and keywords: no variable at all

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.never.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.never.add(id(node.keyword))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_AsName(self, node: cst.AsName) -> None:
        self.skip.update(id(n) for n in _target_names(node.name))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_Del(self, node: cst.Del) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_Param(self, node: cst.Param) -> None:
        if node.name.value in self.values or node.name.value in self.renames:
            raise ReplayError(f"a lambda parameter shadows `{node.name.value}`")

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.skip.update(id(n) for n in _target_names(node.target))

    def visit_CompFor(self, node: cst.CompFor) -> None:
        if names_in(node.target) & (set(self.values) | set(self.renames)):
            raise ReplayError("a comprehension rebinds a replayed name")

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if id(original) in self.never:
            return updated
        if original.value in self.renames:
            return updated.with_changes(value=self.renames[original.value])
        if id(original) in self.skip or original.value not in self.values:
            return updated
        value = self.values[original.value]
        if not isinstance(value, _ATOMS) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return value

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(value=unparen(updated.value))

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        return updated.with_changes(value=unparen(updated.value))


def unparen(value: cst.BaseExpression) -> cst.BaseExpression:
    if len(getattr(value, "lpar", ())) == 1 and not isinstance(value, (cst.Tuple, cst.GeneratorExp)):
        return value.with_changes(lpar=[], rpar=[])
    return value


def bound_names(node: cst.CSTNode) -> set[str]:
    """Names a statement or block binds (``x = ...``, ``for i in ...``; not ``d[k] = ...``, which only
    mutates ``d``)."""
    found: set[str] = set()

    class V(FastVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            found.update(t.value for t in _target_names(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            found.update(t.value for t in _target_names(n.target))

        visit_AugAssign = visit_AnnAssign  # type: ignore[assignment]

        def visit_For(self, n: cst.For) -> None:
            found.update(t.value for t in _target_names(n.target))

        def visit_AsName(self, n: cst.AsName) -> None:
            found.update(t.value for t in _target_names(n.name))

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            found.update(t.value for t in _target_names(n.target))

        def visit_CompFor(self, n: cst.CompFor) -> None:
            found.update(t.value for t in _target_names(n.target))

    V().walk(node)
    return found


def _target_names(target: cst.CSTNode) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def substitute(
    node: cst.CSTNode, values: dict[str, cst.BaseExpression], renames: dict[str, str] | None = None
) -> Any:
    """``node`` with the reads of ``values`` replaced and the names of ``renames`` renamed."""
    if not values and not renames:
        return node
    return node.visit(_Subst(values, renames))


class _Fold(cst.CSTTransformer):
    """Integer arithmetic, f-strings of literals, ``not`` of a constant."""

    def leave_BinaryOperation(
        self, original: cst.BinaryOperation, updated: cst.BinaryOperation
    ) -> cst.BaseExpression:
        left, right, op = updated.left, updated.right, updated.operator
        if isinstance(left, cst.Integer) and isinstance(right, cst.Integer) and not updated.lpar:
            a, b = int(left.value), int(right.value)
            ops = {cst.Add: a + b, cst.Subtract: a - b, cst.Multiply: a * b}
            if type(op) in ops and ops[type(op)] >= 0:
                return cst.Integer(str(ops[type(op)]))
        return updated

    def leave_FormattedString(
        self, original: cst.FormattedString, updated: cst.FormattedString
    ) -> cst.BaseExpression:
        """Literal parts become text (``f'conv{1}_{x}'`` -> ``f'conv1_{x}'``); all text: a plain string. A
        string substituted into a part that stays an expression must not use the f-string's quote."""
        quote = updated.start.lower().replace("f", "").replace("r", "").replace("b", "").replace("u", "")
        parts: list[cst.BaseFormattedStringContent] = []
        for part in updated.parts:
            text = _literal_text(part, quote)
            if (
                text is None
                and isinstance(part, cst.FormattedStringExpression)
                and _quotes_in(part, quote[0])
            ):
                raise ReplayError("a string put into an f-string with the same quotes")
            if text is not None and parts and isinstance(parts[-1], cst.FormattedStringText):
                parts[-1] = cst.FormattedStringText(parts[-1].value + text)
            else:
                parts.append(cst.FormattedStringText(text) if text is not None else part)
        if not all(isinstance(p, cst.FormattedStringText) for p in parts):
            return updated.with_changes(parts=parts)
        joined = "".join(p.value for p in parts)  # type: ignore[attr-defined]
        if "{" in joined or "}" in joined or "\\" in joined:
            return updated.with_changes(parts=parts)
        prefix = updated.start[: len(updated.start) - len(quote)].replace("f", "").replace("F", "")
        return cst.SimpleString(f"{prefix}{quote}{joined}{updated.end}", lpar=updated.lpar, rpar=updated.rpar)

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        """``None is None`` -> ``True``, ``4 is not None`` -> ``True``: a literal an argument made of a
        parameter, tested against ``None``."""
        if len(updated.comparisons) != 1 or updated.lpar:
            return updated
        target = updated.comparisons[0]
        left, right = unparen(updated.left), unparen(target.comparator)
        if not (is_literal(left) and isinstance(right, cst.Name) and right.value == "None"):
            return updated
        same = isinstance(left, cst.Name) and left.value == "None"
        if isinstance(target.operator, cst.Is):
            return cst.Name("True" if same else "False")
        if isinstance(target.operator, cst.IsNot):
            return cst.Name("False" if same else "True")
        return updated

    def leave_UnaryOperation(
        self, original: cst.UnaryOperation, updated: cst.UnaryOperation
    ) -> cst.BaseExpression:
        inner = unparen(updated.expression)
        if (
            isinstance(updated.operator, cst.Not)
            and isinstance(inner, cst.Name)
            and inner.value in ("True", "False")
        ):
            return cst.Name("False" if inner.value == "True" else "True")
        return updated


def _literal_text(part: cst.BaseFormattedStringContent, quote: str) -> str | None:
    """The text of an f-string part that is a literal (braces doubled), or of a text part; None else."""
    if isinstance(part, cst.FormattedStringText):
        return part.value
    expr = unparen(part.expression)  # type: ignore[attr-defined]
    if part.conversion is not None or part.format_spec is not None or part.equal is not None:  # type: ignore[attr-defined]
        return None
    if not isinstance(expr, _LITERALS):
        return None
    value = str(expr.evaluated_value if isinstance(expr, cst.SimpleString) else expr.value)
    if "\\" in value or "\n" in value or quote[0] in value:
        return None
    return value.replace("{", "{{").replace("}", "}}")


def _quotes_in(node: cst.CSTNode, quote: str) -> bool:
    found = False

    class V(FastVisitor):
        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            nonlocal found
            found |= quote in n.quote

    V().walk(node)
    return found


def fold(node: cst.CSTNode) -> Any:
    """``node`` with what its literals fix computed (see :class:`_Fold`)."""
    return node.visit(_Fold())


def truth(test: cst.BaseExpression) -> bool | None:
    test = unparen(test)
    if isinstance(test, cst.Name) and test.value in ("True", "False", "None"):
        return test.value == "True"
    if isinstance(test, cst.Integer):
        return int(test.value) != 0
    return None


def statements(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(body, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=list(body.body))]
    return list(body.body)


def fold_ifs(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``if True: a`` -> ``a``; ``if False: a else: b`` -> ``b`` (tests the arguments made constant)."""
    out: list[cst.BaseStatement] = []
    for stmt in stmts:
        if isinstance(stmt, cst.If) and (known := truth(stmt.test)) is not None:
            if known:
                out.extend(fold_ifs(statements(stmt.body)))
            elif isinstance(stmt.orelse, cst.Else):
                out.extend(fold_ifs(statements(stmt.orelse.body)))
            elif isinstance(stmt.orelse, cst.If):
                out.extend(fold_ifs([stmt.orelse]))
            continue
        out.append(stmt)
    return out


def name_reads(node: cst.CSTNode, name: str) -> int:
    """Reads of ``name`` in ``node`` (assignment targets excluded)."""
    counts = 0

    class V(FastVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            self.walk(n.value)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            self.walk(n.value)
            return False

        def visit_AssignTarget(self, n: cst.AssignTarget) -> bool:
            return not isinstance(n.target, cst.Name)

        def visit_Name(self, n: cst.Name) -> None:
            nonlocal counts
            counts += n.value == name

    V().walk(node)
    return counts


def paren(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, _ATOMS) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
