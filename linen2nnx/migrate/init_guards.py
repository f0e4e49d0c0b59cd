"""``if self.is_initializing(): ...`` at call time whose branch creates nothing: ``False`` exactly.

An NNX call is Linen's ``apply``, where ``self.is_initializing()`` is False; so reading it as ``False``
changes the call in nothing. What it can change is the initialisation: Linen's ``init`` runs the
branch, and a branch that creates variables (a submodule or a method called only there) has no NNX
counterpart unless ``__init__`` builds them. MaxText's models branch only to invent dummy inputs
(``targets = jnp.ones(shape)``) so that ``init`` reaches a submodule that ``apply`` reaches only when
given them; an NNX ``__init__`` builds every submodule the class declares, whatever ``init`` reaches.

So the call becomes ``False`` only when it is the test of an ``if`` (or one operand of an ``and``
test, also through ``not``) with no ``else``, in a method other than ``setup`` (there it *is* the
initialisation), and the test and the branch can create nothing: no ``self`` method or submodule call,
no Linen name, no function defined nearby (it may close over ``self``) -- only assignments to names,
nested ``if``\\ s and ``pass``, calling jax, numpy and pure builtins. Anything else stays a finding. A
branch under ``not self.is_initializing()`` runs only at apply, so it may also store ``.value`` (Flax's
own ``BatchNorm`` updates its running statistics so): NNX's ``__init__`` skips that update as Linen's
``init`` does.
A branch that runs only at init (the test not negated) may also apply a submodule ``setup()`` assigns
or a method the class defines and drop the result (``_ = self.output_head(h)``): it only makes ``init``
create what NNX's ``__init__`` builds anyway.

``self.is_mutable_collection('params')`` is the same question asked another way (True while Linen
initialises, False in an ``apply`` that does not update parameters), and real normalisation layers ask
it to skip updating their running statistics during ``init``: ``initializing = ...`` then
``if not initializing: ra_mean.value = ...``. It reads ``False`` when every use of it (directly, or
through a local bound to it once) is in an ``if`` test without ``else``, through ``not`` and ``and``,
and the branch creates nothing; a branch that runs only when the value is False may also store
``local.value`` / ``self.attr.value`` (``=`` or ``+=``: the updates ``init`` skips, which NNX's
``__init__`` never makes either).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import name_reads, self_attr

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
    method = _enclosing_method(ctx, call)
    return method is not None and method.name.value != "setup" and _flag_guard(ctx, call)


def params_mutable_guard(ctx: FileContext, call: cst.Call) -> bool:
    """``call`` (a ``self.is_mutable_collection('params')``) is read only by ``if`` tests whose
    branches create nothing (see the module docstring), so it reads as ``False`` in NNX exactly."""
    parent = ctx.parent_of(call)
    method = _enclosing_method(ctx, call)
    if method is None or method.name.value == "setup":
        return False
    if isinstance(parent, cst.Assign) and parent.value is call:
        if len(parent.targets) != 1 or not isinstance(parent.targets[0].target, cst.Name):
            return False
        local = parent.targets[0].target
        reads = [n for n in name_reads(method.body, local.value) if n is not local]
        if _bindings(method.body, local.value) != 1 or not reads:
            return False
        return all(_flag_guard(ctx, n) for n in reads)
    return _flag_guard(ctx, call)


def scan_spec_choice(ctx: FileContext, call: cst.Call) -> bool:
    """``call`` (a ``self.is_mutable_collection('params')``), directly or through a local bound to it
    once, is the test of ``axis if initializing else ScanIn(axis)``: T5X's and flaxformer's choice of a
    layer scan's parameter axis (stacked at init, read through ``ScanIn`` at apply)."""
    parent = ctx.parent_of(call)
    method = _enclosing_method(ctx, call)
    if method is None:
        return False
    tests: list[cst.BaseExpression] = [call]
    if isinstance(parent, cst.Assign) and parent.value is call:
        if len(parent.targets) != 1 or not isinstance(parent.targets[0].target, cst.Name):
            return False
        local = parent.targets[0].target
        if _bindings(method.body, local.value) != 1:
            return False
        tests = [n for n in name_reads(method.body, local.value) if n is not local]
    return bool(tests) and all(_scan_in_test(ctx, t) for t in tests)


def _scan_in_test(ctx: FileContext, flag: cst.BaseExpression) -> bool:
    choice = ctx.parent_of(flag)
    return (
        isinstance(choice, cst.IfExp)
        and choice.test is flag
        and isinstance(choice.orelse, cst.Call)
        and _dotted_tail(choice.orelse.func) == "ScanIn"
    )


def _dotted_tail(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    return node.attr.value if isinstance(node, cst.Attribute) else None


def _flag_guard(ctx: FileContext, flag: cst.BaseExpression) -> bool:
    """``flag`` (True only during Linen's init) is a term of an ``if`` test, through ``not`` and
    ``and``, whose branch creates nothing; the branch that runs when it is False may store ``.value``."""
    node: cst.CSTNode = flag
    negated = False
    parent = ctx.parent_of(node)
    while True:
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
            negated = not negated
        elif not (isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And)):
            break
        node, parent = parent, ctx.parent_of(parent)
    if not (isinstance(parent, cst.If) and parent.test is node and parent.orelse is None):
        return False
    others = [e for e in _and_terms(parent.test) if not any(x is flag for x in _and_terms_deep(e))]
    if not all(_creates_nothing(ctx, e) for e in others):
        return False
    return _block_creates_nothing(ctx, parent.body, value_stores=negated, init_calls=not negated)


def _and_terms(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_and_terms(test.left), *_and_terms(test.right)]
    return [test]


def _and_terms_deep(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``expr`` and what it negates (``not not x`` -> x)."""
    found = [expr]
    while isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        expr = expr.expression
        found.append(expr)
    return found


def _bindings(node: cst.CSTNode, name: str) -> int:
    """How many times ``name`` is bound (assigned, a loop or ``with`` target, a parameter, a def)."""
    count = 0

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_For(self, n: cst.For) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_AsName(self, n: cst.AsName) -> None:
            nonlocal count
            count += len(name_reads(n.name, name))

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            nonlocal count
            count += len(name_reads(n.target, name))

        def visit_FunctionDef(self, n: cst.FunctionDef) -> None:
            nonlocal count
            count += 2 if name_reads(n, name) else 0  # a nested function may rebind or shadow it

        def visit_Lambda(self, n: cst.Lambda) -> None:
            nonlocal count
            count += 2 if name_reads(n, name) else 0

    node.visit(V())
    return count


def _enclosing_method(ctx: FileContext, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The method of the nearest class that holds ``node`` (through any nested functions)."""
    method = None
    cur = ctx.parent_of(node)
    while cur is not None and not isinstance(cur, cst.ClassDef):
        if isinstance(cur, cst.FunctionDef):
            method = cur
        cur = ctx.parent_of(cur)
    return method if cur is not None else None


def _block_creates_nothing(
    ctx: FileContext, block: cst.BaseSuite, value_stores: bool = False, init_calls: bool = False
) -> bool:
    """Only ``name = value`` statements (``local.value = value`` too with ``value_stores``, and the
    dropped ``self.<own>(...)`` calls of :func:`_init_call` with ``init_calls``), nested ``if``\\ s and
    ``pass``, with values that create nothing."""
    if not isinstance(block, cst.IndentedBlock):
        return False
    for statement in block.body:
        if isinstance(statement, cst.If):
            if not (
                _creates_nothing(ctx, statement.test)
                and _block_creates_nothing(ctx, statement.body, value_stores, init_calls)
            ):
                return False
            if statement.orelse is not None and not (
                isinstance(statement.orelse, cst.Else)
                and _block_creates_nothing(ctx, statement.orelse.body, value_stores, init_calls)
            ):
                return False
        elif not (
            isinstance(statement, cst.SimpleStatementLine)
            and all(
                _small(ctx, s, value_stores) or (init_calls and _init_call(ctx, s)) for s in statement.body
            )
        ):
            return False
    return True


def _small(ctx: FileContext, statement: cst.BaseSmallStatement, value_stores: bool = False) -> bool:
    """``name = value`` / ``a, b = value`` / ``pass`` with a value that creates nothing; with
    ``value_stores`` also ``local.value = value``."""
    if isinstance(statement, cst.Pass):
        return True
    if isinstance(statement, cst.Assign):
        return all(
            _plain_target(t.target) or (value_stores and _value_store(t.target)) for t in statement.targets
        ) and _creates_nothing(ctx, statement.value)
    if isinstance(statement, cst.AugAssign):  # `count.value += 1`
        return value_stores and _value_store(statement.target) and _creates_nothing(ctx, statement.value)
    if isinstance(statement, cst.AnnAssign):
        return (
            statement.value is not None
            and _plain_target(statement.target)
            and _creates_nothing(ctx, statement.value)
        )
    return False


def _init_call(ctx: FileContext, statement: cst.BaseSmallStatement) -> bool:
    """``self.head(x)`` / ``_ = self.method(x)`` on values that create nothing, its result dropped, where
    ``head`` is a submodule ``setup()`` assigns and ``method`` one the class defines: a call made only so
    that Linen's ``init`` reaches the variables behind it (MaxText runs its output head so), which an
    NNX ``__init__`` builds with the class whatever a call reaches. Writes the method makes are
    ``init_writes``' findings."""
    call = dropped_value(statement)
    if not isinstance(call, cst.Call) or any(a.star for a in call.args):
        return False
    name = self_attr(call.func)
    return name in _own_members(ctx, call) and all(_creates_nothing(ctx, a.value) for a in call.args)


def dropped_value(statement: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    """The value of ``expr`` / ``_ = expr``: a statement that computes a value and keeps none of it."""
    if isinstance(statement, cst.Expr):
        return statement.value
    if isinstance(statement, cst.Assign) and all(
        isinstance(t.target, cst.Name) and t.target.value == "_" for t in statement.targets
    ):
        return statement.value
    return None


def _own_members(ctx: FileContext, node: cst.CSTNode) -> set[str]:
    """The methods the class holding ``node`` defines and the attributes its ``setup()`` assigns."""
    cls = ctx.enclosing(node, cst.ClassDef)
    if cls is None or not isinstance(cls.body, cst.IndentedBlock):
        return set()
    methods = [m for m in cls.body.body if isinstance(m, cst.FunctionDef)]
    members = {m.name.value for m in methods}
    for setup in (m for m in methods if m.name.value == "setup"):
        members |= {
            name
            for target in nodes_of(setup.body, (cst.AssignTarget,))
            if (name := self_attr(target.target)) is not None
        }
    return members


def _value_store(target: cst.BaseExpression) -> bool:
    """``local.value`` / ``self.attr.value``: an update of a variable the method or the class holds,
    which creates nothing."""
    if not (isinstance(target, cst.Attribute) and target.attr.value == "value"):
        return False
    holder = target.value
    if isinstance(holder, cst.Attribute) and isinstance(holder.value, cst.Name):
        return holder.value.value == "self"
    return isinstance(holder, cst.Name) and holder.value != "self"


def _plain_target(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _plain_target(e.value) for e in target.elements)
    return False


def creates_nothing(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """No call in ``expr`` but of jax / numpy / pure builtins, no lambda, and no Linen name."""
    return _creates_nothing(ctx, expr)


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
