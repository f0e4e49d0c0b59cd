"""Codemod in/out fixture pairs: exact output, idempotency, and the findings each case declares.

Each input's first line (``# findings: ...``) lists the rule ids of every finding the case gives: a
silent conversion and an unexpected finding are both failures (tests/fixture_paths.py).
"""

import ast

import pytest
from fixture_paths import all_cases, fixture
from migrate_fixtures import migrate_case

from linen2nnx.migrate import Severity, migrate_source

CASES = sorted(all_cases())


@pytest.mark.parametrize("case", CASES)
def test_fixture_output(case):
    fx = all_cases()[case]
    result = migrate_case(fx)
    assert result.output == fx.output.read_text()
    compile(result.output, fx.output.name, "exec")
    # the module docstring stays the docstring (an import added above it would make it a plain string)
    assert ast.get_docstring(ast.parse(result.output)) == ast.get_docstring(ast.parse(fx.input.read_text()))
    assert fx.input.read_text().startswith("# findings: ")
    assert {f.rule for f in result.findings} == fx.declared()
    # every manual finding leaves an inline marker naming its rule
    for rule in {f.rule for f in result.findings if f.severity is Severity.MANUAL}:
        assert f"# TODO(linen2nnx): {rule}" in result.output


@pytest.mark.parametrize("case", CASES)
def test_second_run_changes_nothing(case):
    """The output is a fixed point, and a second run still reports the work the first marked: every
    manual rule of the first run is a finding of the second (from its marker, where the second run has
    nothing left to rewrite), so ``migrate --check`` keeps failing until a person does it."""
    fx = all_cases()[case]
    first = migrate_case(fx)
    second = migrate_case(fx, first.output)
    assert second.output == first.output
    owed = {f.rule for f in first.findings if f.severity is Severity.MANUAL}
    assert owed <= {f.rule for f in second.findings}, owed - {f.rule for f in second.findings}


def test_identical_linen_names_are_repointed_to_nnx():
    out = migrate_source(fixture("compact_param_in.py").read_text(), "m.py").output
    assert "import flax.linen" not in out and "nnx.initializers.ones(rngs.params()" in out


def test_findings_are_located():
    result = migrate_source(fixture("compact_cnn_in.py").read_text(), "cnn.py")
    shape = [f for f in result.findings if f.rule == "L2N-SHAPE-003"]
    assert [(f.path, f.line) for f in shape] == [("cnn.py", 14)]
    assert shape[0].format_text().startswith("cnn.py:14:13: L2N-SHAPE-003 [manual]")


def test_kept_linen_class_markers_are_not_reworded_by_a_second_run():
    """A second run sees the kept class as ``<Name>Linen``: its findings name that class, but the
    statement already carries a marker of the same rule, so nothing is added."""
    src = (
        "import jax.numpy as jnp\nfrom flax import linen as nn\n\n\n"
        "class Head(nn.Module):\n"
        "    @nn.compact\n"
        "    def __call__(self, x):\n"
        "        kernel = self.get_variable('params', 'k')\n"
        "        return nn.Dense(3)(jnp.mean(x, axis=1)) + kernel\n"
    )
    once = migrate_source(src, "x.py").output
    assert "class HeadLinen(nn.Module)" in once and once.count("L2N-SHAPE-003") == 1
    assert migrate_source(once, "x.py").output == once


def test_marker_text_in_a_string_is_no_marker():
    """A docstring quoting a marker is no work an earlier run left: no finding (it failed --check)."""
    src = (
        '"""How to read the markers. A first run writes, above a layer:\n\n'
        "    # TODO(linen2nnx): L2N-SHAPE-003 in_features of Block is unknown statically\n"
        '"""\n\nfrom flax import nnx\n\n\nclass M(nnx.Module):\n'
        "    def __init__(self, rngs: nnx.Rngs):\n        self.l = nnx.Linear(2, 2, rngs=rngs)\n"
    )
    assert migrate_source(src, "doc.py").findings == []
    marked = src.replace("class M", "# TODO(linen2nnx): L2N-SHAPE-003 a size to give\nclass M")
    assert [f.rule for f in migrate_source(marked, "doc.py").findings] == ["L2N-SHAPE-003"]
