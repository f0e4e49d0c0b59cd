"""Module-level functions of a migrated file that still build Linen modules (``def block(x, f):
return nn.Dense(f)(x)``): an NNX class of this file or of a file importing it must not call them.
The facts are picklable, so the run hands them to importing files beside the class summaries."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.verify_names import flax_class_kind


@dataclasses.dataclass(frozen=True)
class LinenFactory:
    """A module-level function of the run's output that still builds a Linen module: called inside an
    NNX class, it puts Linen there, whichever file defines it."""

    key: str  # absolute dotted name: pkg.ops.linear
    builds: str  # the Linen class it constructs (the first found): flax.linen.Dense
    nnx: bool = False  # ... or an NNX class of the run, built without the rngs its __init__ requires


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
    if not functions:
        return {}
    names = names or (names_of() if names_of is not None else NameResolver(module))
    classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    linen_classes = {c.name.value for c in classes if _linen_bases(c, names)}
    needs_rngs = {c.name.value for c in classes if _needs_rngs(c, names)}
    found: dict[str, LinenFactory] = {}
    for fn in functions:
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
