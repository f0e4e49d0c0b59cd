"""Rules of the verifier (VERIFY): Linen left in a class the output calls NNX, and a traced model that
does not build.

The verifier reads the migrated output once more (``linen2nnx/migrate/verify.py``) and reports what
the rewrite left behind, so that "converted" means converted. It never rewrites anything: every rule
is ``manual`` and none blocks a rewrite.
"""

from __future__ import annotations

from linen2nnx.migrate.findings import Severity
from linen2nnx.migrate.rules.base import Rule

M = Severity.MANUAL

VERIFY_001 = Rule(
    "L2N-VERIFY-001",
    M,
    "A Linen module (a flax.linen layer or a Linen class) is constructed inside an NNX class (with name=, "
    "without rngs=): it is no NNX submodule.",
    "class Model(nnx.Module):\n    def __init__(self, *, rngs):\n"
    "        self.layers = [Block(4, name=str(i)) for i in range(2)]  # Block is Linen",
    "# TODO(linen2nnx): L2N-VERIFY-001 Block(...) is a Linen module constructed inside NNX class Model ...",
)
VERIFY_002 = Rule(
    "L2N-VERIFY-002",
    M,
    "A class of the run is constructed without the arguments its NNX __init__ requires, or with one it "
    "does not take (a Linen name=).",
    "self.blocks = [Block(cfg, name=str(i)) for i in range(n)]  # Block.__init__(self, cfg, *, rngs)",
    "# TODO(linen2nnx): L2N-VERIFY-002 Block(...) passes name=, which Block.__init__ does not take; ...",
)
VERIFY_003 = Rule(
    "L2N-VERIFY-003",
    M,
    "Linen variables read in an NNX class: `.variables`, or `.apply` / `.init` on a submodule or on self.",
    "w = self.transformer.variables['params']['wte']['embedding'].T\n"
    "return self.lm_head.apply({'params': {'kernel': w}}, h)",
    "# TODO(linen2nnx): L2N-VERIFY-003 self.transformer.variables is Linen API ...",
)
VERIFY_004 = Rule(
    "L2N-VERIFY-004",
    M,
    "Linen Module API left in an NNX class (self.param, self.variable, self.scope, self.make_rng, "
    "self.get_variable, self.is_initializing, ...).",
    "w = self.param('w', init, (4, 4))  # in an nnx.Module",
    "# TODO(linen2nnx): L2N-VERIFY-004 self.param is Linen Module API ...",
)
VERIFY_005 = Rule(
    "L2N-VERIFY-005",
    M,
    "A flax.linen call that is not a pure function (a lifted transform, a partitioning box, ...) left in an "
    "NNX class; pure ones (activations, initializers, with_logical_constraint, ...) are fine.",
    "self.body = nn.remat(Block)(4, rngs=rngs)  # in an nnx.Module",
    "# TODO(linen2nnx): L2N-VERIFY-005 flax.linen.remat is Linen, not a pure function ...",
)
VERIFY_006 = Rule(
    "L2N-VERIFY-006",
    M,
    "NNX submodules held in a plain list / tuple / dict attribute: NNX needs nnx.List / nnx.Dict (a plain "
    "container of modules is static data and fails at construction).",
    "self.layers = [Block(4, rngs=rngs) for _ in range(2)]",
    "self.layers = nnx.List([Block(4, rngs=rngs) for _ in range(2)])",
)
VERIFY_007 = Rule(
    "L2N-VERIFY-007",
    M,
    "An NNX __init__ reads an attribute of self on a line above the one that binds it (a Linen setup() may "
    "read it lazily; __init__ runs in order and fails at construction).",
    "self.out = nnx.Linear(self.width, 3, rngs=rngs)\nself.width = self.h * 2",
    "# TODO(linen2nnx): L2N-VERIFY-007 __init__ reads self.width before a later line binds it",
)
VERIFY_008 = Rule(
    "L2N-VERIFY-008",
    M,
    "An NNX __init__'s parameter default, or a class attribute, reads a name the file does not bind (a field "
    "default repeated from a base of another file, say): Python evaluates it when the class is defined, so the "
    "module fails at import with a NameError.",
    "def __init__(self, remat: str = LayerRemat.LEGACY, *, rngs: nnx.Rngs): ...",
    "# TODO(linen2nnx): L2N-VERIFY-008 the default of remat reads LayerRemat, which this file does not bind",
)
VERIFY_010 = Rule(
    "L2N-VERIFY-010",
    M,
    "`migrate --trace --out-dir`: the NNX model the written spec builds fails to build (nnx.eval_shape) or to "
    "run one eval forward on the example batch; the finding names the exception.",
    "linen2nnx migrate model.py --trace train.py:spec --out-dir nnx/",
    "model.py:12:1: L2N-VERIFY-010 [manual] Model does not build from linen2nnx_spec.py: TypeError: ...",
)

RULES = (
    VERIFY_001,
    VERIFY_002,
    VERIFY_003,
    VERIFY_004,
    VERIFY_005,
    VERIFY_006,
    VERIFY_007,
    VERIFY_008,
    VERIFY_010,
)
