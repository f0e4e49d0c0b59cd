"""A Linen class's dataclass fields, and what kind of value each holds.

The fields become ``__init__``'s parameters (a base class's first, as the dataclass orders them);
an activation field (``act: Callable = nn.relu``, or one every caller binds to an activation) keeps
the feature size through ``self.act(x)``; an RNN cell is sized by its carry; a field named ``rngs``
clashes with NNX's constructor argument and is a finding.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.elementwise import setup_activations
from linen2nnx.migrate.kw_only import is_kw_only_marker
from linen2nnx.migrate.linen_api import feature_preserving_functions
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import LINEN_BASES, ClassPlan, Field


def class_fields(ctx: FileContext, node: cst.ClassDef) -> list[Field]:
    """The dataclass fields of ``node``, after those of its Linen base classes."""
    fields: list[Field] = []
    for base in node.bases:  # Linen base classes (this file's or another's) contribute their fields first
        base_plan = ctx.user_class_of(base.value)
        if base_plan is not None:
            fields.extend(base_plan.fields)
    kw_only = False  # past this class's `_: dataclasses.KW_ONLY`: its later fields are keyword-only
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    if "ClassVar" in code(small.annotation.annotation):
                        continue
                    if is_kw_only_marker(small):
                        kw_only = True
                        continue
                    fields = [f for f in fields if f.name != small.target.value]
                    fields.append(dataclasses.replace(ctx.dataclass_field(small), kw_only=kw_only))
    return fields


def plan_field_kinds(ctx: FileContext, plan: ClassPlan, node: cst.ClassDef) -> None:
    """Whether the class is an RNN cell; which fields are activations (keep the feature size)."""
    plan.is_cell = any(
        LINEN_BASES.get(q) == "nnx.RNNCellBase" for base in node.bases for q in ctx.qualnames(base.value)
    ) or any(getattr(ctx.user_class_of(base.value), "is_cell", False) for base in node.bases)
    for stmt in node.body.body:  # `act: Callable = nn.relu`: calling self.act keeps the feature size
        for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
            if (
                isinstance(small, cst.AnnAssign)
                and isinstance(small.target, cst.Name)
                and small.value is not None
                and ctx.qualnames(small.value) & feature_preserving_functions()
            ):
                plan.activation_fields.add(small.target.value)
    # `self.act = ACT2FN[self.config.act]` in setup: calling self.act keeps the feature size too
    plan.activation_fields |= setup_activations(ctx, node, set(plan.field_names))
    calls = calls_in(node.body)
    apis = [ctx.self_call(c) for c in calls]  # `self.<api>(...)` of each call, once
    called = set(apis) - {None}
    plan.put_calls = [c for c, api in zip(calls, apis) if api == "put_variable"]
    for f in plan.fields:  # `act: Callable` with no default, called: what the callers bind it to
        if (
            f.default is None
            and f.name in called
            and ctx.field_bindings.preserves_features(plan.name, f.name)
        ):
            plan.activation_fields.add(f.name)
    if "rngs" in plan.field_names:
        ctx.report(
            MOD_004,
            node,
            f"{plan.name} has a field named `rngs`, which NNX constructors reserve for the nnx.Rngs",
            "rename the field before migrating",
        )
