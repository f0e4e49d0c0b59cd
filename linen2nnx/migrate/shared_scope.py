"""``nn.share_scope(self, child)`` in an ``@nn.compact`` method: the child's variables sit in the
parent's scope.

Linen code uses it to keep checkpoint paths stable while moving parameters into a submodule (an
einsum layer whose parameter used to be the parent's own: ``FeedForward/gating_einsum``, not
``FeedForward/Einsum_0/gating_einsum``). NNX has no scopes: the child is an attribute like any
other (``self.einsum_0``), so the statement goes, and the name map sends each name the child creates
at the parent's level to that attribute without consuming it (``gating_einsum`` -> ``einsum_0``, then
the child's own entry maps ``gating_einsum`` -> ``w``).

The child's names must be fixed (:meth:`.ClassPlan.scope_names`: no lists, no loops), and a variable
a field names (``{weight_name}``) takes the field's value at the construction call, a string literal
there or as the field's default. Anything else keeps the generic finding of ``nn.share_scope``.
"""

from __future__ import annotations

import ast
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_names, name_counts
from linen2nnx.migrate.kw_only import bound_fields
from linen2nnx.migrate.rules import API_008
from linen2nnx.migrate.sites import ClassPlan, Site
from linen2nnx.namemap import is_field_name

SHARE_SCOPE = frozenset({"flax.linen.share_scope", "flax.linen.module.share_scope"})


def plan_shared_scopes(ctx: Any, state: Any, plan: ClassPlan, fn: cst.FunctionDef) -> None:
    """Give each submodule site of ``fn`` that a top-level ``nn.share_scope(self, local)`` statement
    names its names in ``plan``'s scope, and drop the statement (``ctx``: the file's context,
    ``state``: its state)."""
    claimed: set[str] = set()  # the names earlier shared children put at this level
    for stmt in fn.body.body:
        local = _shared_local(ctx, stmt)
        if local is None:
            continue
        sites = [s for s in plan.sites.values() if _assigned_local(ctx, s) == local]
        if not sites or not _sole_bindings(fn, stmt, local, sites):
            continue
        names = [_names_in_parent(ctx, s) for s in sites]
        if any(n is None for n in names) or len(set(names)) != 1:
            continue
        own = {s.linen_name for s in plan.sites.values() if s not in sites and not s.scope_names}
        if (own | claimed) & set(names[0]):  # a name twice in one scope: Linen fails
            continue
        claimed |= set(names[0])  # type: ignore[arg-type]
        for site in sites:
            site.scope_names = names[0]  # type: ignore[assignment]
        ctx.report(
            API_008,
            stmt,
            f"nn.share_scope(self, {local}) removed: the name map sends {', '.join(names[0])} "  # type: ignore[arg-type]
            f"to self.{sites[0].attr}",
        )
        state.dropped_statements.add(stmt)
        state.handled.add(stmt.body[0].value.func)  # type: ignore[attr-defined]


def _sole_bindings(fn: cst.FunctionDef, stmt: cst.BaseStatement, local: str, sites: list[Site]) -> bool:
    """The sites are every binding of ``local`` in ``fn`` (one, or one per branch of an ``if``), and
    nothing reads ``local`` before ``stmt``: a child applied before Linen shares its scope has
    created its variables under its own name already, and a local bound again names another child."""
    if assigned_names(fn).get(local, 0) != len(sites):
        return False
    if len(sites) > 2 or (
        len(sites) == 2
        and sites[0].exclusive_with is not sites[1]
        and sites[1].exclusive_with is not sites[0]
    ):
        return False  # two bindings are the two branches of one `if`, built as one attribute
    reads = 0
    for before in fn.body.body:
        if before is stmt:
            break
        reads += name_counts(before).get(local, 0)
    return reads == len(sites)  # the binding targets themselves


def _shared_local(ctx: Any, stmt: cst.BaseStatement) -> str | None:
    """``local`` of a statement ``nn.share_scope(self, local)``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    call = small.value if isinstance(small, cst.Expr) else None
    if not isinstance(call, cst.Call) or not ctx.qualnames(call.func) & SHARE_SCOPE:
        return None
    args = call.args
    if len(args) != 2 or any(a.keyword is not None or a.star for a in args):
        return None
    first, second = args[0].value, args[1].value
    if isinstance(first, cst.Name) and first.value == "self" and isinstance(second, cst.Name):
        return second.value
    return None


def _assigned_local(ctx: Any, site: Site) -> str | None:
    """The local a hoisted submodule site is assigned to (``gating = Einsum(...)``)."""
    if site.kind not in ("layer", "module") or not site.hoisted or site.parent is not None:
        return None
    if site.container is not None or site.loop is not None or site.nest is not None or site.lifted:
        return None
    parent = ctx.parent_of(site.ctor)
    if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
        return None
    target = parent.targets[0].target
    return target.value if isinstance(target, cst.Name) else None


def _names_in_parent(ctx: Any, site: Site) -> tuple[str, ...] | None:
    """The names a class of the run creates in the scope it shares, each ``{field}`` replaced by the
    field's value at ``site``'s construction call; None when one is not known. The call must name
    the class itself: a partial (``make = partial(Gate, weight_name=...)``) binds fields the call
    does not show."""
    if site.user is None or site.factory is not None or site.lifted is not None:
        return None
    direct = ctx.user_class_of(site.ctor.func)
    if direct is None or (direct.key or direct.name) != (site.user.key or site.user.name):
        return None
    names = site.user.scope_names()
    if not names:
        return None
    out = []
    for name in names:
        value = _field_value(site, name[1:-1]) if is_field_name(name) else name
        if value is None:
            return None
        out.append(value)
    return tuple(out)


def _field_value(site: Site, field: str) -> str | None:
    """The string ``field`` of the class ``site`` builds takes: a literal passed by keyword or by
    position, else the field's literal default."""
    user = site.user
    assert user is not None
    if any(arg.star for arg in site.ctor.args):
        return None
    arg = bound_fields(user.fields, site.ctor).get(field)
    if arg is not None:
        value = arg.value.evaluated_value if isinstance(arg.value, cst.SimpleString) else None
        return value if isinstance(value, str) else None
    default = next((f.default for f in user.fields if f.name == field), None)
    try:
        value = ast.literal_eval(default) if default is not None else None
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None
