"""Values that are elementwise functions, so that calling them keeps the feature size.

Code outside Flax keeps its activations in a table and picks one by a config string:
``ACT2FN = {"gelu": partial(nn.gelu, approximate=False), "relu": nn.relu, "quick": quick}`` at module
level, then ``self.act = ACT2FN[self.config.act]`` in ``setup`` and ``self.act(x)`` in ``__call__``
(or ``ACT2FN["gelu"](x)`` directly). Whatever key the config names, the value is one of the table's,
so when every value keeps the last axis, so does the lookup. A value keeps it when it is

- a function the Linen API tables call feature-preserving (``nn.relu``, ``jax.nn.gelu``, ``jnp.tanh``);
- ``functools.partial`` of one with keyword arguments only (a positional one would take ``x``'s place);
- a module-level function of the file whose returns keep its first parameter's last axis
  (``def quick(x): return x * jax.nn.sigmoid(1.7 * x)``, by the file's dataflow of helpers);
- a lookup ``T[key]`` of a table: a dict display bound once at module level, every value of which keeps
  it, that no statement of the run may change: ``T`` is used nowhere but in lookups, reading methods
  and ``in`` tests, in this file or any other of the run (table_changes.py), and the lookup reads
  the module-level binding. A table of another file of the run is known by its fact
  (:class:`ElementwiseTable`).

A setup attribute bound only to such values (``self.act = ACT2FN[...]``) then keeps the feature size
when called, as an activation field does (class_fields.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import absolute_qualname, names_in, self_attr
from linen2nnx.migrate.function_aliases import assigned_values
from linen2nnx.migrate.linen_api import feature_preserving_functions
from linen2nnx.migrate.table_changes import source_changes

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

KEY_PREFIX = "elementwise:"
PARTIALS = frozenset({"functools.partial"})
_UNREADABLE = "<unreadable>"  # in the names a file may change: every name


@dataclasses.dataclass(frozen=True)
class ElementwiseTable:
    """A module-level table of elementwise functions another file of the run defines (its absolute
    dotted name), so that files importing it know its lookups keep the feature size."""

    key: str


def is_elementwise(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """Whether ``node`` evaluates to a function whose result keeps its first argument's last axis."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        if ctx.qualnames(node) & feature_preserving_functions():
            return True
        return isinstance(node, cst.Name) and _keeping_helper(ctx, node.value)
    if isinstance(node, cst.Call):
        args = list(node.args)
        return (
            bool(ctx.qualnames(node.func) & PARTIALS)
            and bool(args)
            and args[0].keyword is None
            and not args[0].star
            and all(a.keyword is not None for a in args[1:])
            and is_elementwise(ctx, args[0].value)
        )
    if isinstance(node, cst.Subscript):
        return is_table(ctx, node.value)
    if isinstance(node, cst.Lambda):
        return _elementwise_lambda(ctx, node)
    return False


def _elementwise_lambda(ctx: FileContext, node: cst.Lambda) -> bool:
    """``lambda x: x`` (a table's identity entry), or ``lambda x: f(x, ...)`` of an elementwise ``f``
    that reads ``x`` only as its first argument; parameters after ``x`` that the body never reads may
    follow (``lambda x, _: x``, a dropout stand-in called with its flag)."""
    params = node.params
    if not params.params or params.posonly_params or params.params[0].default is not None:
        return False
    name = params.params[0].name.value
    body = node.body
    others = [*params.params[1:], *params.kwonly_params]
    others += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    if names_in(body) & {p.name.value for p in others}:
        return False
    if isinstance(body, cst.Name):
        return body.value == name
    if not (
        isinstance(body, cst.Call) and body.args and body.args[0].keyword is None and not body.args[0].star
    ):
        return False
    first = body.args[0].value
    return (
        isinstance(first, cst.Name)
        and first.value == name
        and all(name not in names_in(a.value) for a in body.args[1:])
        and name not in names_in(body.func)
        and is_elementwise(ctx, body.func)
    )


def is_local_activation(ctx: FileContext, node: cst.Name) -> bool:
    """Whether every value the name ``node`` reads may hold is elementwise: a local chosen by a
    config test (``activation = nn.relu`` / ``else: activation = nn.tanh``, or the same as ``a if c
    else b``), as reinforcement-learning actor-critics pick theirs."""
    values = assigned_values(ctx, node)
    return bool(values) and all(_elementwise_choice(ctx, v) for v in values)


def _elementwise_choice(ctx: FileContext, node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.IfExp):
        return _elementwise_choice(ctx, node.body) and _elementwise_choice(ctx, node.orelse)
    return is_elementwise(ctx, node)


def is_table(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """Whether ``node`` names a table of elementwise functions (this file's or an imported one) that
    no file of the run may change: a name read where it stands for the module-level binding (not a
    local or parameter of the same name)."""
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return False
    if isinstance(node, cst.Name) and node.value in file_tables(ctx):
        return ctx.qualnames(node) == {node.value}
    if not ctx.state.external_elementwise:
        return False
    last = node.value if isinstance(node, cst.Name) else node.attr.value
    if _may_change(ctx, last):
        return False  # an imported table this file may change (`acts.ACTS["glu"] = ...`)
    return any(
        absolute_qualname(q, ctx.state.module_name) in ctx.state.external_elementwise
        for q in ctx.qualnames(node)
    )


def file_tables(ctx: FileContext) -> frozenset[str]:
    """The names of this file's tables of elementwise functions (found on first need)."""
    state = ctx.state
    if state.elementwise_tables is None:
        state.elementwise_tables = frozenset()  # a table whose values look one up is none
        dicts = _bound_once_dicts(state.tree)
        found = {
            name
            for name, value in dicts.items()
            if value.elements and all(_is_plain_entry(ctx, el) for el in value.elements)
        }
        run = state.run_changes
        state.elementwise_tables = frozenset(
            name
            for name in found
            if not _may_change(ctx, name) and (run is None or run.trusts(name))  # run: any file
        )
    return state.elementwise_tables


def _may_change(ctx: FileContext, name: str) -> bool:
    """Whether some statement of this file may change ``name`` (table_changes.py); any name may when
    Python's parser cannot read the file."""
    state = ctx.state
    if state.changed_here is None:
        changed = source_changes(state.tree.code)
        state.changed_here = frozenset({_UNREADABLE}) if changed is None else changed
    return name in state.changed_here or _UNREADABLE in state.changed_here


def table_facts(ctx: FileContext) -> dict[str, ElementwiseTable]:
    """This file's tables, as facts for the files that import them."""
    return {
        KEY_PREFIX + key: ElementwiseTable(key)
        for name in file_tables(ctx)
        for key in [f"{ctx.state.module_name}.{name}" if ctx.state.module_name else name]
    }


def setup_activations(ctx: FileContext, node: cst.ClassDef, fields: set[str]) -> set[str]:
    """The attributes ``setup`` binds to elementwise functions, and every other binding in the class
    too (``self.act = ACT2FN[self.config.act]``): calling one keeps the feature size. Fields are not
    among them (a caller may pass anything)."""
    setup = next(
        (s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "setup"), None
    )
    if setup is None:
        return set()
    values: dict[str, list[cst.BaseExpression]] = {}
    for assign in _AssignFinder.of(node):
        for target in assign.targets:
            attr = self_attr(target.target)
            if attr is not None:
                values.setdefault(attr, []).append(assign.value)
            elif not isinstance(target.target, cst.Name):  # `self.a, self.b = ...`: none of those known
                values.update({a: [cst.Name("None")] for a in _self_attrs(target.target)})
    in_setup = {self_attr(t.target) for a in _AssignFinder.of(setup) for t in a.targets} - {None}
    return {
        attr
        for attr, bound in values.items()
        if attr in in_setup and attr not in fields and all(is_elementwise(ctx, v) for v in bound)
    }


def _keeping_helper(ctx: FileContext, name: str) -> bool:
    """A module-level function of the file whose result has its first parameter's last axis."""
    if name not in ctx.state.module_functions:
        return False
    known = ctx.function_out(name)
    if known is None or not known[0]:
        return False
    params, out = known
    return out.kind == "input" and out.input_name == params[0]


def _is_plain_entry(ctx: FileContext, element: cst.BaseDictElement) -> bool:
    return isinstance(element, cst.DictElement) and is_elementwise(ctx, element.value)


def _bound_once_dicts(tree: cst.Module) -> dict[str, cst.Dict]:
    """Module-level names bound exactly once at module level, to a dict display."""
    bound: dict[str, int] = {}
    dicts: dict[str, cst.Dict] = {}
    for stmt in tree.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            bound[stmt.name.value] = bound.get(stmt.name.value, 0) + 1
            continue
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, (cst.Import, cst.ImportFrom, cst.Del)):  # may bind or unbind any name
                for name in _BindingFinder.of(small) | (
                    names_in(small) if isinstance(small, cst.Del) else set()
                ):
                    bound[name] = bound.get(name, 0) + 2
                continue
            targets = (
                [t.target for t in small.targets]
                if isinstance(small, cst.Assign)
                else [small.target]
                if isinstance(small, (cst.AnnAssign, cst.AugAssign))
                else []
            )
            for target in targets:
                if isinstance(target, cst.Name):
                    bound[target.value] = bound.get(target.value, 0) + 1
                    if isinstance(small, cst.Assign) and isinstance(small.value, cst.Dict):
                        dicts[target.value] = small.value
        if not isinstance(stmt, cst.SimpleStatementLine):  # `if`, `try`, `for`: may rebind anything
            for name in _BindingFinder.of(stmt):
                bound[name] = bound.get(name, 0) + 2
    return {name: d for name, d in dicts.items() if bound.get(name) == 1}


def _self_attrs(node: cst.BaseExpression) -> set[str]:
    if isinstance(node, (cst.Tuple, cst.List)):
        return {a for el in node.elements for a in _self_attrs(el.value)}
    attr = self_attr(node)
    return {attr} if attr is not None else set()


class _AssignFinder(FastVisitor):
    """Every ``Assign`` under a node (nested functions included)."""

    def __init__(self) -> None:
        self.found: list[cst.Assign] = []

    @classmethod
    def of(cls, node: cst.CSTNode) -> list[cst.Assign]:
        finder = cls()
        finder.walk(node)
        return finder.found

    def visit_Assign(self, node: cst.Assign) -> None:
        self.found.append(node)


class _BindingFinder(FastVisitor):
    """The plain names a compound statement binds (assignments, loops, imports, definitions)."""

    def __init__(self) -> None:
        self.found: set[str] = set()

    @classmethod
    def of(cls, node: cst.CSTNode) -> set[str]:
        finder = cls()
        finder.walk(node)
        return finder.found

    def _target(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            self.found.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._target(el.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._target(t.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.found.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.found.add(node.name.value)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        bound = node.asname.name if node.asname is not None else node.name
        if isinstance(bound, cst.Name):
            self.found.add(bound.value)
