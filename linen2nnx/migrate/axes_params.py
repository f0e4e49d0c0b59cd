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

``axes=self.kernel_axes`` (T5X's ``DenseGeneral``), a field of the class annotated as a tuple or a
list, may still be ``None`` (a caller may pass it): the init is then wrapped only when it is not,
``nn.with_logical_partitioning(init, self.kernel_axes) if self.kernel_axes is not None else init``,
which is Linen's own branch (``axes is None``: a plain ``self.param``, no names, no constraint). The
field is read twice, a plain dataclass attribute, so the two reads agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import assigned_in, code, names_in, single_assign
from linen2nnx.migrate.function_replay import top_level_imports
from linen2nnx.migrate.helper_calls import Replayed, _line_map, replayed_result
from linen2nnx.migrate.rules import MOD_001, SHAPE_003

PARAM_WITH_AXES = "flax.linen.partitioning.param_with_axes"


def _dotted(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
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
        names = {stmt.name.value} if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) else assigned_in(stmt)
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


def file_imports(tree: cst.Module, module_name: str) -> dict[str, str]:
    """The file's top-level imports, less a name the file binds again (``from flax.linen.partitioning
    import param_with_axes`` then ``def param_with_axes``: which one a call reads depends on order)."""
    rebound: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            rebound.add(stmt.name.value)
        elif not isinstance(stmt, cst.SimpleStatementLine) or not any(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in stmt.body
        ):
            rebound |= assigned_in(stmt)
    return {
        name: qualname
        for name, qualname in top_level_imports(tree, module_name).items()
        if name not in rebound
    }


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


_SEQUENCE_TYPES = frozenset({"Tuple", "tuple", "List", "list"})


def sequence_fields(cls: cst.ClassDef) -> frozenset[str]:
    """The class's own fields annotated as a tuple or a list (``Tuple[str, ...]``, ``tuple``,
    ``Optional[Tuple[str, ...]]``, ``tuple | None``): their value is such a sequence or, given by a caller, ``None``
    (``Sequence[str]`` is left out: a string is one, and Linen splats it into single letters)."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    found: set[str] = set()
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
            if _sequence_annotation(small.annotation.annotation):
                found.add(small.target.value)
    return frozenset(found)


def _sequence_annotation(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):  # ``X | None``
        sides = (node.left, node.right)
        nones = [n for n in sides if isinstance(n, cst.Name) and n.value == "None"]
        return len(nones) == 1 and all(_sequence_annotation(n) for n in sides if n is not nones[0])
    if isinstance(node, cst.Subscript):
        head = _dotted(node.value)
        last = head.rsplit(".", 1)[-1] if head else None
        if last == "Optional" and len(node.slice) == 1:
            inner = node.slice[0].slice
            return isinstance(inner, cst.Index) and _sequence_annotation(inner.value)
        return last in _SEQUENCE_TYPES
    head = _dotted(node)
    return head is not None and head.rsplit(".", 1)[-1] in _SEQUENCE_TYPES


def _field_axes(value: cst.BaseExpression, fields: frozenset[str]) -> bool:
    """``self.<field>`` of a tuple- or list-annotated field: a sequence or None, read twice alike."""
    return (
        isinstance(value, cst.Attribute)
        and isinstance(value.value, cst.Name)
        and value.value.value == "self"
        and value.attr.value in fields
    )


def why_not(call: cst.Call, fields: frozenset[str] = frozenset()) -> str | None:
    """Why a ``param_with_axes`` call has no exact ``self.param`` form (None: it has); ``fields``: the
    enclosing class's tuple- or list-annotated fields (``sequence_fields``)."""
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
    if not _axes_ok(axes.value) and not _field_axes(axes.value, fields):
        return f"axes={code(axes.value)}, not a tuple display, may be None (then Linen records no names)"
    extra = sorted(set(keywords) - {"axes"})
    if extra:  # NNX's with_partitioning wrapper takes positional init arguments only
        return f"keyword init arguments ({', '.join(k + '=' for k in extra)}) to a partitioning-wrapped init"
    return None


def restated(call: cst.Call, linen: str) -> cst.Call:
    """``param_with_axes(name, init, *args, axes=a, **kw)`` -> ``self.param(name,
    <linen>.with_logical_partitioning(init, a), *args, **kw)``; with ``a`` a field (``self.f``, which
    may be None) the init is wrapped only when it is not: ``<wrapped> if self.f is not None else init``."""
    axes = next(a for a in call.args if a.keyword is not None and a.keyword.value == "axes")
    init = call.args[1]
    boxed: cst.BaseExpression = cst.parse_expression(f"{linen}.with_logical_partitioning(_init, _axes)")
    assert isinstance(boxed, cst.Call)
    boxed = boxed.with_changes(
        args=[
            cst.Arg(init.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(axes.value),
        ]
    )
    if isinstance(axes.value, cst.Attribute):  # a field: None means no names (Linen's ``axes is None``)
        test = cst.Comparison(axes.value, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
        boxed = cst.IfExp(test=test, body=boxed, orelse=init.value)
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
        self.fields: list[frozenset[str]] = []  # each open class's tuple- or list-annotated fields
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
        self.fields.append(sequence_fields(node))
        self.methods.append(None)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.classes.pop()
        self.fields.pop()
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
            or why_not(original, self.fields[-1] if self.fields else frozenset()) is not None
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


def restate_param_with_axes(
    tree: cst.Module, source: str, module_name: str = "", skip: frozenset[str] = frozenset()
) -> Replayed | None:
    """The file with its exact ``param_with_axes`` calls restated (see the module docstring), except in
    the classes ``skip`` names; a module-level alias stays (another file may import it). None when
    nothing was restated."""
    if "param_with_axes" not in source:
        return None
    imports = file_imports(tree, module_name)
    aliases = _aliases(tree, imports)
    transformer = _Restate({PARAM_WITH_AXES}, set(aliases), imports, _linen_name(imports))
    transformer.skip = set(skip)
    new_tree = tree.visit(transformer)
    if transformer.left & transformer.restated:  # those stay Linen: restate only the others
        transformer_skip = transformer.left | skip
        transformer = _Restate({PARAM_WITH_AXES}, set(aliases), imports, _linen_name(imports))
        transformer.skip = transformer_skip
        new_tree = tree.visit(transformer)
    if not transformer.restated:
        return None
    new_source = new_tree.code
    line_map, moved = _line_map(source, new_source)
    return Replayed(new_source, sorted(transformer.restated), line_map, moved, source)


AXES_APIS = frozenset({"param_with_axes", "variable_with_axes"})
_AXES_COLLECTION = {"param_with_axes": "'params_axes'", "variable_with_axes": "'<collection>_axes'"}
_CACHE: list[tuple[cst.Module, set[str], dict[str, str], set[str]]] = []  # the last tree asked about
# module name -> its classes kept as written because, restated, they need a whole input shape their
# builders cannot give (shapes_pushed_on_builders); set by migrate_restated before the module pass runs
_SHAPE_KEPT: dict[str, frozenset[str]] = {}


def _callee_facts(tree: cst.Module, module_name: str) -> tuple[set[str], dict[str, str], set[str]]:
    """(names bound to the APIs, the file's imports, module-level functions that call them)."""
    if not (_CACHE and _CACHE[0][0] is tree):
        imports = file_imports(tree, module_name)
        callees = set(_aliases(tree, imports)) | _module_callees(tree, imports)
        _CACHE[:] = [(tree, callees, imports, _stack_functions(tree, imports, callees))]
    return _CACHE[0][1], _CACHE[0][2], _CACHE[0][3]


def _stack_functions(tree: cst.Module, imports: dict[str, str], callees: set[str]) -> set[str]:
    """Module-level functions (bound once) that call ``param_with_axes`` / ``variable_with_axes``, by
    any name, or another such function: called from an NNX class they fail (Linen's module stack is
    empty there), and the call itself reads as a plain function call."""
    defs: dict[str, cst.FunctionDef] = {}
    bound: dict[str, int] = {}
    for stmt in tree.body:
        names = {stmt.name.value} if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) else assigned_in(stmt)
        for name in names:
            bound[name] = bound.get(name, 0) + 1
        if isinstance(stmt, cst.FunctionDef):
            defs[stmt.name.value] = stmt
    defs = {name: fn for name, fn in defs.items() if bound[name] == 1 and name not in imports}
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, fn in defs.items():
            if name not in found and any(_calls_api(c, imports, callees | found) for c in calls_in(fn.body)):
                found.add(name)
                grew = True
    return found


def _calls_api(call: cst.Call, imports: dict[str, str], callees: set[str]) -> bool:
    dotted = _dotted(call.func)
    return dotted is not None and (dotted in callees or _axes_api(dotted, imports))


def _module_callees(tree: cst.Module, imports: dict[str, str]) -> set[str]:
    """Module-level names bound to ``param_with_axes`` / ``variable_with_axes`` of flax or of another
    module (an alias, or a ``functools.partial`` of one): a call of them needs Linen's module stack."""
    found: set[str] = set()
    for stmt in tree.body:
        pair = single_assign(stmt)
        if pair is None:
            continue
        name, value = pair
        if isinstance(value, cst.Call) and _is_partial(value.func, imports) and value.args:
            if value.args[0].keyword is None and not value.args[0].star:
                value = value.args[0].value
        dotted = _dotted(value)
        if dotted is not None and (dotted in found or _axes_api(dotted, imports)):
            found.add(name)
    return found


def _is_partial(func: cst.BaseExpression, imports: dict[str, str]) -> bool:
    dotted = _dotted(func)
    return dotted is not None and _resolved(dotted, imports) == "functools.partial"


def _axes_api(dotted: str, imports: dict[str, str]) -> bool:
    """``dotted`` names ``param_with_axes`` / ``variable_with_axes`` through an import (flax's own, or
    a module's that restates it: ``from t5x.layers import param_with_axes``, ``layers.param_with_axes``)."""
    resolved = _resolved(dotted, imports)
    return resolved != dotted and resolved.rsplit(".", 1)[-1] in AXES_APIS


def kept_alias(node: cst.CSTNode, tree: cst.Module) -> bool:
    """``node`` is the value of a module-level ``name = nn_partitioning.param_with_axes`` (or
    ``variable_with_axes``) that nothing at module level outside a class reads: the line is kept
    (another file may import it) and needs no finding of its own, since each call through it in a class
    is restated or reported where it is made, and so is each call in another file of the run."""
    for i, stmt in enumerate(tree.body):
        pair = single_assign(stmt)
        if pair is None or pair[1] is not node:
            continue
        return not any(
            pair[0] in names_in(other)
            for j, other in enumerate(tree.body)
            if j != i and not isinstance(other, cst.ClassDef)
        )
    return False


def left_call_finding(call: cst.Call, tree: cst.Module, module_name: str) -> tuple[str, str] | None:
    """(message, hint) for a call of ``param_with_axes`` / ``variable_with_axes`` that the restatement
    left as written: through a module-level alias (T5X's ``param_with_axes =
    nn_partitioning.param_with_axes``) or a ``functools.partial`` of it, or imported from another module
    (a name or a module attribute). It fails in NNX (Linen's module stack is empty there); None for any
    other call. A read of flax's own name has its finding already (rewrite_attrs.py)."""
    dotted = _dotted(call.func)
    if dotted is None:
        return None
    callees, imports, functions = _callee_facts(tree, module_name)
    if dotted in functions:
        return (
            f"{dotted}(...) calls partitioning.param_with_axes / variable_with_axes, which need Linen's "
            "module stack: the call fails in an NNX module",
            "create the nnx.Param in __init__: nnx.Param(nnx.with_partitioning(init, axes)(rngs.params(), "
            "*init_args)) (see docs/nnx_facts.md#sharding-and-logical-partitioning)",
        )
    resolved = _resolved(dotted, imports)
    foreign = _axes_api(dotted, imports) and not resolved.startswith("flax.")
    if dotted not in callees and not foreign:
        return None
    api = "variable_with_axes" if resolved.endswith("variable_with_axes") else "param_with_axes"
    cls = _enclosing_class(call, tree)
    reason = why_not(call, sequence_fields(cls) if cls else frozenset()) or (
        "outside a method of a Linen module, beside another call left as written, in a class kept as "
        "Linen, or no name bound to flax.linen in the file"
    )
    if cls is not None and cls.name.value in _SHAPE_KEPT.get(module_name, ()):
        reason = (
            "restated, its NNX class would need the whole shape of an input, which the classes building "
            "it here cannot give: kept behind nnx.bridge.ToNNX, which sizes itself at its first call"
        )
    if dotted not in _aliases(tree, imports):
        reason = f"called as {dotted}, which is not restated: an import or a functools.partial of it"
    return (
        f"partitioning.{api}(...) left as written ({reason}); its names go to Linen's "
        f"{_AXES_COLLECTION[api]} collection",
        "nnx.Param(nnx.with_partitioning(init, axes)(rngs.params(), *init_args)) in __init__ "
        "(see docs/nnx_facts.md#sharding-and-logical-partitioning)",
    )


def _enclosing_class(call: cst.Call, tree: cst.Module) -> cst.ClassDef | None:
    """The module-level class holding ``call``."""
    for stmt in tree.body:
        if isinstance(stmt, cst.ClassDef) and any(c is call for c in calls_in(stmt)):
            return stmt
    return None


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
    skip: frozenset[str] = frozenset()
    _SHAPE_KEPT[module_name] = skip
    while True:
        restated = restate_param_with_axes(tree, source, module_name, skip)
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
        pushed = shapes_pushed_on_builders(result, restated.classes)
        if not pushed:
            return replayed_result(result, restated, source)
        skip |= pushed
        _SHAPE_KEPT[module_name] = skip  # read by left_call_finding, for the calls these classes keep


def shapes_pushed_on_builders(result: Any, classes: list[str]) -> frozenset[str]:
    """The restated classes whose NNX form needs the whole shape of an input (T5X's ``DenseGeneral``
    reads ``inputs.ndim`` and ``inputs.shape[ax]`` for its ``axis``) that a class of the file building
    it cannot give: a batch or length axis is known only at the call, so each builder, and every class
    above it, would gain a required shape argument a person fills in. Kept as written, such a class
    runs behind ``nnx.bridge.ToNNX``, which sizes itself at its first call, and its builders stay
    clean."""
    summaries = {s.name: s for s in result.summaries.values()}
    unresolved = [f.message for f in result.findings if f.rule == SHAPE_003.id]
    pushed = set()
    for name in classes:
        summary = summaries.get(name)
        shapes = (
            [a for a, how in summary.new_args.items() if how.startswith("input_shape:")] if summary else []
        )
        if any(m.startswith(f"{arg} of {name} ") for arg in shapes for m in unresolved):
            pushed.add(name)
    return frozenset(pushed)
