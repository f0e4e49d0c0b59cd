"""pytest plugin: Linen vs NNX parity tests in your own test suite.

Installed with the package (entry point ``pytest11``), so any suite gets::

    def test_port_is_faithful(linen2nnx_parity):
        result = linen2nnx_parity("mypkg.specs:pair", "ckpts/linen", steps=2)
        assert result.divergence is None

    @pytest.mark.linen2nnx(spec="mypkg.specs:pair", tolerances={"overrides": {"grad:*": 1e-4}})
    def test_marked(linen2nnx_parity):
        linen2nnx_parity()          # the marker's arguments, overridable per call

``linen2nnx_parity(pair=None, linen_ckpt=None, nnx_ckpt=None, **check_kwargs)`` runs
:func:`linen2nnx.equivalence.check` and fails the test with the table of failing leaves and the
culprit module (``AssertionError``) when parity does not hold; it returns the
:class:`~linen2nnx.equivalence.ParityResult` otherwise. ``pair`` is a ``ModelPair`` or a spec
reference. ``--linen2nnx-json DIR`` writes every result as ``linen2nnx-parity/2`` JSON (one file per
call, named after the test) for CI renderers; the terminal summary lists every parity run.

Nothing heavy is imported until a test uses the fixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MARKER = "linen2nnx"
_RESULTS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("linen2nnx", "Linen vs NNX parity")
    group.addoption(
        "--linen2nnx-json",
        metavar="DIR",
        default=None,
        help="write each linen2nnx_parity result as JSON into DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(spec=None, **check_kwargs): default arguments of the linen2nnx_parity fixture "
        "(spec: a ModelPair spec reference; the rest go to linen2nnx.equivalence.check)",
    )
    config.stash[_RESULTS] = []


def _file_name(nodeid: str, n: int) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")
    return f"{stem}{'' if n == 0 else f'-{n}'}.json"


@pytest.fixture
def linen2nnx_parity(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """A function that checks a model pair and fails the test when parity does not hold."""
    marker = request.node.get_closest_marker(MARKER)
    defaults: dict[str, Any] = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        defaults.setdefault("spec", marker.args[0])
    calls: list[int] = []

    def run(pair: Any = None, linen_ckpt: Any = None, nnx_ckpt: Any = None, **kwargs: Any) -> Any:
        from linen2nnx.equivalence import check

        options = {**defaults, **kwargs}
        spec = options.pop("spec", None)
        pair = pair if pair is not None else spec
        if pair is None:
            raise pytest.UsageError(
                f"linen2nnx_parity: give a pair / spec reference, or @pytest.mark.{MARKER}(spec=...)"
            )
        linen_ckpt = linen_ckpt if linen_ckpt is not None else options.pop("linen_ckpt", None)
        nnx_ckpt = nnx_ckpt if nnx_ckpt is not None else options.pop("nnx_ckpt", None)
        result = check(pair, linen_ckpt, nnx_ckpt, **options)
        _record(request, result, len(calls))
        calls.append(1)
        if not result.passed:
            raise AssertionError(result.failure_table())
        return result

    return run


def _record(request: pytest.FixtureRequest, result: Any, n: int) -> None:
    config = request.config
    config.stash[_RESULTS].append(
        (request.node.nodeid, result.passed, result.model, len(result.leaves), len(result.failures))
    )
    out_dir = config.getoption("--linen2nnx-json")
    if out_dir:
        from linen2nnx.reports.json_report import write_json

        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        write_json(result, path / _file_name(request.node.nodeid, n))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    runs = config.stash.get(_RESULTS, [])
    if not runs:
        return
    terminalreporter.section("linen2nnx parity")
    for nodeid, passed, model, leaves, failed in runs:
        verdict = "PASS" if passed else "FAIL"
        terminalreporter.write_line(
            f"{verdict} {model or 'model'}: {leaves} leaves, {failed} failed ({nodeid})"
        )
