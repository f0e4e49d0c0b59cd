"""Submodules a class builds through something the codemod cannot follow to a layer or a class of the run.

Each is a located ``manual`` finding where it is built, never an NNX class that quietly builds Linen:

- an element of a field holding module factories, called at call time (``self.heads[i]()(x)``, or
  ``make()(x)`` over ``for make in self.heads``): flaxformer / SAVi readout heads (``L2N-MOD-008``);
- what a function of no file of the run returns, called and applied (``net = extlib.feature_layer(False)``
  then ``net(features=16)(x)``): most likely a Linen layer or partial (``L2N-MOD-006``);
- a value handed to a module-factory field that another file's class made NNX (``Block(dense=DenseNB)``
  with ``DenseNB`` a Linen partial of a third file): the NNX class builds it with ``rngs``
  (``L2N-MOD-008``).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code, names_in, self_attr
from linen2nnx.migrate.foreign_locals import local_value
from linen2nnx.migrate.rules import MOD_006, MOD_008
from linen2nnx.migrate.sites import ClassPlan

#: Packages whose functions return no Linen module factory: ``jax.vmap(f)(a)(b)`` & co. are no submodule.
KNOWN_LIBRARIES = frozenset(
    {"jax", "jnp", "numpy", "np", "functools", "flax", "math", "optax", "einops", "operator"}
)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def flag_unknown_builder(ctx: FileContext, plan: ClassPlan, node: cst.Call, ctor: cst.Call) -> bool:
    """Report ``node`` (``ctor(...)`` applied at once) when ``ctor`` calls an element of a factory field
    or what an outside function returned; True when it did."""
    picked = field_element(ctx, ctor)
    if picked is not None and picked in plan.field_names:  # `self.heads[i]()(x)`, `make()(x)` over them
        ctx.report(
            MOD_008,
            ctor,
            f"{code(ctor.func)}(...)(...) builds a submodule at call time from an element of the field "
            f"{picked!r} (a sequence of module factories)",
            f"build the modules in __init__ (an nnx.List of them, one per element of {picked}), "
            "with NNX layer classes passed in",
        )
        return True
    maker = outside_maker(ctx, node, ctor)
    if maker is not None:  # `net = extlib.feature_layer(False)` then `net(features=16)(x)`
        ctx.report(
            MOD_006,
            ctor,
            f"{code(ctor.func)}(...)(...) builds a submodule at call time from what {maker}(...) returns "
            "(a function this run does not migrate: most likely a Linen layer or partial)",
            f"migrate the file that defines {maker} in the same run, or build the module in __init__ by hand",
        )
        return True
    return False


def field_element(ctx: FileContext, ctor: cst.Call) -> str | None:
    """The field an element of which ``ctor`` calls: ``self.heads[i](...)``, or ``make(...)`` with
    ``make`` the target of a ``for`` (or comprehension) over ``self.heads`` (or its ``enumerate``)."""
    func = ctor.func
    if isinstance(func, cst.Subscript):
        return self_attr(func.value)
    if not isinstance(func, cst.Name):
        return None
    node: cst.CSTNode | None = ctor
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        for loop in _loops_at(node):
            iterated = loop.iter
            if isinstance(iterated, cst.Call) and code(iterated.func) in ("enumerate", "reversed"):
                iterated = iterated.args[0].value if iterated.args else iterated
            field = self_attr(iterated)
            if field is not None and func.value in names_in(loop.target):
                return field
        node = ctx.parent_of(node)
    return None


def _loops_at(node: cst.CSTNode) -> list[Any]:
    """The ``for`` clauses ``node`` is (a ``for`` statement, or a comprehension's clauses)."""
    if isinstance(node, cst.For):
        return [node]
    loops = []
    comp = node.for_in if isinstance(node, _COMPREHENSIONS) else None
    while comp is not None:
        loops.append(comp)
        comp = comp.inner_for_in
    return loops


def outside_maker(ctx: FileContext, node: cst.Call, ctor: cst.Call) -> str | None:
    """``f`` when ``ctor`` calls what a call of ``f`` returned (``f(...)(...)``, or a local bound once to
    ``f(...)``) and ``node`` applies that at once: a module factory made by a function this run does not
    know (neither a layer factory function of the run nor a library function)."""
    made = ctor.func
    if isinstance(made, cst.Name):
        made = local_value(ctx, node, made.value)
    if not isinstance(made, cst.Call) or type(made.func) not in (cst.Name, cst.Attribute):
        return None
    if ctx.function_factory_of(made.func) is not None or ctx.self_call(made) is not None:
        return None
    qualnames = ctx.qualnames(made.func)
    if not qualnames or any(q.split(".")[0] in KNOWN_LIBRARIES or "." not in q for q in qualnames):
        return None  # a library's, or a function of this file (its replay / the verifier follow it)
    return code(made.func)


def check_handed_factories(ctx: FileContext, plan: ClassPlan, user: ClassPlan, bound: dict[str, Any]) -> None:
    """A class of another file whose module-factory field the run made NNX (its default an NNX layer
    now, ``dense: Callable = nnx.Linear``), handed a value the codemod cannot tell builds an NNX layer: a
    name imported from elsewhere (``DenseNB``, a Linen partial of another file) would reach NNX code
    that builds it with ``rngs`` (TypeError), so it is a finding at the call. Linen layers, classes of
    the run and the caller's own resolved factory fields are handled where they are."""
    defaults = {f.name: f.default for f in user.fields if f.default and f.default.startswith("nnx.")}
    for name, arg in bound.items():
        value = arg.value if isinstance(arg, cst.Arg) else arg
        if name not in defaults or type(value) not in (cst.Name, cst.Attribute):
            continue
        if ctx.layer_rule_of(value) or ctx.user_class_of(value):
            continue
        own = self_attr(value)
        if own is not None and ctx.field_factory(plan, own) is not None:
            continue
        ctx.report(
            MOD_008,
            value,
            f"{code(value)} is handed to the module-factory field {name!r} of {user.name} (another file, "
            f"where it builds NNX layers: {name} defaults to {defaults[name]}), and the codemod cannot tell "
            "it builds an NNX layer",
            f"pass an NNX layer class or a partial of one (partial(nnx.Linear, ...)) as {name}",
        )
