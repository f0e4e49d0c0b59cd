"""Layer factory methods: ``def dense(self, features, name): return nn.DenseGeneral(features, ..., name=name)``.

MaxText-style Linen code builds submodules through small helper methods called from ``@nn.compact``
(``self.dense(cfg.mlp_dim, ('embed', 'mlp'), 'wi_0')(x)``). Each call is one submodule, named by the
``name=`` it passes. The codemod treats every such call as if the returned constructor had been
written at the call site (parameters replaced by the call's arguments), hoists it into ``__init__``
like any other, and drops the helper once no call is left (in NNX it would build an unnamed, unowned
module at every call).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor, syntax_children
from linen2nnx.migrate.cst_utils import (
    code,
    is_docstring,
    names_in,
    parse_expression,
    single_assign,
    strip_commas,
)


@dataclasses.dataclass
class Factory:
    """A helper method whose body is pure locals and ``return <layer or module constructor>``."""

    name: str
    params: list[str]
    defaults: dict[str, cst.BaseExpression]
    local_values: dict[str, cst.BaseExpression]  # `cfg = self.config` -> {"cfg": <self.config>}
    ctor: cst.Call

    def bind(self, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
        """Parameter -> the call's argument expression (defaults filled in); None when it does not bind."""
        bound: dict[str, cst.BaseExpression] = {}
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) > len(self.params):
            return None
        for param, arg in zip(self.params, positional):
            bound[param] = arg.value
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value not in self.params or arg.keyword.value in bound:
                    return None
                bound[arg.keyword.value] = arg.value
        for param in self.params:
            if param not in bound:
                if param not in self.defaults:
                    return None
                bound[param] = self.defaults[param]
        return bound


@dataclasses.dataclass
class PartialLocal:
    """``dense = partial(nn.Dense, use_bias=False)`` in ``@nn.compact``: each ``dense(name='q')(x)``
    builds one submodule, as if ``nn.Dense(use_bias=False, name='q')`` were written there."""

    name: str
    statement: cst.SimpleStatementLine  # dropped once every use is a submodule built in __init__
    partial: cst.Call  # the ``partial(...)`` call itself
    ctor: cst.Call  # ``Class(<the partial's other arguments>)`` (nodes of the original tree)
    uses: int  # reads of the local in the method
    module_level: bool = False  # bound at module level: other classes and files may use it, it stays

    def merged(self, call: cst.Call, ctor: cst.Call | None = None) -> cst.Call:
        """The constructor ``call`` stands for: the partial's arguments, then the call's (its keywords
        win, as with functools.partial; its ``*args`` / ``**kwargs`` kept in place, a partial whose
        keyword such a dict may hold being no partial local: :func:`unknown_overrides`). ``ctor``: the
        partial's constructor as rewritten."""
        base = ctor if ctor is not None else self.ctor
        given = {a.keyword.value for a in call.args if a.keyword is not None}
        args = [
            *(a for a in base.args if a.keyword is None and not a.star),
            *(a for a in call.args if a.keyword is None and a.star != "**"),
            *(a for a in base.args if a.keyword is not None and a.keyword.value not in given),
            *(a for a in call.args if a.keyword is not None or a.star == "**"),
        ]
        return base.with_changes(args=args if ctor is None else strip_commas(args))


def find_partial_local(
    stmt: cst.BaseStatement,
    is_constructor: Callable[[cst.BaseExpression], bool],
    is_partial: Callable[[cst.BaseExpression], bool],
    reads: Mapping[str, int],
    assigned: Mapping[str, int],
) -> PartialLocal | None:
    """``name = partial(<layer or class of the run>, ...)`` assigned once: a :class:`PartialLocal`."""
    assign = single_assign(stmt)
    if assign is None:
        return None
    name, value = assign
    if not (
        isinstance(value, cst.Call)
        and is_partial(value.func)
        and value.args
        and value.args[0].keyword is None
        and not value.args[0].star
        and is_constructor(value.args[0].value)
        and assigned.get(name) == 1
        and not any(a.star for a in value.args)
        and not rebound_reads(value, assigned)
    ):
        return None
    ctor = cst.Call(func=value.args[0].value, args=list(value.args[1:]))
    return PartialLocal(name, stmt, value, ctor, reads.get(name, 0))


def find_alias_local(
    stmt: cst.BaseStatement, is_constructor: Callable[[cst.BaseExpression], bool], reads: Mapping[str, int]
) -> PartialLocal | None:
    """A module-level ``name = nn.MultiHeadDotProductAttention`` (a layer or class under another name):
    a :class:`PartialLocal` with no arguments of its own, each ``name(...)`` built as the class itself."""
    assign = single_assign(stmt)
    if assign is None or type(assign[1]) not in (cst.Name, cst.Attribute) or not is_constructor(assign[1]):
        return None
    name, value = assign
    partial = cst.Call(func=cst.Name("partial"), args=[cst.Arg(value)])
    return PartialLocal(
        name, stmt, partial, cst.Call(func=value, args=[]), reads.get(name, 0), module_level=True
    )


def alias_reads_built(cls: cst.ClassDef, fn: cst.FunctionDef, name: str) -> bool:
    """Every read of the module-level alias ``name`` in ``cls`` is one the planner builds in ``__init__``:
    in ``fn`` (the compact method or setup), ``name(...)(...)`` applied where it stands, or, in setup,
    ``self.x = name(...)``. A read anywhere else (another method, a value handed on, a constructor
    argument, ``nn.remat(name)``) would keep the Linen class inside the NNX one."""
    reads: list[tuple[cst.CSTNode, ...]] = []  # each read with its parents, innermost first

    def walk(node: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if type(node) is cst.Name and node.value == name:
            reads.append(parents)
        for child in syntax_children(node):
            if (type(node) is cst.Attribute and child is node.attr) or (
                type(node) is cst.Arg and child is node.keyword
            ):
                continue
            walk(child, (node, *parents))

    walk(cls.body, ())
    for parents in reads:
        if fn not in parents or len(parents) < 2 or type(parents[0]) is not cst.Call:
            return False
        call, outer = parents[0], parents[1]
        applied = type(outer) is cst.Call and outer.func is call
        stored = (
            fn.name.value == "setup"
            and type(outer) is cst.Assign
            and len(outer.targets) == 1
            and type(outer.targets[0].target) is cst.Attribute
        )
        if not (applied or stored):
            return False
    return True


def rebound_reads(partial: cst.Call, assigned: Mapping[str, int]) -> set[str]:
    """The locals the arguments of ``partial`` read that the method binds more than once: the partial
    holds the value at its creation, and merging its arguments into a later call would read the name
    again there, after a rebinding perhaps."""
    return {n for a in partial.args[1:] for n in names_in(a.value) if assigned.get(n, 0) > 1}


def unknown_overrides(partial: cst.Call, name: str, body: cst.CSTNode) -> bool:
    """Does a call ``name(..., **kwargs)`` in ``body`` leave a keyword of ``partial`` unspelled? The dict
    may hold it: functools.partial lets the call's value win, a merged call would pass it twice."""
    keywords = {a.keyword.value for a in partial.args if a.keyword is not None}
    found = False

    class Calls(FastVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            if (
                isinstance(node.func, cst.Name)
                and node.func.value == name
                and any(a.star == "**" for a in node.args)
            ):
                found |= bool(keywords - {a.keyword.value for a in node.args if a.keyword is not None})

    Calls().walk(body)
    return found


def find_factory(
    fn: cst.FunctionDef,
    is_constructor: Callable[[cst.BaseExpression], bool],
    is_pure: Callable[[cst.BaseExpression], bool],
) -> Factory | None:
    """``fn`` as a :class:`Factory`, or None when its body does anything else."""
    if fn.decorators or fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or fn.params.star_kwarg:
        return None
    params = [p for p in (*fn.params.params, *fn.params.kwonly_params)]
    if not params or params[0].name.value != "self":
        return None
    body = [s for s in fn.body.body if not is_docstring(s)]
    if not body:
        return None
    *pre, last = body
    if not (
        isinstance(last, cst.SimpleStatementLine)
        and len(last.body) == 1
        and isinstance(last.body[0], cst.Return)
        and isinstance(last.body[0].value, cst.Call)
    ):
        return None
    ctor = last.body[0].value
    if not is_constructor(ctor.func):
        return None
    local_values: dict[str, cst.BaseExpression] = {}
    for stmt in pre:
        assign = single_assign(stmt)
        if assign is None or not is_pure(assign[1]):
            return None
        local_values[assign[0]] = assign[1]
    return Factory(
        name=fn.name.value,
        params=[p.name.value for p in params[1:]],
        defaults={p.name.value: p.default for p in params[1:] if p.default is not None},
        local_values=local_values,
        ctor=ctor,
    )


def substitute(expr: cst.BaseExpression, values: Mapping[str, str]) -> cst.BaseExpression:
    """Replace free names of ``expr`` by source expressions (keywords and attribute names kept)."""

    class T(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            if original.value in values:
                value = parse_expression(values[original.value])
                negative_literal = isinstance(value, cst.UnaryOperation) and isinstance(
                    value.expression, (cst.Integer, cst.Float)
                )
                return (
                    value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    if isinstance(value, LOOSE) and not negative_literal
                    else value
                )
            return updated

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            return updated.with_changes(attr=original.attr)

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
            return updated.with_changes(keyword=original.keyword)

        def leave_Lambda(self, original: cst.Lambda, updated: cst.Lambda) -> cst.Lambda:
            return updated.with_changes(params=original.params)

        def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
            decided = _literal_is_none(updated.test)  # `cfg.x if None is None else None` -> `cfg.x`
            if decided is None:
                return updated
            return updated.body if decided else updated.orelse

    return parse_expression(code(expr.visit(T())))


def _literal_is_none(test: cst.BaseExpression) -> bool | None:
    """The value of ``<literal> is None`` / ``<literal> is not None``; None when not that form."""
    while isinstance(test, cst.BaseExpression) and test.lpar and len(test.lpar) == 1:
        test = test.with_changes(lpar=[], rpar=[])
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    literal = (cst.Integer, cst.Float, cst.SimpleString)
    left = test.left
    left_none = isinstance(left, cst.Name) and left.value == "None"
    if not (
        left_none
        or isinstance(left, literal)
        or (isinstance(left, cst.Name) and left.value in ("True", "False"))
    ):
        return None
    if not (isinstance(target.comparator, cst.Name) and target.comparator.value == "None"):
        return None
    if isinstance(target.operator, cst.Is):
        return left_none
    if isinstance(target.operator, cst.IsNot):
        return not left_none
    return None


LOOSE = (
    cst.BinaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.UnaryOperation,
    cst.IfExp,
    cst.Lambda,
    cst.NamedExpr,
)
"""Expressions that need parentheses when they replace a name inside a larger expression."""


def call_site_ctor(factory: Any, call: cst.Call, ctor: cst.Call | None = None) -> cst.Call | None:
    """The constructor ``call`` of ``factory`` stands for: ``ctor`` (default: the factory's own) with
    the parameters replaced by the call's arguments and the helper's locals by their values (for a
    partial: its arguments, then the call's)."""
    if not isinstance(factory, Factory):  # a partial local, or a module-factory field
        return factory.merged(call, ctor)
    bound = factory.bind(call)
    if bound is None:
        return None
    values = {name: code(value) for name, value in bound.items()}
    for name, value in factory.local_values.items():  # in order: a local may use an earlier one
        if name not in values:
            values[name] = code(substitute(value, values))
    source = ctor if ctor is not None else factory.ctor
    result = substitute(source, values)
    assert isinstance(result, cst.Call)
    return result.with_changes(func=source.func)  # the original node: its qualified name is known
