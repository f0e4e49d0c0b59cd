"""Mode flags of a class of the run that its ``__call__`` merges with a field (``merge_param``).

Part of the *analyse* step. Linen's own ``nn.BatchNorm`` / ``nn.Dropout`` take their mode flag either
as a field or as a call argument and merge the two with ``merge_param``; real code copies them
(flaxmodels' ``ops.BatchNorm``) and builds them with the flag taken from the caller's call:
``BatchNorm(use_running_average=not train)(x)``. NNX builds the submodule in ``__init__``, where the
caller's ``train`` does not exist, so the flag moves to the call: ``self.batch_norm_0(x,
use_running_average=not train)``. That computes the same exactly when the field defaults to ``None``
(built without it, the field is ``None``), the class reads the field nowhere but in that
``merge_param`` (nothing else sees the field's ``None``), and ``__call__`` binds the merged value to
the parameter's own name before anything reads the parameter (nothing sees the raw call argument).
The built-in layers' flags are the layer rules' ``call_args``; these are the run's classes' own.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import kwarg, names_in, self_attr, single_assign
from linen2nnx.migrate.sites import ClassPlan, Site


def merge_flags(ctx: FileContext, plan: ClassPlan, node: cst.ClassDef) -> tuple[str, ...]:
    """The fields of ``node`` that its ``__call__`` merges with a call argument of the same name in a
    way a caller may pass at the call instead (see the module docstring)."""
    call = next(
        (s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__call__"), None
    )
    if call is None:
        return ()
    params = {p.name.value for p in (*call.params.params[1:], *call.params.kwonly_params)}
    defaults = {f.name: f.default for f in plan.fields}
    reads = _self_reads(node)
    found = []
    for index, stmt in enumerate(call.body.body):
        assign = single_assign(stmt)
        if assign is None or not isinstance(assign[1], cst.Call):
            continue
        name = _merged_name(ctx, assign[1])
        if (
            name is not None
            and name == assign[0]
            and name in params
            and defaults.get(name) == "None"
            and reads.get(name) == 1
            and not any(name in names_in(s) for s in call.body.body[:index])
        ):
            found.append(name)
    return tuple(found)


def _merged_name(ctx: FileContext, call: cst.Call) -> str | None:
    """``merge_param('f', self.f, f)`` (or ``(..., f, self.f)``) -> ``"f"``; else None."""
    if not any(q.startswith("flax.") and q.endswith(".merge_param") for q in ctx.qualnames(call.func)):
        return None
    if len(call.args) != 3 or any(a.keyword is not None or a.star for a in call.args):
        return None
    first, a, b = (arg.value for arg in call.args)
    if not isinstance(first, cst.SimpleString):
        return None
    name = first.evaluated_value
    ok = {self_attr(a), self_attr(b)} == {name, None} and name in {
        x.value for x in (a, b) if isinstance(x, cst.Name)
    }
    return name if ok and isinstance(name, str) else None


def _self_reads(node: cst.ClassDef) -> dict[str, int]:
    """How many times each ``self.<name>`` occurs in the class body."""
    counts: dict[str, int] = {}
    stack: list[cst.CSTNode] = [node.body]  # every node of the body (a stack, not a visitor class a call)
    while stack:
        n = stack.pop()
        if type(n) is cst.Attribute:
            attr = self_attr(n)
            if attr is not None:
                counts[attr] = counts.get(attr, 0) + 1
        stack.extend(syntax_children(n))
    return counts


def moved_flag(site: Site, name: str, arg: cst.Arg) -> bool:
    """Does the keyword argument ``name=`` of a class of the run move to the call (a merged flag)?"""
    return (
        site.rule is None
        and site.user is not None
        and arg.keyword is not None
        and name in site.user.call_flags
    )


def with_moved_flags(site: Site, ctor_args: list[cst.Arg]) -> list[cst.Arg]:
    """A user class's constructor arguments without the flags that moved to its call."""
    return [a for a in ctor_args if a.keyword is None or a.keyword.value not in site.moved_args]


def moved_flag_args(site: Site, ctor: cst.Call) -> list[cst.Arg]:
    """The flags the constructor ``ctor`` (as rewritten) passed, as keyword arguments of the call."""
    return [
        kwarg(a.keyword.value, a.value)
        for a in ctor.args
        if a.keyword is not None and a.keyword.value in site.moved_args
    ]
