"""Training code that hands a Linen module value on: where the pass follows it, the file converts; where
it does not (the receiver would get a partial constructor), a TRAIN-008 finding blocks the rewrite."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source

MODEL = """
import functools
import jax
import flax.linen as nn


class MLP(nn.Module):
    width: int = 4

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)


def create(rng, model: MLP, x):
    return model.init(rng, x)


def fit(model, x):
    return model.init(jax.random.key(0), x)


class Maker:
    def create(self, rng, model: MLP, x):
        return model.init(rng, x)
"""

FOLLOWED = {
    "print": "model = MLP(8)\n    print(model)\n    return model.init(rng, x)",
    "f-string": 'model = MLP(8)\n    name = f"{model}"\n    return model.init(rng, x)',
    "identity test": "model = MLP(8)\n    assert model is not None\n    return model.init(rng, x)",
    "annotated function": "model = MLP(8)\n    return create(rng, model, x)",
    "annotated method": "model = MLP(8)\n    return Maker().create(rng, model, x)",
    "jitted alias": "model = MLP(8)\n    step = jax.jit(create, static_argnums=1)\n    return step(rng, model, x)",
    "partial binding": "model = MLP(8)\n    return functools.partial(create, model=model)(rng, x=x)",
    "apply's method": "model = MLP(8)\n    v = model.init(rng, x)\n    return model.apply(v, x, method=model.__call__)",
}
HANDED_ON = {
    "unannotated parameter": "model = MLP(8)\n    return fit(model, x)",
    "constructor as the argument": "return fit(MLP(8), x)",
    "dict": 'cfg = {"model": MLP(8)}\n    return cfg["model"].init(rng, x)',
    "attribute store": "holder = Maker()\n    holder.net = MLP(8)\n    return holder.net.init(rng, x)",
    "another attribute": "model = MLP(8)\n    return model.clone(width=2).init(rng, x)",
    "init_with_output": "model = MLP(8)\n    return model.init_with_output(rng, x)",
}


def _train_findings(body: str) -> list:
    src = MODEL + "\n\ndef train(rng, x):\n    " + body + "\n"
    result = migrate_source(textwrap.dedent(src), "train.py")
    return [f for f in result.findings if f.rule == "L2N-TRAIN-008"]


@pytest.mark.parametrize("case", sorted(FOLLOWED))
def test_a_module_value_the_pass_follows_converts(case):
    assert _train_findings(FOLLOWED[case]) == []


@pytest.mark.parametrize("case", sorted(HANDED_ON))
def test_a_module_value_handed_where_the_pass_cannot_follow_blocks(case):
    found = _train_findings(HANDED_ON[case])
    assert found and all("handed on as a value" in f.message for f in found), found


RECEIVERS = """
import sys
import jax
import optax
import flax.linen as nn
from elsewhere import load_model

REG = {}
NAMED = {}


class MLP(nn.Module):
    width: int = 4

    @classmethod
    def tiny(cls):
        return cls(width=2)

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)


REG["mlp"] = MLP


def build(model_cls):
    return model_cls(width=4)


def make():
    return MLP.tiny()
"""
UNFOLLOWED = {
    "classmethod": "model = MLP.tiny()\n    return model.init(rng, x)",
    "registry": 'return REG["mlp"](width=3).init(rng, x)',
    "getattr": 'cls = getattr(sys.modules[__name__], "MLP")\n    return cls(width=8).init(rng, x)',
    "builder handed the class": "model = build(MLP)\n    return model.init(rng, x)",
    "function returning a classmethod build": "model = make()\n    return model.init(rng, x)",
}
NOT_A_RUN_MODEL = {
    "optax": "tx = optax.adam(1e-3)\n    return tx.init({'w': x})",
    "parameter": "return x.apply(rng)",
    "imported builder": "model = load_model()\n    return model.init(rng, x)",
}


def _receiver_findings(body: str) -> list:
    src = RECEIVERS + "\n\ndef train(rng, x):\n    " + body + "\n"
    result = migrate_source(textwrap.dedent(src), "train.py")
    return [f for f in result.findings if f.rule == "L2N-TRAIN-008"]


@pytest.mark.parametrize("case", sorted(UNFOLLOWED))
def test_init_on_a_receiver_a_class_of_the_run_may_have_built_is_located(case):
    """The class is NNX after the migration, with no init / apply: left as written, the call failed."""
    found = _receiver_findings(UNFOLLOWED[case])
    assert found and all("does not follow" in f.message for f in found), found


@pytest.mark.parametrize("case", sorted(NOT_A_RUN_MODEL))
def test_init_on_a_receiver_no_class_of_the_run_builds_is_not(case):
    assert _receiver_findings(NOT_A_RUN_MODEL[case]) == []
