"""Classes that hold nothing (linen2nnx/migrate/stateless_classes.py): built in ``__init__`` even where
Linen builds them under a call-time test, in the same file or from another file's summary; a class
that may create anything stays a finding. Numeric parity: the L2N-MOD-003/stateless_call_time fixture
in test_module_forms_parity.py."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.engine import Mode, migrate_paths

USER = """
class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(4)(x)
        if not train:
            x = Tag(name="representation")(x)
        return x
"""


def _tag(body: str, extra: str = "") -> str:
    return (
        "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Tag(nn.Module):\n"
        + extra
        + "    @nn.compact\n    def __call__(self, x):\n"
        + textwrap.indent(body, " " * 8)
        + "\n"
    )


def _manual(findings, path_end="") -> list[str]:
    return [f.message for f in findings if f.severity.value == "manual" and f.path.endswith(path_end)]


@pytest.mark.parametrize("body", ["return x", "return jnp.tanh(x) * 2.0"])
def test_a_class_that_holds_nothing_is_built_under_a_call_time_test(body):
    result = migrate_source(_tag(body) + USER, "model.py", module_name="model")
    assert _manual(result.findings) == []
    assert "self.representation = Tag(rngs=rngs)" in result.output
    assert migrate_source(result.output, "model.py", module_name="model").output == result.output


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        ("return nn.Dense(3)(x)", ""),  # builds a layer
        ("return x * self.param('s', nn.initializers.ones, (1,))", ""),  # a parameter
        ("return self.helper(x)", ""),  # a method that may create anything
        ("return x", "    size: int = dataclasses.field(default=3)\n\n"),  # a call in the class body
    ],
)
def test_a_class_that_may_create_something_stays_a_finding(body, extra):
    src = "import dataclasses\n" + _tag(body, extra) + USER
    result = migrate_source(src, "model.py", module_name="model")
    assert any("call-time value" in m for m in _manual(result.findings)), _manual(result.findings)


def test_another_files_class_that_holds_nothing_comes_from_its_summary(tmp_path):
    (tmp_path / "layers.py").write_text(_tag("return x"))
    (tmp_path / "model.py").write_text("import flax.linen as nn\n\nfrom layers import Tag\n" + USER)
    result = migrate_paths([tmp_path], Mode.DIFF)
    out = next(f.output for f in result.files if f.path.name == "model.py")
    assert _manual(result.findings, "model.py") == []
    assert "self.representation = Tag(rngs=rngs)" in out
