"""Shared steps of the parity tests over codemod fixtures: migrate a fixture's input, check that the
output is the golden ``_out.py``, import both sides, and compare them through the name map.

The NNX side is the golden output itself; the Linen weights are perturbed and reach the NNX model only
through the name map, so no init value can hide a wrong mapping.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
from fixture_paths import all_cases, fixture
from migrate_fixtures import case_trace

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file


def build(case: str, tmp_path: Path):
    """(Linen module, NNX module, migrate result, name-map path) of a fixture, with the trace and
    options its header names."""
    src = fixture(f"{case}_in.py").read_text()
    fx = all_cases()[case]
    result = migrate_source(
        src, f"{case}.py", module_name=case, trace=case_trace(fx), unsafe_fixes="unsafe-fixes" in fx.options()
    )
    assert result.output == fixture(f"{case}_out.py").read_text()
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    return import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py"), result, map_path


def assert_parity(linen_model, nnx_factory, x, map_path, *, train_kwargs=None, eval_kwargs=None):
    """Forward, loss and gradients agree, with one gradient per Linen parameter; returns the parity."""
    side = LinenSide(
        model=linen_model,
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs=train_kwargs or {},
        eval_kwargs=eval_kwargs or {},
    )
    variables = perturbed(side.init_variables())
    parity = check(ModelPair(linen=side, nnx_factory=nnx_factory, name_map=map_path), variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol, lf.note) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))
    return parity


def grad_paths(parity) -> set[str]:
    """The NNX paths that received a gradient."""
    return {leaf.path for leaf in parity.by_check()["grad"]}
