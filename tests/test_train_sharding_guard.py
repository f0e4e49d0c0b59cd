"""Training code that builds a partitioned model: the NNX model is built with eager sharding only under a
mesh *and* logical axis rules, whichever file the model is in.

An NNX Variable with sharding names is sharded when it is created (eager sharding is NNX's default): with
no mesh that raises, and with a mesh but no rules its logical names are read as mesh axes and raise too.
Linen's partition boxes are metadata until the code's own ``out_shardings`` place them. Both failures
came out of a migration reported as converted:

- a training file that names no sharding API, building a model of another file that does, got no guard
  (``An auto mesh context or metadata is required ...``);
- training code that hands its rules to ``nn.logical_to_mesh_sharding(specs, mesh, RULES)`` under
  ``jax.set_mesh`` and never activates them got eager sharding (``Resource axis: embed ... not found``).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid

import jax
import numpy as np
import pytest

from linen2nnx.migrate import Severity
from linen2nnx.migrate.engine import Mode, migrate_paths

NET = """
import flax.linen as nn


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "mlp"))
        return nn.Dense(4, kernel_init=init)(x)
"""

PLAIN = """
import jax
import optax
from flax.training import train_state

from .net import MLP


def create(x):
    model = MLP()
    variables = model.init(jax.random.key(0), x)
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.sgd(0.1))
"""

PLACED = """
import jax
import optax
from flax import linen as nn
from flax.training import train_state

from .net import MLP

RULES = (("embed", None), ("mlp", "model"))


def create_placed(x, mesh):
    model = MLP()

    def init_fn(rng):
        variables = model.init(rng, x)
        return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.sgd(0.1))

    abstract = jax.eval_shape(init_fn, jax.random.key(0))
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, RULES)
    return nn.unbox(jax.jit(init_fn, out_shardings=shardings)(jax.random.key(0)))
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The Linen package and its migration, importable side by side (their own package names)."""
    root = tmp_path_factory.mktemp("guard")
    name = f"guard_{uuid.uuid4().hex[:8]}"
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(textwrap.dedent(NET))
    (pkg / "plain.py").write_text(textwrap.dedent(PLAIN))
    (pkg / "placed.py").write_text(textwrap.dedent(PLACED))
    result = migrate_paths([pkg], Mode.DIFF)
    assert not [
        f for r in result.files for f in r.findings if f.severity in (Severity.MANUAL, Severity.ERROR)
    ]
    out = root / f"{name}_nnx"
    out.mkdir()
    for r in result.files:
        (out / r.path.name).write_text(r.output if r.output is not None else r.source)
    sys.path.insert(0, str(root))
    try:
        linen = {m: importlib.import_module(f"{name}.{m}") for m in ("plain", "placed")}
        nnx_side = {m: importlib.import_module(f"{name}_nnx.{m}") for m in ("plain", "placed")}
    finally:
        sys.path.remove(str(root))
    return linen, nnx_side, result


def test_a_model_of_another_file_is_built_under_the_guard_with_no_mesh(migrated):
    linen, nnx_side, result = migrated
    plain = next(r for r in result.files if r.path.name == "plain.py")
    assert "nnx.use_eager_sharding(" in plain.output  # though the file's own text names no sharding
    x = np.ones((2, 3), np.float32)
    linen["plain"].create(x)
    _, state = nnx_side["plain"].create(x)
    assert state[0]["dense_0"]["kernel"].get_value().shape == (3, 4)


def test_rules_handed_to_the_placement_and_never_activated(migrated):
    linen, nnx_side, _ = migrated
    mesh = jax.make_mesh((1,), ("model",), axis_types=(jax.sharding.AxisType.Auto,))
    x = np.ones((2, 3), np.float32)
    with jax.set_mesh(mesh):
        linen_kernel = linen["placed"].create_placed(x, mesh).params["Dense_0"]["kernel"]
        _, state = nnx_side["placed"].create_placed(x, mesh)
    kernel = state[0]["dense_0"]["kernel"].get_value()
    assert kernel.sharding.spec == linen_kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model")
