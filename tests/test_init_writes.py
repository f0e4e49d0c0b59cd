"""Variables a call writes with no test of initialisation (L2N-VAR-009): Linen's ``init`` runs the call,
so the state it returns is one update in; the NNX constructor starts from the initial value. The rewrite
itself is exact for every apply (parity with converted weights below), the finding says where a model
built from scratch starts elsewhere, and its hint (one call on the init batch after building) closes
the gap exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_parity import build
from flax import nnx

from linen2nnx.checkpoint_convert import convert_tree
from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair

CASE = "init_time_writes"
X = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)


def _side(linen_model) -> LinenSide:
    return LinenSide(
        model=linen_model,
        batch={"x": X},
        loss=lambda out, b: jnp.mean(out**2),
        mutable=("stats",),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
    )


def _stats(model) -> dict:
    return {"/".join(map(str, k)): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(model))}


def test_each_unguarded_write_is_located_and_guarded_ones_are_not(tmp_path):
    _, _, result, _ = build(CASE, tmp_path)
    found = [
        (f.line, f.message.split(" is written by ")[1].split(" ")[0])
        for f in result.findings
        if f.rule == "L2N-VAR-009"
    ]
    assert found == [
        (18, "Counter.__call__"),
        (37, "MovingAverage._update"),
    ]  # not reset(), not GuardedCounter
    assert not any(f.rule == "L2N-MOD-007" for f in result.findings)  # the finding does not block
    assert not [f for f in result.findings if f.severity == "manual" and f.rule != "L2N-VAR-009"]


@pytest.mark.parametrize("cls", ["Counter", "MovingAverage", "GuardedCounter"])
def test_applies_agree_with_converted_weights(cls, tmp_path):
    """Forward, loss, gradients and the written statistics match Linen's apply."""
    linen_mod, nnx_mod, _, map_path = build(CASE, tmp_path)
    side = _side(getattr(linen_mod, cls)())
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: getattr(nnx_mod, cls)(in_features=4, rngs=rngs),
        name_map=map_path,
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


@pytest.mark.parametrize(
    ("cls", "differs"), [("Counter", True), ("MovingAverage", True), ("GuardedCounter", False)]
)
def test_the_finding_marks_where_init_state_differs_and_its_hint_closes_it(cls, differs, tmp_path):
    """Built from the same parameters, the NNX model's state equals Linen's init exactly where no finding
    is given; where one is, it equals it after one call on the init batch, as the hint says."""
    linen_mod, nnx_mod, _, map_path = build(CASE, tmp_path)
    linen_model = getattr(linen_mod, cls)()
    init = linen_model.init(jax.random.PRNGKey(0), X)
    factory = lambda rngs: getattr(nnx_mod, cls)(in_features=4, rngs=rngs)  # noqa: E731
    pair = ModelPair(linen=_side(linen_model), nnx_factory=factory, name_map=map_path)
    from_linen = _stats(convert_tree(init, pair, map_path, optimizer=False).model())
    built = factory(nnx.Rngs(0))
    nnx.update(built, nnx.state(convert_tree(init, pair, map_path, optimizer=False).model(), nnx.Param))
    before = _stats(built)
    assert before.keys() == from_linen.keys()
    same = all(np.allclose(before[k], from_linen[k]) for k in before)
    assert same is not differs
    if differs:
        built(jnp.asarray(X))  # the hint: one call on the init batch, in the mode init ran
        after = _stats(built)
        assert all(np.allclose(after[k], from_linen[k], atol=1e-6) for k in after), (after, from_linen)


def test_a_class_kept_as_linen_gets_no_finding():
    """Behind the bridge the class initialises as Linen does: the finding and its marker go."""
    src = """
import flax.linen as nn
import jax.numpy as jnp


class Counter(nn.Module):
    @nn.compact
    def __call__(self, x):
        count = self.variable("stats", "count", jnp.zeros, ())
        count.value += 1
        return nn.Dense(int(x.sum()))(x)
"""
    result = migrate_source(src, "kept.py", module_name="kept")
    assert "L2N-MOD-007" in {f.rule for f in result.findings}
    assert "L2N-VAR-009" not in {f.rule for f in result.findings} and "L2N-VAR-009" not in result.output


def test_an_init_test_whose_body_ends_in_a_compound_statement_is_read():
    """``if self.is_initializing():`` whose last line is itself an ``if`` is no early exit: the write after
    it is still reported, and the file is not lost to an internal error."""
    src = """
import flax.linen as nn
import jax.numpy as jnp


class Counter(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        count = self.variable("stats", "count", jnp.zeros, ())
        y = nn.Dense(3)(x)
        if self.is_initializing():
            if train:
                y = y * 1.0
        count.value += 1
        return y
"""
    result = migrate_source(src, "nested.py", module_name="nested")
    assert "L2N-IO-004" not in {f.rule for f in result.findings}, result.findings
