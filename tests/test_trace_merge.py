"""Traces of several configs of one model, merged (``trace_merge.merge_traces``): a class only one
config builds is sized from that config's trace, and a width the dataflow gives as a config expression
(``self.features * self.expansion``) is taken for a traced input shape when each traced instance saw
exactly its value, as is the size after a reduction over leading axes that every config's trace
shows leaves the last axis."""

import numpy as np
from fixture_parity import assert_parity

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.trace import Trace, trace_linen
from linen2nnx.migrate.trace_merge import merge_traces
from linen2nnx.spec import LinenSide, import_file

SOURCE = '''
from functools import partial
from typing import Any

import flax.linen as nn
import jax.numpy as jnp


class Norm(nn.Module):
    """Sizes its parameter from the input's shape, as a copied BatchNorm does."""

    @nn.compact
    def __call__(self, x):
        shape = tuple(d if i == x.ndim - 1 else 1 for i, d in enumerate(x.shape))
        scale = self.param("scale", nn.initializers.ones, shape)
        return x * scale


class Basic(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return Norm()(nn.Dense(self.features)(x))


class Wide(nn.Module):
    features: int
    expansion: int = 3

    @nn.compact
    def __call__(self, x):
        return Norm()(nn.Dense(self.features * self.expansion)(x))


class Net(nn.Module):
    block: Any = Basic
    widths: tuple = (2, 4)

    @nn.compact
    def __call__(self, x):
        for width in self.widths:
            x = self.block(features=width)(x)
        x = jnp.mean(x, axis=(1,))  # keeps the last axis only if x has rank 3: the traces confirm it
        return nn.Dense(3)(x)


WideNet = partial(Net, block=Wide)
'''


def _trace(module, model) -> Trace:
    x = np.ones((2, 4, 5), np.float32)
    side = LinenSide(
        model=model, batch={"x": x}, loss=lambda out, b: (out**2).mean(), train_kwargs={}, eval_kwargs={}
    )
    return trace_linen(side)


def test_merged_traces_size_the_blocks_of_each_config_and_keep_parity(tmp_path):
    (tmp_path / "linen_src.py").write_text(SOURCE)
    linen = import_file(tmp_path / "linen_src.py")
    basic_only = _trace(linen, linen.Net())
    trace = merge_traces([basic_only, _trace(linen, linen.WideNet())])
    alone = migrate_source(SOURCE, "blocks.py", module_name="blocks", trace=basic_only)
    assert any(f.severity == "manual" and "Wide" in f.message for f in alone.findings)  # Wide untraced

    result = migrate_source(SOURCE, "blocks.py", module_name="blocks", trace=trace)
    assert [f for f in result.findings if f.severity == "manual"] == []
    assert "x_shape=(1, 1, self.features * self.expansion)" in result.output
    assert "x_shape=(1, 1, self.features)" in result.output
    (tmp_path / "nnx_src.py").write_text(result.output)
    nnx = import_file(tmp_path / "nnx_src.py")
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    x = np.random.default_rng(0).normal(size=(2, 4, 5)).astype(np.float32)
    for model, block in ((linen.Net(), nnx.Basic), (linen.WideNet(), nnx.Wide)):
        assert_parity(model, lambda rngs, b=block: nnx.Net(block=b, in_features=5, rngs=rngs), x, map_path)


def test_merge_renumbers_parents_and_drops_axes_the_configs_disagree_on():
    def trace(parents, read):
        return Trace(
            child_inputs={("Net", "Block_0"): [(2, 3)], ("Block", "Norm_0"): [(2, 4)]},
            instances={"Net": [{}], "Block": [{"f": 4}]},
            root_class="Net",
            root_module="m",
            root_inputs=[(2, 3)],
            dims_read={("Block", "Norm_0"): read},
            child_parents={("Block", "Norm_0"): parents},
        )

    merged = merge_traces([trace([0], (-1,)), trace([0], (-1,)), trace([0], (-2, -1))])
    assert merged.instances["Block"] == [{"f": 4}] * 3
    assert merged.child_parents[("Block", "Norm_0")] == [0, 1, 2]  # each call with its own instance
    assert merged.child_parents[("Net", "Block_0")] == [None] * 3  # not recorded: unpaired
    assert merged.shapes_for("Block", "Norm_0") == [(2, 4)] * 3
    assert ("Block", "Norm_0") not in merged.dims_read  # (-1,) in two configs, (-2, -1) in the third
    assert merge_traces([trace([0], (-1,))] * 2).dims_read == {("Block", "Norm_0"): (-1,)}


def test_merge_keeps_the_first_traces_module_paths_only():
    """A size looked up by Linen path (trace_paths.py) must come from the model the spec builds, the
    first trace's: the other configs' instances get no path, and their paths' inputs are dropped."""

    def trace(width):
        return Trace(
            child_inputs={("Net", "block"): [(2, width)]},
            instances={"Net": [{}], "Block": [{}]},
            root_class="Net",
            root_module="m",
            root_inputs=[(2, 3)],
            path_inputs={("block",): [(2, width)]},
            instance_paths={"Net": [()], "Block": [("block",)]},
        )

    merged = merge_traces([trace(3), trace(5)])
    assert merged.instance_paths == {"Net": [(), None], "Block": [("block",), None]}
    assert merged.path_inputs == {("block",): [(2, 3)]}
    assert merged.instances["Block"] == [{}, {}]
