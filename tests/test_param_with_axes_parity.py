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


def _x4() -> np.ndarray:
    return np.random.default_rng(1).normal(size=(2, 5)).astype(np.float32)


def test_field_axes_outputs_and_gradients_match(tmp_path):
    """``axes=self.kernel_axes`` (a tuple-annotated field, T5X's DenseGeneral), set, None and its
    default ``()``: same outputs, losses and gradients with the Linen weights."""
    linen_mod, nnx_mod, result, map_path = build("param_with_axes_field", tmp_path)
    assert not [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    assert "param_with_axes(" not in result.output
    assert_parity(linen_mod.Model(), lambda rngs: nnx_mod.Model(in_features=5, rngs=rngs), _x4(), map_path)


def test_field_axes_metadata_is_linens_axes(tmp_path):
    """Each NNX Param carries the names Linen records in ``params_axes``, and a Param whose field is
    None carries none, as Linen records none for it."""
    linen_mod, nnx_mod, _, _ = build("param_with_axes_field", tmp_path)
    variables = linen_mod.Model().init(jax.random.key(0), _x4())
    linen_axes = nn_partitioning.get_axis_names(variables["params_axes"])
    with nnx.use_eager_sharding(False):  # no mesh here: the names are kept as metadata only
        model = nnx_mod.Model(in_features=5, rngs=nnx.Rngs(0))
    pairs = {
        ("DenseGeneral_0", "kernel"): ("dense_general_0", "kernel"),
        ("DenseGeneral_1", "kernel"): ("dense_general_1", "kernel"),
        ("DenseGeneral_2", "kernel"): ("dense_general_2", "kernel"),
        ("Scale_0", "scale"): ("scale_0", "scale"),
        ("Scale_1", "scale"): ("scale_1", "scale"),
    }
    recorded = {(parent, name) for parent, names in linen_axes.items() for name in names}
    assert recorded == {("DenseGeneral_0", "kernel"), ("DenseGeneral_2", "kernel"), ("Scale_0", "scale")}
    for (linen_parent, name), (nnx_parent, attr) in pairs.items():
        param = getattr(getattr(model, nnx_parent), attr)
        linen_value = variables["params"][linen_parent][name]
        assert param.get_value().dtype == linen_value.dtype and param.get_value().shape == linen_value.shape
        if (linen_parent, name) in recorded:
            assert param.out_sharding == tuple(linen_axes[linen_parent][name])
        else:
            assert getattr(param, "out_sharding", None) is None
    assert linen_axes["DenseGeneral_0"]["kernel"] == jax.sharding.PartitionSpec("embed", "mlp")
    assert linen_axes["DenseGeneral_2"]["kernel"] == jax.sharding.PartitionSpec()
    spec = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    assert spec["dense_general_0"]["kernel"].get_value() == linen_axes["DenseGeneral_0"]["kernel"]
    assert spec["scale_0"]["scale"].get_value() == linen_axes["Scale_0"]["scale"]


_MESH_SCRIPT = r"""
import json, sys
import jax, numpy as np
import flax.linen as nn
from flax import nnx
from flax.linen import partitioning as nn_partitioning
from linen2nnx.spec import import_file

linen_mod, nnx_mod = import_file(sys.argv[1]), import_file(sys.argv[2])
mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
rules = (("embed", "data"), ("mlp", "model"))
x = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    variables = linen_mod.Model().init(jax.random.key(0), x)
    names = nn_partitioning.get_axis_names(variables["params_axes"])
    linen_out = linen_mod.Model().apply({"params": variables["params"]}, x)
    linen = nn.logical_to_mesh_sharding(names, mesh, rules)
with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    model = nnx_mod.Model(in_features=4, rngs=nnx.Rngs(0))
    placed = {"DenseGeneral_0/kernel": str(model.dense_general_0.kernel.get_value().sharding.spec),
              "DenseGeneral_2/kernel": str(model.dense_general_2.kernel.get_value().sharding.spec),
              "Scale_0/scale": str(model.scale_0.scale.get_value().sharding.spec)}
    for (lp, ln), (np_, na) in [(("DenseGeneral_0", "kernel"), ("dense_general_0", "kernel")),
                                (("DenseGeneral_1", "kernel"), ("dense_general_1", "kernel")),
                                (("DenseGeneral_2", "kernel"), ("dense_general_2", "kernel")),
                                (("Scale_0", "scale"), ("scale_0", "scale")),
                                (("Scale_1", "scale"), ("scale_1", "scale"))]:
        param = getattr(getattr(model, np_), na)
        param.set_value(jax.device_put(variables["params"][lp][ln], param.get_value().sharding))
    nnx_out = nnx.jit(lambda m, x: m(x))(model, x)
print(json.dumps({
    "linen": {f"{p}/{n}": str(s.spec) for p, d in linen.items() for n, s in d.items()},
    "nnx": placed,
    "max_diff": float(np.max(np.abs(np.asarray(linen_out) - np.asarray(nnx_out)))),
}))
"""


def test_field_axes_shard_as_linen_on_a_mesh(tmp_path):
    """On a 2x2 mesh under logical rules, each NNX Param built eagerly is placed as Linen's
    ``params_axes`` names map, and the model computes Linen's output with Linen's weights."""
    import json
    import os
    import subprocess
    import sys

    build("param_with_axes_field", tmp_path)  # writes linen_src.py and nnx_src.py
    script = tmp_path / "mesh.py"
    script.write_text(_MESH_SCRIPT)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "linen_src.py"), str(tmp_path / "nnx_src.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    expected = {
        "DenseGeneral_0/kernel": "P('data', 'model')",
        "DenseGeneral_2/kernel": "P()",
        "Scale_0/scale": "P('data',)",
    }
    assert got["linen"] == expected and got["nnx"] == expected
    assert got["max_diff"] <= 1e-6  # a sharded matmul may sum in another order


def test_field_annotations_that_hold_a_tuple_or_none():
    """Only a field annotated as a tuple or a list (or one of them or None) is restated: a Sequence
    may be a string, which Linen splats into single letters and NNX keeps whole."""
    import libcst as cst

    from linen2nnx.migrate.axes_params import sequence_fields

    cls = cst.parse_module(
        "class C:\n"
        "    a: Tuple[str, ...] = ()\n"
        "    b: typing.Optional[typing.Tuple[str, ...]] = None\n"
        "    c: tuple | None = None\n"
        "    d: list = ()\n"
        "    e: Sequence[str] = ()\n"
        "    f: Any = ()\n"
        "    g: str | None = None\n"
        "    h: tuple | list | None = None\n"
        "    i = ()\n"
    ).body[0]
    assert sequence_fields(cls) == {"a", "b", "c", "d"}


def test_whole_shape_class_stays_behind_the_bridge_and_computes_linens(tmp_path):
    """A DenseGeneral whose NNX form would need its input's whole shape keeps its ``param_with_axes``
    call behind ``nnx.bridge.ToNNX``, with the reason; its builder converts and, with Linen's weights,
    computes Linen's output."""
    linen_mod, nnx_mod, result, _ = build("param_with_axes_whole_shape", tmp_path)
    kept = [f for f in result.findings if f.rule == "L2N-API-002"]
    assert [f.line for f in kept] == [28] and "whole shape of an input" in kept[0].message
    assert {f.line for f in result.findings if f.rule == "L2N-MOD-007"} == {20}
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    variables = perturbed(linen_mod.Attention().init(jax.random.key(0), x))
    with nnx.use_eager_sharding(False):  # no mesh here: the names are kept as metadata only
        model = nnx.bridge.lazy_init(nnx_mod.Attention(in_features=5, rngs=nnx.Rngs(1)), x)
    model.query.linen.kernel.set_value(variables["params"]["query"]["kernel"])
    model.head_0.w.set_value(variables["params"]["Head_0"]["w"])
    assert model.head_0.w.out_sharding == ("embed", "mlp")
    expected = linen_mod.Attention().apply({"params": variables["params"]}, x)
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(expected))
