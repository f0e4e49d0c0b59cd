"""The whole chain on the zoo mlp and cnn: migrate (traced) -> convert -> check, plus the demo.

The NNX models here are produced by ``migrate`` from the zoo sources, never written by hand.
"""

import json
import textwrap

import pytest

from linen2nnx import zoo
from linen2nnx.cli import main
from linen2nnx.equivalence import check
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.spec_writer import write_pair_spec
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import load_linen_side, load_pair

MODELS = ("mlp", "cnn", "encoder")


@pytest.fixture(scope="module", params=MODELS)
def migrated(request, tmp_path_factory):
    """(name, out_dir, spec_path, linen_ckpt) after a short Linen training run and a traced migration."""
    name = request.param
    root = tmp_path_factory.mktemp(name)
    train = zoo.load_train_module(name)
    state, _ = train.train("tiny", steps=3, seed=1)
    linen_ckpt = root / "linen_ckpt"
    train.save_checkpoint(state, linen_ckpt)
    ref = zoo.spec_ref(name)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source(name)], Mode.OUT_DIR, out_dir=root / "nnx", trace=trace)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    spec_path = write_pair_spec(root / "nnx", trace, result)
    return name, root, spec_path, linen_ckpt


def test_migrated_zoo_model_has_parity(migrated):
    name, _, spec_path, linen_ckpt = migrated
    # An attention key bias has a zero gradient in exact arithmetic (softmax ignores a per-query constant):
    # Adam normalises the float noise of both sides into lr-sized, unrelated steps, so that one parameter
    # drifts apart while every loss and every other leaf agrees. Its budget is widened, by name.
    result = check(
        load_pair(str(spec_path)),
        linen_ckpt,
        steps=20,
        tolerances={"overrides": {"train/*:*/key/bias": 1e-2}},
    )
    assert result.training is not None and result.training.steps == 20 and result.training.passed
    assert (
        max(abs(a - b) / abs(a) for a, b in zip(result.training.linen_loss, result.training.nnx_loss)) <= 1e-5
    )
    checks = result.by_check()
    expected = {"forward/eval", "forward/train", "loss/eval", "loss/train", "grad"}
    if name == "cnn":
        expected.add("batch_stats")  # running stats after a train-mode step
    assert expected <= set(checks)
    assert result.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in result.failures]
    n_params = {"mlp": 6, "cnn": 12, "encoder": 40}[name]
    assert len(checks["grad"]) == n_params
    for leaf in result.leaves:
        if leaf.check.startswith(("forward", "loss", "grad", "batch_stats")):
            assert leaf.max_abs <= 1e-5 * (1 + leaf.ref_max)


def test_convert_then_check_through_the_cli(migrated, capsys):
    _, root, spec_path, linen_ckpt = migrated
    nnx_ckpt = root / "nnx_ckpt_cli"
    assert main(["convert", str(linen_ckpt), str(nnx_ckpt), "--spec", str(spec_path)]) == 0
    assert (
        main(["convert", str(linen_ckpt), str(nnx_ckpt), "--spec", str(spec_path)]) == 2
    )  # no silent overwrite
    assert "already exists" in capsys.readouterr().err
    report = root / "parity.json"
    assert (
        main(
            [
                "check",
                "--spec",
                str(spec_path),
                "--ckpt",
                str(linen_ckpt),
                "--nnx-ckpt",
                str(nnx_ckpt),
                "--json",
                str(report),
            ]
        )
        == 0
    )
    data = json.loads(report.read_text())
    assert data["schema"] == "linen2nnx-parity/2" and data["passed"] is True


def test_convert_against_mismatched_model_names_every_path(migrated, tmp_path, capsys):
    name, root, spec_path, linen_ckpt = migrated
    if name != "cnn":
        pytest.skip("one mismatch case is enough")
    wrong = tmp_path / "wrong_spec.py"
    wrong.write_text(
        textwrap.dedent(f"""
        import dataclasses
        from linen2nnx.spec import import_file, linen_ctor_kwargs, load_pair

        def pair():
            good = load_pair({str(spec_path)!r})
            cls = import_file({str(root / "nnx" / "model.py")!r}).CNN
            kwargs = linen_ctor_kwargs(good.linen.model)
            kwargs.update(hidden=kwargs["hidden"] * 2, in_features=1)  # every hidden-sized leaf changes shape
            return dataclasses.replace(good, nnx_factory=lambda rngs: cls(**kwargs, rngs=rngs))
        """)
    )
    dst = tmp_path / "nnx_ckpt"
    assert main(["convert", str(linen_ckpt), str(dst), "--spec", str(wrong)]) == 2
    err = capsys.readouterr().err
    for path in ("dense_0/kernel", "dense_0/bias", "dense_1/kernel"):
        assert path in err
    assert not dst.exists() and not list(tmp_path.glob(".nnx_ckpt*"))


def test_broken_spec_is_a_named_error(tmp_path, capsys):
    assert main(["check", "--spec", str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err
    assert main(["check", "--spec", "linen2nnx.zoo.cnn.train:nope"]) == 2
    assert "no function 'nope'" in capsys.readouterr().err


def test_demo_runs_to_parity(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--model", "mlp", "--out", str(out), "--steps", "5"]) == 0
    assert "PARITY PASS" in capsys.readouterr().err
    for artefact in (
        "linen_ckpt",
        "nnx/model.py",
        "nnx/linen2nnx-map.json",
        "nnx/linen2nnx_spec.py",
        "nnx_ckpt",
        "parity.json",
        "migration-report.json",
        "README.md",
        "nnx_train/metrics.jsonl",
    ):
        assert (out / artefact).exists(), artefact
    assert "## Keep training in NNX" in (out / "README.md").read_text()
    assert {"train/loss", "train/params"} <= json.loads((out / "parity.json").read_text())["checks"].keys()
    assert main(["demo", "--model", "mlp", "--out", str(out)]) == 2  # refuses to clobber


def test_demo_training_stage_fails_when_nnx_does_not_continue_linen(tmp_path):
    """The demo's last stage passes only when the first NNX loss is Linen's at that step."""
    from linen2nnx.train.demo_stage import DemoTraining

    same = DemoTraining(step=5, nnx_loss=2.5, linen_loss=2.5 + 1e-6, last_loss=2.0, steps=5, out=tmp_path)
    other = DemoTraining(step=5, nnx_loss=2.5, linen_loss=2.6, last_loss=2.0, steps=5, out=tmp_path)
    assert same.continues_linen and "DIFFERS" not in same.summary()
    assert not other.continues_linen and "DIFFERS from Linen" in other.summary()
