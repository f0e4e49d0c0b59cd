"""``if self.is_initializing(): ...`` at call time whose branch creates nothing: ``False`` exactly.

An NNX call is Linen's ``apply``, where ``self.is_initializing()`` is False; so reading it as ``False``
changes the call in nothing. What it can change is the initialisation: Linen's ``init`` runs the
branch, and a branch that creates variables (a submodule or a method called only there) has no NNX
counterpart unless ``__init__`` builds them. MaxText's models branch only to invent dummy inputs
(``targets = jnp.ones(shape)``) so that ``init`` reaches a submodule that ``apply`` reaches only when
given them; an NNX ``__init__`` builds every submodule the class declares, whatever ``init`` reaches.

So the call becomes ``False`` only when it is the test of an ``if`` (or one operand of an ``and``
test) with no ``else``, in a method other than ``setup`` (there it *is* the initialisation), and the
test and the branch can create nothing: no ``self`` method or submodule call, no Linen name, no
function defined nearby (it may close over ``self``) -- only assignments to names, nested ``if``\\ s
and ``pass``, calling jax, numpy and pure builtins. Anything else stays a finding.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext

PURE_CALL_PREFIXES = ("jax.numpy.", "jax.lax.", "jax.random.", "numpy.", "math.")
PURE_BUILTINS = frozenset(
    f"builtins.{n}"
    for n in (
        "len",
        "getattr",
        "hasattr",
        "isinstance",
        "int",
        "float",
        "bool",
        "str",
        "tuple",
        "list",
        "dict",
        "min",
        "max",
        "abs",
        "range",
        "zip",
        "any",
        "all",
    )
)


def init_only_guard(ctx: FileContext, call: cst.Call) -> bool:
    """``call`` (a ``self.is_initializing()``) guards a branch that creates nothing (see the module
    docstring), so it reads as ``False`` in NNX with no change in behaviour."""
    node: cst.CSTNode = call
    parent = ctx.parent_of(node)
    while isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And):
        node, parent = parent, ctx.parent_of(parent)
    if not (isinstance(parent, cst.If) and parent.test is node and parent.orelse is None):
        return False
    method = _enclosing_method(ctx, parent)
    if method is None or method.name.value == "setup":
        return False
    others = _operands(parent.test, call)
    return all(_creates_nothing(ctx, e) for e in others) and _block_creates_nothing(ctx, parent.body)


def _enclosing_method(ctx: FileContext, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The method of the nearest class that holds ``node`` (through any nested functions)."""
    method = None
    cur = ctx.parent_of(node)
    while cur is not None and not isinstance(cur, cst.ClassDef):
        if isinstance(cur, cst.FunctionDef):
            method = cur
        cur = ctx.parent_of(cur)
    return method if cur is not None else None


def _operands(test: cst.BaseExpression, call: cst.Call) -> list[cst.BaseExpression]:
    """The operands of an ``and`` test besides ``call``."""
    if test is call:
        return []
    assert isinstance(test, cst.BooleanOperation)
    return [*_operands_of(test.left, call), *_operands_of(test.right, call)]


def _operands_of(node: cst.BaseExpression, call: cst.Call) -> list[cst.BaseExpression]:
    if node is call:
        return []
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        return _operands(node, call)
    return [node]


def _block_creates_nothing(ctx: FileContext, block: cst.BaseSuite) -> bool:
    if not isinstance(block, cst.IndentedBlock):
        return False
    for statement in block.body:
        if isinstance(statement, cst.If):
            if not (_creates_nothing(ctx, statement.test) and _block_creates_nothing(ctx, statement.body)):
                return False
            if statement.orelse is not None and not (
                isinstance(statement.orelse, cst.Else) and _block_creates_nothing(ctx, statement.orelse.body)
            ):
                return False
        elif not (
            isinstance(statement, cst.SimpleStatementLine) and all(_small(ctx, s) for s in statement.body)
        ):
            return False
    return True


def _small(ctx: FileContext, statement: cst.BaseSmallStatement) -> bool:
    """``name = value`` / ``a, b = value`` / ``pass`` with a value that creates nothing."""
    if isinstance(statement, cst.Pass):
        return True
    if isinstance(statement, cst.Assign):
        return all(_plain_target(t.target) for t in statement.targets) and _creates_nothing(
            ctx, statement.value
        )
    if isinstance(statement, cst.AnnAssign):
        return (
            statement.value is not None
            and _plain_target(statement.target)
            and _creates_nothing(ctx, statement.value)
        )
    return False


def _plain_target(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _plain_target(e.value) for e in target.elements)
    return False


def _creates_nothing(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """No call in ``expr`` but of jax / numpy / pure builtins, no lambda, and no Linen name."""
    found = True

    class V(cst.CSTVisitor):
        def visit_Lambda(self, node: cst.Lambda) -> bool:
            nonlocal found
            found = False
            return False

        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            names = ctx.qualnames(node.func)
            if not names or not all(n.startswith(PURE_CALL_PREFIXES) or n in PURE_BUILTINS for n in names):
                found = False

        def visit_Attribute(self, node: cst.Attribute) -> None:
            nonlocal found
            if any(q.startswith("flax.") for q in ctx.qualnames(node)):
                found = False

    expr.visit(V())
    return found
