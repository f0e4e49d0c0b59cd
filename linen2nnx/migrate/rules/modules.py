"""Rules of the module pass: classes, built-in layers, sizes and variables (MOD, LAYER, SHAPE, VAR)."""

from __future__ import annotations

from linen2nnx.migrate.findings import Severity
from linen2nnx.migrate.rules.base import Rule

C, U, M = Severity.CONVERTED, Severity.UNSAFE, Severity.MANUAL

MOD_001 = Rule(
    "L2N-MOD-001",
    C,
    "Linen module class rewritten as an nnx.Module with __init__(..., *, rngs).",
    "class MLP(nn.Module):\n    features: int",
    "class MLP(nnx.Module):\n    def __init__(self, features: int, *, rngs: nnx.Rngs): ...",
)
MOD_002 = Rule(
    "L2N-MOD-002",
    C,
    "setup() body moved into __init__.",
    "def setup(self):\n    self.dense = nn.Dense(4)",
    "def __init__(self, in_features, *, rngs):\n    self.dense = nnx.Linear(in_features, 4, rngs=rngs)",
)
MOD_003 = Rule(
    "L2N-MOD-003",
    C,
    "@nn.compact submodules hoisted into __init__ under their Linen auto-names.",
    "@nn.compact\ndef __call__(self, x):\n    return nn.Dense(4)(x)",
    "self.dense_0 = nnx.Linear(in_features, 4, rngs=rngs)  # in __init__\nreturn self.dense_0(x)",
)
MOD_004 = Rule(
    "L2N-MOD-004",
    M,
    "Submodule construction the codemod cannot hoist (loop, branch, call-time value).",
    "for w in x.shape:\n    x = nn.Dense(w)(x)",
    "# TODO(linen2nnx): L2N-MOD-004 ... (the class is kept as Linen)",
    blocks_rewrite=True,
)
MOD_006 = Rule(
    "L2N-MOD-006",
    M,
    "A submodule class the run does not define (e.g. a Linen class from an unmigrated file).",
    "from other_pkg import Block\n...\nx = Block(4)(x)",
    "# TODO(linen2nnx): L2N-MOD-006 Block is not part of this run",
    blocks_rewrite=True,
)
MOD_007 = Rule(
    "L2N-MOD-007",
    M,
    "Class kept as Linen (<Name>Linen) behind nnx.bridge.ToNNX: it runs, but blocking findings stop its rewrite.",
    "class Head(nn.Module):  # with a blocking finding",
    "class HeadLinen(nn.Module): ...\nclass Head(nnx.Module):  # wraps HeadLinen with nnx.bridge.ToNNX",
)
MOD_008 = Rule(
    "L2N-MOD-008",
    M,
    "Submodule built at call time by a module-factory field (`self.conv(...)(x)`, `conv: ModuleDef`) whose "
    "bindings the codemod cannot follow to one kind of layer.",
    "conv: ModuleDef\n...\nx = self.conv(8, (3, 3))(x)",
    "# TODO(linen2nnx): L2N-MOD-008 ... (the class is kept as Linen)",
    blocks_rewrite=True,
)

MOD_009 = Rule(
    "L2N-MOD-009",
    U,
    "Submodule Linen builds under a condition on a call-time value: built in __init__ always, as the traced "
    "call built it, and used under the same condition (applied with --unsafe-fixes).",
    "if input_embds is None:\n    input_embds = nn.Embed(vocab, d)(ids)",
    "self.embed_0 = nnx.Embed(vocab, d, rngs=rngs)  # in __init__\nif input_embds is None:\n"
    "    input_embds = self.embed_0(ids)",
)
MOD_010 = Rule(
    "L2N-MOD-010",
    C,
    "A subclass of a Linen class of the run that inherits the base's setup / @nn.compact build, or calls "
    "super().setup(): its __init__ calls the base's __init__ with the base's fields and size arguments.",
    "class Wide(Base):  # Base builds self.proj in setup()\n    extra: int = 2",
    "def __init__(self, width, extra=2, *, rngs):\n    self.width = width\n    self.extra = extra\n"
    "    super().__init__(width=width, rngs=rngs)",
)

MOD_011 = Rule(
    "L2N-MOD-011",
    C,
    "A Linen dataclass's __post_init__ hook (nothing calls it in an NNX class): its body moved into __init__, "
    "after the fields, without the super().__post_init__() call.",
    "def __post_init__(self):\n    self.half = self.width // 2\n    super().__post_init__()",
    "def __init__(self, width, *, rngs):\n    self.width = width\n    self.half = self.width // 2",
)
MOD_012 = Rule(
    "L2N-MOD-012",
    M,
    "A field whose default is a field specifier of another library (a function returning a "
    "dataclasses.Field, e.g. fiddle's instance_field): a dataclass reads it as the field's default or "
    "default factory, an __init__ default is the specifier object itself.",
    "params_init: WeightInit = instance_field(default_param_init)",
    "# TODO(linen2nnx): L2N-MOD-012 ... (write the default the specifier gives)",
)
MOD_013 = Rule(
    "L2N-MOD-013",
    M,
    "One Linen name built as two different modules, one per branch of a config test, that place a name they "
    "share apart (or whose names this file's map cannot tell): the name map of a class names one build's weights, "
    "so a checkpoint of the other configuration would convert under the wrong names. Modules that name their "
    "weights alike are listed as alternatives under the name instead.",
    "if self.plain:\n    self.norm = Affine()\nelse:\n    self.norm = Swapped()",
    "# TODO(linen2nnx): L2N-MOD-013 norm is built as Affine or as Swapped depending on the config ...",
)
MOD_014 = Rule(
    "L2N-MOD-014",
    C,
    "An array setup() computes from the configuration (a rotary frequency table, a causal mask) becomes a "
    "@property: recomputed where it is read, as Linen's setup() recomputed it on every apply, instead of module "
    "state that nnx.eval_shape / nnx.jit cannot build and no Linen checkpoint holds.",
    "def setup(self):\n    self.inv_freq = 1.0 / (self.base ** (jnp.arange(0, self.dim, 2) / self.dim))",
    "@property\ndef inv_freq(self):\n    return 1.0 / (self.base ** (jnp.arange(0, self.dim, 2) / self.dim))",
)
MOD_015 = Rule(
    "L2N-MOD-015",
    C,
    "Submodule Linen builds only when an optional input is given (`if context is not None:`): built in "
    "__init__ always and used under the same test. A checkpoint from an init that skipped the branch has none "
    "of its weights, which convert names; a later auto-named module of its class is a finding (its Linen name "
    "depends on the test).",
    "if context is not None:\n    x = x + nn.MultiHeadDotProductAttention(num_heads=2, name='cross')(x, context)",
    "self.cross = nnx.MultiHeadAttention(2, in_features, in_kv_features=..., rngs=rngs)  # in __init__\n"
    "if context is not None:\n    x = x + self.cross(x, context)",
)
MOD_016 = Rule(
    "L2N-MOD-016",
    U,
    "A field named like a method of nnx.Module (train, eval, sow, perturb, iter_modules, iter_children, "
    "set_attributes): the NNX class stores it as an attribute of that name, which hides the method "
    "(model.train() raises TypeError); the model computes the same.",
    "class Model(nn.Module):\n    train: bool = False",
    "self.train = train  # TODO: hides nnx.Module.train(); rename the field",
)
MOD_017 = Rule(
    "L2N-MOD-017",
    M,
    "A class decorator the codemod does not know, kept on the NNX class: a Linen module is a dataclass (such a "
    "decorator may read dataclasses.fields(self) or wrap the dataclass __init__, as diffusers' "
    "flax_register_to_config does), an nnx.Module is not; check that it works there, or drop it.",
    "@register_to_config\nclass UNet(nn.Module):\n    features: int = 4",
    "# TODO(linen2nnx): L2N-MOD-017 ...\n@register_to_config\nclass UNet(nnx.Module):",
)
LAYER_001 = Rule(
    "L2N-LAYER-001",
    C,
    "Built-in Linen layer replaced by its NNX counterpart.",
    "nn.Dense(4)",
    "nnx.Linear(in_features, 4, rngs=rngs)",
)
LAYER_002 = Rule(
    "L2N-LAYER-002",
    M,
    "Layer argument with no NNX equivalent.",
    "nn.GRUCell(features=4)",
    "# TODO(linen2nnx): L2N-LAYER-002 nnx.GRUCell has no hn bias",
    blocks_rewrite=True,
)
LAYER_004 = Rule(
    "L2N-LAYER-004",
    C,
    "A subclass of a built-in layer that overrides param to transform a parameter (a weight-standardised "
    "convolution): an NNX subclass whose __call__ runs the base on a clone holding the transformed value.",
    "class StdConv(nn.Conv):\n    def param(self, name, *a, **kw):\n        param = super().param(name, *a, **kw)\n"
    '        if name == "kernel":\n            param = standardize(param)\n        return param',
    "class StdConv(nnx.Conv):\n    def __call__(self, *args, **kwargs):\n        layer = nnx.clone(self)\n"
    "        param = self.kernel[...]\n        param = standardize(param)\n        layer.kernel[...] = param\n"
    "        return nnx.Conv.__call__(layer, *args, **kwargs)",
)
LAYER_003 = Rule(
    "L2N-LAYER-003",
    C,
    "Mode argument (deterministic / use_running_average) moved to call time: of a built-in layer, or of a class "
    "of the run whose __call__ merges it with its field (merge_param).",
    "nn.Dropout(0.1, deterministic=not train)(x)",
    "self.dropout_0 = nnx.Dropout(0.1, rngs=rngs)  # in __init__\nself.dropout_0(x, deterministic=not train)",
)

SHAPE_001 = Rule(
    "L2N-SHAPE-001",
    C,
    "Input feature size taken from the trace of the example batch.",
    "x = x.reshape((x.shape[0], -1))\nx = nn.Dense(10)(x)",
    "self.dense_0 = nnx.Linear(self.hidden * 49, 10, rngs=rngs)  # the traced size, as a config expression",
)
SHAPE_002 = Rule(
    "L2N-SHAPE-002",
    C,
    "New constructor argument for the module's input feature size.",
    "class MLP(nn.Module):\n    features: int",
    "def __init__(self, features: int, *, in_features: int, rngs: nnx.Rngs): ...",
)
SHAPE_003 = Rule(
    "L2N-SHAPE-003",
    M,
    "Input feature size unknown: a required constructor argument was added.",
    "x = some_function(x)\nx = nn.Dense(10)(x)",
    "def __init__(self, *, dense_0_in_features: int, rngs): ...  # TODO(linen2nnx): L2N-SHAPE-003",
)
SHAPE_005 = Rule(
    "L2N-SHAPE-005",
    C,
    "Input feature size its builders pass: a required constructor argument every class of the run that builds this one fills.",
    "class Up(nn.Module):  # Block builds Up(...)\n    @nn.compact\n    def __call__(self, x):\n        return nn.Conv(8, (3, 3))(resize(x))",
    "def __init__(self, *, conv_0_in_features: int, rngs): ...  # Block passes up_conv_0_in_features",
)
SHAPE_004 = Rule(
    "L2N-SHAPE-004",
    U,
    "Input feature size is a traced literal that no config expression explains.",
    "x = nn.Dense(10)(f(x))  # traced: 784 wide",
    "self.dense_0 = nnx.Linear(784, 10, rngs=rngs)  # with --unsafe-fixes",
)

VAR_001 = Rule(
    "L2N-VAR-001",
    C,
    "self.param / self.variable -> an nnx Variable created in __init__.",
    "w = self.param('w', init, (4, 4))",
    "self.w = nnx.Param(init(rngs.params(), (4, 4)))  # in __init__; read as self.w[...]",
)
VAR_002 = Rule(
    "L2N-VAR-002",
    C,
    "self.sow(collection, ...) -> self.sow(nnx.<VariableType>, ...).",
    "self.sow('intermediates', 'h', h)",
    "self.sow(nnx.Intermediate, 'h', h)",
)
VAR_003 = Rule(
    "L2N-VAR-003",
    C,
    "self.make_rng(stream) -> a draw from the module's own nnx.Rngs.",
    "key = self.make_rng('noise')",
    "key = self.rngs.noise()",
)
VAR_004 = Rule(
    "L2N-VAR-004",
    C,
    "A variable Linen creates on the init call (decode cache) or by a put_variable write -> created on the "
    "first NNX call or write; has_variable / get_variable follow.",
    "is_init = self.has_variable('cache', 'k')\nk = self.variable('cache', 'k', jnp.zeros, shape)",
    "is_init = hasattr(self, 'k')\nif not hasattr(self, 'k'): self.k = nnx.Cache(jnp.zeros(shape))",
)
VAR_005 = Rule(
    "L2N-VAR-005",
    C,
    "A parameter read through a submodule's .variables['params'][...] (or a variable of the class's own "
    "self.variables[collection][name]) -> its NNX attribute path.",
    "w = self.transformer.variables['params']['wte']['embedding']",
    "w = self.transformer.wte.embedding[...]",
)
VAR_006 = Rule(
    "L2N-VAR-006",
    C,
    "A built-in layer applied with other weights (.apply({'params': {...}}, x), a tied head) -> the layer's "
    "graphdef merged with those weights.",
    "logits = self.lm_head.apply({'params': {'kernel': emb.T}}, h)",
    "logits = nnx.merge(nnx.graphdef(self.lm_head), nnx.State({'kernel': nnx.Param(emb.T)}))(h)",
)
VAR_007 = Rule(
    "L2N-VAR-007",
    C,
    "A variable created in its input's dtype (x.dtype, the dtype of the inputs Linen's init saw) -> created in "
    "<attr>_dtype, a keyword constructor argument defaulting to float32; a checkpoint in another dtype fails "
    "conversion naming the leaf until it is given. In the dtype= of the built-in layer that made a local "
    "(x = nn.Conv(..., dtype=self.dtype)(x), then reshapes) -> created in that dtype; in a dtype field that "
    "defaults to None, in it when set, else as without dtype=.",
    "probe = self.param('probe', init, (1, 1, d), x.dtype)",
    "self.probe = nnx.Param(init(rngs.params(), (1, 1, d), self.probe_dtype))  # probe_dtype=jax.numpy.float32",
)
VAR_008 = Rule(
    "L2N-VAR-008",
    M,
    "A class whose variables take its input's dtype (L2N-VAR-007) applied to a value cast at call time, or output "
    "by a built-in layer given dtype= (mixed precision): Linen's init creates them in that dtype, NNX in the class's "
    "<attr>_dtype argument, float32 unless it is given.",
    "y = Head()(x.astype(jnp.bfloat16))",
    "self.head = Head(probe_dtype=jnp.bfloat16, ...)  # by hand: the TODO names the argument",
)
VAR_009 = Rule(
    "L2N-VAR-009",
    M,
    "A variable written at call time with no test of initialisation (self.is_initializing(), "
    "self.has_variable(...)): Linen's init runs the call and returns the written value, the NNX constructor "
    "the initial one, so a model built from scratch starts from other state. Applies and converted "
    "checkpoints are exact; the rewrite goes on.",
    "count = self.variable('stats', 'count', jnp.zeros, ())\ncount.value += 1",
    "# TODO(linen2nnx): L2N-VAR-009 ...\nself.count.value += 1  # Linen's init returns count == 1",
)

RULES = (
    MOD_001,
    MOD_002,
    MOD_003,
    MOD_004,
    MOD_006,
    MOD_007,
    MOD_008,
    MOD_009,
    MOD_010,
    MOD_011,
    MOD_012,
    MOD_013,
    MOD_014,
    MOD_015,
    MOD_016,
    MOD_017,
    LAYER_001,
    LAYER_002,
    LAYER_003,
    LAYER_004,
    SHAPE_001,
    SHAPE_002,
    SHAPE_003,
    SHAPE_004,
    SHAPE_005,
    VAR_001,
    VAR_002,
    VAR_003,
    VAR_004,
    VAR_005,
    VAR_006,
    VAR_007,
    VAR_008,
    VAR_009,
)
