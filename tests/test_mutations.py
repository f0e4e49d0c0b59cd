"""Mutation testing of ``check``: a typical migration bug injected into the *migrated* source of a zoo
model must fail the check and be localised to the module it was put in.

Each model is migrated once (``migrate --trace``), in its own test; a model whose migration still
has manual findings is replaced by its hand-written twin (``tests/fixtures/nnx_twins/``), which is
then checked unmutated with the same perturbed weights first. The mutation table is
``bench/mutations.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from linen2nnx.equivalence import check
from linen2nnx.equivalence.perturb import perturbed_init

ROOT = Path(__file__).resolve().parents[1]
TWINS = Path(__file__).parent / "fixtures" / "nnx_twins"


def _load_mutations():
    """``bench/mutations.py``: repository tooling (it reads ``tests/fixtures``), not package code."""
    spec = importlib.util.spec_from_file_location("bench_mutations", ROOT / "bench" / "mutations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


mutations = _load_mutations()
MUTATIONS, Base, NotApplicable = mutations.MUTATIONS, mutations.Base, mutations.NotApplicable
prepare, render, run_mutation = mutations.prepare, mutations.render, mutations.run_mutation


MODELS = sorted({m.model for m in MUTATIONS})


def _base(model: str, root: Path) -> Base:
    """The model's NNX code: migrated, or the twin, which is first checked clean on the mutation
    run's weights. (The clean migrated models are checked by test_end_to_end / test_zoo_transforms;
    a base that failed on its own would also name its own culprit, not the mutated module.)"""
    base = prepare(model, root, TWINS)
    if base.source == "twin":
        pair = base.pair()
        result = check(pair, perturbed_init(pair), divergence=False, long_batch=False)
        assert result.passed, f"unmutated {model} twin fails:\n{result.failure_table()}"
    return base


@pytest.mark.parametrize("model", MODELS)
def test_mutations_are_detected_and_localised(model, tmp_path):
    """One test per model (it is migrated once); every mutation of that model, with a table row each."""
    base = _base(model, tmp_path)
    rows = []
    for mutation in (m for m in MUTATIONS if m.model == model):
        # the long batch is what the RoPE slip needs; the other bugs show on the example batch
        row = run_mutation(
            base, mutation, tmp_path, long_batch=None if mutation.name == "rope_base" else False
        )
        rows.append(row)
        culprit = row.result.divergence.culprit if row.result.divergence else None
        assert row.detected, f"{mutation.name}: check passed on the mutated {model}"
        assert row.localised, (
            f"{mutation.name}: culprit {culprit and culprit.nnx_path!r} "
            f"({culprit and culprit.check}), expected one of {mutation.culprits}\n"
            + row.result.failure_table()
        )
        assert any(c.startswith(mutation.how) for c in row.failed_checks), (mutation.name, row.failed_checks)
        if mutation.name == "rope_base":  # the spec's 4x longer batch: the slip grows with the position
            short, long = row.result.worst("forward/eval"), row.result.worst("forward/long")
            assert long.shape[1] == 4 * short.shape[1] and long.max_abs > short.max_abs
    text = render(rows)
    assert f"detected {len(rows)}/{len(rows)}, localised {len(rows)}/{len(rows)}" in text
    for row in rows:
        assert row.bug in text


def test_twin_stands_in_when_the_migration_has_manual_findings(monkeypatch, tmp_path):
    def with_a_finding(model, out_dir):
        return out_dir / "linen2nnx_spec.py", [
            "model.py:1:1: L2N-TEST [manual] pretend the codemod could not"
        ]

    monkeypatch.setattr(mutations, "migrate_zoo", with_a_finding)
    base = _base("rnn", tmp_path)
    assert base.source == "twin" and base.findings and (base.directory / "rnn_map.json").exists()
    gates = next(m for m in MUTATIONS if m.name == "lstm_gate_order")
    row = run_mutation(base, gates, tmp_path)
    assert row.detected and row.localised and row.source == "twin"
    with pytest.raises(NotApplicable):
        next(m for m in MUTATIONS if m.name == "bn_momentum").edit((base.directory / "rnn.py").read_text())
