"""Submodules a class builds through something the codemod cannot follow to a layer or a class of the run.

Each is a located ``manual`` finding where it is built, never an NNX class that quietly builds Linen:

- an element of a field holding module factories, called at call time (``self.heads[i]()(x)``, or
  ``make()(x)`` over ``for make in self.heads``): flaxformer / SAVi readout heads (``L2N-MOD-008``);
- what an imported function of no library returns, called and applied in an NNX class the run wrote
  (``net = networks.feature_layer(False)`` then ``net(features=16)(x)``): most likely a Linen layer or
  partial (:func:`outside_maker`, read by the verifier: ``L2N-VERIFY-001``);
- a value handed to a module-factory field that another file's class made NNX (``Block(dense=DenseNB)``
  with ``DenseNB`` a Linen partial of a third file): the NNX class builds it with ``rngs``
  (``L2N-MOD-008``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import code, names_in, self_attr
from linen2nnx.migrate.foreign_locals import bound_once, local_value
from linen2nnx.migrate.rules import MOD_008
from linen2nnx.migrate.sites import ClassPlan

#: Packages whose functions return no Linen module factory: ``jax.vmap(f)(a)(b)`` & co. are no submodule.
KNOWN_LIBRARIES = frozenset(
    {"jax", "jnp", "numpy", "np", "functools", "flax", "math", "optax", "einops", "operator"}
)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def flag_unknown_builder(ctx: FileContext, plan: ClassPlan, node: cst.Call, ctor: cst.Call) -> bool:
    """Report ``node`` (``ctor(...)`` applied at once) when ``ctor`` calls an element of a factory field;
    True when it did."""
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
    return False


def field_element(ctx: FileContext, ctor: cst.Call) -> str | None:
    """The field an element of which ``ctor`` calls: ``self.heads[i](...)`` (also through a local bound
    once to it), or ``make(...)`` with ``make`` a target of a ``for`` (or comprehension) whose iterable
    reads ``self.heads`` (``enumerate(self.heads)``, ``zip(self.names, self.heads)``,
    ``self.heads.values()``)."""
    func = ctor.func
    if isinstance(func, cst.Name):
        bound = local_value(ctx, ctor, func.value)
        if isinstance(bound, cst.Subscript):  # `h = self.heads[i]`, then `h()(x)`
            func = bound
    if isinstance(func, cst.Subscript):
        return self_attr(func.value)
    if not isinstance(func, cst.Name):
        return None
    node: cst.CSTNode | None = ctor
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        for loop in _loops_at(node):
            if func.value in names_in(loop.target):
                reads = reversed(nodes_of(loop.iter, (cst.Attribute,)))  # the last: zip(names, heads)
                field = next((f for n in reads if (f := self_attr(n)) is not None), None)
                if field is not None:
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


def outside_maker(
    fn: cst.FunctionDef | None, func: cst.BaseExpression, qualnames: Callable[[cst.CSTNode], set[str]]
) -> str | None:
    """How a call of ``func`` with keyword arguments, applied at once, builds a module (for the verifier's
    finding; a curried plain function called positionally, ``pick("square")(2)(x)``, is none) when ``func``
    is what an imported function of no library returned: ``f(...)`` itself (``f(...)(features=16)(x)``),
    or a local of ``fn`` bound once to it (``net = networks.feature_layer(noisy)``, then
    ``net(features=16)(x)``): most likely a Linen layer or partial. None otherwise."""
    made: cst.BaseExpression | None = func
    if isinstance(func, cst.Name):
        made = bound_once(fn, func.value) if fn is not None else None
    if not isinstance(made, cst.Call) or type(made.func) not in (cst.Name, cst.Attribute):
        return None
    names = qualnames(made.func)
    if not names or any(_of_library(q) or "." not in q for q in names):
        return None  # a library's, or a function of this file (its replay / the verifier follow it)
    if isinstance(func, cst.Name):
        return f"{func.value}(...) is applied at once, and {func.value} holds what {code(made.func)}(...) returns"
    return f"what {code(made.func)}(...) returns is called and applied at once"


def check_handed_factories(ctx: FileContext, plan: ClassPlan, user: ClassPlan, bound: dict[str, Any]) -> None:
    """A class of another file whose module-factory field the run made NNX (its default an NNX layer
    now, ``dense: Callable = nnx.Linear``), handed a value the codemod cannot tell builds an NNX layer: a
    name imported from elsewhere (``DenseNB``, a Linen partial of another file) would reach NNX code
    that builds it with ``rngs`` (TypeError), so it is a finding at the call. Linen layers, classes of
    the run and the caller's own resolved factory fields are handled where they are."""
    defaults = {f.name: f.default for f in user.fields if f.default and _nnx_layer_class(f.default)}
    for name, arg in bound.items():
        value = arg.value if isinstance(arg, cst.Arg) else arg
        if name not in defaults or type(value) not in (cst.Name, cst.Attribute):
            continue
        if ctx.layer_rule_of(value) or ctx.user_class_of(value):
            continue
        if any(_of_library(q) for q in ctx.qualnames(value)):
            continue  # a library's function or class: converted (or reported) where it is written
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


def _nnx_layer_class(default: str) -> bool:
    """``nnx.Linear`` / ``nnx.Conv``: a field default naming an NNX layer class (what a module-factory
    field the run converted defaults to), not an activation (``nnx.gelu``) or an initializer."""
    head, _, rest = default.partition(".")
    return head == "nnx" and rest[:1].isupper() and rest.replace("_", "").isalnum()


def _of_library(qualname: str) -> bool:
    return qualname.split(".")[0] in KNOWN_LIBRARIES
