"""Logical partitioning survives migration: same values, and every NNX parameter carries the
sharding names of its Linen counterpart."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from fixture_paths import fixture
from flax import nnx

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

FIXTURE = fixture("compact_partitioned_in.py")


def test_partition_names_and_values_carry_over(tmp_path):
    src = FIXTURE.read_text()
    result = migrate_source(src, "proj.py", module_name="proj")
    assert not [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    (tmp_path / "linen_proj.py").write_text(src)
    (tmp_path / "nnx_proj.py").write_text(result.output)
    linen_cls = import_file(tmp_path / "linen_proj.py").Proj
    nnx_cls = import_file(tmp_path / "nnx_proj.py").Proj
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    side = LinenSide(
        model=linen_cls(features=3),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(features=3, in_features=5, rngs=rngs), name_map=map_path
    )
    variables = side.init_variables()
    parity = check(pair, perturbed(variables))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]

    linen_specs = nn.get_partition_spec(variables)["params"]
    model = pair.make_nnx()  # no mesh: built with eager sharding off, names kept as metadata
    nnx_specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    assert nnx_specs["scale"].get_value() == linen_specs["scale"] == jax.sharding.PartitionSpec("embed")
    assert (
        nnx_specs["dense_0"]["kernel"].get_value()
        == linen_specs["Dense_0"]["kernel"]
        == jax.sharding.PartitionSpec("embed", "mlp")
    )


def test_matrix_product_size_is_never_guessed():
    """``x @ w`` with a parameter of literal shape has w's last axis; with a value of unknown rank
    (which may be a vector, contracting the last axis away) it stays unknown."""
    src = """import flax.linen as nn


class M(nn.Module):
    @nn.compact
    def __call__(self, x, y):
        w = self.param("w", nn.initializers.ones_init(), (x.shape[-1], 7))
        return nn.Dense(2)(x @ w) + nn.Dense(2)(x @ y)
"""
    result = migrate_source(src, "m.py")
    shape = [f for f in result.findings if f.rule == "L2N-SHAPE-003"]
    assert len(shape) == 1 and "unknown rank" in shape[0].message
    assert "nnx.Linear(7, 2" in result.output and "nnx.Linear(dense_1_in_features, 2" in result.output


def test_logical_constraint_is_kept_and_still_runs():
    src = """import flax.linen as nn


class C(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.with_logical_constraint(x, ("batch", "embed"))
        return nn.Dense(3)(x)
"""
    result = migrate_source(src, "c.py")
    assert not [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
    assert "import flax.linen as nn" in result.output and "nn.with_logical_constraint(x" in result.output
    namespace: dict = {}
    exec(compile(result.output, "c.py", "exec"), namespace)
    model = namespace["C"](in_features=4, rngs=nnx.Rngs(0))
    assert model(jnp.ones((2, 4))).shape == (2, 3)  # no mesh: the constraint is a no-op, as in Linen


PARTITION_API = fixture("partitioning_api_out.py")

_SHARDING_SCRIPT = r"""
import json, sys
import jax
import flax.linen as nn
from flax import nnx
from linen2nnx.spec import import_file

migrated = import_file(sys.argv[1])
mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
rules = (("embed", "data"), ("mlp", "model"))
init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "mlp"))
linen_vars = jax.eval_shape(lambda: nn.Dense(8, kernel_init=init).init(jax.random.key(0), jax.numpy.ones((2, 4))))
with nnx.use_eager_sharding(False):
    model = nnx.Linear(4, 8, kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp")),
                       rngs=nnx.Rngs(0))
with nnx.logical_axis_rules(()):  # the recipe of the L2N-PART-003 hint: logical names, as Linen gives
    nnx_specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
nnx_shardings = migrated.shardings(nnx_specs, mesh, rules)
with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    linen_shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(linen_vars), mesh, rules)
print(json.dumps({"linen": str(linen_shardings["params"]["kernel"].spec),
                  "nnx": str(nnx_shardings["kernel"].get_value().spec),
                  "unboxed": migrated.plain(5) == (5, 5)}))
"""


def test_migrated_partitioning_api_gives_linen_shardings(tmp_path):
    """The migrated lm1b-style helpers (nnx.logical_axis_rules, the kept nn.logical_to_mesh_sharding),
    fed the NNX state's logical specs as the L2N-PART-003 hint says, give the mesh shardings Linen
    gives its boxes."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "shardings.py"
    script.write_text(_SHARDING_SCRIPT)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, str(script), str(PARTITION_API)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"linen": "P('data', 'model')", "nnx": "P('data', 'model')", "unboxed": True}


def test_kept_logical_to_mesh_maps_nnx_specs_as_linen_maps_its_boxes():
    """The migrated helpers keep ``nn.logical_to_mesh``: fed the logical specs of an NNX state (read
    with no rules active) under ``nnx.logical_axis_rules``, they give the mesh axes the Linen helpers
    give for the partition boxes of the same model, and the rule-less call does the same given the
    rules."""
    linen_mod = import_file(fixture("logical_to_mesh_in.py"), "_l2m_linen")
    nnx_mod = import_file(fixture("logical_to_mesh_out.py"), "_l2m_nnx")
    rules = (("embed", "data"), ("mlp", "model"))
    init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "mlp"))
    linen_vars = jax.eval_shape(
        lambda: nn.Dense(8, kernel_init=init).init(jax.random.key(0), jnp.ones((2, 4)))
    )
    linen_kernel = nn.get_partition_spec(linen_vars)["params"]["kernel"]
    with nnx.use_eager_sharding(False):
        kernel_init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp"))
        model = nnx.Linear(4, 8, kernel_init=kernel_init, rngs=nnx.Rngs(0))
    with nnx.logical_axis_rules(()):
        nnx_specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    expected = jax.sharding.PartitionSpec("data", "model")
    assert linen_mod.mesh_axes({"kernel": linen_kernel}, rules)["kernel"] == expected
    assert nnx_mod.mesh_axes(nnx_specs, rules)["kernel"].get_value() == expected
    assert nnx_mod.mesh_axes_given(nnx_specs, rules)["kernel"].get_value() == expected
    assert linen_mod.mesh_axes_given({"kernel": linen_kernel}, rules)["kernel"] == expected


def test_linen_partitions_read_each_form_and_map_each_its_own_way():
    """Logical boxes map through the rules (their own rules when they carry them), mesh boxes are mesh
    axes already, and T5X's params_axes names the parameter beside it: one reader for check,
    convert and train, where a mesh name taken for a logical one placed a weight replicated."""
    import jax
    import jax.numpy as jnp
    from flax.linen import partitioning
    from jax.sharding import PartitionSpec as P

    from linen2nnx.equivalence.linen_partitioning import LinenPartition, linen_partitions, mesh_spec

    class Forms(nn.Module):
        @nn.compact
        def __call__(self, x):
            k = partitioning.param_with_axes(
                "kernel", nn.initializers.lecun_normal(), (x.shape[-1], 8), jnp.float32, axes=("embed", "mlp")
            )
            b = self.param("b", nn.with_partitioning(nn.initializers.zeros, ("fsdp",)), (8,))
            own = nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",), rules=(("mlp", "tensor"),))
            return x @ k + b + self.param("c", own, (8,))

    parts = linen_partitions(jax.eval_shape(Forms().init, jax.random.key(0), jnp.ones((2, 4))))
    assert parts == {
        ("params", "kernel"): LinenPartition(("embed", "mlp"), True),
        ("params", "b"): LinenPartition(("fsdp",), False),
        ("params", "c"): LinenPartition(("mlp",), True, (("mlp", "tensor"),)),
    }
    rules = (("embed", "fsdp"), ("mlp", "data"), ("fsdp", "data"))
    assert mesh_spec(parts["params", "kernel"], rules) == P("fsdp", "data")
    assert mesh_spec(parts["params", "b"], rules) == P("fsdp")  # never through the rules
    assert mesh_spec(parts["params", "c"], rules) == P("tensor")  # the box's rules replace the pair's
    assert mesh_spec(None, rules) == P()


def test_a_logical_box_with_its_own_rules_keeps_them_as_sharding_rules(tmp_path):
    """``rules=`` of ``nn.with_logical_partitioning`` becomes NNX's ``sharding_rules=``: the NNX
    weight maps through the box's rules to the mesh axes Linen places it on, and computes the same."""
    from jax.sharding import PartitionSpec as P

    from linen2nnx.equivalence.linen_partitioning import linen_partitions, mesh_spec

    src = fixture("logical_box_rules_in.py").read_text()
    result = migrate_source(src, "box.py", module_name="box")
    assert result.output == fixture("logical_box_rules_out.py").read_text()
    assert "sharding_rules=" in result.output and "rules=((" not in result.output.replace(
        "sharding_rules=", ""
    )
    (tmp_path / "linen_box.py").write_text(src)
    (tmp_path / "nnx_box.py").write_text(result.output)
    linen_cls, nnx_cls = (
        import_file(tmp_path / "linen_box.py").Scaled,
        import_file(tmp_path / "nnx_box.py").Scaled,
    )
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    side = LinenSide(
        model=linen_cls(), batch={"x": x}, loss=lambda o, b: jnp.mean(o**2), train_kwargs={}, eval_kwargs={}
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(in_features=5, rngs=rngs), name_map=map_path
    )
    variables = side.init_variables()
    parity = check(pair, perturbed(variables))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]
    # the box's rules place it on both sides (NNX refuses context rules that map `mlp` elsewhere)
    context_rules = (("embed", "data"),)
    linen_spec = mesh_spec(linen_partitions(variables)["params", "scale"], context_rules)
    with nn.logical_axis_rules(context_rules):
        nnx_spec = nnx.get_partition_spec(nnx.state(pair.make_nnx(), nnx.Param))["scale"].get_value()
    assert linen_spec == nnx_spec == P("tensor")


def test_param_with_axes_names_reach_the_mesh_check_and_their_records_are_no_arrays():
    """T5X's params_axes records are metadata, not variables: the mesh check read one as an array and
    crashed (`'AxisMetadata' object has no attribute 'shape'`); their names are the parameter's."""
    import jax.numpy as jnp
    from flax.linen import partitioning

    from linen2nnx.equivalence.linen_partitioning import LinenPartition
    from linen2nnx.equivalence.mesh import linen_logical_specs

    class T5Dense(nn.Module):
        @nn.compact
        def __call__(self, x):
            k = partitioning.param_with_axes(
                "kernel", nn.initializers.lecun_normal(), (x.shape[-1], 8), jnp.float32, axes=("embed", "mlp")
            )
            return x @ k

    side = LinenSide(
        model=T5Dense(),
        batch={"x": np.ones((2, 4), np.float32)},
        loss=lambda o, b: jnp.mean(o**2),
        train_kwargs={},
        eval_kwargs={},
    )
    assert linen_logical_specs(ModelPair(linen=side, nnx_factory=None)) == {
        ("params", "kernel"): (LinenPartition(("embed", "mlp"), True), (4, 8))
    }


def test_names_in_a_list_become_a_tuple():
    """Linen's boxes take sharding names in a list as in a tuple; NNX places a Variable only by a tuple or
    a PartitionSpec, and left a list's weight replicated with no error. The migration of the list form
    is the migration of the tuple form."""
    src = FIXTURE.read_text()
    listed = src.replace('("embed",)', '["embed"]').replace('("embed", "mlp")', '["embed", "mlp"]')
    assert listed.count("[") == src.count("[") + 2
    assert migrate_source(listed, "proj.py").output == migrate_source(src, "proj.py").output
    names = 'nn.with_partitioning(init, names=["data"])'
    assert '("data",)' in migrate_source(f"import flax.linen as nn\nf = {names}\n", "m.py").output
