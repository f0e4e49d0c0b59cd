"""Syntactic helpers of the verifier: what a class defines on ``self``, which locals hold a class,
container displays, the functions that use Linen Module API on an argument. Pure functions of the
tree, kept apart from the walk in ``verify.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, syntax_children
from linen2nnx.migrate.cst_utils import absolute_qualname, self_attr
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.sites import MARKER, markers_of
from linen2nnx.migrate.verify_names import LINEN_SELF_ONLY, LINEN_TREE_PLACE, flax_class_kind


def linen_helpers(module: cst.Module) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Module-level functions that call Linen Module API on one of their parameters (``p.param(...)``),
    or hand that parameter on to such a function of the file (``outer(self, ...)`` calling
    ``inner(self, ...)``): name -> (parameter names, parameter -> the first such method)."""
    return _helpers([fn for fn in module.body if isinstance(fn, cst.FunctionDef)], skip=0)


def linen_decorators(module: cst.Module) -> dict[str, str]:
    """Module-level functions that return a wrapper calling Linen Module API on its first parameter
    (``def add_bias(f): def wrapped(self, x): return f(self, x) + self.param(...)``): name -> that
    method. A method they decorate runs the wrapper with the NNX module as ``self``."""
    out: dict[str, str] = {}
    for fn in module.body:
        if isinstance(fn, cst.FunctionDef):
            nested = [s for s in fn.body.body if isinstance(s, cst.FunctionDef)]
            for params, api in _helpers(nested, skip=0).values():
                if params and params[0] in api:
                    out.setdefault(fn.name.value, api[params[0]])
    return out


def method_helpers(cls: cst.ClassDef) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Methods of ``cls`` that call Linen Module API on a parameter other than ``self`` (flax's LayerNorm
    style: ``self._normalize(self, x, ...)`` whose ``mdl.param(...)`` creates the scale): name ->
    (parameter names after ``self``, parameter -> the first such method)."""
    return _helpers([fn for fn in cls.body.body if isinstance(fn, cst.FunctionDef)], skip=1)


def _helpers(functions: list[cst.FunctionDef], skip: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Of ``functions``, those that use Linen Module API on a parameter (the first ``skip`` not counted)."""
    params = {
        fn.name.value: [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)][skip:]
        for fn in functions
    }
    calls = {fn.name.value: calls_in(fn.body) for fn in functions}
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    changed = True
    while changed:  # a function handing its parameter on is one too: until nothing more is found
        changed = False
        for fn in functions:
            name, mine = fn.name.value, params[fn.name.value]
            api = dict(out[name][1]) if name in out else {}
            for call in calls[name]:
                for param, method in _api_uses(call, mine, out):
                    api.setdefault(param, method)
            if api and (name not in out or api != out[name][1]):
                out[name] = (mine, api)
                changed = True
    return out


def _api_uses(
    call: cst.Call, mine: list[str], helpers: dict[str, tuple[list[str], dict[str, str]]]
) -> list[tuple[str, str]]:
    """``(parameter, method)`` for each of ``mine`` that ``call`` uses Linen Module API on: directly
    (``p.param(...)``), or by handing it to a function of ``helpers`` that does."""
    f = call.func
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name):
        if f.value.value in mine and f.attr.value in LINEN_SELF_ONLY - LINEN_TREE_PLACE:
            return [(f.value.value, f.attr.value)]
        return []
    if not (isinstance(f, cst.Name) and f.value in helpers):
        return []
    callee_params, api = helpers[f.value]
    found = []
    for i, arg in enumerate(call.args):
        target = (
            arg.keyword.value
            if arg.keyword is not None
            else (callee_params[i] if i < len(callee_params) else None)
        )
        if isinstance(arg.value, cst.Name) and arg.value.value in mine and target in api and not arg.star:
            found.append((arg.value.value, api[target]))
    return found


LINEN_HELPER_KEY = "linen_helper:"  # the facts key of a file's linen_helpers, for importing files


def helper_facts(module: cst.Module, module_name: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The file's :func:`linen_helpers` under their ``linen_helper:`` keys: a file calling one (or a
    function of its own handing it ``self``) reports the call as its own helpers' calls are."""
    if not any(isinstance(s, cst.FunctionDef) for s in module.body):
        return {}
    prefix = f"{LINEN_HELPER_KEY}{module_name}." if module_name else LINEN_HELPER_KEY
    return {prefix + name: helper for name, helper in linen_helpers(module).items()}


def imported_helper(
    call: cst.Call, names: NameResolver, module_name: str, facts: Mapping[str, Any]
) -> tuple[list[str], dict[str, str]] | None:
    """The parameters and Linen API uses of the other file's helper ``call`` calls, or None."""
    if not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    for q in names.qualnames(call.func):
        fact = facts.get(LINEN_HELPER_KEY + absolute_qualname(q, module_name))
        if isinstance(fact, tuple):
            return fact
    return None


def handed_self(call: cst.Call, helper: tuple[list[str], dict[str, str]]) -> str | None:
    """``<parameter>.<method>`` of the Linen API ``helper`` calls on the parameter ``call`` hands
    ``self`` to, or None."""
    params, api = helper
    for i, arg in enumerate(call.args):
        target = arg.keyword.value if arg.keyword is not None else (params[i] if i < len(params) else None)
        if isinstance(arg.value, cst.Name) and arg.value.value == "self" and target in api:
            return f"{target}.{api[target]}"
    return None


def module_partials(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """Module-level ``name = <call>(<first>, ...)`` and ``name = dotted.name`` lines, by name (see
    :func:`linen_partial`)."""
    found: dict[str, cst.BaseExpression] = {}
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            value = small.value if isinstance(small, cst.Assign) else None
            if (isinstance(value, cst.Call) and value.args) or type(value) in (cst.Name, cst.Attribute):
                for t in small.targets:
                    if isinstance(t.target, cst.Name):
                        found[t.target.value] = value  # type: ignore[assignment]
    return found


def linen_partial(
    call: cst.BaseExpression | None, names: NameResolver, linen_classes: set[str]
) -> str | None:
    """The Linen module class ``call`` (``partial(nn.Dense, use_bias=False)`` bound at module level)
    partially applies, or names (``Dense = nn.Dense``): a call of that name builds a Linen module,
    whatever the class it is made in."""
    if type(call) in (cst.Name, cst.Attribute):
        first: cst.BaseExpression = call  # type: ignore[assignment]
    elif (
        type(call) is not cst.Call
        or "functools.partial" not in names.qualnames(call.func)
        or call.args[0].keyword
    ):
        return None
    else:
        first = call.args[0].value
    if isinstance(first, cst.Name) and first.value in linen_classes:
        return first.value
    return next((q for q in names.qualnames(first) if flax_class_kind(q) == "linen"), None)


def top_classes(module: cst.Module) -> list[cst.ClassDef]:
    return [s for s in module.body if isinstance(s, cst.ClassDef)]


CONTAINERS = {
    cst.List: "list",
    cst.ListComp: "list",
    cst.Tuple: "tuple",
    cst.Dict: "dict",
    cst.DictComp: "dict",
}


def container_kind(node: cst.BaseExpression) -> str | None:
    """``"list"`` / ``"tuple"`` / ``"dict"`` for a container display, a comprehension or ``list(...)``."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value in ("list", "tuple", "dict")
    ):
        return node.func.value if len(node.args) == 1 else None
    return CONTAINERS.get(type(node))


def container_items(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The element expressions of a container (a comprehension's element, a dict's values)."""
    if isinstance(node, cst.Call):
        node = node.args[0].value
    if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return [node.elt]
    if isinstance(node, cst.DictComp):
        return [node.value]
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value for e in node.elements]
    if isinstance(node, cst.Dict):
        return [e.value for e in node.elements if isinstance(e, cst.DictElement)]
    return []


def self_chain(node: cst.BaseExpression) -> bool:
    """``self``, ``self.a``, ``self.a[i].b``: an expression rooted at ``self`` through attributes and subscripts."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return isinstance(node, cst.Name) and node.value == "self"


def linen_args(call: cst.Call) -> str:
    kw = {a.keyword.value for a in call.args if a.keyword is not None}
    said = []
    if "name" in kw:
        said.append("with name=")
    if "rngs" not in kw:
        said.append("without rngs=")
    return f" ({', '.join(said)})" if said else ""


def defined_names(cls: cst.ClassDef) -> set[str]:
    """What a class defines: the names its body binds, and every ``self.<name>`` it assigns."""
    return class_body_names(cls) | self_assigned(cls)


def names_with_bases(node: cst.ClassDef, defs: dict[str, cst.ClassDef]) -> set[str]:
    """What ``node`` and its bases of this file (``defs``: its classes by name) define: methods, class
    attributes, and everything assigned to ``self.<name>`` (an NNX class may well call its own attribute
    ``scope``)."""
    names: set[str] = set()
    todo = [node]
    while todo:
        cls = todo.pop()
        names |= defined_names(cls)
        todo += [
            defs[b.value.value]
            for b in cls.bases
            if isinstance(b.value, cst.Name) and b.value.value in defs and defs[b.value.value] is not cls
        ]
    return names


def class_body_names(cls: cst.ClassDef) -> set[str]:
    """The names a class body binds at its top level (methods, nested classes, class attributes)."""
    return {name for stmt in cls.body.body for name in bound_by(stmt)}


def bound_by(stmt: cst.BaseStatement) -> set[str]:
    """The names one statement of a class body binds there (a method, a nested class, attributes)."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    names: set[str] = set()
    for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
        targets = (
            [t.target for t in small.targets]
            if isinstance(small, cst.Assign)
            else ([small.target] if isinstance(small, cst.AnnAssign) else [])
        )
        names.update(t.value for t in targets if isinstance(t, cst.Name))
    return names


def self_assigned(cls: cst.ClassDef) -> set[str]:
    """``<name>`` of every ``self.<name> = ...`` (or ``setattr(self, '<name>', ...)``) in the class."""
    return set(self_assignments(cls))


def self_assignments(cls: cst.ClassDef) -> dict[str, int]:
    """How many assignment targets of the class write each ``self.<name>``."""
    found: dict[str, int] = {}

    def walk(node: cst.CSTNode) -> None:
        targets: list[cst.CSTNode] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            targets = [node.target]
        for t in targets:
            for el in [e.value for e in t.elements] if isinstance(t, (cst.Tuple, cst.List)) else [t]:
                if (
                    isinstance(el, cst.Attribute)
                    and isinstance(el.value, cst.Name)
                    and el.value.value == "self"
                ):
                    found[el.attr.value] = found.get(el.attr.value, 0) + 1
        for child in syntax_children(node):
            walk(child)

    walk(cls.body)
    return found


def assignments(body: cst.CSTNode) -> list[cst.Assign]:
    """The single-target assignments of a function body, in order (not of functions nested in it)."""
    found: list[cst.Assign] = []

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            found.append(node)
        for child in syntax_children(node):
            visit(child)

    visit(body)
    return found


def applied_locals(fn: cst.FunctionDef) -> set[int]:
    """Ids of the calls given ``name=`` whose result a local of ``fn`` holds and ``fn`` then calls
    (``layer = factory(..., name="attn")`` ... ``layer(x)``): built and applied as a Linen compact
    method does, like ``factory(..., name="attn")(x)``."""
    if not any(_gives_name(call) for call in calls_in(fn.body)):  # the common case, from the file's memo
        return set()
    named = {}
    for assign in assignments(fn.body):
        target, value = assign.targets[0].target, assign.value
        if isinstance(target, cst.Name) and isinstance(value, cst.Call):
            if _gives_name(value):
                named[target.value] = value
    if not named:  # the common case: nothing more to look at
        return set()
    called: set[str] = set()

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not fn:
            return
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            called.add(node.func.value)
        for child in syntax_children(node):
            visit(child)

    visit(fn.body)
    return {id(named[n]) for n in called if n in named}


def _gives_name(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "name" for a in call.args)


def marked_by_another_rule(stmt: cst.CSTNode) -> bool:
    """``stmt`` carries a marker of a rule other than the verifier's. A size's ``L2N-SHAPE-003`` does
    not count: it goes when the class's builders pass the size (caller_sizes.py), and a leftover it
    hid would then show only on a second run."""
    return any(
        not m.startswith((f"{MARKER} L2N-VERIFY", f"{MARKER} L2N-SHAPE-003"))
        for m in markers_of(stmt, MARKER)
    )


def self_target(node: cst.Assign | cst.AnnAssign) -> cst.Attribute | None:
    """The first ``self.<name>`` an assignment binds, if any."""
    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    return next(
        (
            t
            for t in targets
            if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self"
        ),
        None,
    )


def linen_module_copy(call: cst.Call) -> bool:
    """``self.norm.clone(name="n0")`` / ``self.block.copy(parent=None, name=...)``: Linen's
    ``Module.clone`` / ``Module.copy`` on a module the class holds (a ``name=`` or ``parent=`` says
    so; a dict's or an array's ``copy()`` takes neither)."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value in ("copy", "clone")
        and self_attr(func.value) is not None
        and any(a.keyword is not None and a.keyword.value in ("name", "parent") for a in call.args)
    )
