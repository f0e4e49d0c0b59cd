"""Sharding and call-time state in training code: the partition-spec handlers and the facts they rest on.

Why each piece exists (each verified against the Linen numerics and shardings on an
8-device mesh, ``tests/test_train_loop_migration.py``):

- **Eager sharding.** A Linen init returns partition *boxes*: metadata only, made real under a mesh
  by ``out_shardings`` / ``nn.unbox``. An NNX Variable with ``out_sharding`` metadata is sharded when
  it is created and raises with no mesh active, or with logical names and no rules to map them (training
  code that hands its rules to ``nn.logical_to_mesh_sharding`` and never activates them). So where the
  training code builds an NNX model whose file (or whose model's file) deals in sharding, it builds it
  under ``nnx.use_eager_sharding(<a mesh and logical axis rules are active>)``: under ``jax.set_mesh`` and
  the rules the params come out sharded (optimizer state included), otherwise they stay metadata, like
  Linen's boxes, until the code's own ``out_shardings`` place them.
- **Partition specs.** ``nn.get_partition_spec`` returns the logical names whatever rules are active;
  ``nnx.get_partition_spec`` maps them through the active ``nnx.logical_axis_rules``. Fed to
  ``nn.logical_to_mesh_sharding(specs, mesh, rules)`` inside the rules, the names would be mapped twice
  (mesh axes looked up as logical names: silently replicated). With the active rules that call is
  ``nnx.get_named_sharding(tree, mesh)``; anywhere else the specs are read with the rules cleared.
- **Call-time state.** A Linen init runs ``__call__``, so variables created there (a decode cache under
  ``if decode:``) exist after init. The migrated NNX model creates them on its first call that meets the
  class's ``state_when`` condition, so an init that Linen runs with that condition true becomes
  construction plus that one call. The condition is decided from the literal keyword arguments of the
  init; when it cannot be decided and the init's call-time collections are read, it is left to a person.
"""

from __future__ import annotations

import ast

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.rules.training import TRAIN_008, TRAIN_013
from linen2nnx.migrate.training.exprs import argument
from linen2nnx.migrate.training.planner import STATE_TYPES, Edit, TrainPlanner
from linen2nnx.migrate.training.values import string_index

# a training file that mentions any of these deals in sharding: its models may carry partition metadata
SHARDING_HINTS = (
    "logical_axis_rules",
    "get_partition_spec",
    "logical_to_mesh",
    "partitioning",
    "jax.sharding",
    "set_mesh",
    "NamedSharding",
    "PartitionSpec",
    "unbox",
)
# a model file that mentions any of these may give its weights sharding names (partition metadata)
METADATA_HINTS = ("partitioning", "PARTITION_NAME", "with_axes", "Partitioned")
ACTIVE_RULES = "flax.core.spmd.get_logical_axis_rules()"
EAGER_GUARD = f"nnx.use_eager_sharding(not jax.sharding.get_abstract_mesh().empty and bool({ACTIVE_RULES}))"
NO_RULES = "nnx.logical_axis_rules(())"
# readers of the active logical axis rules (one function under several names)
RULES_READERS = frozenset(
    {
        "flax.linen.get_logical_axis_rules",
        "flax.linen.spmd.get_logical_axis_rules",
        "flax.core.spmd.get_logical_axis_rules",
        "flax.linen.partitioning.get_axis_rules",
    }
)
LOGICAL_TO_MESH = frozenset(
    {
        "flax.linen.logical_to_mesh_sharding",
        "flax.linen.spmd.logical_to_mesh_sharding",
        "flax.linen.partitioning.logical_to_mesh_sharding",
    }
)
PARTITION_SPEC = frozenset({"flax.nnx.get_partition_spec", "flax.nnx.spmd.get_partition_spec"})


def uses_sharding(source: str) -> bool:
    """The file deals in sharding (see ``SHARDING_HINTS``)."""
    return any(h in source for h in SHARDING_HINTS)


def gives_sharding_names(source: str) -> bool:
    """The file's modules may carry partition metadata (see ``METADATA_HINTS``): a training file of another
    file that builds one builds it under the eager guard too, though its own text names no sharding."""
    return any(h in source for h in METADATA_HINTS)


def decide(condition: str, known: dict[str, object]) -> bool | None:
    """Evaluate a ``state_when`` condition (``decode``, ``not train and decode``) with the parameters in
    ``known``; None when it depends on anything else. A tiny evaluator: the condition is user source,
    never executed."""
    try:
        tree = ast.parse(condition, mode="eval").body
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in known:
                return known[node.id]
            raise LookupError(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.BoolOp):  # one decided operand may decide the whole (False and ?)
            is_and, unknown = isinstance(node.op, ast.And), False
            for value in node.values:
                try:
                    if bool(ev(value)) is not is_and:
                        return not is_and
                except LookupError:
                    unknown = True
            if unknown:
                raise LookupError("operand")
            return is_and
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "bool"
            and len(node.args) == 1
            and not node.keywords
        ):
            return bool(ev(node.args[0]))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = ev(node.left), ev(node.comparators[0])
            op = node.ops[0]
            if isinstance(op, (ast.Eq, ast.Is)):
                return left == right
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return left != right
        raise LookupError(ast.dump(node))

    try:
        return bool(ev(tree))
    except LookupError:
        return None


def literal(source: str) -> tuple[bool, object]:
    """``True`` / ``False`` / ``None`` / numbers / strings -> (True, value); anything else (False, None)."""
    try:
        return True, ast.literal_eval(source)
    except (ValueError, SyntaxError):
        return False, None


def plan_partition_spec(plan: TrainPlanner, call: cst.Call) -> None:
    """``nnx.get_partition_spec(x)`` (the module codemod's spelling of ``nn.get_partition_spec``) where
    Linen read logical names: see this module's docstring."""
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return
    arg = call.args[0].value
    holder = plan.parent(call)
    outer = plan.parent(holder) if isinstance(holder, cst.Arg) and holder.keyword is None else None
    if (
        isinstance(outer, cst.Call)
        and outer.args
        and outer.args[0] is holder
        and plan.values.qualnames(outer.func) & LOGICAL_TO_MESH
    ):
        mesh = argument(outer, 1, "mesh")
        rules = argument(outer, 2, "rules")
        if mesh is not None and rules is not None and active_rules(plan, rules) and len(outer.args) == 3:
            plan.note(
                TRAIN_013,
                outer,
                f"{code(outer.func)}({code(call)}, {code(mesh)}, <the active rules>) "
                f"-> nnx.get_named_sharding({code(arg)}, {code(mesh)})",
            )

            def named(updated: cst.CSTNode) -> cst.CSTNode:
                spec_arg = updated.args[0].value.args[0].value  # type: ignore[attr-defined]
                mesh_arg = next(
                    a.value
                    for i, a in enumerate(updated.args)  # type: ignore[attr-defined]
                    if (a.keyword is None and i == 1) or (a.keyword and a.keyword.value == "mesh")
                )
                return cst.parse_expression(f"nnx.get_named_sharding({code(spec_arg)}, {code(mesh_arg)})")

            plan.edits[outer] = Edit(named)
            return
        logical_specs(plan, call, f"`{code(outer.func)}` maps the specs of {code(arg)} through its own rules")
        return
    value = plan.values.value_of(arg)
    if value is None or value.kind not in ("vars", "coll", "ts"):
        return  # not a value of the training code: the module codemod's conversion stands
    if value.kind == "vars":
        key = string_index(holder) if isinstance(holder, cst.Subscript) and holder.value is call else None
        var_type = STATE_TYPES.get(key or "")
        if var_type is None:
            return  # the variables used whole: reported where they are used
        plan.edits[holder] = Edit(
            lambda updated, t=var_type: cst.parse_expression(  # type: ignore[misc]
                f"nnx.get_partition_spec(nnx.state({code(updated.value.args[0].value)}, nnx.{t}))"
            )
        )  # type: ignore[attr-defined]
    logical_specs(plan, call, f"the partition specs of {code(arg)}")


def logical_specs(plan: TrainPlanner, call: cst.Call, what: str) -> None:
    """Run ``call``'s statement under ``nnx.logical_axis_rules(())``, so that the specs are the logical
    names Linen's ``get_partition_spec`` returns, whatever rules the caller made active."""
    stmt = plan.insertable(call)
    if stmt is None:
        plan.block(
            TRAIN_008,
            call,
            f"{what}: Linen's are logical names whatever rules are active, "
            "nnx.get_partition_spec applies the active ones",
            f"read them under `with {NO_RULES}:`",
        )
        return
    if _under_no_rules(plan, stmt):
        return  # already read with the rules cleared (an earlier run's guard, or the author's)
    guards = plan.wrap.setdefault(stmt, [])
    if NO_RULES not in guards:
        guards.insert(0, NO_RULES)
    plan.note(
        TRAIN_013,
        call,
        f"{what}: read under `with {NO_RULES}:` (Linen's partition specs are "
        "the logical names whatever rules are active)",
    )


def _under_no_rules(plan: TrainPlanner, stmt: cst.CSTNode) -> bool:
    """Is ``stmt`` inside a ``with nnx.logical_axis_rules(()):`` of its own function?"""
    cur = plan.parent(stmt)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(cur, cst.With) and any(code(item.item) == NO_RULES for item in cur.items):
            return True
        cur = plan.parent(cur)
    return False


def active_rules(plan: TrainPlanner, node: cst.BaseExpression) -> bool:
    """``nn.get_logical_axis_rules()``, or the one name bound to it (``mesh, rules = ..., ...`` too)."""
    if isinstance(node, cst.Name):
        refs = plan.values.referents(node)
        if len(refs) != 1:
            return False
        bound = plan.values.binding_value(refs[0]) or unpacked(plan, refs[0].node)
        if bound is None or plan.function_of(bound) is not plan.function_of(node):
            return False
        node = bound
    return (
        isinstance(node, cst.Call)
        and not node.args
        and bool(plan.values.qualnames(node.func) & RULES_READERS)
    )


def unpacked(plan: TrainPlanner, target: cst.CSTNode) -> cst.BaseExpression | None:
    """``a, b = x, y``: the ``y`` that the target ``b`` is bound to."""
    element = plan.parent(target)
    pattern = plan.parent(element) if isinstance(element, cst.Element) else None
    assign_target = plan.parent(pattern) if isinstance(pattern, cst.Tuple) else None
    assign = plan.parent(assign_target) if isinstance(assign_target, cst.AssignTarget) else None
    if not (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.value, cst.Tuple)
        and len(assign.value.elements) == len(pattern.elements)
    ):  # type: ignore[union-attr]
        return None
    index = next(i for i, e in enumerate(pattern.elements) if e is element)  # type: ignore[union-attr]
    value = assign.value.elements[index]
    return None if isinstance(value, cst.StarredElement) else value.value


def partition_spec_key(plan: TrainPlanner, node: cst.CSTNode) -> str | None:
    """``nnx.get_partition_spec(<node>)['params']`` -> ``'params'``."""
    arg = plan.parent(node)
    spec = plan.parent(arg) if isinstance(arg, cst.Arg) and arg.keyword is None and not arg.star else None
    if not (
        isinstance(spec, cst.Call)
        and len(spec.args) == 1
        and plan.values.qualnames(spec.func) & PARTITION_SPEC
    ):
        return None
    sub = plan.parent(spec)
    return string_index(sub) if isinstance(sub, cst.Subscript) and sub.value is spec else None
