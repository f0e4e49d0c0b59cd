"""A size a class cannot compute is a manual finding only at the classes no class of the run builds
(linen2nnx.migrate.caller_sizes): its builders pass it, in the same file or from another one."""

import numpy as np
from fixture_parity import assert_parity, build

from linen2nnx.migrate import migrate_paths, migrate_source
from linen2nnx.migrate.engine import Mode

MIXER = """
import flax.linen as nn


class Mixer(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = jnp.repeat(x, 2, axis=-1)
        return nn.Dense(self.features)(x)
"""
MODEL = """
import flax.linen as nn

from pkg.blocks import Mixer


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        return Mixer(3)(nn.Dense(4)(x))
"""


def _rules(result, severity=None):
    return sorted(
        f.rule for f in result.findings if "SHAPE" in f.rule and severity in (None, f.severity.value)
    )


def _migrated_package(tmp_path, blocks: str, model: str):
    """The results for ``pkg/blocks.py`` and ``pkg/model.py`` (which imports it), migrated as one run."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "blocks.py").write_text(blocks)
    (pkg / "model.py").write_text(model)
    by_file = {r.path.name: r for r in migrate_paths([pkg], Mode.CHECK, base=tmp_path).files}
    return by_file["blocks.py"], by_file["model.py"]


def test_a_built_class_is_settled_and_computes_as_linen(tmp_path):
    linen_mod, nnx_mod, result, map_path = build("builder_passes", tmp_path)
    assert _rules(result) == ["L2N-SHAPE-002", "L2N-SHAPE-003", "L2N-SHAPE-005"]
    assert result.output.count("TODO(linen2nnx)") == 1  # the model's: a person supplies the number
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    assert_parity(
        linen_mod.Model(),
        lambda rngs: nnx_mod.Model(in_features=5, mixer_0_dense_0_in_features=8, rngs=rngs),
        x,
        map_path,
    )


def test_a_class_nothing_builds_keeps_its_manual_finding():
    result = migrate_source(MIXER, "blocks.py", module_name="blocks")
    assert _rules(result, "manual") == ["L2N-SHAPE-003"]
    assert "TODO(linen2nnx): L2N-SHAPE-003" in result.output


def test_a_function_that_builds_the_class_does_not_settle_it():
    source = MIXER + "\n\ndef make():\n    return Mixer(3)\n"
    result = migrate_source(source, "blocks.py", module_name="blocks")
    assert _rules(result, "manual") == ["L2N-SHAPE-003"]


def test_a_builder_in_another_file_settles_the_class(tmp_path):
    blocks, model = _migrated_package(tmp_path, MIXER, MODEL)
    assert _rules(blocks) == ["L2N-SHAPE-005"] and "TODO" not in blocks.output
    assert _rules(model, "manual") == ["L2N-SHAPE-003"]
    assert "mixer_0_dense_0_in_features" in model.output
    # the same files one at a time: the block's builder is not known, so it stays manual
    alone = migrate_source(MIXER, "blocks.py", module_name="pkg.blocks")
    assert _rules(alone, "manual") == ["L2N-SHAPE-003"]


LABELLED = """
import flax.linen as nn


class Labelled(nn.Module):
    c_dim: int = 0

    @nn.compact
    def __call__(self, z, c=None):
        x = nn.Dense(4)(z)
        if self.c_dim > 0:
            x = x + nn.Dense(4)(c)
        return x
"""
LABELS_USER = """
import flax.linen as nn

from pkg.blocks import Labelled


class Plain(nn.Module):
    @nn.compact
    def __call__(self, z):
        return Labelled()(nn.Dense(3)(z))


class Tagged(nn.Module):
    @nn.compact
    def __call__(self, z, tags):
        return Labelled(c_dim=2)(z, c=nn.Dense(5)(tags))
"""


def test_the_size_of_an_optional_input_is_passed_only_where_the_input_is(tmp_path):
    """``c=None``: its size argument defaults to None, so a builder in another file that leaves ``c`` out
    passes none (it was asked for: a manual size no config needs), and one that gives it passes its size."""
    blocks, model = _migrated_package(tmp_path, LABELLED, LABELS_USER)
    assert "c_features: int | None = None" in blocks.output
    assert _rules(model, "manual") == [] and not [f for f in model.findings if "VERIFY" in f.rule]
    assert "Labelled(in_features=3, rngs=rngs)" in model.output
    assert "Labelled(c_dim=2, in_features=in_features, c_features=5, rngs=rngs)" in model.output
