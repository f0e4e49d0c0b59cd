"""Rule catalogue: stable ids, one-line summaries and fix applicability, as data.

Ids never change meaning once published; ``docs/rules.md`` is generated from this table.
"""

from __future__ import annotations

import dataclasses

from linen2nnx.migrate.findings import Severity


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    summary: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule("L2N-MOD-001", Severity.CONVERTED, "Linen module class rewritten as an nnx.Module with __init__(..., *, rngs)."),
        Rule("L2N-MOD-002", Severity.CONVERTED, "setup() body moved into __init__."),
        Rule("L2N-MOD-003", Severity.CONVERTED, "@nn.compact submodules hoisted into __init__ under their Linen auto-names."),
        Rule("L2N-MOD-004", Severity.MANUAL, "Submodule construction the codemod cannot hoist (loop, branch, call-time value)."),
        Rule("L2N-MOD-006", Severity.MANUAL, "A submodule class the run does not define (e.g. a Linen class from an unmigrated file)."),
        Rule("L2N-MOD-007", Severity.MANUAL, "Class kept as Linen (<Name>Linen) behind nnx.bridge.ToNNX: it runs, but blocking findings stop its rewrite."),
        Rule("L2N-MOD-008", Severity.MANUAL, "Submodule built at call time by a module-factory field (`self.conv(...)(x)`, `conv: ModuleDef`) whose bindings the codemod cannot follow to one kind of layer."),
        Rule("L2N-LAYER-001", Severity.CONVERTED, "Built-in Linen layer replaced by its NNX counterpart."),
        Rule("L2N-LAYER-002", Severity.MANUAL, "Layer argument with no NNX equivalent."),
        Rule("L2N-LAYER-003", Severity.CONVERTED, "Mode argument (deterministic / use_running_average) moved to call time."),
        Rule("L2N-SHAPE-001", Severity.CONVERTED, "Input feature size taken from the trace of the example batch."),
        Rule("L2N-SHAPE-002", Severity.CONVERTED, "New constructor argument for the module's input feature size."),
        Rule("L2N-SHAPE-003", Severity.MANUAL, "Input feature size unknown: a required constructor argument was added."),
        Rule("L2N-SHAPE-004", Severity.UNSAFE, "Input feature size is a traced literal that no config expression explains."),
        Rule("L2N-VAR-001", Severity.CONVERTED, "self.param / self.variable -> an nnx Variable created in __init__."),
        Rule("L2N-VAR-002", Severity.CONVERTED, "self.sow(collection, ...) -> self.sow(nnx.<VariableType>, ...)."),
        Rule("L2N-VAR-003", Severity.CONVERTED, "self.make_rng(stream) -> a draw from the module's own nnx.Rngs."),
        Rule("L2N-VAR-004", Severity.CONVERTED, "A variable Linen creates on the init call (decode cache) -> created on the first NNX call; has_variable / get_variable follow."),
        Rule("L2N-API-003", Severity.UNSAFE, "self.is_initializing() -> False (applied with --unsafe-fixes)."),
        Rule("L2N-API-004", Severity.CONVERTED, "nn.merge_param(name, attr, arg) -> arg if arg is not None else attr."),
        Rule("L2N-PART-001", Severity.CONVERTED, "nn.with_logical_partitioning / nn.with_partitioning -> nnx.with_partitioning."),
        Rule("L2N-XFORM-001", Severity.CONVERTED, "nn.scan / nn.remat / nn.vmap of a module class -> nnx.vmap-built stack + nnx.scan / nnx.remat / nnx.vmap at the call."),
        Rule("L2N-XFORM-002", Severity.MANUAL, "Lifted transform form that is not converted (variable_carry, nested scans, non-literal axes, ...)."),
        Rule("L2N-PART-002", Severity.CONVERTED, "nn.logical_axis_rules / partitioning.axis_rules / nn.get_partition_spec (outside axis rules) -> the nnx functions."),
        Rule("L2N-PART-003", Severity.MANUAL, "nn.get_partition_spec inside axis rules: Linen's ignores them, NNX's applies them; the hint gives the recipe."),
        Rule("L2N-PART-004", Severity.CONVERTED, "A helper that only unboxes LogicallyPartitioned / Partitioned is removable; its calls become their argument."),
        Rule("L2N-API-006", Severity.CONVERTED, "A custom RNN cell's initialize_carry(rng, input_shape) -> initialize_carry(input_shape, rngs=None), as nnx.RNN calls it."),
        Rule("L2N-API-005", Severity.CONVERTED, "Pure flax.linen function with no NNX counterpart kept (e.g. with_logical_constraint)."),
        Rule("L2N-API-001", Severity.CONVERTED, "flax.linen function re-pointed to the identical flax.nnx function."),
        Rule("L2N-API-002", Severity.MANUAL, "Linen API with no automatic conversion yet."),
        Rule("L2N-TRAIN-001", Severity.CONVERTED, "Linen module built outside a module -> functools.partial(Class, ...): a constructor that init completes with rngs and input sizes."),
        Rule("L2N-TRAIN-002", Severity.CONVERTED, "module.init(rngs, x, ...) -> constructing the NNX module (rngs=nnx.Rngs(...), input sizes from x)."),
        Rule("L2N-TRAIN-003", Severity.CONVERTED, "variables['params'] / variables['batch_stats'] of an initialised model -> nnx.state(model, nnx.Param / nnx.BatchStat)."),
        Rule("L2N-TRAIN-004", Severity.CONVERTED, "TrainState.create(...) -> nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param))): the state is the (graphdef, state) pair jax.jit steps take."),
        Rule("L2N-TRAIN-005", Severity.CONVERTED, "state.apply_fn / module.apply -> a call of the NNX model (a merged copy for given params; rngs= -> nnx.reseed, mutable= -> nnx.state)."),
        Rule("L2N-TRAIN-006", Severity.CONVERTED, "state.apply_gradients / state.replace -> optimizer.update(model, grads) / nnx.update(model, ...), the state re-split."),
        Rule("L2N-TRAIN-007", Severity.CONVERTED, "Train-state fields (params, batch_stats, step, tx) -> read from `model, optimizer = nnx.merge(*state)`."),
        Rule("L2N-TRAIN-008", Severity.MANUAL, "Training-code construct with no automatic conversion; the file's training code is left in its Linen form."),
        Rule("L2N-TRAIN-009", Severity.MANUAL, "Linen init / apply on a model this run does not migrate, or whose variables are not in scope."),
        Rule("L2N-TRAIN-010", Severity.MANUAL, "A constructor argument of the migrated class that the init call cannot supply."),
        Rule("L2N-TRAIN-011", Severity.CONVERTED, "jax.eval_shape(functools.partial(model.init, ...), rng, *x) -> jax.eval_shape of a function that builds the NNX model (and makes the call that creates its call-time state, e.g. a decode cache): the abstract model."),
        Rule("L2N-TRAIN-012", Severity.CONVERTED, "module.apply({'params': p, 'cache': c}, x, mutable=['cache']) with the collections passed in -> the abstract NNX model (nnx.eval_shape) updated with those States and called; mutable collections read back with nnx.state."),
        Rule("L2N-TRAIN-013", Severity.CONVERTED, "Partition specs of training values: logical_to_mesh_sharding(get_partition_spec(x), mesh, <active rules>) -> nnx.get_named_sharding(x, mesh); other specs read under nnx.logical_axis_rules(()) (Linen's are logical names whatever rules are active)."),
        Rule("L2N-TRAIN-014", Severity.CONVERTED, "An NNX model built by training code of a file that deals in sharding is built under nnx.use_eager_sharding(<a mesh is active>): sharded under jax.set_mesh, metadata only without a mesh (like Linen's boxes)."),
        Rule("L2N-TRAIN-015", Severity.MANUAL, "An init whose call-time state (e.g. a decode cache) NNX creates on a later call, where the codemod cannot tell whether Linen's init created it; the file's training code is left in its Linen form."),
        Rule("L2N-IO-001", Severity.ERROR, "File could not be parsed (syntax error); left untouched."),
        Rule("L2N-IO-002", Severity.ERROR, "File could not be decoded as text; left untouched."),
        Rule("L2N-IO-003", Severity.ERROR, "Output could not be written; nothing partial was left."),
        Rule("L2N-IO-004", Severity.ERROR, "Internal error while migrating this file; left untouched."),
    )
}


def rule(rule_id: str) -> Rule:
    return RULES[rule_id]


def render_rules_markdown() -> str:
    """``docs/rules.md``, generated from :data:`RULES` (``python -m linen2nnx.migrate.rules``)."""
    lines = [
        "# Migration rules",
        "",
        "Generated from `linen2nnx/migrate/rules/__init__.py` by `python -m linen2nnx.migrate.rules`; do not edit.",
        "",
        "Severity: `converted` (rewritten, behaviour preserved), `unsafe` (rewritten under a stated assumption),",
        "`manual` (not rewritten; an inline `# TODO(linen2nnx): RULE` marks the spot), `error` (file untouched).",
        "",
        "| id | severity | what it means |",
        "|---|---|---|",
    ]
    lines += [f"| `{r.id}` | {r.severity.value} | {r.summary} |" for r in RULES.values()]
    return "\n".join(lines) + "\n"
