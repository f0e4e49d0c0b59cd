"""Submodules ``setup()`` builds from outside the run: ``self.attn_weights = kd.nn.Identity()``.

In a compact method ``Foo(...)(x)`` with ``Foo`` neither a built-in layer nor a class of the run is
reported as a Linen submodule the run does not see (``L2N-MOD-006``, see
``SitePlanner.flag_unknown_submodule``). The same module bound to an attribute in ``setup()`` and
applied as ``self.attn_weights(...)`` got nothing: the class was rewritten as NNX with a Linen module
built in its ``__init__`` (outside any Linen scope, so it neither builds nor runs), a silent failure.

Two forms say that a setup() attribute holds a Linen module nothing of the run converts:

- a capitalised callee imported from outside the run (``kd.nn.Identity()``, ``other.Block(4)``);
- any callee nothing resolves that is given ``name=`` and no ``rngs=`` (``self.config.make(name="enc")``,
  a configuration's method returning a Linen module): Linen's way of naming a submodule, never NNX's.

Both only when the class applies the attribute (``self.attr(...)``), as it applies a submodule: a plain
object a setup() keeps for other uses is not a module.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in, syntax_children
from linen2nnx.migrate.cst_utils import callee_name, code, root_name, self_attr
from linen2nnx.migrate.file_state import FileState
from linen2nnx.migrate.rules import MOD_006, MOD_008
from linen2nnx.migrate.sites import ClassPlan
from linen2nnx.migrate.verify_names import NOT_MODULE_PREFIXES, looks_like_linen_module

_NOT_FOREIGN_MODULE = (*NOT_MODULE_PREFIXES, "functools.", "flax.", "math.", "operator.", "einops.")


def flag_foreign_setup(ctx: FileContext, plan: ClassPlan, attr: str, value: cst.Call) -> None:
    """Report ``self.<attr> = value`` of the planned class's setup() when it builds a Linen submodule
    from outside the run (L2N-MOD-006, which keeps the class Linen behind the bridge)."""
    block = _setup_class(ctx, plan)
    if block is None:
        return
    builds = lambda c: bool(ctx.layer_rule_of(c.func) or ctx.user_class_of(c.func))  # noqa: E731
    qualnames = ctx.qualnames(value.func)
    found = foreign_setup_module(ctx.state, qualnames, value, attr, block, set(plan.field_names), builds)
    if found is not None:
        hint = "migrate the file that defines it in the same run, or convert it by hand"
        ctx.report(MOD_006, value, found, hint)


def flag_setup_factory_field(ctx: FileContext, plan: ClassPlan, attr: str, value: cst.Call) -> None:
    """``self.norm = self.norm_factory()`` in setup(), then ``self.norm(x)``: a submodule built by a
    module-factory field (flaxformer's ``Callable[[], nn.Module]`` factories). Kept as written, the NNX
    class would call the factory with no ``rngs`` and none of the sizes a migrated class takes, and build
    nothing that runs: reported (``L2N-MOD-008``, which keeps the class Linen behind the bridge) where the
    field's annotation names a module or its bindings are layers or classes of the run."""
    field = self_attr(value.func)
    if field is None or field in plan.factories:
        return
    annotation = next((f.annotation or "" for f in plan.fields if f.name == field), None)
    if annotation is None or not ("Module" in annotation or ctx.field_factory(plan, field) is not None):
        return
    block = _setup_class(ctx, plan)
    if block is not None and _applied(block, attr):
        ctx.report(
            MOD_008,
            value,
            f"self.{attr} = self.{field}(...) in setup() builds a submodule from the module-factory field "
            f"{field!r}, which NNX would call without rngs or the sizes a migrated class takes",
            f"build it in __init__: self.{attr} = {field}(..., rngs=rngs), with an NNX class passed in",
        )


def _setup_class(ctx: FileContext, plan: ClassPlan) -> cst.ClassDef | None:
    """The class whose ``setup()`` is planned (None when it has none)."""
    block = ctx.parent_of(ctx.parent_of(plan.setup) or plan.setup) if plan.setup is not None else None
    return block if isinstance(block, cst.ClassDef) else None


def foreign_setup_module(
    state: FileState,
    qualnames: set[str],
    value: cst.Call,
    attr: str,
    cls: cst.ClassDef,
    fields: set[str],
    builds: Callable[[cst.Call], bool],
) -> str | None:
    """What ``self.<attr> = value`` of setup() builds, said as a Linen submodule from outside the run
    (the message of its finding), or None when it is not plainly one. ``qualnames``: what the callee
    may name; ``fields``: the class's fields; ``builds``: does a call build a layer or a class of the run."""
    func = value.func
    if type(func) not in (cst.Name, cst.Attribute) or self_attr(func) is not None:
        return None  # `self.method(...)`, `self.factory_field(...)`: planned or reported elsewhere
    if any(q.startswith(_NOT_FOREIGN_MODULE) for q in qualnames) or looks_like_linen_module(value, qualnames):
        return None  # a capitalised callee given name= and no rngs: the verifier's (L2N-VERIFY-001)
    if _handed_modules(value, fields, builds):
        return None
    root = root_name(func)
    if root is not None and (root.value in state.module_classes or root.value in state.module_functions):
        return None  # of this file: its classes are planned, its functions checked by the verifier
    keywords = {a.keyword.value for a in value.args if a.keyword is not None}
    named = "name" in keywords and "rngs" not in keywords
    imported = callee_name(value)[:1].isupper() and any("." in q for q in qualnames)
    if not (named or imported) or not _applied(cls, attr):
        return None
    how = f"{code(func)}(..., name=...)" if named and not imported else f"{callee_name(value)}(...)"
    return (
        f"self.{attr} = {how} in setup() looks like a Linen submodule that is not part of this run "
        f"(the class applies self.{attr})"
    )


def _handed_modules(value: cst.Call, fields: set[str], builds: Callable[[cst.Call], bool]) -> bool:
    """Is the call handed what the class builds: an attribute of self other than a field (the submodules
    setup() bound, ``TransparentLayerSequence(self.layers)``), a lambda, or a layer built in place? Such a
    helper applies modules the run converts, and is no module of its own."""
    for arg in value.args:
        if any(isinstance(n, cst.Lambda) for n in _nodes(arg.value)) or any(
            builds(c) for c in calls_in(arg.value)
        ):
            return True
        if any((a := self_attr(n)) is not None and a not in fields for n in _nodes(arg.value)):
            return True
    return False


def _nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    found, todo = [], [node]
    while todo:
        cur = todo.pop()
        found.append(cur)
        todo.extend(syntax_children(cur))
    return found


def _applied(cls: cst.ClassDef, attr: str) -> bool:
    """Does a method of ``cls`` call ``self.<attr>(...)``?"""
    return any(self_attr(call.func) == attr for call in calls_in(cls.body))
