"""``partitioning.param_with_axes`` calls restated as ``self.param`` with logical partitioning.

T5X / flaxformer create parameters with ``param_with_axes(name, init, *args, axes=names)``. Linen
stores the value unboxed in ``params`` and ``AxisMetadata(names)`` as ``<name>_axes`` in a separate
``params_axes`` collection, and constrains the value read with ``with_logical_constraint(value,
PartitionSpec(*names))``. ``self.param(name, nn.with_logical_partitioning(init, names), *args)``
returns the same value under the same constraint (``LogicallyPartitioned.unbox``), and its NNX form is
the one the module pass already writes: ``nnx.Param(nnx.with_partitioning(init, names)(rngs.params(),
*args))``, the names on the Variable's ``out_sharding`` (NNX has no ``params_axes`` collection; the
checkpoint converter reads the params and leaves that collection out, see
docs/nnx_facts.md#sharding-and-logical-partitioning).

The restatement is a text pass before the module pass, like helper_calls.py: the module pass reads
the restated file, its findings are placed back on the original's lines, and when a restated class is
still kept as Linen the original is migrated instead (Linen's checkpoint layout differs between the two
forms). Only the exact form is restated: a call in a method of a class that defines ``setup`` or an
``@nn.compact`` method, ``self`` its first parameter, the name and init function positional, no
``module=`` and no splat, ``axes=`` a tuple or list display or ``tuple(...)`` (so never ``None``, which
Linen treats as "no axes"), and a name bound to ``flax.linen`` in the file. Every other call is left
as written (a located finding says why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_in, code, single_assign
from linen2nnx.migrate.function_replay import top_level_imports
from linen2nnx.migrate.helper_calls import Replayed, _line_map, replayed_result
from linen2nnx.migrate.rules import MOD_001

PARAM_WITH_AXES = "flax.linen.partitioning.param_with_axes"


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def _resolved(dotted: str, imports: dict[str, str]) -> str:
    head, _, rest = dotted.partition(".")
    base = imports.get(head)
    if base is None:
        return dotted
    return f"{base}.{rest}" if rest else base


def _aliases(tree: cst.Module, imports: dict[str, str]) -> dict[str, cst.BaseStatement]:
    """Module-level names bound once to ``param_with_axes`` (by import or ``x = nn_partitioning.
    param_with_axes``) -> the binding statement (None-like for an import, which stays)."""
    bound: dict[str, int] = {}
    found: dict[str, cst.BaseStatement] = {}
    for stmt in tree.body:
        names = assigned_in(stmt)
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            names = {stmt.name.value}
        for name in names:
            bound[name] = bound.get(name, 0) + 1
        pair = single_assign(stmt)
        if pair is None:
            continue
        name, value = pair
        dotted = _dotted(value)
        if dotted is not None and _resolved(dotted, imports) == PARAM_WITH_AXES:
            found[name] = stmt
    return {name: stmt for name, stmt in found.items() if bound.get(name) == 1 and name not in imports}


def _linen_name(imports: dict[str, str]) -> str | None:
    names = sorted(name for name, qualname in imports.items() if qualname == "flax.linen")
    return names[0] if names else None


def _axes_ok(value: cst.BaseExpression) -> bool:
    """A display that is never None: ``(...)`` / ``[...]`` without a starred element, or ``tuple(x)``."""
    if isinstance(value, (cst.Tuple, cst.List)):
        return not any(isinstance(e, cst.StarredElement) for e in value.elements)
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value == "tuple"
        and len(value.args) == 1
        and not value.args[0].star
        and value.args[0].keyword is None
    )


def why_not(call: cst.Call) -> str | None:
    """Why a ``param_with_axes`` call has no exact ``self.param`` form (None: it has)."""
    if any(a.star for a in call.args):
        return "*args / **kwargs splats"
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) < 2 or any(a.keyword is not None for a in call.args[:2]):
        return "the name or the init function given by keyword"
    keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if "module" in keywords:
        return "an explicit module="
    axes = keywords.get("axes")
    if axes is None:
        return "no axes="
    if not _axes_ok(axes.value):
        return f"axes={code(axes.value)}, not a tuple display, may be None (then Linen records no names)"
    return None


def restated(call: cst.Call, linen: str) -> cst.Call:
    """``param_with_axes(name, init, *args, axes=a, **kw)`` -> ``self.param(name,
    <linen>.with_logical_partitioning(init, a), *args, **kw)``."""
    axes = next(a for a in call.args if a.keyword is not None and a.keyword.value == "axes")
    init = call.args[1]
    boxed = cst.parse_expression(f"{linen}.with_logical_partitioning(_init, _axes)")
    assert isinstance(boxed, cst.Call)
    boxed = boxed.with_changes(
        args=[
            cst.Arg(init.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(axes.value),
        ]
    )
    args = [a for a in call.args if a is not axes]
    args[1] = args[1].with_changes(value=boxed)
    last = args[-1]
    if axes is call.args[-1] and not isinstance(axes.comma, cst.MaybeSentinel):
        last = last.with_changes(comma=axes.comma)  # keep a trailing comma's layout
    elif axes is call.args[-1]:
        last = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    args[-1] = last
    return call.with_changes(func=cst.Attribute(cst.Name("self"), cst.Name("param")), args=args)


class _Restate(cst.CSTTransformer):
    """Restates the exact calls in the methods of Linen-looking classes; records the others."""

    def __init__(self, callees: set[str], aliases: set[str], imports: dict[str, str], linen: str | None):
        self.callees, self.aliases, self.imports, self.linen = callees, aliases, imports, linen
        self.methods: list[cst.FunctionDef | None] = []  # None: a function that is not such a method
        self.classes: list[tuple[str, bool]] = []
        self.restated: set[str] = set()
        self.left: set[str] = set()  # classes with a call left as written
        self.skip: set[str] = set()  # classes not to restate (a class with a left call is kept as Linen)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
        fns = [s for s in body if isinstance(s, cst.FunctionDef)]
        linen_like = any(
            f.name.value == "setup" or any(_is_compact(d.decorator, self.imports) for d in f.decorators)
            for f in fns
        )
        self.classes.append((node.name.value, linen_like and not self.methods))
        self.methods.append(None)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.classes.pop()
        self.methods.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        in_class = bool(self.methods) and self.methods[-1] is None and bool(self.classes)
        params = node.params.params
        method = in_class and self.classes[-1][1] and params and params[0].name.value == "self"
        self.methods.append(node if method else _NOT_METHOD)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.methods.pop()
        return updated

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.methods.append(_NOT_METHOD)

    def leave_Lambda(self, original: cst.Lambda, updated: cst.BaseExpression) -> cst.BaseExpression:
        self.methods.pop()
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        dotted = _dotted(original.func)
        if dotted is None or not (dotted in self.aliases or _resolved(dotted, self.imports) in self.callees):
            return updated
        method = self.methods[-1] if self.methods else None
        shadowed = isinstance(method, cst.FunctionDef) and dotted.split(".")[0] in assigned_in(method.body)
        if (
            not isinstance(method, cst.FunctionDef)
            or method is _NOT_METHOD
            or shadowed
            or self.linen is None
            or why_not(original) is not None
            or not updated.deep_equals(original)  # a restated call in its arguments: left as written
        ):
            self.left.update(name for name, _ in self.classes[-1:])
            return updated
        if self.classes[-1][0] in self.skip:
            return updated
        self.restated.add(self.classes[-1][0])
        return restated(original, self.linen)


_NOT_METHOD = cst.FunctionDef(cst.Name("_"), cst.Parameters(), cst.SimpleStatementSuite([cst.Pass()]))


def _is_compact(decorator: cst.BaseExpression, imports: dict[str, str]) -> bool:
    dotted = _dotted(decorator)
    return dotted is not None and _resolved(dotted, imports) == "flax.linen.compact"


def restate_param_with_axes(tree: cst.Module, source: str, module_name: str = "") -> Replayed | None:
    """The file with its exact ``param_with_axes`` calls restated (see the module docstring); a
    module-level alias no longer read is dropped. None when nothing was restated."""
    if "param_with_axes" not in source:
        return None
    imports = top_level_imports(tree, module_name)
    aliases = _aliases(tree, imports)
    transformer = _Restate({PARAM_WITH_AXES}, set(aliases), imports, _linen_name(imports))
    new_tree = tree.visit(transformer)
    if transformer.left & transformer.restated:  # those stay Linen: restate only the others
        skip = transformer.left
        transformer = _Restate({PARAM_WITH_AXES}, set(aliases), imports, _linen_name(imports))
        transformer.skip = skip
        new_tree = tree.visit(transformer)
    if not transformer.restated:
        return None
    index = {id(stmt): i for i, stmt in enumerate(tree.body)}  # the visit keeps the body's order
    at = {name: index[id(stmt)] for name, stmt in aliases.items()}
    dropped = {at[name] for name in aliases if not _still_read(new_tree, name, at[name])}
    if dropped:
        new_tree = new_tree.with_changes(body=[s for i, s in enumerate(new_tree.body) if i not in dropped])
    new_source = new_tree.code
    line_map, moved = _line_map(source, new_source)
    return Replayed(new_source, sorted(transformer.restated), line_map, moved, source)


def _still_read(tree: cst.Module, name: str, binding: int) -> bool:
    """Whether ``name`` occurs in any module-level statement but its binding (text, so ``__all__``
    strings and the calls left as written count)."""
    return any(name in code(stmt) for i, stmt in enumerate(tree.body) if i != binding)


_CACHE: list[tuple[cst.Module, set[str], dict[str, str]]] = []  # the last tree asked about


def _callee_facts(tree: cst.Module, module_name: str) -> tuple[set[str], dict[str, str]]:
    if not (_CACHE and _CACHE[0][0] is tree):
        imports = top_level_imports(tree, module_name)
        _CACHE[:] = [(tree, set(_aliases(tree, imports)), imports)]
    return _CACHE[0][1], _CACHE[0][2]


def left_call_finding(call: cst.Call, tree: cst.Module, module_name: str) -> tuple[str, str] | None:
    """(message, hint) for a call through a module-level alias of ``param_with_axes`` (T5X's
    ``param_with_axes = nn_partitioning.param_with_axes``) that the restatement left as written: it
    fails in NNX (Linen's module stack is empty there); None for any other call."""
    dotted = _dotted(call.func)
    if dotted is None:
        return None
    aliases, _ = _callee_facts(tree, module_name)
    if dotted not in aliases:  # a read of the API's own name has its finding already (rewrite_attrs.py)
        return None
    reason = why_not(call) or (
        "outside a method of a Linen module, beside another call left as written, in a class kept as "
        "Linen, or no name bound to flax.linen in the file"
    )
    return (
        f"partitioning.param_with_axes(...) left as written ({reason}); its names go to Linen's 'params_axes' "
        "collection",
        "nnx.Param(nnx.with_partitioning(init, axes)(rngs.params(), *init_args)) in __init__ "
        "(see docs/nnx_facts.md#sharding-and-logical-partitioning)",
    )


def migrate_restated(
    migrate: Callable[..., Any],
    tree: cst.Module,
    source: str,
    path: str,
    module_name: str,
    trace: Any,
    options: dict[str, Any],
    replay_helpers: bool,
) -> Any:
    """The file migrated (``migrate``: engine.migrate_source) with its exact ``param_with_axes`` calls
    restated as ``self.param``; None when there is none or a restated class is not rewritten as an NNX
    class (then the original is migrated, so a class kept as Linen keeps Linen's ``params_axes``
    layout)."""
    restated = restate_param_with_axes(tree, source, module_name)
    if restated is None:
        return None
    result = migrate(
        restated.source,
        path,
        module_name,
        trace,
        **options,
        replay_helpers=replay_helpers,
        restate_axes=False,
    )
    migrated = {f.message for f in result.findings if f.rule == MOD_001.id}
    if any(f"{name} -> nnx.Module" not in migrated for name in restated.classes):
        return None  # a restated class the module pass did not rewrite (not a Linen module after all)
    return replayed_result(result, restated, source)
