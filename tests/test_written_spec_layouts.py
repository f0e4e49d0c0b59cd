"""The pair spec ``migrate --trace --out-dir`` writes, loaded the way a user runs the next stage: in a
fresh process, from a ``src/`` layout whose migrated copy has the same package name, with the name map
written elsewhere (``--map``); and a trace whose Linen model fails is a named error, not a traceback."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MODEL = """\
import flax.linen as nn


class Model(nn.Module):
    width: int = 4

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)
"""
SPECS = """\
import jax.numpy as jnp
from linen2nnx.spec import LinenSide
from mypkg.model import Model


def linen_side():
    return LinenSide(model=Model(WIDTH), batch={"x": jnp.ones((2, 3))}, loss=lambda o, b: (o**2).sum(),
                     train_kwargs={}, eval_kwargs={})
"""


def _package(root: Path, width: str = "4") -> dict[str, str]:
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "__init__.py").write_text("")
    (root / "src" / "mypkg" / "model.py").write_text(MODEL)
    (root / "specs.py").write_text(SPECS.replace("WIDTH", width))
    paths = [root / "src", root, Path(__file__).parents[1]]  # the linen2nnx under test, not an installed one
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}


def _cli(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "linen2nnx", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_src_layout_spec_loads_the_linen_package_beside_its_migrated_copy(tmp_path):
    env = _package(tmp_path)
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "nnx_src" / "mypkg" / "model.py").is_file()  # the same package name as the Linen one
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")  # a fresh process
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert "PASS" in checked.stdout + checked.stderr


def test_the_written_spec_reads_the_name_map_where_map_put_it(tmp_path):
    env = _package(tmp_path)
    args = (
        "migrate",
        "src/mypkg/",
        "--out-dir",
        "nnx/",
        "--trace",
        "specs:linen_side",
        "--map",
        "maps/m.json",
    )
    done = _cli(tmp_path, env, *args)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "maps" / "m.json").is_file() and not (tmp_path / "nnx" / "linen2nnx-map.json").exists()
    assert "'../maps/m.json'" in (tmp_path / "nnx" / "linen2nnx_spec.py").read_text()
    checked = _cli(tmp_path, env, "check", "nnx/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_a_trace_whose_linen_model_fails_is_a_named_error(tmp_path):
    env = _package(tmp_path, width='"four"')  # nn.Dense("four"): Linen fails on the example batch
    done = _cli(tmp_path, env, "migrate", "src/mypkg/", "--out-dir", "nnx/", "--trace", "specs:linen_side")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "specs:linen_side" in done.stderr and "Model fails on its example batch" in done.stderr
    assert not (tmp_path / "nnx").exists()


def test_write_with_a_trace_says_no_spec_is_written(tmp_path):
    env = _package(tmp_path)
    done = _cli(tmp_path, env, "migrate", "src/mypkg/", "--write", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stderr
    assert "no pair spec is written without --out-dir" in textwrap.dedent(done.stderr).replace("\n", " ")
    assert not list(tmp_path.rglob("linen2nnx_spec.py"))


def test_a_batch_that_does_not_give_the_inputs_is_a_named_error():
    """A spec whose batch has no ``x`` and no ``inputs=``: an error naming the spec and what to set (it
    was a KeyError traceback, exit 1, the exit of a run with findings)."""
    import flax.linen as nn
    import numpy as np
    import pytest

    from linen2nnx.errors import L2NError
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import LinenSide

    side = LinenSide(
        model=nn.Dense(3), batch={"inputs": np.ones((2, 4), np.float32)}, loss=lambda o, b: o.sum()
    )
    with pytest.raises(L2NError, match=r"spec specs:side: the example batch does not give Dense's inputs"):
        trace_linen(side, "specs:side")


ENUM_MODEL = """\
import dataclasses
import enum

import flax.linen as nn


class Kind(enum.Enum):
    LOCAL = enum.auto()
    GLOBAL = enum.auto()


@dataclasses.dataclass(frozen=True)
class Config:
    kinds: tuple = (Kind.LOCAL, Kind.GLOBAL)
    features: int = 4


class Layer(nn.Module):
    kind: Kind
    features: int

    @nn.compact
    def __call__(self, x):
        scale = 10.0 if self.kind == Kind.LOCAL else 1.0
        return nn.Dense(self.features)(x) * scale


class Model(nn.Module):
    config: Config = Config()

    @nn.compact
    def __call__(self, x):
        for kind in self.config.kinds:
            x = Layer(kind=kind, features=self.config.features)(x)
        return x
"""


def test_an_enum_of_a_migrated_file_in_the_config_is_the_nnx_copys_member(tmp_path):
    """A config (a dataclass holding a tuple of enum members) whose enum a migrated file defines: the
    written spec hands the NNX twin the members of the migrated copy's enum, so its tests of the config
    go as Linen's do (the Linen members never equal them: check failed a correct migration, 0.9 off)."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(ENUM_MODEL)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stderr
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


CONFIG_CLASSES = """\
class TextConfig:
    def __init__(self, width=4):
        self.width = width


class ModelConfig:
    def __init__(self):
        self.text = TextConfig()
"""

CONFIG_CHECKED_MODEL = """\
import flax.linen as nn

from .config import ModelConfig, TextConfig


class Model(nn.Module):
    config: ModelConfig = ModelConfig()

    @nn.compact
    def __call__(self, x):
        scale = 10.0 if isinstance(self.config.text, TextConfig) else 1.0  # a causal mask's test, say
        return nn.Dense(self.config.text.width)(x) * scale
"""


def test_a_config_object_of_a_copied_file_is_an_object_of_the_nnx_copys_class(tmp_path):
    """A package migrated whole copies its config module too (no Flax in it): the NNX copy's
    ``isinstance(self.config.text, TextConfig)`` tests the copy's class, so the written spec hands the
    NNX twin objects of that class (Hugging Face CLIP's text attention went non-causal: check failed a
    correct migration)."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "config.py").write_text(CONFIG_CLASSES)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(CONFIG_CHECKED_MODEL)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "nnx_src" / "mypkg" / "config.py").read_text() == CONFIG_CLASSES  # copied as is
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


BRIDGED_MLP = """\
import flax.linen as nn


class Model(nn.Module):
    sizes: tuple = (5, 3)
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x):
        for i, size in enumerate(self.sizes):
            x = nn.Dense(size, name=f"hidden_{i}")(x)
            if i < len(self.sizes) - 1 and self.layer_norm and x.ndim > 1:  # a call-time test: kept
                x = nn.LayerNorm()(x)
        return x
"""


def test_a_root_kept_as_linen_has_no_sizes_to_give(tmp_path):
    """A root class kept behind the bridge gains size arguments its wrapper takes and ignores: the written
    spec asked for them ("give values for ['hidden_in_features']") although check passes without them."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(BRIDGED_MLP)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert "L2N-MOD-007" in done.stdout + done.stderr
    assert "UNRESOLVED_ARGS = []" in (tmp_path / "nnx_src" / "linen2nnx_spec.py").read_text()
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


HEAD_AFTER_BLOCK = """\
from typing import Sequence

import flax.linen as nn


class MLP(nn.Module):
    widths: Sequence[int] = (5, 4)

    @nn.compact
    def __call__(self, x):
        for w in sorted(self.widths, reverse=True):  # the last width of a call's result: unknown statically
            x = nn.relu(nn.Dense(w)(x))
        return x


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3, name="head")(MLP()(x))
"""


def test_a_root_size_no_config_explains_is_given_as_traced_by_the_spec(tmp_path):
    """The head's input width (the MLP's last width, the last of a loop over a call's result, unknown
    statically) is a required argument with its finding; no field of the root equals the traced 4, so the code keeps the
    argument, but the written spec builds the traced model with it, and check passes with no hand edit
    (the spec asked for it: "give values for ['head_in_features']")."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(HEAD_AFTER_BLOCK)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    said = done.stdout + done.stderr
    assert "required constructor argument head_in_features added" in said, said
    assert "gives the traced 4, right for the traced config only" in said
    spec = (tmp_path / "nnx_src" / "linen2nnx_spec.py").read_text()
    assert "TRACED_ARGS = {'head_in_features': 4}" in spec and "UNRESOLVED_ARGS = []" in spec
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


SIBLING_LAYERS = """\
import flax.linen as nn


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)
"""
SIBLING_MODEL = """\
import flax.linen as nn

from mypkg import layers


class Model(nn.Module):
    width: int = 4

    @nn.compact
    def __call__(self, x):
        return layers.Block(self.width)(x)
"""


def test_files_of_a_package_migrated_without_its_init_import_their_migrated_siblings(tmp_path):
    """The run names the files, not the folder, so the package's ``__init__.py`` is not migrated: the
    Linen side imports ``mypkg`` (and ``mypkg.layers`` with it) first, and the migrated model's ``from
    mypkg import layers`` found the Linen module on the package (Block() got rngs=: a false
    L2N-VERIFY-010, and convert / check failed with a TypeError)."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "layers.py").write_text(SIBLING_LAYERS)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(SIBLING_MODEL)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    files = ["src/mypkg/layers.py", "src/mypkg/model.py"]
    done = _cli(tmp_path, env, "migrate", *files, "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0 and "L2N-VERIFY-010" not in done.stdout + done.stderr, (
        done.stdout + done.stderr
    )
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


TWIN_BLOCK = """\
import flax.linen as nn


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x) * SCALE
"""
TWIN_NETS = """\
from typing import Any

import flax.linen as nn

from mypkg.b import Block


class Net(nn.Module):
    block_cls: Any = Block

    @nn.compact
    def __call__(self, x):
        return self.block_cls(4)(x)
"""


def test_a_class_in_the_config_is_its_own_twin_not_one_of_the_same_name(tmp_path):
    """``Net(block_cls=a.Block)`` while ``nets.py`` imports another ``Block`` (``from mypkg.b import
    Block``), and the NNX ``nets`` never imports ``a``: the written spec hands NNX ``a.Block`` (its module
    and qualified name, the copy of ``a`` imported then), not ``b.Block`` found by the bare name in
    ``nets`` (check failed a correct migration, forward 1.58 off)."""
    env = _package(tmp_path)
    for name, scale in (("a", "2.0"), ("b", "1.0")):
        (tmp_path / "src" / "mypkg" / f"{name}.py").write_text(TWIN_BLOCK.replace("SCALE", scale))
    (tmp_path / "src" / "mypkg" / "nets.py").write_text(TWIN_NETS)
    specs = SPECS.replace("from mypkg.model import Model", "from mypkg import a\nfrom mypkg.nets import Net")
    (tmp_path / "specs.py").write_text(specs.replace("Model(WIDTH)", "Net(block_cls=a.Block)"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0 and "L2N-VERIFY-010" not in done.stdout + done.stderr, (
        done.stdout + done.stderr
    )
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


PER_ELEMENT = """\
from typing import Any, Callable, Sequence

import flax.linen as nn


class Model(nn.Module):
    widths: Sequence[int] = (5, 4)
    act: Callable[..., Any] = nn.relu

    def setup(self):
        self.layers = [nn.Dense(w) for i, w in enumerate(self.widths)]

    def __call__(self, x):
        for layer in self.layers:
            x = self.act(layer(x))
        return x
"""


def test_one_traced_size_per_element_is_given_by_the_spec(tmp_path):
    """An activation held in a field hides each layer's output size from the flow: one input size per
    element of the setup() list is asked for (a tuple); the spec gives the traced (3, 5)."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(PER_ELEMENT)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert "gives the traced (3, 5), right for the traced config only" in done.stdout + done.stderr
    spec = (tmp_path / "nnx_src" / "linen2nnx_spec.py").read_text()
    assert "TRACED_ARGS = {'layers_in_features': (3, 5)}" in spec and "UNRESOLVED_ARGS = []" in spec
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


NESTED = (
    PER_ELEMENT.replace("class Model(nn.Module):", "class Stack(nn.Module):")
    + """

class Model(nn.Module):
    def setup(self):
        self.stack = Stack()

    def __call__(self, x):
        return self.stack(x)
"""
)

CELL_AFTER_BLOCK = HEAD_AFTER_BLOCK.replace(
    '        return nn.Dense(3, name="head")(MLP()(x))',
    "        h = MLP()(x)\n"
    "        carry, y = nn.SimpleCell(6, name='cell')(jnp.zeros((x.shape[0], 6)), h)\n"
    "        return y",
).replace("import flax.linen as nn", "import flax.linen as nn\nimport jax.numpy as jnp")


SHARED_CLASSES = """\
import flax.linen as nn


class Attention(nn.Module):
    width: int = 8

    def setup(self):
        self.key = nn.Dense(self.width)

    def __call__(self, h, kv=None):
        return self.key(kv) if kv is not None else self.key(h)


class Layer(nn.Module):
    cross: bool = False

    def setup(self):
        self.attention = Attention()
        if self.cross:
            self.crossattention = Attention()

    def __call__(self, h, enc=None):
        h = self.attention(h)
        return self.crossattention(h, enc) if enc is not None else h


class Model(nn.Module):
    def setup(self):
        self.proj = nn.Dense(8)
        self.layers = [Layer(name=str(i)) for i in range(2)]

    def __call__(self, x):
        x = self.proj(x)
        for layer in self.layers:
            x = layer(x)
        return x
"""


OPTIONAL_STACK = (
    PER_ELEMENT.replace("class Model(nn.Module):", "class Stack(nn.Module):")
    + """

class Model(nn.Module):
    adapter: bool = False

    def setup(self):
        self.proj = nn.Dense(3)
        self.stack = Stack() if self.adapter else None

    def __call__(self, x):
        x = self.proj(x)
        return self.stack(x) if self.stack is not None else x
"""
)


@pytest.mark.parametrize(
    "source, traced",
    [
        # a class the root builds once asks its builder for its sizes: the root's spec gives its trace
        (NESTED, "{'stack_layers_in_features': (3, 5)}"),
        # a cell's call is (carry, x): its input size is x's (4), not the carry's (6), which the trace
        # took for the input and matched to the cell's own features (wrong, with no finding under --write)
        (CELL_AFTER_BLOCK, "{'cell_in_features': 4}"),
        # sizes of classes built several times (each element's), found by their layers' Linen paths
        # ('0', 'attention', 'key'); None for a layer of a module the traced config never builds
        (
            SHARED_CLASSES,
            "{'layers_attention_key_in_features': (8, 8), 'layers_crossattention_key_in_features': (None, None)}",
        ),
        # a list of a holder built under a config test that the traced config does not build: its sizes
        # are read by nobody, and the tuple's length is unknown
        (OPTIONAL_STACK, "{'stack_layers_in_features': None}"),
    ],
    ids=["nested", "cell", "several-instances", "optional-list"],
)
def test_traced_sizes_of_nested_classes_and_cells_are_given_by_the_spec(source, traced, tmp_path):
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(source)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    spec = (tmp_path / "nnx_src" / "linen2nnx_spec.py").read_text()
    assert f"TRACED_ARGS = {traced}" in spec and "UNRESOLVED_ARGS = []" in spec, spec
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


LABELLED = """\
import flax.linen as nn


class Model(nn.Module):
    c_dim: int = 0
    width: int = 4

    @nn.compact
    def __call__(self, z, c=None):
        x = nn.Dense(self.width)(z)
        if self.c_dim > 0:
            x = x + nn.Dense(self.width)(c)
        return x
"""


def test_an_optional_input_the_example_leaves_out_has_no_size_to_give(tmp_path):
    """``c=None``, read only when ``c_dim > 0``: its size argument defaults to None (a config without
    labels builds without it), and the spec of an example batch without ``c`` gives none (it indexed the
    batch past its end)."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(LABELLED)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model()"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stdout + done.stderr
    migrated = (tmp_path / "nnx_src" / "mypkg" / "model.py").read_text()
    assert "c_features: int | None = None" in migrated
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


CONV_BLOCK = """\
import flax.linen as nn


class ConvBlock(nn.Module):
    n_filters: int
    strides: tuple = (1, 1)

    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.Conv(self.n_filters, (3, 3), self.strides)(x))
"""
STEM = """\
from typing import Any, Callable

import flax.linen as nn

from .blocks import ConvBlock

ModuleDef = Callable[..., Any]


class Model(nn.Module):
    conv_block_cls: ModuleDef = ConvBlock
    width: int = 4

    @nn.compact
    def __call__(self, x):
        x = self.conv_block_cls(self.width, strides=(2, 2))(x)
        return self.conv_block_cls(self.width * 2)(x).mean(axis=(1, 2))
"""


def test_a_factory_field_bound_to_a_class_of_another_file_builds_it_in_init(tmp_path):
    """jax-resnet's ``conv_block_cls: ModuleDef = ConvBlock`` after ``from .common import ConvBlock``: the
    field builds that class of the run (it was L2N-MOD-008, the class kept as Linen), with its Linen
    auto-names (``ConvBlock_0``), and the migrated pair checks out."""
    env = _package(tmp_path)
    (tmp_path / "src" / "mypkg" / "blocks.py").write_text(CONV_BLOCK)
    (tmp_path / "src" / "mypkg" / "model.py").write_text(STEM)
    specs = SPECS.replace("Model(WIDTH)", "Model()").replace("jnp.ones((2, 3))", "jnp.ones((2, 8, 8, 3))")
    (tmp_path / "specs.py").write_text(specs)
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0, done.stdout + done.stderr
    migrated = (tmp_path / "nnx_src" / "mypkg" / "model.py").read_text()
    assert (
        "self.conv_block_0 = self.conv_block_cls(self.width, strides=(2, 2), in_features=in_features"
        in migrated
    )
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_a_norm_between_layers_converts_and_checks_out(tmp_path):
    """The same MLP with a norm between its layers on a test of the loop's names and the config only
    (``if i < len(self.sizes) - 1 and self.layer_norm``): the loop is replayed in ``__init__`` with that
    test, and the pair checks out from a fresh process."""
    env = _package(tmp_path)
    model = BRIDGED_MLP.replace(" and x.ndim > 1:  # a call-time test: kept", ":")
    (tmp_path / "src" / "mypkg" / "model.py").write_text(model)
    (tmp_path / "specs.py").write_text(SPECS.replace("Model(WIDTH)", "Model(sizes=(5, 4, 3))"))
    done = _cli(tmp_path, env, "migrate", "src/", "--out-dir", "nnx_src/", "--trace", "specs:linen_side")
    assert done.returncode == 0 and "L2N-MOD-007" not in done.stdout + done.stderr, done.stdout + done.stderr
    migrated = (tmp_path / "nnx_src" / "mypkg" / "model.py").read_text()
    assert (
        "if i < len(self.sizes) - 1 and self.layer_norm:\n" in migrated
        and "next(layer_norm__iter)" in migrated
    )
    checked = _cli(tmp_path, env, "check", "nnx_src/linen2nnx_spec.py")
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_a_bare_name_is_a_twin_only_where_the_linen_module_binds_it_to_that_class(monkeypatch):
    """Where the class's own module has no NNX copy (an NNX module loaded on its own), the class of
    the same name in the NNX module is its twin only if the Linen module of that name binds the name
    to this very class: another ``Block`` there is another class, whose twin would compute otherwise."""
    import types

    import flax.linen as nn
    from flax import nnx

    from linen2nnx.spec import nnx_config_value

    def linen_block(module: str) -> type:
        return type("Block", (nn.Module,), {"__module__": module, "__call__": lambda self, x: x})

    ours, other = linen_block("l2n_test_elsewhere"), linen_block("l2n_test_home")
    nnx_home = types.ModuleType("l2n_test_home")
    nnx_home.Block = type("Block", (nnx.Module,), {})
    linen_home = types.ModuleType("l2n_test_home")
    monkeypatch.setitem(sys.modules, "l2n_test_home", linen_home)
    linen_home.Block = other
    assert nnx_config_value(ours, nnx_home) is ours  # not the NNX twin of `other`
    linen_home.Block = ours
    assert nnx_config_value(ours, nnx_home) is nnx_home.Block
