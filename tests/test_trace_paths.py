"""Sizes looked up in a trace by Linen path (``trace_paths.traced_at``): one size per layer, a tuple
per list element, None only for a layer whose holder the traced model never built and NNX builds
under a config test too (``?cross``)."""

import jax.numpy as jnp
import numpy as np

from linen2nnx.migrate.trace import Trace
from linen2nnx.migrate.trace_paths import MISSING, traced_at


def _trace(path_inputs, instance_paths, defined):
    return Trace(
        child_inputs={},
        instances={k: [{}] * len(v) for k, v in instance_paths.items()},
        root_class="Net",
        root_module="m",
        root_inputs=[(2, 3)],
        path_inputs=path_inputs,
        instance_paths=instance_paths,
        defined=defined,
    )


TRACE = _trace(
    {
        ("0", "attn", "key"): [(2, 5, 8)],
        ("1", "attn", "key"): [(2, 5, 8)],
        ("0", "mlp", "up"): [(2, 5, 8), (2, 5, 6)],  # two calls, two sizes: no one size
    },
    {"Net": [()], "Layer": [("0",), ("1",)], "Attn": [("0", "attn"), ("1", "attn")], "Mlp": [("0", "mlp")]},
    {(): ("0", "1"), ("0",): ("attn", "mlp"), ("1",): ("attn",)},  # what each one's setup() defined
)


def test_one_size_per_element_of_a_list():
    assert traced_at(TRACE, (), ("{i}", "attn", "key")) == (8, 8)


def test_a_holder_its_config_test_defined_but_no_call_reached_is_missing():
    """``Model(cross=True)`` traced without encoder states: setup() defined the cross-attention (NNX
    builds it, and needs its size), but nothing called it. Only a holder never defined gets None."""
    trace = _trace({}, {"Net": [()], "Layer": [("0",)]}, {(): ("0",), ("0",): ("attn", "cross")})
    assert traced_at(trace, (), ("0", "?cross", "key")) is MISSING
    assert traced_at(trace, (), ("0", "?other", "key")) is None


def test_a_layer_of_a_holder_never_built_is_none_and_of_one_built_but_unseen_is_missing():
    assert traced_at(TRACE, (), ("{i}", "?cross", "key")) == (None, None)  # no ('0', 'cross') instance
    # a holder NNX builds always (Linen built it only once called, a pooler never applied): a size
    # the trace cannot tell
    assert traced_at(TRACE, (), ("{i}", "pooler", "dense")) is MISSING
    assert traced_at(TRACE, (), ("0", "attn", "value")) is MISSING  # 'attn' ran, its 'value' never did


def test_disagreeing_calls_and_elements_the_trace_never_saw_are_missing():
    assert traced_at(TRACE, (), ("0", "mlp", "up")) is MISSING
    assert traced_at(TRACE, (), ("layers_{i}", "attn", "key")) is MISSING  # no element `layers_0`
    assert traced_at(TRACE, ("1",), ("attn", "key")) == 8  # from an instance's own path


MULTI = """\
import flax.linen as nn


class Attention(nn.Module):
    width: int

    def setup(self):
        self.key = nn.Dense(self.width)

    def __call__(self, h, kv=None):
        return self.key(kv) if kv is not None else self.key(h)


class Layer(nn.Module):
    width: int

    def setup(self):
        self.proj = nn.Dense(self.width)
        self.attention = Attention(self.width)

    def __call__(self, h):
        return self.attention(self.proj(h))


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = Layer(6)(nn.Dense(3)(x))
        return Layer(4)(nn.Dense(5)(x))
"""


def test_a_size_each_instance_saw_at_its_layers_path_is_the_config_value_that_matches(tmp_path):
    """The key projection's input is the attention's input or a cross-attention's: the flow cannot
    tell. Layer is built twice (widths 6 and 4, fed widths 3 and 5); the trace saw 6 and 4 at each
    one's ``attention/key``, which ``self.width`` equals in each and no input of Layer has: Layer
    passes it, nobody is asked, and the result has parity."""
    import jax.numpy as jnp
    import numpy as np

    from linen2nnx.equivalence import check, perturbed
    from linen2nnx.migrate import Severity, migrate_source
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import LinenSide, ModelPair, import_file

    (tmp_path / "linen_src.py").write_text(MULTI)
    side = LinenSide(
        model=import_file(tmp_path / "linen_src.py").Model(),
        batch={"x": np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    result = migrate_source(MULTI, "multi.py", module_name="multi", trace=trace_linen(side))
    assert not [f for f in result.findings if f.severity is Severity.MANUAL], result.findings
    traced = [f.message for f in result.findings if f.rule == "L2N-SHAPE-001"]
    assert any(
        m.startswith("key_in_features of Attention = self.width (traced at attention/key") for m in traced
    )
    assert "key_in_features=self.width" in result.output
    (tmp_path / "nnx_src.py").write_text(result.output)
    nnx_mod = import_file(tmp_path / "nnx_src.py")
    result.name_map.save(tmp_path / "map.json")
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_mod.Model(in_features=3, rngs=rngs),
        name_map=tmp_path / "map.json",
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


def test_a_module_or_list_of_an_optional_holder_never_built_is_none():
    """An adapter built only under a config test, which the traced config does not build: its own input
    size and its list's element sizes are read by nobody (a tuple would not even know its length)."""
    assert traced_at(TRACE, (), ("?adapter",)) is None
    assert traced_at(TRACE, (), ("?adapter", "{i}", "dense")) is None
    assert traced_at(TRACE, (), ("adapter", "{i}", "dense")) is MISSING  # built always in NNX: asked


def test_a_size_equal_to_an_input_width_of_the_builder_or_to_one_is_not_taken(tmp_path):
    """Where the traced size is also the width of one of the builder's own inputs (the key may read
    that input, whose width other configs change) or is 1 (a parameter of size 1 broadcasts against
    any width and runs, wrong), a config value equal to it proves nothing: the size stays asked for."""
    from linen2nnx.migrate import migrate_source
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import LinenSide, import_file

    variants = {  # the key reads Layer's own input (widths 6 and 4, as `self.width`); a width of 1
        "input": MULTI.replace("self.attention(self.proj(h))", "self.attention(h)")
        .replace("nn.Dense(3)(x)", "nn.Dense(6)(x)")
        .replace("nn.Dense(5)(x)", "nn.Dense(4)(x)"),
        "one": MULTI.replace("Layer(6)", "Layer(1)").replace("Layer(4)", "Layer(1)"),
    }
    for why, source in variants.items():
        (tmp_path / f"linen_{why}.py").write_text(source)
        side = LinenSide(
            model=import_file(tmp_path / f"linen_{why}.py").Model(),
            batch={"x": np.ones((2, 3), np.float32)},
            loss=lambda out, batch: jnp.mean(out**2),
            train_kwargs={},
            eval_kwargs={},
        )
        result = migrate_source(source, "multi.py", module_name="multi", trace=trace_linen(side))
        claims = [
            f.message for f in result.findings if f.message.startswith("key_in_features of Attention =")
        ]
        assert not claims, (why, claims)
