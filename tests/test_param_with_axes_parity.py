"""``partitioning.param_with_axes`` (T5X / flaxformer) migrated: same outputs, losses and gradients
with the Linen weights, every NNX Param carrying the logical names Linen records in its
``params_axes`` collection, and a Linen variables dict holding that collection converted through the
checkpoint converter, which reads ``params`` and leaves ``params_axes`` out, saying so.
"""

import jax
import numpy as np
from fixture_parity import assert_parity, build
from flax import nnx
from flax.linen import partitioning as nn_partitioning

from linen2nnx.checkpoint_convert.api import convert_tree
from linen2nnx.checkpoint_convert.read import AXES_IGNORED
from linen2nnx.equivalence import perturbed
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.spec import LinenSide, ModelPair

CASE = "param_with_axes"


def _x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)


def test_outputs_and_gradients_match(tmp_path):
    linen_mod, nnx_mod, result, map_path = build(CASE, tmp_path)
    assert not [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    assert "param_with_axes(" not in result.output  # the module-level alias stays: another file may import it
    assert_parity(linen_mod.Model(), lambda rngs: nnx_mod.Model(in_features=5, rngs=rngs), _x(), map_path)


def test_sharding_metadata_is_linens_axes(tmp_path):
    linen_mod, nnx_mod, _, _ = build(CASE, tmp_path)
    variables = linen_mod.Model().init(jax.random.key(0), _x())
    linen_axes = nn_partitioning.get_axis_names(variables["params_axes"])
    with nnx.use_eager_sharding(False):  # no mesh here: the names are kept as metadata only
        model = nnx_mod.Model(in_features=5, rngs=nnx.Rngs(0))
    nnx_axes = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    pairs = [
        (("MlpBlock_0", "kernel"), ("mlp_block_0", "kernel")),
        (("MlpBlock_0", "bias"), ("mlp_block_0", "bias")),
        (("LayerNorm_0", "scale"), ("layer_norm_0", "scale")),
    ]
    for (linen_parent, name), (nnx_parent, attr) in pairs:
        expected = linen_axes[linen_parent][name]
        assert nnx_axes[nnx_parent][attr].get_value() == expected
        assert getattr(getattr(model, nnx_parent), attr).out_sharding == tuple(expected)
    assert linen_axes["MlpBlock_0"]["kernel"] == jax.sharding.PartitionSpec("embed", "mlp")


def test_checkpoint_with_params_axes_converts(tmp_path):
    linen_mod, nnx_mod, _, map_path = build(CASE, tmp_path)
    side = LinenSide(
        model=linen_mod.Model(),
        batch={"x": _x()},
        loss=lambda out, b: (out**2).mean(),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = side.init_variables()
    assert "params_axes" in variables
    variables = {**variables, "params": perturbed({"params": variables["params"]})["params"]}
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_mod.Model(in_features=5, rngs=rngs), name_map=map_path
    )
    converted = convert_tree(variables, pair, map_path)
    assert converted.report.ignored == {"params_axes": AXES_IGNORED}
    assert len(converted.report.mapped) == len(jax.tree.leaves(variables["params"]))
    model = nnx.merge(converted.graphdef, converted.state)
    expected = linen_mod.Model().apply({"params": variables["params"]}, _x())
    np.testing.assert_array_equal(np.asarray(model(_x())), np.asarray(expected))


def test_class_not_rewritten_keeps_its_calls():
    """A class the module pass does not rewrite as NNX (a mixin with no Linen base) keeps its
    ``param_with_axes`` call as written: restated, it would change Linen's ``params`` layout."""
    src = (
        "import flax.linen as nn\n"
        "from flax.linen import partitioning as nn_partitioning\n\n\n"
        "class Mixin:\n"
        "    @nn.compact\n"
        "    def __call__(self, x):\n"
        '        return x + nn_partitioning.param_with_axes("b", nn.initializers.zeros, (3,), axes=("mlp",))\n'
    )
    result = migrate_source(src, "mixin.py", module_name="mixin")
    assert 'nn_partitioning.param_with_axes("b"' in result.output and "self.param" not in result.output


def test_keyword_init_arguments_stay_linen_positional_ones_convert(tmp_path):
    """``dtype=`` given to a partitioning-wrapped init stays Linen (NNX's wrapper takes positional
    arguments only); the positional dtype converts and computes what Linen does."""
    linen_mod, nnx_mod, result, map_path = build("partitioned_init_keywords", tmp_path)
    kept = {f.line for f in result.findings if f.rule == "L2N-MOD-007"}
    assert kept == {17, 24, 42}  # Scale, Dense and FieldInit (dtype= to its field's partitioned init)
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    assert_parity(linen_mod.Positional(), lambda rngs: nnx_mod.Positional(rngs=rngs), x, map_path)
    with nnx.use_eager_sharding(False):  # no mesh here: the names are kept as metadata only
        scale = nnx.bridge.lazy_init(nnx_mod.Scale(rngs=nnx.Rngs(0)), x)  # Linen behind the bridge
        np.testing.assert_array_equal(np.asarray(scale(x)), x)
        # the wrapper's default is the Linen class's own (the NNX wrapper would give Linen VariableMetadata)
        field_init = nnx.bridge.lazy_init(nnx_mod.FieldInit(rngs=nnx.Rngs(0)), x)
        np.testing.assert_allclose(
            np.asarray(field_init(x)),
            linen_mod.FieldInit().init_with_output(jax.random.key(0), x)[0],
            rtol=1e-6,
        )
