"""``linen2nnx train``: the NNX model keeps training from convert's output exactly where Linen left off.

The NNX models here come from ``migrate`` (traced) and their weights from ``convert``; the Linen
reference is the zoo's own Linen model, restored from its checkpoint and stepped on the same batches.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from linen2nnx import zoo
from linen2nnx.checkpoint_convert import convert
from linen2nnx.cli import main
from linen2nnx.equivalence.build import linen_dropout_off
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.spec_writer import write_pair_spec
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import load_linen_side, load_pair
from linen2nnx.train import TrainConfig, read_metrics, run_training
from linen2nnx.train.data import SyntheticData
from linen2nnx.train.loop import CHECKPOINT_DIR

ROOT = Path(__file__).resolve().parents[1]
LINEN_STEPS = 4


_BUILT: dict[str, tuple] = {}  # model -> what _converted returns, built once per process


@pytest.fixture(scope="module", params=("mlp", "cnn"))
def converted(request, tmp_path_factory):
    """(name, root, spec_path, linen_ckpt, nnx_ckpt) of each model: see :func:`_converted`."""
    return _converted(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def mlp_converted(tmp_path_factory):
    """The mlp's chain only, for the tests one model is enough for."""
    return _converted("mlp", tmp_path_factory)


def _converted(name, tmp_path_factory):
    """(name, root, spec_path, linen_ckpt, nnx_ckpt): Linen trained LINEN_STEPS steps, migrated, converted.

    The mlp's is the output of ``linen2nnx demo`` (the same chain, plus the demo's own training stage,
    checked by test_demo_ends_by_training_the_converted_model)."""
    if name not in _BUILT:
        _BUILT[name] = _build(name, tmp_path_factory)
    return _BUILT[name]


def _build(name, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"train_{name}")
    if name == "mlp":
        demo = root / "demo"
        assert main(["demo", "--model", "mlp", "--out", str(demo), "--steps", str(LINEN_STEPS)]) == 0
        return name, demo, demo / "nnx" / "linen2nnx_spec.py", demo / "linen_ckpt", demo / "nnx_ckpt"
    train = zoo.load_train_module(name)
    state, _ = train.train("tiny", steps=LINEN_STEPS, seed=0)
    linen_ckpt = root / "linen_ckpt"
    train.save_checkpoint(state, linen_ckpt)
    ref = zoo.spec_ref(name)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source(name)], Mode.OUT_DIR, out_dir=root / "nnx", trace=trace)
    assert result.exit_code() == 0
    spec_path = write_pair_spec(root / "nnx", trace, result)
    convert(linen_ckpt, root / "nnx_ckpt", load_pair(str(spec_path)))
    return name, root, spec_path, linen_ckpt, root / "nnx_ckpt"


def linen_losses(name, linen_ckpt, batches):
    """The Linen run continued from its checkpoint on ``batches`` (dropout off): one loss per step."""
    train = zoo.load_train_module(name)
    side = train.spec("tiny")
    state = ocp.StandardCheckpointer().restore(str(linen_ckpt), train.create_train_state("tiny"))
    assert int(state.step) == LINEN_STEPS
    extra = {"batch_stats": state.batch_stats} if getattr(state, "batch_stats", None) is not None else {}

    @jax.jit
    def step(state, extra, batch):
        def f(params):
            args, kwargs = side.inputs(batch)
            with linen_dropout_off():
                out, upd = side.model.apply(
                    {"params": params, **extra}, *args, **kwargs, **side.train_kwargs, mutable=list(extra)
                )
            return side.loss(out, batch), upd

        (loss, upd), grads = jax.value_and_grad(f, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads), upd, loss

    losses = []
    for batch in batches:
        state, extra, loss = step(state, extra, batch)
        losses.append(float(loss))
    return losses


def test_train_continues_the_linen_run(converted, tmp_path):
    """First NNX loss == the Linen loss at that step; the whole curve follows Linen's; loss decreases."""
    name, _, spec_path, linen_ckpt, nnx_ckpt = converted
    steps = 12
    assert main([
        "train", str(spec_path), "--out", str(tmp_path / "run"), "--init-from", str(nnx_ckpt),
        "--steps", str(steps), "--deterministic", "--seed", "3",
    ]) == 0  # fmt: skip
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(LINEN_STEPS, LINEN_STEPS + steps))
    assert all(r["step_time_s"] > 0 and r["examples_per_s"] > 0 for r in records)
    pair = load_pair(str(spec_path))
    batch_size = len(pair.linen.batch[next(iter(pair.linen.batch))])
    data = SyntheticData(pair.linen.batch, batch_size, seed=3)
    ref = linen_losses(name, linen_ckpt, [next(data) for _ in range(steps)])
    nnx_losses = [r["loss"] for r in records]
    np.testing.assert_allclose(nnx_losses[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(nnx_losses, ref, rtol=1e-4)
    assert np.mean(nnx_losses[-3:]) < np.mean(nnx_losses[:3])
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "run" / "checkpoints" / str(LINEN_STEPS + steps)).is_dir()


def test_killed_run_resumes_with_an_identical_loss_curve(mlp_converted, tmp_path):
    """SIGKILL mid-run (async saves in flight, dropout on), then --resume: bit-for-bit the same losses."""
    _, _, spec_path, _, nnx_ckpt = mlp_converted
    opts = {"steps": 8, "save_every": 2, "init_from": str(nnx_ckpt)}
    full = run_training(load_pair(str(spec_path)), TrainConfig(out=tmp_path / "full", **opts))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "train_kill_worker.py"), str(spec_path), str(tmp_path / "run"),
         str(LINEN_STEPS + 5), json.dumps(opts)],
        env=env, check=False, capture_output=True,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert len(read_metrics(tmp_path / "run")) == 5
    assert main([
        "train", str(spec_path), "--out", str(tmp_path / "run"), "--steps", "8", "--save-every", "2", "--resume",
    ]) == 0  # fmt: skip
    resumed = read_metrics(tmp_path / "run")
    assert [r["step"] for r in resumed] == list(range(LINEN_STEPS, LINEN_STEPS + 8))
    assert [r["loss"] for r in resumed] == full.losses  # bit for bit
    kept = sorted(int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit())
    assert kept == [LINEN_STEPS + 4, LINEN_STEPS + 6, LINEN_STEPS + 8]  # --keep 3 (the default)


def test_resume_continues_with_the_settings_the_run_was_trained_with(mlp_converted, tmp_path, capsys):
    """A run with --seed 5 --deterministic, extended by a bare --resume: the losses of the uninterrupted
    run (the seed and dropout-off come from the checkpoint), and a resume giving another seed is refused.
    Before, the resume drew its batches with seed 0 and dropout on, and exited 0."""
    _, _, spec_path, _, nnx_ckpt = mlp_converted
    flags = ["--seed", "5", "--deterministic", "--batch-size", "6", "--save-every", "2"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    assert (
        main(["train", str(spec_path), "--out", full, "--steps", "6", "--init-from", str(nnx_ckpt), *flags])
        == 0
    )
    assert (
        main(["train", str(spec_path), "--out", part, "--steps", "3", "--init-from", str(nnx_ckpt), *flags])
        == 0
    )
    assert main(["train", str(spec_path), "--out", part, "--steps", "6", "--resume"]) == 0
    assert [r["loss"] for r in read_metrics(Path(part))] == [r["loss"] for r in read_metrics(Path(full))]
    # --save-every 2 carried over too: the resumed segment saved its step 8 as the whole run did (it
    # saved its final step only), beside the first segment's final step 7
    kept = [sorted(int(p.name) for p in (Path(run) / CHECKPOINT_DIR).iterdir()) for run in (part, full)]
    assert kept == [[LINEN_STEPS + k for k in (3, 4, 6)], [LINEN_STEPS + k for k in (2, 4, 6)]]
    capsys.readouterr()
    assert main(["train", str(spec_path), "--out", part, "--steps", "8", "--resume", "--seed", "6"]) == 2
    assert "trained with --seed 5" in capsys.readouterr().err
    # the Python API: a setting left None (the batch size) is the run's, the others as given
    pair = load_pair(str(spec_path))
    cfg = TrainConfig(out=Path(part), steps=7, resume=True, seed=5, deterministic=True)
    assert run_training(pair, cfg).end_step == LINEN_STEPS + 7
    # a resume whose --steps end at or before the run's step trains nothing: an error that says so
    capsys.readouterr()
    assert main(["train", str(spec_path), "--out", part, "--steps", "4", "--resume"]) == 2
    assert "nothing to train" in capsys.readouterr().err


def test_usage_errors_exit_2_and_write_nothing(mlp_converted, tmp_path, capsys):
    _, root, spec_path, _, _ = mlp_converted
    out = tmp_path / "run"
    bad = tmp_path / "not_a_ckpt"
    bad.mkdir()
    cases = [
        (["--init-from", str(tmp_path / "missing")], "not found"),
        (["--init-from", str(bad)], "not an Orbax checkpoint"),
        (["--batch-size", "6", "--grad-accum", "4"], "--batch-size 6"),
        (["--mesh", "data=64"], "needs 64 devices"),
        (["--resume"], "no checkpoints"),
        (["--data", str(tmp_path / "tokens.npy")], "--data"),
    ]
    for extra, message in cases:
        assert main(["train", str(spec_path), "--out", str(out), *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
        assert not out.exists(), extra
    assert main(["train", str(root / "nope.py"), "--out", str(out)]) == 2
    assert not out.exists()


def test_checkpoint_that_does_not_fit_or_is_corrupt_is_named(mlp_converted, tmp_path, capsys):
    """A converted checkpoint of another shape, a corrupt one, a corrupt run checkpoint: each named, exit 2."""
    import shutil

    _, _, spec_path, _, nnx_ckpt = mlp_converted
    raw = ocp.StandardCheckpointer().restore(str(nnx_ckpt))
    raw["head"]["kernel"]["value"] = np.zeros((32, 5), np.float32)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(str(tmp_path / "wide"), raw)
    out = tmp_path / "run"
    assert main(["train", str(spec_path), "--out", str(out), "--init-from", str(tmp_path / "wide")]) == 2
    err = capsys.readouterr().err
    assert "does not fit the model" in err and "head/kernel: checkpoint (32, 5) vs model (32, 4)" in err
    assert not out.exists() and "Linen checkpoint" not in err
    # the Linen checkpoint itself, not convert's output: said so
    linen_like = tmp_path / "linen_like"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(str(linen_like), {"params": {"head": {"kernel": np.zeros((32, 4), np.float32)}}})
    assert main(["train", str(spec_path), "--out", str(out), "--init-from", str(linen_like)]) == 2
    assert "run `linen2nnx convert` on it first" in " ".join(capsys.readouterr().err.split())
    assert not out.exists()

    corrupt = tmp_path / "corrupt"
    shutil.copytree(nnx_ckpt, corrupt)
    shutil.rmtree(corrupt / "d")
    assert main(["train", str(spec_path), "--out", str(out), "--init-from", str(corrupt)]) == 2
    assert str(corrupt) in capsys.readouterr().err
    assert not out.exists()

    assert (
        main(["train", str(spec_path), "--out", str(out), "--steps", "2", "--save-every", "1", "--profile"])
        == 0
    )
    assert list((out / "profile").rglob("*.xplane.pb"))  # --profile: a jax.profiler trace of the run
    shutil.rmtree(out / "checkpoints" / "2" / "state" / "d")
    assert main(["train", str(spec_path), "--out", str(out), "--steps", "3", "--resume"]) == 2
    assert str(out / "checkpoints" / "2") in capsys.readouterr().err


def test_grad_accumulation_equals_one_big_batch_and_remat_changes_nothing(mlp_converted, tmp_path):
    """K micro-batches summed in a scan == one step on the whole batch (fp32 rounding); remat full
    recomputes the same numbers."""
    _, _, spec_path, _, nnx_ckpt = mlp_converted
    pair = load_pair(str(spec_path))
    common = {"steps": 3, "init_from": nnx_ckpt, "deterministic": True, "tensorboard": False}
    big = run_training(pair, TrainConfig(out=tmp_path / "big", **common))
    accum = run_training(pair, TrainConfig(out=tmp_path / "accum", grad_accum=4, **common))
    remat = run_training(pair, TrainConfig(out=tmp_path / "remat", remat="full", **common))
    np.testing.assert_allclose(accum.losses, big.losses, rtol=1e-5)
    np.testing.assert_allclose(remat.losses, big.losses, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(accum.state), jax.tree.leaves(big.state)):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            continue
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-6)


def test_compile_only_prints_memory_and_flops(mlp_converted, tmp_path, capsys):
    _, _, spec_path, _, _ = mlp_converted
    out = tmp_path / "run"
    assert main(["train", str(spec_path), "--out", str(out), "--compile-only", "--remat", "full"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["flops"] > 0 and report["argument_bytes"] > 0 and report["devices"] == 1
    assert "temp" in captured.err and "FLOPs" in captured.err
    assert not out.exists()  # nothing run, nothing written


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """The zoo decoder (nn.scan over nn.remat layers, logical partitioning) initialised in Linen (its
    step-0 TrainState: the mlp and cnn tests cover a trained one), migrated, converted."""
    root = tmp_path_factory.mktemp("train_decoder")
    train = zoo.load_train_module("decoder")
    train.save_checkpoint(train.create_train_state("tiny", seed=0), root / "linen_ckpt")
    ref = zoo.spec_ref("decoder")
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source("decoder")], Mode.OUT_DIR, out_dir=root / "nnx", trace=trace)
    spec_path = write_pair_spec(root / "nnx", trace, result)
    convert(root / "linen_ckpt", root / "nnx_ckpt", load_pair(str(spec_path)))
    return root, spec_path


def test_decoder_on_8_devices_matches_linen(decoder, tmp_path):
    """--mesh data=2,fsdp=2,tensor=2 on 8 host devices (a subprocess): every parameter's PartitionSpec
    is Linen's, the trained arrays are laid out so, the first loss is the (one-device) Linen loss at that
    step, and the loss decreases. Two processes of 4 devices each (jax.distributed, one mesh over the 8)
    give the same losses."""
    from linen2nnx.equivalence.mesh import host_device_env

    root, spec_path = decoder
    report = tmp_path / "mesh.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "train_cli_mesh_worker.py"), str(spec_path),
         str(root / "nnx_ckpt"), str(root / "linen_ckpt"), str(tmp_path / "mesh_run"), str(report)],
        env={**host_device_env(8), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(report.read_text())
    assert r["devices"] == 8
    assert r["partition_spec"] and all(ok for _, ok, _ in r["partition_spec"]), r["partition_spec"]
    assert r["trained_specs"] == r["metadata_specs"]
    assert r["trained_specs"]["layers/mlp/wi_0/kernel"] == "(None, 'fsdp', 'tensor')"
    assert r["compile"]["devices"] == 8 and r["compile"]["flops"] > 0 and r["compile"]["temp_bytes"] > 0

    assert r["start_step"] == 0
    np.testing.assert_allclose(r["losses"][0], r["linen_first_loss"], rtol=1e-5)
    assert r["losses"][-1] < r["losses"][0]

    # the same run as 2 processes of 4 host devices each, one mesh over the 8 (jax.distributed)
    losses = _two_process_run(spec_path, root / "nnx_ckpt", tmp_path / "two")
    np.testing.assert_allclose(losses, r["losses"], rtol=1e-5)


def _two_process_run(spec_path, nnx_ckpt, out):
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    flags = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4"}  # fmt: skip
    cmd = [sys.executable, "-m", "linen2nnx", "train", str(spec_path), "--out", str(out), "--init-from",
           str(nnx_ckpt), "--steps", "3", "--deterministic", "--mesh", "data=2,fsdp=2,tensor=2",
           "--coordinator", f"localhost:{port}", "--num-processes", "2"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*cmd, "--process-id", str(i)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=600)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    return [rec["loss"] for rec in read_metrics(out)]


def test_demo_ends_by_training_the_converted_model(mlp_converted):
    """The demo's last stage: NNX trains on from the converted checkpoint; its README shows the first
    NNX loss next to the Linen loss at that step, and they agree."""
    import re

    _, out, *_ = mlp_converted
    records = read_metrics(out / "nnx_train")
    assert records[0]["step"] == LINEN_STEPS and len(records) == 5
    row = re.search(rf"^\| {LINEN_STEPS} \| ([\d.]+) \| ([\d.]+) \|$", (out / "README.md").read_text(), re.M)
    assert row is not None
    nnx_loss, linen_loss = map(float, row.groups())
    assert nnx_loss == pytest.approx(records[0]["loss"], abs=1e-7)
    assert nnx_loss == pytest.approx(linen_loss, rel=1e-6)
    assert "linen2nnx train" in (out / "README.md").read_text()


def test_data_sources_are_deterministic_resumable_and_sharded_per_process(tmp_path):
    """Batch i is a pure function of (seed, i): a restored position continues with the next batch, and
    the processes' rows put together are the one-process batch."""
    from linen2nnx.train.data import DataError, TokenFileData, make_data

    example = {"x": np.arange(40, dtype=np.float32).reshape(10, 4), "y": np.arange(10, dtype=np.int32)}
    a = make_data("synthetic", example, 8, seed=1)
    first = [next(a) for _ in range(3)]
    state = a.state()
    b = make_data("synthetic", example, 8, seed=1)
    b.restore(state)
    np.testing.assert_array_equal(next(b)["x"], next(a)["x"])
    np.testing.assert_array_equal(first[0]["y"], make_data("synthetic", example, 8, seed=1).batch_at(0)["y"])
    assert (first[0]["x"][:, 0] / 4 == first[0]["y"]).all()  # rows stay whole: labels follow inputs
    halves = [
        make_data("synthetic", example, 8, 1, process_index=i, process_count=2).batch_at(0) for i in (0, 1)
    ]
    np.testing.assert_array_equal(np.concatenate([h["x"] for h in halves]), first[0]["x"])

    tokens = tmp_path / "tokens.npy"
    np.save(tokens, np.arange(1000, dtype=np.int32))
    lm_example = {"inputs": np.zeros((4, 16), np.int32), "targets": np.zeros((4, 16), np.int32)}
    data = make_data(str(tokens), lm_example, 4, seed=0)
    assert isinstance(data, TokenFileData)
    batch = next(data)
    assert batch["inputs"].shape == (4, 16) and (batch["targets"] == batch["inputs"] + 1).all()
    assert (batch["inputs"][:, 0] % 16 == 0).all()  # whole windows of the file, shuffled
    halves = [
        make_data(str(tokens), lm_example, 4, 0, process_index=i, process_count=2).batch_at(5) for i in (0, 1)
    ]
    np.testing.assert_array_equal(np.concatenate([h["inputs"] for h in halves]), data.batch_at(5)["inputs"])
    resumed = make_data(str(tokens), lm_example, 4, seed=0)
    resumed.restore(data.state())
    np.testing.assert_array_equal(next(resumed)["inputs"], next(data)["inputs"])
    with pytest.raises(DataError, match="SyntheticData"):
        resumed.restore(a.state())
    with pytest.raises(DataError, match="example batch has keys"):
        make_data(str(tokens), example, 4, seed=0)
    with pytest.raises(DataError, match="does not divide over 3 processes"):
        make_data("synthetic", example, 8, 0, process_count=3)


def test_a_masked_optimizer_state_fits_its_checkpoint(tmp_path):
    """optax.multi_transform / masked keep optax.MaskedNode leaves, which hold no data: fit_problems
    neither reads their shape (an AttributeError traceback, exit 1, before) nor counts what a
    checkpoint stores for them as unexpected; a really missing leaf is still named."""
    import optax
    from flax import nnx

    from linen2nnx.train.state import CheckpointError, fit_problems

    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

    def labels(params):
        return jax.tree.map(lambda x: "w" if x.ndim == 2 else "b", params)

    tx = optax.multi_transform({"w": optax.adam(1e-2), "b": optax.sgd(1e-1, momentum=0.9)}, labels)
    state = nnx.state(nnx.Optimizer(model, tx, wrt=nnx.Param))
    meta: dict = {}  # what the checkpoint's metadata holds: a shape per leaf, () for a masked node
    for path, var in nnx.to_flat_state(state):
        node = meta
        for key in map(str, path[:-1]):
            node = node.setdefault(key, {})
        node[str(path[-1])] = jax.ShapeDtypeStruct(getattr(var.get_value(), "shape", ()), np.float32)
    assert any(not hasattr(v.get_value(), "shape") for _, v in nnx.to_flat_state(state))  # masked nodes
    fit_problems(meta, state, tmp_path / "opt", "optimizer state")  # fits: no error
    smaller = nnx.state(
        nnx.Optimizer(nnx.Linear(3, 2, use_bias=False, rngs=nnx.Rngs(0)), optax.adam(1e-2), wrt=nnx.Param)
    )
    with pytest.raises(CheckpointError, match="does not fit"):
        fit_problems(meta, smaller, tmp_path / "opt", "optimizer state")


def test_seed_decides_the_rng_streams_of_a_run_from_a_converted_checkpoint(mlp_converted):
    """A Linen checkpoint holds no RNG state: the converted one carries convert's init streams, which
    --seed now replaces (before, every seed drew the same dropout masks); the weights stay converted."""
    from flax import nnx

    from linen2nnx.train.state import choose_tx, state_from_converted

    _, _, spec_path, _, nnx_ckpt = mlp_converted
    pair = load_pair(str(spec_path))
    tx = choose_tx(pair)

    def streams_and_weights(seed):
        flat = dict(nnx.to_flat_state(state_from_converted(pair, tx, nnx_ckpt, seed=seed).state[0]))
        keys = {
            p: np.asarray(jax.random.key_data(v.get_value()))
            for p, v in flat.items()
            if isinstance(v, nnx.RngKey)
        }
        weights = {p: np.asarray(v.get_value()) for p, v in flat.items() if isinstance(v, nnx.Param)}
        return keys, weights

    (keys1, w1), (keys2, w2) = streams_and_weights(1), streams_and_weights(2)
    assert keys1 and all(not np.array_equal(keys1[p], keys2[p]) for p in keys1)
    assert w1.keys() == w2.keys() and all(np.array_equal(w1[p], w2[p]) for p in w1)


def test_a_save_a_kill_left_unfinished_does_not_block_a_new_run(mlp_converted, tmp_path):
    """A run killed while writing its first checkpoint leaves only Orbax's temporary folder: that is
    no checkpoint, so a new run starts (and clears it) instead of refusing with 'pass --resume'."""
    _, _, spec_path, _, nnx_ckpt = mlp_converted
    out = tmp_path / "run"
    (out / "checkpoints" / "10.orbax-checkpoint-tmp" / "state").mkdir(parents=True)
    argv = ["train", str(spec_path), "--out", str(out), "--init-from", str(nnx_ckpt), "--steps", "2"]
    assert main(argv) == 0
    assert not list((out / "checkpoints").glob("*orbax-checkpoint-tmp*"))


def test_a_converted_checkpoint_without_optimizer_state_says_the_optimizer_starts_fresh(
    mlp_converted, tmp_path, capsys
):
    """convert's output of Linen step LINEN_STEPS with its optimizer/ left behind: train starts a fresh
    optimizer at step 0 and says so (it said only "trained steps 0..1"); with the optimizer, no note."""
    import shutil

    _, _, spec_path, _, nnx_ckpt = mlp_converted
    weights_only = tmp_path / "weights_only"
    shutil.copytree(nnx_ckpt, weights_only, ignore=shutil.ignore_patterns("optimizer"))
    capsys.readouterr()
    args = ["train", str(spec_path), "--steps", "1", "--deterministic"]
    assert main([*args, "--out", str(tmp_path / "fresh"), "--init-from", str(weights_only)]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert f"Linen step {LINEN_STEPS} but no optimizer state" in err and "trained steps 0..0" in err
    assert main([*args, "--out", str(tmp_path / "resumed"), "--init-from", str(nnx_ckpt)]) == 0
    assert "no optimizer state" not in capsys.readouterr().err


def test_a_state_restored_without_a_mesh_is_committed_to_the_device(mlp_converted):
    """Restored without a mesh, the optimizer state came back as host numpy arrays and the RNG streams
    uncommitted: the jitted step compiled once for them and again for its own device outputs. Every
    leaf is now a device array committed as the step's outputs are."""
    import jax

    from linen2nnx.train.state import choose_tx, state_from_converted

    _, _, spec_path, _, nnx_ckpt = mlp_converted
    pair = load_pair(str(spec_path))
    ts = state_from_converted(pair, choose_tx(pair), nnx_ckpt, seed=1, deterministic=True)
    leaves = jax.tree.leaves(ts.state)
    assert leaves and all(isinstance(a, jax.Array) and a.committed for a in leaves)


def test_deterministic_names_random_draws_it_could_not_switch_off(mlp_converted, tmp_path):
    """--deterministic zeroes every Dropout rate; a mask the model draws by hand from its own stream
    stays on. The run says which stream still drew (it said nothing: steps silently not comparable),
    and a model whose only randomness is Dropout layers gets no note."""
    import dataclasses

    import jax.numpy as jnp
    from flax import nnx

    class HandDropout(nnx.Module):
        def __init__(self, inner, rngs):
            self.inner, self.rngs = inner, rngs

        def __call__(self, *args, **kwargs):
            out = self.inner(*args, **kwargs)
            return out * jax.random.bernoulli(self.rngs.dropout(), 0.9, out.shape).astype(jnp.float32)

    spec_path = mlp_converted[2]
    pair = load_pair(str(spec_path))
    plain = run_training(pair, TrainConfig(out=tmp_path / "plain", steps=2, deterministic=True))
    assert plain.notes == []
    hand = dataclasses.replace(pair, nnx_factory=lambda rngs: HandDropout(pair.nnx_factory(rngs), rngs))
    result = run_training(hand, TrainConfig(out=tmp_path / "hand", steps=2, deterministic=True))
    assert len(result.notes) == 1 and "rngs/dropout (2 in 2 step(s))" in result.notes[0]
    noisy = run_training(hand, TrainConfig(out=tmp_path / "noisy", steps=2))
    assert noisy.notes == []  # not asked to be deterministic: nothing to say


def test_resume_with_no_finished_checkpoint_names_the_way_out_and_nothing_else(mlp_converted, tmp_path):
    """A run killed before its first save leaves only an unfinished step: --resume is refused (exit 2)
    saying to run without it, and the checkpoint manager is closed first (its background thread printed
    a RuntimeError traceback under the real error)."""
    spec_path = mlp_converted[2]
    out = tmp_path / "killed"
    (out / CHECKPOINT_DIR / "4.orbax-checkpoint-tmp-1700000000").mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "linen2nnx",
            "train",
            str(spec_path),
            "--out",
            str(out),
            "--resume",
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stderr
    assert "run without --resume to start it anew" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
