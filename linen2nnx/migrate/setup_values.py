"""Values ``setup()`` computes from the class's own parameters or variables.

Linen runs ``setup()`` again on every ``apply``, so ``self.scale = jnp.exp(self.log_scale)`` or
``self.wt = self.w.T`` there is recomputed from the parameters being applied. ``__init__`` runs once:
the same line in it computes a plain array from the initial values, which later calls keep using --
other outputs, and no gradient for the parameter. Such a value is a finding that blocks the rewrite;
the fix is to compute it where it is used (``__call__``, or a property).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of, syntax_children
from linen2nnx.migrate.cst_utils import self_attr, self_targets
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.setup_arrays import plan_setup_arrays, report_handed_arrays
from linen2nnx.migrate.sites import ClassPlan

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

VARIABLE_KINDS = ("param", "variable")


def plan_setup_values(ctx: FileContext, plan: ClassPlan) -> None:
    """Findings for the values ``setup()`` computes from parameters, the arrays it computes from the
    configuration that become properties, and arrays handed to classes of the run (setup_arrays.py)."""
    report_frozen_values(ctx, plan)
    plan_setup_arrays(ctx, plan)
    report_handed_arrays(ctx, plan)


def report_frozen_values(ctx: FileContext, plan: ClassPlan) -> None:
    """A finding for each ``self.X = <value>`` of ``setup()`` whose value reads a parameter or variable
    the class creates (through its attribute, a local bound to it, or the creating call itself)."""
    setup = plan.setup
    if setup is None:
        return
    variable_calls = {id(c) for c, s in plan.sites.items() if s.kind in VARIABLE_KINDS}
    variable_attrs = {s.attr for s in plan.sites.values() if s.kind in VARIABLE_KINDS}
    variable_locals: set[str] = set()
    for node in nodes_of(setup.body, (cst.Assign,), opaque=(cst.FunctionDef, cst.Lambda, cst.ClassDef)):
        assert isinstance(node, cst.Assign)
        value = node.value
        parts = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        created = bool(parts) and all(id(part) in variable_calls for part in parts)  # `a, b = (p, p)`
        if created:
            variable_locals |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
        reads = _reads(value, variable_calls, variable_attrs, variable_locals)
        for _, name in self_targets(node):
            if reads and not created:
                ctx.report(
                    MOD_004,
                    node,
                    f"setup() computes self.{name} from {reads}: Linen runs setup() on every apply, NNX's "
                    f"__init__ once, so self.{name} would keep the initial value (and {reads} no gradient)",
                    "compute it where it is used (in __call__, or a property) from the variable",
                )


def _reads(value: cst.BaseExpression, calls: set[int], attrs: set[str], names: set[str]) -> str | None:
    """The variable ``value`` reads, as the source names it; None when it reads none."""
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        if id(node) in calls:
            return "the variable it creates"
        attr = self_attr(node) if isinstance(node, cst.Attribute) else None
        if attr is not None and attr in attrs:
            return f"self.{attr}"
        if isinstance(node, cst.Name) and node.value in names:
            return node.value
        if isinstance(node, (cst.Lambda, cst.FunctionDef)):
            continue  # runs later, when called
        stack.extend(syntax_children(node))
    return None
