"""Rules of Linen API calls, partitioning and lifted transforms (API, PART, XFORM)."""

from __future__ import annotations

from linen2nnx.migrate.findings import Severity
from linen2nnx.migrate.rules.base import Rule

C, U, M = Severity.CONVERTED, Severity.UNSAFE, Severity.MANUAL

API_001 = Rule(
    "L2N-API-001",
    C,
    "flax.linen function re-pointed to the identical flax.nnx function.",
    "nn.relu(x)",
    "nnx.relu(x)",
)
API_002 = Rule(
    "L2N-API-002",
    M,
    "Linen API with no automatic conversion yet.",
    "v = self.scope.get_variable('params', 'w')",
    "# TODO(linen2nnx): L2N-API-002 ... (the class is kept as Linen)",
    blocks_rewrite=True,
)
API_003 = Rule(
    "L2N-API-003",
    U,
    "self.is_initializing() -> False (applied with --unsafe-fixes).",
    "if self.is_initializing(): ...",
    "if False: ...",
)
API_004 = Rule(
    "L2N-API-004",
    C,
    "nn.merge_param(name, attr, arg) -> arg if arg is not None else attr.",
    "d = nn.merge_param('deterministic', self.deterministic, deterministic)",
    "d = deterministic if deterministic is not None else self.deterministic",
)
API_005 = Rule(
    "L2N-API-005",
    C,
    "Pure flax.linen function with no NNX counterpart kept (e.g. with_logical_constraint).",
    "x = nn.with_logical_constraint(x, ('batch', 'embed'))",
    "x = nn.with_logical_constraint(x, ('batch', 'embed'))  # kept: a pure function",
)
API_006 = Rule(
    "L2N-API-006",
    C,
    "A custom RNN cell's initialize_carry(rng, input_shape) -> initialize_carry(input_shape, rngs=None), as nnx.RNN "
    "calls it.",
    "def initialize_carry(self, rng, input_shape): ...",
    "def initialize_carry(self, input_shape, rngs=None): ...",
)
API_007 = Rule(
    "L2N-API-007",
    C,
    "self.is_initializing() at call time guarding a branch that creates nothing (dummy inputs for init, or a "
    "submodule applied only so that init creates its parameters) -> False, as in Linen's apply; so does "
    "self.is_mutable_collection('params') whose if tests only skip updates during init (running statistics).",
    "if self.is_initializing() and targets is None:\n    targets = jnp.zeros(shape)",
    "if False and targets is None:\n    targets = jnp.zeros(shape)",
)
API_008 = Rule(
    "L2N-API-008",
    C,
    "nn.share_scope(self, child) in @nn.compact removed: NNX has no scopes, the child is an attribute, and the "
    "name map sends the names the child creates in the parent's scope to that attribute.",
    "gating = Einsum((2, 4, 8), weight_name='gating')\nnn.share_scope(self, gating)",
    "self.einsum_0 = Einsum((2, 4, 8), weight_name='gating', rngs=rngs)  # in __init__; name map: gating -> einsum_0",
)

PART_001 = Rule(
    "L2N-PART-001",
    C,
    "nn.with_logical_partitioning / nn.with_partitioning -> nnx.with_partitioning. The names become Variable "
    "metadata (out_sharding); with eager sharding (on by default) the NNX model is built under a mesh "
    "(jax.set_mesh), or with no mesh under nnx.use_eager_sharding(False), as the written spec builds it.",
    "nn.with_logical_partitioning(init, ('embed', 'mlp'))",
    "nnx.with_partitioning(init, ('embed', 'mlp'))",
)
PART_002 = Rule(
    "L2N-PART-002",
    C,
    "nn.logical_axis_rules / partitioning.axis_rules / nn.get_partition_spec (outside axis rules) -> the nnx "
    "functions.",
    "with nn.logical_axis_rules(rules): ...",
    "with nnx.logical_axis_rules(rules): ...",
)
PART_003 = Rule(
    "L2N-PART-003",
    M,
    "nn.get_partition_spec inside axis rules: Linen's ignores them, NNX's applies them; the hint gives the recipe.",
    "with nn.logical_axis_rules(rules):\n    spec = nn.get_partition_spec(state)",
    "# TODO(linen2nnx): L2N-PART-003 read the spec under nnx.logical_axis_rules(())",
)
PART_004 = Rule(
    "L2N-PART-004",
    C,
    "A helper that only unboxes LogicallyPartitioned / Partitioned is removable; its calls become their argument.",
    "params = remove_boxes(params)",
    "params = params",
)

XFORM_001 = Rule(
    "L2N-XFORM-001",
    C,
    "nn.scan / nn.remat / nn.vmap of a module class -> nnx.vmap-built stack + nnx.scan / nnx.remat / nnx.vmap at "
    "the call.",
    "Stack = nn.scan(nn.remat(Block), variable_axes={'params': 0}, split_rngs={'params': True}, length=4)",
    "self.layers = nnx.vmap(make_block, ...)(rngs)  # in __init__; applied with nnx.scan",
)
XFORM_002 = Rule(
    "L2N-XFORM-002",
    M,
    "Lifted transform form that is not converted (variable_carry, nested scans, non-literal axes, ...).",
    "nn.scan(Block, variable_carry='counter', ...)",
    "# TODO(linen2nnx): L2N-XFORM-002 variable_carry is not converted",
    blocks_rewrite=True,
)
XFORM_003 = Rule(
    "L2N-XFORM-003",
    C,
    "nn.jit on a method -> nnx.jit on the NNX method (self, which NNX cannot hold static, dropped from "
    "static_argnames / static_argnums / donate_argnums).",
    "@functools.partial(nn.jit, static_argnames=('self', 'last_only'))\ndef __call__(self, x, last_only=False): ...",
    "@functools.partial(nnx.jit, static_argnames=('last_only',))\ndef __call__(self, x, last_only=False): ...",
)
XFORM_004 = Rule(
    "L2N-XFORM-004",
    U,
    "A scan or vmap whose split_rngs NNX cannot follow: a stack leaving a stream unsplit (False: Linen gives "
    "every layer the same key of it; 'dropout' not listed while the block drops out: Linen's train step "
    "raises), where NNX's stack splits every stream; a shared layer's scan with a stream set False (Linen: "
    "one key for every step, NNX: a new key each step) or vmap with a stream set True (Linen: a key per "
    "element, NNX: the layer's one key for all). Weights converted from a checkpoint are unaffected; "
    "initialising from scratch, or training with dropout, differs.",
    "nn.scan(Block, variable_axes={'params': 0}, split_rngs={'params': True}, length=4)  # Block drops out",
    "# TODO: NNX gives each layer its own dropout key; Linen gave all of them one",
)

RULES = (
    API_003,
    API_007,
    API_008,
    API_004,
    PART_001,
    XFORM_001,
    XFORM_002,
    XFORM_003,
    XFORM_004,
    PART_002,
    PART_003,
    PART_004,
    API_006,
    API_005,
    API_001,
    API_002,
)
