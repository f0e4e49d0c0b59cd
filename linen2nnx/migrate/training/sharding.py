"""What the training codemod needs to know about sharding and call-time state (pure helpers, no planning).

Why each piece exists (reference §5; each verified against the Linen numerics and shardings on an
8-device mesh, ``tests/test_train_loop_migration.py``):

- **Eager sharding.** A Linen init returns partition *boxes*: metadata only, made real under a mesh
  by ``out_shardings`` / ``nn.unbox``. An NNX Variable with ``out_sharding`` metadata is sharded when
  it is created and raises with no mesh active. So where the training code builds an NNX model whose
  file deals in sharding, it builds it under ``nnx.use_eager_sharding(<a mesh is active>)``: under
  ``jax.set_mesh`` the params come out sharded (optimizer state included), with no mesh they stay
  metadata, like Linen's boxes.
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

# a training file that mentions any of these deals in sharding: its models may carry partition metadata
SHARDING_HINTS = ("logical_axis_rules", "get_partition_spec", "logical_to_mesh", "partitioning", "jax.sharding",
                  "set_mesh", "NamedSharding", "PartitionSpec", "unbox")
EAGER_GUARD = "nnx.use_eager_sharding(not jax.sharding.get_abstract_mesh().empty)"
NO_RULES = "nnx.logical_axis_rules(())"
# readers of the active logical axis rules (one function under several names)
RULES_READERS = frozenset({"flax.linen.get_logical_axis_rules", "flax.linen.spmd.get_logical_axis_rules",
                           "flax.core.spmd.get_logical_axis_rules", "flax.linen.partitioning.get_axis_rules"})
LOGICAL_TO_MESH = frozenset({"flax.linen.logical_to_mesh_sharding", "flax.linen.spmd.logical_to_mesh_sharding",
                             "flax.linen.partitioning.logical_to_mesh_sharding"})
PARTITION_SPEC = frozenset({"flax.nnx.get_partition_spec", "flax.nnx.spmd.get_partition_spec"})


def uses_sharding(source: str) -> bool:
    return any(h in source for h in SHARDING_HINTS)


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
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool" \
                and len(node.args) == 1 and not node.keywords:
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
