"""Rules of the training-code pass (TRAIN): init, TrainState, apply, state reads, eval_shape, sharding."""

from __future__ import annotations

from linen2nnx.migrate.findings import Severity
from linen2nnx.migrate.rules.base import Rule

C, M = Severity.CONVERTED, Severity.MANUAL

TRAIN_001 = Rule(
    "L2N-TRAIN-001",
    C,
    "Linen module built outside a module -> functools.partial(Class, ...): a constructor that init completes "
    "with rngs and input sizes.",
    "model = MLP(features=4)",
    "model = functools.partial(MLP, features=4)",
)
TRAIN_002 = Rule(
    "L2N-TRAIN-002",
    C,
    "module.init(rngs, x, ...) -> constructing the NNX module (rngs=nnx.Rngs(...), input sizes from x).",
    "variables = model.init(key, x)",
    "model = model(in_features=x.shape[-1], rngs=nnx.Rngs(key))",
)
TRAIN_003 = Rule(
    "L2N-TRAIN-003",
    C,
    "variables['params'] / variables['batch_stats'] of an initialised model -> nnx.state(model, nnx.Param / "
    "nnx.BatchStat).",
    "params = variables['params']",
    "params = nnx.state(model, nnx.Param)",
)
TRAIN_004 = Rule(
    "L2N-TRAIN-004",
    C,
    "TrainState.create(...) -> nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param))): the state is the "
    "(graphdef, state) pair jax.jit steps take.",
    "state = TrainState.create(apply_fn=model.apply, params=params, tx=tx)",
    "state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))",
)
TRAIN_005 = Rule(
    "L2N-TRAIN-005",
    C,
    "state.apply_fn / module.apply -> a call of the NNX model (a merged copy for given params, and for a "
    "model that may sow, whose NNX sow would keep the values Linen drops; rngs= -> nnx.reseed, mutable= -> "
    "nnx.state).",
    "logits = state.apply_fn({'params': params}, x)",
    "logits = model(x)",
)
TRAIN_006 = Rule(
    "L2N-TRAIN-006",
    C,
    "state.apply_gradients / state.replace -> optimizer.update(model, grads) / nnx.update(model, ...), the state "
    "re-split.",
    "state = state.apply_gradients(grads=grads)",
    "optimizer.update(model, grads)\nstate = nnx.split((model, optimizer))",
)
TRAIN_007 = Rule(
    "L2N-TRAIN-007",
    C,
    "Train-state fields (params, batch_stats, step, tx) -> read from `model, optimizer = nnx.merge(*state, "
    "copy=True)` (a copy: Linen's state is a value an update never changes); the step as int32, Linen's type.",
    "step = state.step",
    'model, optimizer = nnx.merge(*state, copy=True)\nstep = optimizer.step[...].astype("int32")',
)
TRAIN_008 = Rule(
    "L2N-TRAIN-008",
    M,
    "Training-code construct with no automatic conversion; the file's training code is left in its Linen form.",
    "class MyState(TrainState):\n    ema: Any",
    "# TODO(linen2nnx): L2N-TRAIN-008 a custom TrainState field",
    blocks_rewrite=True,
)
TRAIN_009 = Rule(
    "L2N-TRAIN-009",
    M,
    "Linen init / apply on a model this run does not migrate, whose variables are not in scope, or that is "
    "another instance than the one whose init made them (its constructor arguments would be lost).",
    "y = other_model.apply({'params': p}, x)",
    "# TODO(linen2nnx): L2N-TRAIN-009 a Linen apply on params of unknown origin",
    blocks_rewrite=True,
)
TRAIN_010 = Rule(
    "L2N-TRAIN-010",
    M,
    "A constructor argument of the migrated class that the init call cannot supply.",
    "variables = model.init(key, x)  # the NNX class also needs dense_0_in_features",
    "# TODO(linen2nnx): L2N-TRAIN-010 pass dense_0_in_features=... where the module is built",
)
TRAIN_011 = Rule(
    "L2N-TRAIN-011",
    C,
    "jax.eval_shape(functools.partial(model.init, ...), rng, *x) -> jax.eval_shape of a function that builds the "
    "NNX model (and makes the call that creates its call-time state, e.g. a decode cache): the abstract model.",
    "abstract = jax.eval_shape(functools.partial(model.init, train=False), key, x)",
    "abstract = nnx.eval_shape(lambda: model(in_features=..., rngs=nnx.Rngs(key)))",
)
TRAIN_012 = Rule(
    "L2N-TRAIN-012",
    C,
    "module.apply({'params': p, 'cache': c}, x, mutable=['cache']) with the collections passed in -> the "
    "abstract NNX model (nnx.eval_shape) updated with those States and called; mutable collections read back "
    "with nnx.state.",
    "y, vars = model.apply({'params': p, 'cache': c}, x, mutable=['cache'])",
    "nnx.update(m, p, c)\ny = m(x)\nvars = {'cache': nnx.state(m, nnx.Cache)}",
)
TRAIN_013 = Rule(
    "L2N-TRAIN-013",
    C,
    "Partition specs of training values: logical_to_mesh_sharding(get_partition_spec(x), mesh, <active rules>) "
    "-> nnx.get_named_sharding(x, mesh); other specs read under nnx.logical_axis_rules(()) (Linen's are logical "
    "names whatever rules are active).",
    "shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(state), mesh, rules)",
    "shardings = nnx.get_named_sharding(state, mesh)",
)
TRAIN_014 = Rule(
    "L2N-TRAIN-014",
    C,
    "An NNX model built by training code of a file that deals in sharding, or of a model from a file that "
    "names partitions, is built under nnx.use_eager_sharding(<a mesh and logical axis rules are active>): "
    "sharded under jax.set_mesh and the rules, metadata only otherwise (like Linen's boxes, which the code's "
    "own out_shardings place).",
    "variables = model.init(key, x)",
    "with nnx.use_eager_sharding(<a mesh and rules are active>):\n    model = model(rngs=nnx.Rngs(key))",
)
TRAIN_015 = Rule(
    "L2N-TRAIN-015",
    M,
    "An init whose call-time state (e.g. a decode cache) NNX creates on a later call, where the codemod cannot "
    "tell whether Linen's init created it; the file's training code is left in its Linen form.",
    "variables = model.init(key, x, decode=flag)",
    "# TODO(linen2nnx): L2N-TRAIN-015 whether this init creates the cache is not known",
    blocks_rewrite=True,
)

RULES = (
    TRAIN_001,
    TRAIN_002,
    TRAIN_003,
    TRAIN_004,
    TRAIN_005,
    TRAIN_006,
    TRAIN_007,
    TRAIN_008,
    TRAIN_009,
    TRAIN_010,
    TRAIN_011,
    TRAIN_012,
    TRAIN_013,
    TRAIN_014,
    TRAIN_015,
)
