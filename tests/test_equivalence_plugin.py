"""The pytest plugin: a user's suite gets the ``linen2nnx_parity`` fixture and ``@pytest.mark.linen2nnx``."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

pytest_plugins = ["pytester"]

TWINS = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"


def _plugin_args() -> list[str]:
    """``-p`` only when the package's ``pytest11`` entry point is not installed (a source checkout)."""
    installed = any(e.value == "linen2nnx.pytest_plugin" for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", "linen2nnx.pytest_plugin"]


def test_fixture_and_marker_in_a_users_suite(pytester, tmp_path):
    pytester.makepyfile(
        test_port=f"""
        import dataclasses

        import pytest

        from linen2nnx.spec import import_file

        TWINS = {str(TWINS)!r}
        twins = import_file(TWINS)

        class HalfHead(twins.MLP):  # a port whose head output is off by a factor of two
            def __call__(self, x, *, train=False):
                return 0.5 * super().__call__(x, train=train)

        def broken_pair():
            pair = twins.mlp_pair()
            return dataclasses.replace(pair, nnx_factory=lambda rngs: HalfHead(
                twins.MLP_HIDDEN, twins.N_CLASSES, 0.5, in_features=twins.MLP_IN, rngs=rngs))

        def test_faithful_port(linen2nnx_parity):
            result = linen2nnx_parity(TWINS + ":mlp_pair")
            assert result.passed and result.model == "mlp" and result.divergence is None

        @pytest.mark.linen2nnx(broken_pair(), steps=1)
        def test_broken_port(linen2nnx_parity):
            linen2nnx_parity()

        def test_no_pair(linen2nnx_parity):
            linen2nnx_parity()
    """
    )
    out = tmp_path / "parity-json"
    result = pytester.runpytest_inprocess(*_plugin_args(), "-p", "no:benchmark", "--linen2nnx-json", str(out))
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    assert "parity FAILED for mlp" in text and "first divergence (forward/eval" in text
    assert "training parity over 1 steps" in text  # the marker's steps=1 reached check
    assert "give a pair / spec reference" in text
    result.stdout.fnmatch_lines(
        [
            "*linen2nnx parity*",
            "PASS mlp: * leaves, 0 failed (test_port.py::test_faithful_port)",
            "FAIL mlp: * leaves, * failed (test_port.py::test_broken_port)",
        ]
    )
    files = sorted(p.name for p in out.iterdir())
    assert files == ["test_port.py_test_broken_port.json", "test_port.py_test_faithful_port.json"]
    broken = json.loads((out / files[0]).read_text())
    assert broken["schema"] == "linen2nnx-parity/2" and broken["passed"] is False
    assert (
        broken["divergence"]["culprit"]["nnx_path"] == "" and broken["training"]["steps"] == 1
    )  # the root's own code


def test_marker_is_registered(pytester):
    result = pytester.runpytest_inprocess(*_plugin_args(), "-p", "no:benchmark", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.linen2nnx(spec=None, **check_kwargs):*"])
