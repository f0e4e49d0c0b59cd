"""Data classes of one file of the run followed in another (``linen2nnx/migrate/record_facts.py``):
an output class defined in a file the module pass skips (it never says ``linen``) sizes the layers of
the files that import it."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_paths
from linen2nnx.migrate.record_facts import of_source

OUTPUTS = """
import flax
import jax.numpy as jnp

from {base} import ModelOutput


@flax.struct.dataclass
class BaseOutput(ModelOutput):
    last_hidden_state: jnp.ndarray = None
    hidden_states: tuple = None
"""

MODEL = """
import flax.linen as nn

from {dots}outputs import BaseOutput


class Encoder(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x, return_dict: bool = True):
        h = nn.Dense(self.hidden)(x)
        if not return_dict:
            return (h,)
        return BaseOutput(last_hidden_state=h)


class Head(nn.Module):
    hidden: int

    def setup(self):
        self.encoder = Encoder(self.hidden)
        self.cls = nn.Dense(2)

    def __call__(self, x, return_dict: bool = True):
        return self.cls(self.encoder(x, return_dict=return_dict)[0])
"""


@pytest.mark.parametrize(
    "package, base, dots",
    [
        (True, "transformers.utils", "."),  # a package of the run, HF's class by its absolute name
        (False, "..utils", ".."),  # a relative `utils.ModelOutput` above the run: not taken for HF's
        (True, "mylib.utils", "."),  # another project's ModelOutput: not followed
    ],
)
def test_output_classes_of_another_file_size_the_importers(tmp_path, package, base, dots):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    if package:
        (root / "__init__.py").write_text("")
        (root / "sub" / "__init__.py").write_text("")
        model_dots = "."
        (root / "sub" / "outputs.py").write_text(textwrap.dedent(OUTPUTS.format(base=base)))
    else:
        model_dots = dots
        (root / "outputs.py").write_text(textwrap.dedent(OUTPUTS.format(base=base)))
    (root / "sub" / "model.py").write_text(textwrap.dedent(MODEL.format(dots=model_dots)))
    result = migrate_paths([tmp_path])
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    sized = "cls_in_features" not in model.output
    assert sized == (base == "transformers.utils")


def test_facts_of_a_file_without_data_classes_cost_no_parse():
    assert of_source("x = (", "m") == {}  # never parsed: no dataclass named
    assert of_source("import dataclasses\nx = (", "m") == {}  # does not parse: no facts


def namespace_layout(root, top: str) -> None:
    """``top/outputs.py`` and ``top/models/enc/model.py`` in folders without ``__init__.py``
    (namespace packages): only the relative imports say that the folders are packages."""
    (root / top / "models" / "enc").mkdir(parents=True)
    (root / top / "outputs.py").write_text(textwrap.dedent(OUTPUTS.format(base=".utils")))
    (root / top / "models" / "enc" / "model.py").write_text(textwrap.dedent(MODEL.format(dots="...")))


@pytest.mark.parametrize("top", ["transformers", "mylib"])
def test_output_classes_of_namespace_packages(tmp_path, top):
    """``from .utils import ModelOutput`` in a folder ``transformers`` names HF's class whether or not
    the folder has an ``__init__.py``; in a folder of another name it is another project's class."""
    namespace_layout(tmp_path, top)
    result = migrate_paths([tmp_path])
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert ("cls_in_features" not in model.output) == (top == "transformers")
    assert not any("TODO" in line for line in model.output.splitlines()) == (top == "transformers")


def test_relative_names_by_the_folders_they_climb():
    from linen2nnx.migrate.tuple_flow import climbed_qualname

    assert climbed_qualname(".utils.X", ("a", "b")) == "b.utils.X"
    assert climbed_qualname("..utils.X", ("a", "b")) == "a.utils.X"
    assert climbed_qualname("...utils.X", ("a", "b")) == ""  # climbs past the folders known
    assert climbed_qualname("utils.X", ("a", "b")) == ""  # absolute: resolved as it is
    assert climbed_qualname(".utils.X", ("a", "my-dir")) == ""  # no package name
