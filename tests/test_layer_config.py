"""Static settings of dropout / norm / attention layers are compared (``config`` leaves): a changed
dropout rate, BatchNorm momentum or a ``deterministic`` a migration dropped fails ``check``, though
no number differs (dropout is off on both sides in every forward ``check`` runs)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.equivalence.layer_config import FIELDS, compare_settings
from linen2nnx.reports.junit import render_junit
from linen2nnx.reports.parity_markdown import render_parity_markdown
from linen2nnx.spec import LinenSide, ModelPair

D = 4


class LNet(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(D, name="dense")(x)
        x = nn.Dropout(0.1, broadcast_dims=(0,), name="drop")(x, deterministic=not train)
        x = nn.BatchNorm(momentum=0.9, epsilon=1e-5, name="bn")(x, use_running_average=not train)
        return nn.LayerNorm(epsilon=1e-6, name="ln")(x)


class Net(nnx.Module):
    def __init__(
        self,
        rngs,
        *,
        rate=0.1,
        momentum=0.9,
        ln_eps=1e-6,
        fast_variance=True,
        pass_train=True,
        deterministic=False,
        order="as Linen",
    ):
        self.dense = nnx.Linear(3, D, rngs=rngs)
        self.drop = nnx.Dropout(rate, broadcast_dims=(0,), deterministic=deterministic, rngs=rngs)
        self.bn = nnx.BatchNorm(D, momentum=momentum, epsilon=1e-5, rngs=rngs)
        self.ln = nnx.LayerNorm(D, epsilon=ln_eps, use_fast_variance=fast_variance, rngs=rngs)
        self.pass_train = pass_train
        self.order = order

    def __call__(self, x, train: bool = False):
        x = self.dense(x)
        if self.order == "norm first":  # the dropout moved after the BatchNorm it came before
            x = self.bn(x, use_running_average=not train)
        if self.order != "no dropout":
            x = self.drop(x, deterministic=not train) if self.pass_train else self.drop(x)
        if self.order == "second call deterministic":  # one module called twice, off the second time
            x = self.drop(x, deterministic=True)
        if self.order != "norm first":
            x = self.bn(x, use_running_average=not train)
        return self.ln(x)


def _pair(**twin) -> ModelPair:
    batch = {"x": jax.random.normal(jax.random.key(3), (6, 3))}
    linen = LinenSide(
        model=LNet(), batch=batch, name="net", mutable=("batch_stats",), loss=lambda out, b: jnp.mean(out**2)
    )
    return ModelPair(linen=linen, nnx_factory=lambda rngs: Net(rngs, **twin))


def _config(result):
    return {lf.path: lf for lf in result.leaves if lf.check == "config"}


@pytest.fixture(scope="module")
def faithful():
    return check(_pair(), jit=False, long_batch=False)


def test_an_unchanged_model_passes_with_a_config_leaf_per_layer(faithful):
    assert faithful.passed, faithful.failure_table()
    leaves = _config(faithful)
    assert set(leaves) == {"drop", "bn", "ln"} and all(lf.passed for lf in leaves.values())
    # the call-time setting is compared as each mode's call sees it (Linen default None, NNX False)
    assert "deterministic in eval: Linen True, NNX True" in leaves["drop"].note
    assert "deterministic in train: Linen False, NNX False" in leaves["drop"].note
    assert "momentum: Linen 0.9, NNX 0.9" in leaves["bn"].note


def test_a_changed_dropout_rate_fails_config_alone_and_names_the_module():
    r = check(_pair(rate=0.5), jit=False, long_batch=False)
    assert not r.passed
    # every number with dropout off agrees; the forward with dropout on (the same masks) does not
    assert {lf.check for lf in r.failures} == {"config", "forward/dropout", "loss/dropout"}
    (bad,) = [lf for lf in r.failures if lf.check == "config"]
    assert (
        bad.path == "drop" and "Linen drop / NNX drop" in bad.note and "rate: Linen 0.1, NNX 0.5" in bad.note
    )
    assert (r.divergence.culprit.nnx_path, r.divergence.culprit.check) == ("drop", "config")
    assert "rate: Linen 0.1, NNX 0.5" in r.failure_table()
    data = r.to_json()
    assert data["checks"]["config"] == {"passed": False, "leaves": 3, "failed": 1, "max_abs": "inf"}
    assert any(lf["check"] == "config" and "NNX 0.5" in lf["note"] for lf in data["leaves"])
    assert "rate: Linen 0.1, NNX 0.5" in render_parity_markdown(data)
    xml = render_junit(data)
    assert 'name="config"' in xml and "<failure" in xml


def test_momentum_epsilon_and_a_dropped_call_flag_fail():
    r = check(_pair(momentum=0.99, ln_eps=1e-3), jit=False, long_batch=False, divergence=False)
    notes = {lf.path: lf.note for lf in r.failures if lf.check == "config"}
    assert "momentum: Linen 0.9, NNX 0.99" in notes["bn"] and "epsilon: Linen 1e-06, NNX 0.001" in notes["ln"]
    # NNX deterministic=True and the call's flag dropped: dropout would never run in training
    r = check(_pair(pass_train=False, deterministic=True), jit=False, long_batch=False, divergence=False)
    (bad,) = [lf for lf in r.failures if lf.check == "config"]
    assert bad.path == "drop" and "deterministic in train: Linen False, NNX True" in bad.note
    assert "in eval" not in bad.note  # eval mode agrees (True on both sides)


def test_a_changed_variance_formula_fails_config():
    """``use_fast_variance=False`` on one side: the same numbers on inputs near zero, far apart on
    inputs far from it (E[x²] - E[x]² cancels in float32), which no forward of the check shows."""
    r = check(_pair(fast_variance=False), jit=False, long_batch=False, divergence=False)
    (bad,) = r.failures
    assert (bad.check, bad.path) == (
        "config",
        "ln",
    ) and "use_fast_variance: Linen True, NNX False" in bad.note


def test_the_name_table_and_unset_settings():
    assert ("rate", "rate") in FIELDS["Dropout"] and ("momentum", "momentum") in FIELDS["BatchNorm"]
    pairs = FIELDS["GroupNorm"]
    agree, differ = compare_settings(
        pairs,
        {"epsilon": 1e-6, "num_groups": 32, "group_size": None},
        {"epsilon": 1e-6, "num_groups": 32, "group_size": 2},
    )
    assert differ == [] and len(agree) == 2  # Linen leaves group_size to be derived: not compared
    agree, differ = compare_settings((("rate", "p"),), {"rate": 0.1}, {"p": 0.2})
    assert differ == ["rate (NNX p): Linen 0.1, NNX 0.2"]


@pytest.mark.parametrize(
    "order, path, words",
    [
        ("no dropout", "drop", "called in Linen's train forward, never in NNX's"),
        ("norm first", "(call order)", "call 1 is drop in Linen, bn in NNX"),
        ("second call deterministic", "drop", "deterministic in train: Linen False, NNX True"),
    ],
)
def test_a_dropout_the_numbers_cannot_see_fails_config(order, path, words):
    """Dropout is off in every forward check runs, so a call left out, moved, or made deterministic on
    a second call changes no number; the recorded calls tell."""
    r = check(_pair(order=order), jit=False, long_batch=False)
    assert not r.passed and {lf.check for lf in r.failures} == {"config"}, r.failure_table()
    failed = {lf.path: lf.note for lf in r.failures}
    assert path in failed and words in failed[path], failed


class Renamed(Net):
    """The dropout under another attribute name: no name map places it, so no setting of it would be
    compared (a rate changed with the rename passed before)."""

    def __init__(self, rngs):
        super().__init__(rngs, rate=0.5)
        self.dropout = self.drop
        del self.drop

    def __call__(self, x, train: bool = False):
        x = self.dropout(self.dense(x), deterministic=not train)
        return self.ln(self.bn(x, use_running_average=not train))


def test_a_linen_layer_placed_nowhere_fails_config():
    pair = _pair()
    pair = ModelPair(linen=pair.linen, nnx_factory=lambda rngs: Renamed(rngs))
    r = check(pair, jit=False, long_batch=False)
    failed = {lf.path: lf.note for lf in r.failures if lf.check == "config"}
    assert (
        "(unplaced) drop" in failed
        and "no NNX module the module map pairs it with" in failed["(unplaced) drop"]
    )
