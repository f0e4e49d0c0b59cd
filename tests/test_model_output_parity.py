"""Numeric parity of Hugging Face-style blocks that return a tuple or a ``ModelOutput`` by a call-time
flag (fixture ``model_outputs``): the sizes the migration reads through ``outputs[0]``,
``outputs.last_hidden_state`` and ``h[..., 0, :]`` must build an NNX model that computes the same.

transformers is no test dependency: both sides import a stand-in ``transformers.utils.ModelOutput``
with the behaviour the migration relies on -- the fields that are not None, in declaration order,
are what an integer index or a slice reads; a field is read as an attribute.
"""

import collections
import dataclasses
import sys
import types

import numpy as np
import pytest
from fixture_parity import assert_parity, build, grad_paths
from fixture_paths import fixture


class ModelOutput(collections.OrderedDict):
    """The part of Hugging Face's ``ModelOutput`` the fixture uses."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                collections.OrderedDict.__setitem__(self, field.name, value)

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict(self.items())[key]
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple:
        return tuple(self[k] for k in self.keys())


def add_start_docstrings(*docstr):
    """Hugging Face's class decorator: prepends text to ``__doc__`` and returns the class itself."""

    def decorate(fn):
        fn.__doc__ = "".join(docstr) + (fn.__doc__ or "")
        return fn

    return decorate


@pytest.fixture
def model_output(monkeypatch):
    package, utils = types.ModuleType("transformers"), types.ModuleType("transformers.utils")
    utils.ModelOutput = ModelOutput
    utils.add_start_docstrings = add_start_docstrings
    package.utils = utils
    monkeypatch.setitem(sys.modules, "transformers", package)
    monkeypatch.setitem(sys.modules, "transformers.utils", utils)


@pytest.mark.parametrize("return_dict", [True, False])
def test_outputs_read_by_index_field_and_slice(tmp_path, model_output, return_dict):
    linen_mod, nnx_mod, result, map_path = build("model_outputs", tmp_path)
    assert "_in_features: int" not in result.output  # every head sized statically
    x = np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Model(return_dict=return_dict),
            lambda rngs: nnx_mod.Model(return_dict=return_dict, in_features=5, rngs=rngs),
            x,
            map_path,
        )
    )
    assert {"classifier/kernel", "first_head/kernel", "backbone/pooler/dense_0/kernel"} <= grads


@pytest.mark.parametrize("return_dict", [True, False])
def test_an_output_handed_on_in_another_object_keeps_its_elements(tmp_path, model_output, return_dict):
    """``DualOutput(..., backbone_output=outputs)`` builds a data class of the run from the backbone's
    output: it changes nothing of it, so ``outputs[0]`` still sizes the projection."""
    linen_mod, nnx_mod, result, map_path = build("model_outputs", tmp_path)
    assert "self.projection = nnx.Linear(self.hidden, self.labels" in result.output
    x = np.random.default_rng(1).normal(size=(2, 3, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Dual(return_dict=return_dict),
            lambda rngs: nnx_mod.Dual(return_dict=return_dict, in_features=5, rngs=rngs),
            x,
            map_path,
        )
    )
    assert "projection/kernel" in grads


def test_model_output_stand_in_indexes_fields_not_none(model_output):
    import flax
    import jax.numpy as jnp

    @flax.struct.dataclass
    class Out(ModelOutput):
        a: object = None
        b: object = None
        c: object = None

    out = Out(a=None, b=jnp.ones(2), c=jnp.zeros(3))
    assert out[0].shape == (2,) and out[1].shape == (3,) and len(out[1:]) == 1 and out.a is None


@pytest.mark.parametrize("return_dict", [True, False])
def test_outputs_of_a_namespace_package(tmp_path, model_output, return_dict):
    """The output class in a folder ``transformers`` without ``__init__.py`` (test_record_facts): the
    head's input size read through ``encoder(x)[0]`` builds an NNX model that computes the same. Both
    sides run with the output class defined beside them instead of imported relatively."""
    from test_record_facts import OUTPUTS, namespace_layout

    from linen2nnx.migrate import migrate_paths
    from linen2nnx.spec import import_file

    namespace_layout(tmp_path / "run", "transformers")
    result = migrate_paths([tmp_path / "run"])
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert "cls_in_features" not in model.output  # the head sized by the encoder's output
    outputs = OUTPUTS.format(base="transformers.utils")
    for side, text in (("linen_src", model.source), ("nnx_src", model.output)):
        body = text.replace("from ...outputs import BaseOutput\n", "")
        (tmp_path / f"{side}.py").write_text(outputs + body)
    result.name_map.save(tmp_path / "map.json")
    linen_mod, nnx_mod = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    x = np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Head(hidden=4),
            lambda rngs: nnx_mod.Head(hidden=4, in_features=5, rngs=rngs),
            x,
            tmp_path / "map.json",
            train_kwargs={"return_dict": return_dict},
            eval_kwargs={"return_dict": return_dict},
        )
    )
    assert {"cls/kernel", "encoder/dense_0/kernel"} <= grads


@pytest.mark.parametrize("return_dict", [True, False])
def test_sum_of_block_outputs_read_by_index(tmp_path, model_output, return_dict):
    """``decoder_outputs + encoder_outputs`` (fixture ``model_outputs_sum``): the head sized by the
    decoder's hidden states, ``outputs[0]`` on either path, computes the same."""
    linen_mod, nnx_mod, result, map_path = build("model_outputs_sum", tmp_path)
    assert "_in_features: int" not in result.output  # the head sized statically
    x = np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Model(return_dict=return_dict),
            lambda rngs: nnx_mod.Model(return_dict=return_dict, in_features=5, rngs=rngs),
            x,
            map_path,
        )
    )
    assert {"lm_head/kernel", "model/decoder/dense_0/kernel", "model/encoder/dense_0/kernel"} <= grads


def test_docstring_decorator_kept_without_finding(tmp_path, model_output):
    """``@add_start_docstrings(...)`` (fixture ``docstring_decorator``) stays on the NNX class with no
    finding, imported absolutely or relatively, and the class computes the same with its docstring."""
    from linen2nnx.migrate import migrate_source

    linen_mod, nnx_mod, _, map_path = build("docstring_decorator", tmp_path)
    assert nnx_mod.Head.__doc__.startswith("The head, without anything on top.A classification head.")
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    assert_parity(linen_mod.Head(), lambda rngs: nnx_mod.Head(in_features=5, rngs=rngs), x, map_path)
    relative = (
        fixture("docstring_decorator_in.py").read_text().replace("from transformers.utils", "from ...utils")
    )
    rules = {f.rule for f in migrate_source(relative, "m.py", module_name="transformers.models.m.m").findings}
    assert "L2N-MOD-017" not in rules
    unknown = relative.replace("from ...utils import", "from ...other import")
    rules = {f.rule for f in migrate_source(unknown, "m.py", module_name="transformers.models.m.m").findings}
    assert "L2N-MOD-017" in rules


def test_docstring_decorator_of_a_namespace_package_kept_without_finding(tmp_path):
    """A copy of Hugging Face's model files without ``__init__.py`` (a namespace package): the module's
    own name is ``m``, and ``from ...utils import add_start_docstrings`` is read from the folders it
    climbs, ``transformers.utils``. Climbing folders of another name is still a finding."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    relative = (
        fixture("docstring_decorator_in.py").read_text().replace("from transformers.utils", "from ...utils")
    )
    for root, expected in (("transformers", False), ("mylib", True)):
        folder = tmp_path / root / "models" / "m"
        folder.mkdir(parents=True)
        (folder / "m.py").write_text(relative)
        rules = {f.rule for f in migrate_paths([tmp_path / root], Mode.CHECK, jobs=1).findings}
        assert ("L2N-MOD-017" in rules) is expected, (root, rules)
