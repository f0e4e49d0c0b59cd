"""Sizes the dataflow can only guess at are never guessed: without a trace they are manual
findings; a trace that shows exactly the candidate's size confirms it, and the result has parity."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import LinenSide, ModelPair, import_file

SOURCE = Path(__file__).parent / "fixtures" / "traced" / "pooled_birnn.py"


def _side(module) -> LinenSide:
    x = np.random.default_rng(3).normal(size=(2, 6, 4)).astype(np.float32)
    return LinenSide(
        model=module.Classifier(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )


def test_unconfirmed_sizes_stay_manual():
    result = migrate_source(SOURCE.read_text(), "pooled_birnn.py", module_name="pooled_birnn")
    manual = {(f.rule, f.message.split(" (")[0]) for f in result.findings if f.severity is Severity.MANUAL}
    # Pool's size is an argument the Classifier building it passes (settled); the Classifier's is asked for
    settled = {(f.rule, f.message.split(" (")[0]) for f in result.findings if f.rule == "L2N-SHAPE-005"}
    assert ("L2N-SHAPE-005", "input feature size of Pool.dense_1") in settled
    assert ("L2N-SHAPE-003", "input feature size of Classifier.pool") in manual


def test_trace_confirms_candidates_and_the_result_has_parity(tmp_path):
    (tmp_path / "linen_src.py").write_text(SOURCE.read_text())
    linen_mod = import_file(tmp_path / "linen_src.py")
    side = _side(linen_mod)
    trace = trace_linen(side)
    result = migrate_source(SOURCE.read_text(), "pooled_birnn.py", module_name="pooled_birnn", trace=trace)
    assert not [f for f in result.findings if f.severity is Severity.MANUAL], result.findings
    confirmed = [f.message for f in result.findings if f.rule == "L2N-SHAPE-001" and "confirms" in f.message]
    assert any(m.startswith("input feature size of Pool.dense_1 = in_features") for m in confirmed), confirmed
    assert any(m.startswith("input feature size of Classifier.pool = 2 * self.hidden") for m in confirmed), (
        confirmed
    )
    (tmp_path / "nnx_src.py").write_text(result.output)
    nnx_mod = import_file(tmp_path / "nnx_src.py")
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_mod.Classifier(in_features=4, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))


TAGGER = Path(__file__).parent / "fixtures" / "traced" / "feedback_tagger.py"


def test_a_cell_carry_keeps_its_shape_and_config_tests_choose_sizes(tmp_path):
    """No trace needed: the guess fed back through the carry is ``classes`` wide (one_hot), and the
    ``if not self.feed_input`` branch becomes a choice in __init__. Both settings reach parity."""
    result = migrate_source(TAGGER.read_text(), "feedback_tagger.py", module_name="feedback_tagger")
    assert not [f for f in result.findings if f.severity is Severity.MANUAL], result.findings
    assert (
        "nnx.LSTMCell((self.classes if not self.feed_input else x_features), self.features" in result.output
    )
    (tmp_path / "linen_src.py").write_text(TAGGER.read_text())
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_mod, nnx_mod = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    xs = np.random.default_rng(4).normal(size=(2, 5, 3)).astype(np.float32)
    for feed_input in (True, False):
        side = LinenSide(
            model=linen_mod.Tagger(feed_input=feed_input),
            batch={"x": xs},
            loss=lambda out, batch: jnp.mean(out**2),
            train_kwargs={},
            eval_kwargs={},
        )
        pair = ModelPair(
            linen=side,
            name_map=map_path,
            nnx_factory=lambda rngs, f=feed_input: nnx_mod.Tagger(feed_input=f, in_features=3, rngs=rngs),
        )
        parity = check(pair, perturbed(side.init_variables()))
        assert parity.passed, (feed_input, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures])


def test_a_traced_carry_wider_than_features_sizes_the_cell(tmp_path):
    """Linen's LSTMCell reads its hidden size from the carry: the trace shows 8 where ``features``
    says 6, so the cell takes the carry's width, as a constructor argument its caller fills from its
    own config (``carry_width``), and the result has parity."""
    (tmp_path / "linen_src.py").write_text(TAGGER.read_text())
    linen_mod = import_file(tmp_path / "linen_src.py")
    xs = np.random.default_rng(5).normal(size=(2, 5, 3)).astype(np.float32)
    side = LinenSide(
        model=linen_mod.Tagger(carry_width=8),
        batch={"x": xs},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    result = migrate_source(
        TAGGER.read_text(), "feedback_tagger.py", module_name="feedback_tagger", trace=trace_linen(side)
    )
    assert not [f for f in result.findings if f.severity is Severity.MANUAL], result.findings
    assert (
        "nnx.LSTMCell((self.classes if not self.feed_input else x_features), lstm_cell_0_hidden_features"
        in (result.output)
    )
    assert "lstm_cell_0_hidden_features=self.carry_width" in result.output
    (tmp_path / "nnx_src.py").write_text(result.output)
    nnx_mod = import_file(tmp_path / "nnx_src.py")
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side,
        name_map=map_path,
        nnx_factory=lambda rngs: nnx_mod.Tagger(carry_width=8, in_features=3, rngs=rngs),
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


def test_einops_patterns_keep_the_last_axis_only_when_both_sides_end_with_it():
    """The output's last axis is the input's when the pattern ends both sides with the same axis or
    group; an axis the output splits, merges or adds is never guessed (a manual size instead)."""
    from linen2nnx.migrate.last_axis_ops import einops_keeps_last

    kept = [
        "n h w c -> n (h w) c",
        "b t d -> t b d",
        "... d -> ... d",
        "b s (h d) -> b s (h  d)",
        "b n -> b r n",
    ]
    changed = ["b n (h d) -> b h n d", "n c -> n c r", "a b -> (a b)", "b (h d) -> b (d h)", "no arrow"]
    assert [einops_keeps_last(p) for p in kept] == [True] * len(kept)
    assert [einops_keeps_last(p) for p in changed] == [False] * len(changed)
    source = (
        "import einops\nimport flax.linen as nn\n\n\nclass Heads(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n"
        "        return nn.Dense(3)(einops.rearrange(x, 'b n (h d) -> b h n d', h=2))\n"
    )
    result = migrate_source(source, "heads.py", module_name="heads")
    assert [f.rule for f in result.findings if f.severity is Severity.MANUAL] == ["L2N-SHAPE-003"]


PRODUCT_SOURCE = """
import flax.linen as nn


def merge_heads(h):
    return h.reshape(h.shape[:-2] + (-1,))


class Block(nn.Module):
    num_heads: int = {heads}
    head_dim: int = {dim}
    mlp_ratio: int = 4

    @nn.compact
    def __call__(self, x):
        h = nn.DenseGeneral((self.num_heads, self.head_dim), name="qkv")(x)
        return nn.Dense(2, name="out")(merge_heads(h))
"""


def _traced_product(tmp_path, heads: int, dim: int):
    source = PRODUCT_SOURCE.format(heads=heads, dim=dim)
    path = tmp_path / f"block_{heads}_{dim}.py"
    path.write_text(source)
    module = import_file(path)
    side = LinenSide(
        model=module.Block(),
        batch={"x": np.zeros((2, 5), np.float32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    return migrate_source(source, path.name, module_name=path.stem, trace=trace_linen(side))


def test_a_traced_size_is_named_by_a_product_of_two_config_values_only_when_one_product_fits(tmp_path):
    """5 heads x 7: only num_heads * head_dim makes 35 (no field, nor 2, 3 or 4 times one), so the
    constructor computes it; 3 heads x 4 makes 12, which mlp_ratio * num_heads makes too (and 3 *
    head_dim): ambiguous, a manual finding, never a guess."""
    fits = _traced_product(tmp_path, 5, 7)
    assert "nnx.Linear(self.head_dim * self.num_heads, 2" in fits.output
    assert not [f for f in fits.findings if f.severity is Severity.MANUAL]
    ambiguous = _traced_product(tmp_path, 3, 4)
    manual = [f for f in ambiguous.findings if f.severity is Severity.MANUAL]
    assert {f.rule for f in manual} == {"L2N-SHAPE-003"}  # ambiguous, so a constructor argument
    (why,) = [f.message for f in manual if "ambiguous" in f.message]
    assert "self.head_dim * self.num_heads" in why and "self.mlp_ratio * self.num_heads" in why


STYLED = Path(__file__).parent / "fixtures" / "traced" / "styled_pair.py"


def test_a_trace_sizes_a_layer_beside_a_second_input_from_numpy_config(tmp_path):
    """The second input shares the first one's batch, so the batch axis grows in both when the trace
    asks which axes size the parameter; the width the caller's numpy-integer field holds matches. The
    length axis is the input's token count, which the `length` field equals by chance (the class never
    reads it): a required argument listing both, never the field. Given it, the result has parity."""
    (tmp_path / "linen_src.py").write_text(STYLED.read_text())
    linen_mod = import_file(tmp_path / "linen_src.py")
    rng = np.random.default_rng(6)
    batch = {"x": rng.normal(size=(2, 3, 4)).astype(np.float32), "styles": rng.normal(size=(2, 2))}
    side = LinenSide(
        model=linen_mod.Styled(),
        batch=batch,
        loss=lambda out, b: jnp.mean(out**2),
        inputs=lambda b: ((b["x"], b["styles"].astype(np.float32)), {}),
        train_kwargs={},
        eval_kwargs={},
    )
    result = migrate_source(
        STYLED.read_text(), "styled_pair.py", module_name="styled_pair", trace=trace_linen(side)
    )
    (manual,) = [f for f in result.findings if f.severity is Severity.MANUAL]
    assert "axis 1, traced 3, matches: self.length" in manual.message
    assert "axis 1 of a traced input of shape (2, 3, 4)" in manual.message
    assert "x_shape=mix_0_x_shape" in result.output
    (tmp_path / "nnx_src.py").write_text(result.output)
    nnx_mod = import_file(tmp_path / "nnx_src.py")
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side,
        name_map=map_path,
        nnx_factory=lambda rngs: nnx_mod.Styled(in_features=4, mix_0_x_shape=(1, 3, 5), rngs=rngs),
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


CLOSURES = """
import flax.linen as nn


class Config:  # a plain config object that holds a closure, as big model configs do
    def __init__(self):
        self.hidden = 6
        self.kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal")


class Sizes:  # pickles, by reference to this file's module, which a worker process cannot import
    out = 3

    def __init__(self):
        self.out = 3


class Head(nn.Module):
    cfg: Config
    sizes: Sizes
    bias_init: object = nn.initializers.variance_scaling(1.0, "fan_in", "normal")

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(self.cfg.hidden, kernel_init=self.cfg.kernel_init)(x)
        return nn.Dense(3)(x)
"""


def test_a_trace_whose_configs_hold_closures_migrates_the_same_in_worker_processes(tmp_path):
    """``-j 2`` sends the trace to its workers: initialisers (closures) in the traced configs do not
    pickle and the traced file's classes do not unpickle there, so each travels as a plain copy, and
    every output and finding equals the one-process run."""
    import pickle

    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.trace import OpaqueValue

    src = tmp_path / "src"
    src.mkdir()
    (src / "head.py").write_text(CLOSURES)
    (src / "other.py").write_text("import flax.linen as nn\n\n\nclass Tiny(nn.Module):\n    pass\n")
    module = import_file(src / "head.py")
    x = np.zeros((2, 3, 4), np.float32)
    side = LinenSide(
        model=module.Head(module.Config(), module.Sizes()),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    trace = trace_linen(side)
    copy = pickle.loads(pickle.dumps(trace))
    config = copy.instances["Head"][0]
    assert config["cfg"].hidden == 6 and isinstance(config["cfg"].kernel_init, OpaqueValue)
    assert callable(config["bias_init"]) and config["sizes"].out == 3
    serial = migrate_paths([src], Mode.CHECK, jobs=1, trace=trace)
    parallel = migrate_paths([src], Mode.CHECK, jobs=2, trace=trace)
    assert [r.output for r in parallel.files] == [r.output for r in serial.files]
    assert [r.findings for r in parallel.files] == [r.findings for r in serial.files]
    head = next(r for r in serial.files if r.rel.endswith("head.py"))
    assert "nnx.Linear" in head.output and not [f for f in head.findings if f.severity is Severity.MANUAL]
