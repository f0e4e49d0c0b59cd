"""A class migrate keeps as Linen behind ``nnx.bridge.ToNNX`` builds its ``nn.Dropout`` at call time,
where setting NNX dropout rates to 0 cannot reach it: the train-mode checks turn it off as Linen's is
(an exact twin used to fail forward/train, loss/train and every gradient there)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

SOURCE = """\
import flax.linen as nn


class Heads(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.reshape(x.shape[:-1] + (2, x.shape[-1] // 2))
        x = nn.Dropout(0.5)(x, deterministic=not train)
        return nn.DenseGeneral(features=4, axis=(-2, -1))(x)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(6)(x)
        x = nn.Dropout(0.5)(x, deterministic=not train)
        return Heads()(x, train)
"""


def test_dropout_inside_a_bridged_class_is_off_in_train_mode_checks(tmp_path):
    result = migrate_source(SOURCE, "bridged.py", module_name="bridged")
    assert "nnx.bridge.ToNNX(HeadsLinen(" in result.output
    (tmp_path / "linen_src.py").write_text(SOURCE)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_mod, nnx_mod = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    side = LinenSide(
        model=linen_mod.Net(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        optimizer=optax.sgd(0.1),
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)

    def build(rngs):
        model = nnx_mod.Net(in_features=5, rngs=rngs)  # no size for the bridged class: it reads none
        nnx.bridge.lazy_init(model, x)  # as the written spec does for a bridged class
        return model

    pair = ModelPair(linen=side, nnx_factory=build, name_map=map_path)
    variables = perturbed(side.init_variables())
    parity = check(pair, variables, steps=2)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    checks = parity.by_check()
    assert checks["forward/train"] and len(checks["grad"]) == len(jax.tree.leaves(variables["params"]))
