"""Module-level functions of a migrated file that still build Linen modules (``def block(x, f):
return nn.Dense(f)(x)``): an NNX class of this file or of a file importing it must not call them.
The facts are picklable, so the run hands them to importing files beside the class summaries."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, returned_values
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.verify_names import flax_class_kind


@dataclasses.dataclass(frozen=True)
class LinenFactory:
    """A module-level function of the run's output that still builds a Linen module: called inside an
    NNX class, it puts Linen there, whichever file defines it."""

    key: str  # absolute dotted name: pkg.ops.linear
    builds: str  # the Linen class it constructs (the first found): flax.linen.Dense
    nnx: bool = False  # ... or an NNX class of the run, built without the rngs its __init__ requires
    gives: str = ""  # "class": returns the Linen class; "table": a module-level table of Linen classes

    def message(self, call: str, owner: str) -> str:
        """The finding of ``call``, which builds (or picks) the Linen class inside NNX class ``owner``."""
        if self.gives == "table":
            return (
                f"{call}(...) builds a Linen module ({self.builds} among them) chosen from the table "
                f"{self.key} inside NNX class {owner}: build the NNX counterpart in __init__ (with rngs)"
            )
        does = "gives a Linen class" if self.gives == "class" else "builds a Linen module"
        return (
            f"{call} {does} ({self.builds}) inside NNX class {owner}: "
            f"make {self.key} build the NNX counterpart (with rngs), or build the layer here"
        )


def linen_factories(
    module: cst.Module,
    module_name: str,
    names: NameResolver | None = None,
    *,
    names_of: Callable[[], NameResolver] | None = None,
) -> dict[str, LinenFactory]:
    """The module-level functions of ``module`` (an output of the run) that build a Linen module, by
    absolute name: what an NNX class of this file or of a file importing it must not call.
    ``names`` (or ``names_of``, which gives it when needed) is ``module``'s resolver."""
    functions = [s for s in module.body if isinstance(s, cst.FunctionDef)]
    tables = _tables(module)
    if not functions and not tables:
        return {}
    names = names or (names_of() if names_of is not None else NameResolver(module))
    classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    linen_classes = {c.name.value for c in classes if _linen_bases(c, names)}
    needs_rngs = {c.name.value for c in classes if _needs_rngs(c, names)}
    found: dict[str, LinenFactory] = {}
    prefix = f"{module_name}." if module_name else ""
    for name, values in tables.items():
        builds = _linen_class(values, names, linen_classes, tables)
        if builds:
            found[prefix + name] = LinenFactory(prefix + name, builds, gives="table")
    for fn in functions:
        returned = [v for v in returned_values(fn.body) if v is not None]
        builds = _linen_class(returned, names, linen_classes, tables)
        if builds:  # `return nn.LayerNorm if name == "ln" else nn.RMSNorm`: called, then built
            found[prefix + fn.name.value] = LinenFactory(prefix + fn.name.value, builds, gives="class")
            continue
        for call in calls_in(fn.body):
            func = call.func
            if isinstance(func, cst.Name) and func.value in linen_classes:
                builds = func.value
            elif isinstance(func, (cst.Name, cst.Attribute)):
                builds = next((q for q in names.qualnames(func) if flax_class_kind(q) == "linen"), "")
            else:
                builds = ""
            key = f"{module_name}.{fn.name.value}" if module_name else fn.name.value
            if builds:
                found[key] = LinenFactory(key, builds)
                break
            if isinstance(func, cst.Name) and func.value in needs_rngs and not _gives_rngs(call):
                found[key] = LinenFactory(key, func.value, nnx=True)  # `BatchNorm(...)(x)` at call time
                break
    return found


def _needs_rngs(cls: cst.ClassDef, names: NameResolver) -> bool:
    """An NNX class whose ``__init__`` takes a ``rngs`` it has no default for (a converted class)."""
    if not any(
        flax_class_kind(q) == "nnx" for b in cls.bases if b.keyword is None for q in names.qualnames(b.value)
    ):
        return False
    init = next(
        (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
    )
    params = [] if init is None else [*init.params.params, *init.params.kwonly_params]
    return any(p.name.value == "rngs" and p.default is None for p in params)


def _gives_rngs(call: cst.Call) -> bool:
    return any(a.star == "**" or (a.keyword is not None and a.keyword.value == "rngs") for a in call.args)


def _linen_bases(cls: cst.ClassDef, names: NameResolver) -> bool:
    return any(
        flax_class_kind(q) == "linen"
        for b in cls.bases
        if b.keyword is None
        for q in names.qualnames(b.value)
    )


def _tables(module: cst.Module) -> dict[str, list[cst.BaseExpression]]:
    """The values of the dict, list and tuple displays module-level names are bound to, by name."""
    found: dict[str, list[cst.BaseExpression]] = {}
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, values = small.targets[0].target, display_values(small.value)
                if isinstance(target, cst.Name) and values:
                    found.setdefault(target.value, []).extend(values)
    return found


def display_values(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values of a dict, list or tuple display; none for any other expression."""
    if isinstance(value, cst.Dict):
        return [e.value for e in value.elements if isinstance(e, cst.DictElement)]
    if isinstance(value, (cst.List, cst.Tuple)):
        return [e.value for e in value.elements if isinstance(e, cst.Element)]
    return []


def _linen_class(
    values: list[cst.BaseExpression],
    names: NameResolver,
    linen_classes: set[str],
    tables: dict[str, list[cst.BaseExpression]],
) -> str:
    """The first Linen class ``values`` name, not called (through conditional expressions, lookups of
    displays or of the module's ``tables``, and ``functools.partial``); "" when none does."""
    todo = list(reversed(values))
    while todo:
        value = todo.pop()
        if isinstance(value, cst.IfExp):
            todo += [value.orelse, value.body]
        elif isinstance(value, cst.Subscript):
            table = value.value
            looked_up = tables.get(table.value, []) if isinstance(table, cst.Name) else []
            todo += reversed(display_values(table) or looked_up)
        elif (
            isinstance(value, cst.Call) and "functools.partial" in names.qualnames(value.func) and value.args
        ):
            todo.append(value.args[0].value)
        elif isinstance(value, cst.Name) and value.value in linen_classes:
            return value.value
        elif isinstance(value, (cst.Name, cst.Attribute)):
            q = next((q for q in names.qualnames(value) if flax_class_kind(q) == "linen"), "")
            if q:
                return q
    return ""
