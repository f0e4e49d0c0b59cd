"""Reads of what ``init`` returned: ``variables['params']`` -> ``nnx.state(model, nnx.Param)`` (TRAIN_003).

In NNX the initialised variables *are* the model, so a collection of them is ``nnx.state`` of the model
with that collection's Variable type. Used any other way (passed whole to ``jax.tree_util.tree_map``)
the value would silently be the model: that blocks the file's rewrite (TRAIN_008).
"""

from __future__ import annotations

import re

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_003, TRAIN_008
from linen2nnx.migrate.training.planner import STATE_TYPES, Edit, TrainPlanner
from linen2nnx.migrate.training.sharding import partition_spec_key
from linen2nnx.migrate.training.values import string_index

AUTO_NAME = re.compile(r"[A-Z][A-Za-z0-9]*_[0-9]+")  # Linen's `Dense_0`: NNX's attribute is `dense_0`


def plan_subscript(plan: TrainPlanner, node: cst.Subscript) -> None:
    """``variables[<collection>]`` of an initialised model -> ``nnx.state(model, nnx.<Type>)``; a key that
    is a Linen auto-name (``params['Dense_0']``) blocks: the NNX state names the module ``dense_0``."""
    key = string_index(node)
    if key is not None and AUTO_NAME.fullmatch(key):
        plan.block(
            TRAIN_008,
            node,
            f"[{key!r}] reads a variable tree by a Linen auto-name: the NNX state names that module in "
            "snake_case (see the name map)",
            "read the NNX attribute (model.<attr>.kernel) or its snake_case key",
        )
        return
    value = plan.values.value_of(node)
    if value is None or value.kind != "coll":
        return
    var_type = STATE_TYPES.get(value.collection)
    if var_type is None:
        plan.block(
            TRAIN_008,
            node,
            f"collection {value.collection!r} of an initialised model",
            "collect it with nnx.capture / a custom nnx.Variable type",
        )
        return
    plan.note(TRAIN_003, node, f"variables[{value.collection!r}] -> nnx.state(model, nnx.{var_type})")
    plan.edits[node] = Edit(
        lambda updated: cst.parse_expression(f"nnx.state({code(updated.value)}, nnx.{var_type})")
    )  # type: ignore[attr-defined]


def plan_variables_use(plan: TrainPlanner, node: cst.BaseExpression) -> None:
    """What ``init`` returned may be indexed by collection, applied, passed on or returned; used any
    other way it would silently be the NNX model (``jax.tree_util.tree_map(f, variables)``)."""
    value = plan.values.value_of(node)
    if value is None or value.kind != "vars":
        return
    parent = plan.parent(node)
    if isinstance(parent, cst.Subscript) and parent.value is node and string_index(parent) is not None:
        return
    if isinstance(parent, (cst.Return, cst.Assign, cst.AnnAssign)) and parent.value is node:
        return
    if STATE_TYPES.get(partition_spec_key(plan, node) or ""):
        return  # nn.get_partition_spec(variables)['params']: the specs of one collection
    if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = plan.parent(parent)
        if (
            isinstance(call, cst.Call)
            and call.args
            and call.args[0] is parent
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in ("apply", "apply_fn")
        ):
            return
    plan.block(
        TRAIN_008,
        node,
        f"the variables `{code(node)}` of an initialised model used as a whole "
        "(in NNX they are the model itself)",
        "use nnx.state(model, nnx.Param) / nnx.split(model)",
    )
