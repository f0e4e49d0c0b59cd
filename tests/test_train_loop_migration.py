"""The training codemod on the zoo's Linen train loops, end to end: migrate model + train loop, then train
both for 10 steps from the same weights on the same batches and compare the losses step by step.

Also: what outside-style training code gets (findings, not crashes), where findings point, and the
pass's switches. The in/out fixtures of each rule are in ``tests/fixtures/migrate/train_*``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import textwrap
import uuid
from pathlib import Path

import jax
import numpy as np
import pytest

from linen2nnx import zoo
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.spec_writer import write_pair_spec
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import load_linen_side, load_pair

STEPS = 10
RTOL = 1e-5


def _migrate_zoo(name: str, root: Path):
    """Copy the zoo model + train loop into a fresh package, migrate both (traced) into another package.

    Returns (migration result, spec path, migrated train module)."""
    package = f"l2n_train_{name}_{uuid.uuid4().hex[:8]}"
    src = root / "src" / package
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    for part in ("model", "train"):
        text = (zoo.model_source(name).parent / f"{part}.py").read_text()
        (src / f"{part}.py").write_text(text.replace(f"linen2nnx.zoo.{name}.model", ".model"))
    ref = zoo.spec_ref(name)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    out = root / "out" / f"nnx_{package}"
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out, trace=trace)
    return result, trace, out


def _import(out: Path):
    sys.path.insert(0, str(out.parent))
    try:
        return importlib.import_module(f"{out.name}.train")
    finally:
        sys.path.remove(str(out.parent))


def _no_dropout(monkeypatch, train_module) -> None:
    """Dropout masks of Linen and NNX differ for the same key: parity runs with every rate at 0."""
    cfg = train_module.CONFIGS["tiny"]
    model = cfg["model"]
    if isinstance(model, dict):
        for key in [k for k in model if "dropout" in k]:
            monkeypatch.setitem(model, key, 0.0)
    else:
        rates = {f.name: 0.0 for f in dataclasses.fields(model) if "dropout" in f.name}
        monkeypatch.setitem(cfg, "model", dataclasses.replace(model, **rates))


def _linen_losses(train, state, batches, keys):
    losses = []
    for batch, key in zip(batches, keys):
        state, metrics = train.train_step(state, batch, key)
        losses.append(float(metrics["loss"]))
    return state, losses


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder", "rnn", "decoder"])
def test_migrated_train_loop_matches_linen_losses(name, tmp_path, monkeypatch):
    from flax import nnx

    from linen2nnx.checkpoint_convert import convert_tree

    result, trace, out = _migrate_zoo(name, tmp_path)
    manual = sorted({f"{f.rule} ({Path(f.path).name}:{f.line})" for f in result.findings
                     if f.severity in (Severity.MANUAL, Severity.ERROR)})
    if manual and name in ("rnn", "decoder"):
        pytest.skip(f"the {name} model + train loop do not migrate without manual findings yet: {', '.join(manual)}")
    assert not manual, manual
    spec = load_pair(str(write_pair_spec(out, trace, result)))

    linen_train = zoo.load_train_module(name)
    nnx_train = _import(out)
    _no_dropout(monkeypatch, linen_train)
    _no_dropout(monkeypatch, nnx_train)
    batches = [b for _, b in zip(range(STEPS), linen_train.batches("tiny", 0))]
    keys = list(jax.random.split(jax.random.key(1), STEPS))

    linen_init = linen_train.create_train_state("tiny", seed=0)
    _, linen_losses = _linen_losses(linen_train, linen_init, batches, keys)

    # the migrated loop's own state, with the Linen initial weights loaded through the converter
    graphdef, state = nnx_train.create_train_state("tiny", seed=0)
    model, optimizer = nnx.merge(graphdef, state)
    tree = {"params": linen_init.params}
    if getattr(linen_init, "batch_stats", None) is not None:
        tree["batch_stats"] = linen_init.batch_stats
    converted = convert_tree(tree, spec, out / "linen2nnx-map.json", optimizer=False).model()
    for kind in (nnx.Param, nnx.BatchStat):
        nnx.update(model, nnx.state(converted, kind))
    state = (graphdef, nnx.state((model, optimizer)))
    nnx_losses = []
    for batch, key in zip(batches, keys):
        state, metrics = nnx_train.train_step(state, batch, key)
        nnx_losses.append(float(metrics["loss"]))

    print(f"{name}: linen {linen_losses}\n{name}: nnx   {nnx_losses}")
    np.testing.assert_allclose(nnx_losses, linen_losses, rtol=RTOL, atol=0)
    assert nnx_train.train_step._cache_size() == 1  # the split state's graphdef is static: traced once


# ---- the fixtures run: the Linen input and its migrated output train to the same numbers ---------------
FIXTURES = Path(__file__).parent / "fixtures" / "migrate"


def _load(case: str, side: str):
    from linen2nnx.spec import import_file

    return import_file(FIXTURES / f"{case}_{side}.py", f"_train_fixture_{case}_{side}")


def test_train_state_fixture_runs_like_linen():
    linen, nnx_side = _load("train_state", "in"), _load("train_state", "out")
    linen_losses, linen_eval = linen.train(steps=3)
    nnx_losses, nnx_eval = nnx_side.train(steps=3)
    np.testing.assert_allclose(nnx_losses, linen_losses, rtol=RTOL)
    np.testing.assert_allclose(nnx_eval, linen_eval, rtol=RTOL)
    assert nnx_side.train_step._cache_size() == 1  # the graphdef is static: one trace for every step


def test_dropout_keys_reach_the_nnx_model():
    """``rngs={'dropout': k}`` -> ``nnx.reseed``: a new key gives a new mask, the same key the same one."""
    nnx_side = _load("train_state", "out")
    x = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
    y = np.arange(8) % 3
    state = nnx_side.create_train_state(0, x, rate=0.5)
    a, b = jax.random.split(jax.random.key(3))
    loss = [float(nnx_side.train_step(state, x, y, key)[1]["loss"]) for key in (a, a, b)]
    assert loss[0] == loss[1] != loss[2]


def test_batch_stats_fixture_runs_like_linen():
    linen, nnx_side = _load("train_batch_stats", "in"), _load("train_batch_stats", "out")
    linen_losses, linen_steps, linen_eval = linen.train(steps=3)
    nnx_losses, nnx_steps, nnx_eval = nnx_side.train(steps=3)
    np.testing.assert_allclose(nnx_losses, linen_losses, rtol=RTOL)
    np.testing.assert_allclose(nnx_eval, linen_eval, rtol=RTOL, atol=1e-6)  # eval uses the running stats
    assert nnx_steps == linen_steps == 3


def test_apply_fixture_builds_the_same_parameters():
    linen, nnx_side = _load("train_apply", "in"), _load("train_apply", "out")
    key, x = jax.random.key(0), np.ones((2, 5), np.float32)
    assert nnx_side.param_count(key, x) == linen.param_count(key, x)
    (y, z), (ly, lz) = nnx_side.predict(key, x), linen.predict(key, x)
    assert y.shape == ly.shape and z.shape == lz.shape


def test_findings_point_at_the_input_lines():
    src = (FIXTURES / "train_state_in.py").read_text()
    result = migrate_source(src, "train.py")
    lines = src.splitlines()
    by_rule = {f.rule: f for f in result.findings if f.rule.startswith("L2N-TRAIN")}
    assert "TrainState.create" in lines[by_rule["L2N-TRAIN-004"].line - 1]
    assert "model.init" in lines[by_rule["L2N-TRAIN-002"].line - 1]
    assert "state.apply_fn" in lines[by_rule["L2N-TRAIN-005"].line - 1]


def test_ignored_training_rules_leave_the_training_code_alone():
    src = (FIXTURES / "train_state_in.py").read_text()
    result = migrate_source(src, "train.py", ignore=["L2N-TRAIN"])
    assert "state.apply_fn(" in result.output and "class MLP(nnx.Module)" in result.output
    assert not [f for f in result.findings if f.rule.startswith("L2N-TRAIN")]


def test_a_train_file_that_never_says_linen_is_migrated_with_its_model(tmp_path):
    pkg = tmp_path / "proj"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text((FIXTURES / "train_state_in.py").read_text().split("\n\ndef make_model")[0] + "\n")
    (pkg / "loop.py").write_text(textwrap.dedent("""
        import jax
        import optax
        from flax.training import train_state

        from .net import MLP


        def create(x):
            model = MLP(hidden=4)
            variables = model.init(jax.random.key(0), x)
            return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.sgd(0.1))
        """))
    result = migrate_paths([pkg], Mode.DIFF)
    loop = next(r for r in result.files if r.path.name == "loop.py")
    assert not loop.skipped and "nnx.split((variables, nnx.Optimizer(variables, optax.sgd(0.1), wrt=nnx.Param)))" \
        in loop.output
    assert "train_state" not in loop.output  # the import went with its last use


# ---- outside-style code: sensible manual findings, never a crash or a half conversion -----------------
_MODEL = '''
import jax
import optax
from flax import linen as nn
from flax.training import train_state


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x)
'''

OUTSIDE = {
    # the pre-update state is read after the update: NNX updates in place
    "old_state_read": ('''
@jax.jit
def step(state, grads):
    new_state = state.apply_gradients(grads=grads)
    changed = jax.tree_util.tree_map(lambda a, b: a - b, new_state.params, state.params)
    return new_state, changed
''', {"L2N-TRAIN-008"}),
    # a renamed update inside a loop would re-apply to the original state each turn in Linen
    "update_in_loop": ('''
def steps(state, grads_list):
    for grads in grads_list:
        new_state = state.apply_gradients(grads=grads)
    return new_state.params
''', {"L2N-TRAIN-008"}),
    # apply through a model of another file this run does not migrate
    "unknown_model": ('''
def predict(model, params, x):
    return model.apply({"params": params}, x)
''', {"L2N-TRAIN-009"}),
    # the whole variables dict serialised: in NNX it is the model
    "variables_whole": ('''
def shapes(x):
    variables = Net().init(jax.random.key(0), x)
    return jax.tree_util.tree_map(lambda v: v.shape, variables)
''', {"L2N-TRAIN-008"}),
    # opt_state has another layout in nnx.Optimizer
    "opt_state": ('''
def count(state):
    return state.opt_state[0].count + state.apply_fn({"params": state.params}, 1.0)
''', {"L2N-TRAIN-008"}),
}


@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_outside_style_code_is_left_with_findings(case):
    code, rules = OUTSIDE[case]
    src = _MODEL + code
    result = migrate_source(src, f"{case}.py")
    manual = {f.rule for f in result.findings if f.severity is Severity.MANUAL}
    assert manual == rules
    assert not [f for f in result.findings if f.rule in ("L2N-TRAIN-004", "L2N-TRAIN-006")]
    body = result.output.split("class Net(nnx.Module)")[1]
    assert code.strip().splitlines()[-1].strip() in body  # the training code is untouched
    for rule in rules:
        assert f"# TODO(linen2nnx): {rule}" in result.output
    compile(result.output, case, "exec")
    assert migrate_source(result.output, f"{case}.py").output == result.output
