"""Arrays ``setup()`` computes from the configuration become properties of the NNX class.

``self.inv_freq = 1.0 / (self.base ** (jnp.arange(0, d, 2) / d))`` in ``setup()`` is recomputed on every
Linen ``apply``. The same line in ``__init__`` stores the array in the module, where NNX counts it as
state: built under ``nnx.eval_shape`` or ``nnx.jit`` (as a checkpoint conversion or an equivalence check
builds it) a jax array is a leaked tracer and a numpy one an abstract shape, and no Linen checkpoint has
the entry. A ``@property`` computes it where it is read, as Linen did (MaxText's own NNX
``RotaryEmbedding.timescale`` is one).

A value qualifies when it is a top-level ``self.X = value`` of ``setup()``, ``X`` bound once there, the
value calls into jax or numpy (or a function of the file that does) and reads nothing but fields,
earlier such properties, names of the module and ``setup()`` locals of the same kind, which the property
computes again. An array value that reads other locals stays in ``__init__`` with a finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, nodes_of
from linen2nnx.migrate.cst_utils import assigned_names, names_in, self_attr, self_targets, single_assign
from linen2nnx.migrate.mutation import mutated_locals
from linen2nnx.migrate.rules import MOD_004, MOD_014
from linen2nnx.migrate.sites import ClassPlan

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

PYTHON_VALUES = frozenset({"int", "float", "bool", "complex", "str", "len", "tuple", "list", "round"})
ARRAY_LIBRARIES = ("jax.", "numpy.", "flax.linen.make_", "flax.linen.attention.make_")  # and Linen's masks


def plan_setup_arrays(ctx: FileContext, plan: ClassPlan) -> None:
    """``plan.setup_properties``: each ``setup()`` attribute that becomes a property, with the
    ``setup()`` locals the property computes first (in order)."""
    setup = plan.setup
    if setup is None:
        return
    bound = assigned_names(setup)
    changed = mutated_locals(setup)  # `widths.append(w)`: not a value its binding alone gives
    attrs_bound: dict[str, int] = {}
    for node in nodes_of(setup.body, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For)):
        for _, name in self_targets(node):
            attrs_bound[name] = attrs_bound.get(name, 0) + 1
    site_calls = {id(c) for c in plan.sites} | {id(c) for c in plan.lazy_vars}
    local_reads: dict[str, list[str]] = {}  # replayable local -> the locals it needs, in order
    fields = set(plan.field_names)
    for stmt in setup.body.body:  # an array bound under a config test stays (a helper's replay binds some)
        if any(id(c) in site_calls for c in calls_in(stmt)):
            continue
        local = single_assign(stmt)
        if local is not None:
            needs = _needs(local[1], fields | set(plan.setup_properties), bound, local_reads)
            if needs is not None and bound.get(local[0]) == 1 and local[0] not in changed:
                local_reads[local[0]] = needs
            continue
        target = _self_assign(stmt)
        if target is None or not _computes_array(ctx, target[1]):
            continue
        needs = _needs(target[1], fields | set(plan.setup_properties), bound, local_reads)
        if needs is not None and attrs_bound.get(target[0]) == 1:
            plan.setup_properties[target[0]] = needs
            ctx.report(
                MOD_014, stmt, f"setup()'s array self.{target[0]} -> a property computed where it is read"
            )
        elif not self_reads(target[1]) - fields - set(plan.setup_properties):  # else a variable or a method
            where = (
                "bound more than once"
                if attrs_bound.get(target[0]) != 1
                else "from locals it cannot compute again"
            )
            ctx.report(
                MOD_004,
                stmt,
                f"setup() stores the array self.{target[0]} {where}: kept in NNX's __init__ it is module "
                "state, which nnx.eval_shape / nnx.jit cannot build",
                f"compute self.{target[0]} where it is used, or in a property from the class's fields",
            )


def _self_assign(stmt: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """``self.X = value`` on a line of its own -> ``("X", value)``."""
    if (
        type(stmt) is cst.SimpleStatementLine
        and len(stmt.body) == 1
        and type(stmt.body[0]) is cst.Assign
        and len(stmt.body[0].targets) == 1
    ):
        name = self_attr(stmt.body[0].targets[0].target)
        return None if name is None else (name, stmt.body[0].value)
    return None


def _computes_array(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """Whether ``value`` calls into jax or numpy, directly or through a function of the file, for an
    array (not ``int(2 ** np.ceil(...))``, ``x.item()``: a Python value, static as any field)."""
    if type(value) is cst.Call and (
        (type(value.func) is cst.Name and value.func.value in PYTHON_VALUES)
        or (type(value.func) is cst.Attribute and value.func.attr.value in ("item", "tolist"))
    ):
        return False
    for call in calls_in(value):
        names = ctx.qualnames(call.func)
        if any(n.startswith(ARRAY_LIBRARIES) for n in names):
            return True
        helper = ctx.state.module_functions.get(call.func.value) if type(call.func) is cst.Name else None
        if helper is not None and any(
            any(n.startswith(ARRAY_LIBRARIES) for n in ctx.qualnames(c.func)) for c in calls_in(helper)
        ):
            return True
    return False


def self_reads(value: cst.BaseExpression) -> set[str]:
    """The ``X`` of each ``self.X`` ``value`` reads; ``{"self"}`` too when it uses ``self`` otherwise."""
    attrs = [n for n in nodes_of(value, (cst.Attribute,)) if self_attr(n) is not None]
    found = {self_attr(a) or "" for a in attrs}
    uses = sum(1 for n in nodes_of(value, (cst.Name,)) if n.value == "self")  # type: ignore[attr-defined]
    return found | ({"self"} if uses > len(attrs) else set())


def _needs(
    value: cst.BaseExpression, attrs: set[str], bound: dict[str, int], local_reads: dict[str, list[str]]
) -> list[str] | None:
    """The ``setup()`` locals (with those they need, in order) ``value`` reads, when it reads nothing
    but ``attrs`` of ``self``, module names and replayable locals; None otherwise."""
    if self_reads(value) - attrs:
        return None
    needs: list[str] = []
    for name in sorted(names_in(value) - {"self"}):
        if name not in bound:
            continue  # a module name, a builtin, or a comprehension's own
        if name not in local_reads:
            return None
        needs.extend(n for n in [*local_reads[name], name] if n not in needs)
    return needs


def split_properties(
    plan: ClassPlan, setup_body: list[cst.BaseStatement]
) -> tuple[list[cst.BaseStatement], list[cst.FunctionDef]]:
    """The rewritten ``setup()`` body less the statements that become properties, and the properties
    (after ``__init__``, with the statements' comments); a local only they read leaves ``__init__`` too,
    its comments going with its first copy."""
    locals_by_name = {a[0]: s for s in setup_body if (a := single_assign(s)) is not None}
    moved = {
        id(s): (t[0], t[1])
        for s in setup_body
        if (t := _self_assign(s)) is not None
        and t[0] in plan.setup_properties
        and all(n in locals_by_name for n in plan.setup_properties[t[0]])  # else rewritten: stays
    }
    if not moved:
        return setup_body, []
    kept = [s for s in setup_body if id(s) not in moved]
    dropped = {n for name, _ in moved.values() for n in plan.setup_properties[name]}
    while True:  # a local that a statement left in __init__ reads stays, and so do those it reads
        read = set().union(
            *(names_in(s) for s in kept if (a := single_assign(s)) is None or a[0] not in dropped)
        )
        if not read & dropped:
            break
        dropped -= read
    properties: list[cst.FunctionDef] = []
    for stmt in setup_body:
        if id(stmt) not in moved:
            continue
        name, value = moved[id(stmt)]
        replayed = []
        for local in plan.setup_properties[name]:
            lines = _comments(locals_by_name[local]) if local in dropped else []
            replayed.append(locals_by_name[local].with_changes(leading_lines=lines))
            locals_by_name[local] = locals_by_name[local].with_changes(leading_lines=())  # comments once
        properties.append(
            cst.FunctionDef(
                name=cst.Name(name),
                params=cst.Parameters([cst.Param(cst.Name("self"))]),
                body=cst.IndentedBlock([*replayed, cst.SimpleStatementLine([cst.Return(value)])]),
                decorators=[cst.Decorator(cst.Name("property"))],
                leading_lines=[cst.EmptyLine(indent=False), *_comments(stmt)],
            )
        )
    return [s for s in kept if (a := single_assign(s)) is None or a[0] not in dropped], properties


def _comments(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The comment lines above ``stmt`` (its blank lines dropped)."""
    return [line for line in getattr(stmt, "leading_lines", ()) if line.comment is not None]
