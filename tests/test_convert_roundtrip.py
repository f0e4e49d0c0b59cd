"""convert at scale, part 4: Linen -> NNX -> Linen gives back the original checkpoint bit for bit.

The model is the logically partitioned, ``nn.scan``-stacked pair of tests/mesh_worker.py (boxed
params with a ``layers`` axis, MaxText's layout) trained by nobody: its AdamW state is filled with
deterministic noise and the step set to 1000, so every optimizer leaf is distinct from init.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx
from flax.training.train_state import TrainState
from mesh_worker import handwritten_pair

from linen2nnx.checkpoint_convert import convert, read_report, verify
from linen2nnx.checkpoint_convert.to_linen import convert_to_linen
from linen2nnx.checkpoint_convert.verify import checksum
from linen2nnx.cli import main
from linen2nnx.errors import L2NError
from linen2nnx.spec import LinenSide, ModelPair, import_file

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"


def boxed_pair():
    pair = handwritten_pair()
    return dataclasses.replace(pair, linen=dataclasses.replace(pair.linen, optimizer=optax.adamw(1e-3)))


def _state(pair) -> TrainState:
    variables = pair.linen.init_variables()
    state = TrainState.create(apply_fn=None, params=variables["params"], tx=pair.linen.optimizer)
    rng = np.random.default_rng(1)

    def noise(x):
        if isinstance(x, jax.Array) and x.dtype == np.float32:
            return x + rng.standard_normal(x.shape).astype(np.float32)
        return jax.numpy.asarray(1000, np.int32) if isinstance(x, jax.Array) else x  # adam's count

    return state.replace(
        step=jax.numpy.asarray(1000, np.int32), opt_state=jax.tree.map(noise, state.opt_state)
    )


@pytest.fixture(scope="module")
def linen_root(tmp_path_factory) -> tuple[Path, TrainState]:
    root = tmp_path_factory.mktemp("linen") / "run"
    state = _state(boxed_pair())
    with ocp.CheckpointManager(root) as mgr:
        mgr.save(1000, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
        mgr.wait_until_finished()
    return root, state


def _flat(path: Path) -> tuple[object, dict[str, object]]:
    with ocp.StandardCheckpointer() as ckptr:
        tree = ckptr.restore(path)
    return jax.tree.structure(tree), dict(jax.tree_util.tree_flatten_with_path(tree)[0])


def test_linen_nnx_linen_round_trip_is_bit_identical(linen_root, tmp_path):
    root, _ = linen_root
    pair = boxed_pair()
    report = convert(root, tmp_path / "nnx", pair)
    assert report.optimizer and report.step == 1000 and report.step_dtype == "int32"
    assert any(u.startswith("params/blocks/") for u in report.unboxed)  # scanned, boxed stack
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    want_def, want = _flat(root / "1000" / "state")
    got_def, got = _flat(tmp_path / "back")
    assert want_def == got_def and want.keys() == got.keys()
    assert len(want) > 20
    for k, w in want.items():
        g = got[k]
        assert type(g) is type(w) and g.dtype == w.dtype, jax.tree_util.keystr(k)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=jax.tree_util.keystr(k))


def test_linen_code_restores_the_round_trip_with_boxes_and_names(linen_root, tmp_path):
    root, state = linen_root
    pair = boxed_pair()
    convert(root, tmp_path / "nnx", pair)
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(tmp_path / "back", abstract)
    stack = restored.params["blocks"]["up"]["kernel"]
    assert isinstance(stack, nn.LogicallyPartitioned) and stack.names == ("layers", "embed", "mlp")
    np.testing.assert_array_equal(stack.value, state.params["blocks"]["up"]["kernel"].value)
    assert int(restored.step) == 1000


def test_a_python_int_step_comes_back_as_the_int64_it_was_saved_as(tmp_path):
    """``TrainState.create`` + ``apply_gradients`` outside jit keep the step a Python int, which Orbax
    saves as int64: the round trip writes it back as int64 (a device array would be int32 without x64)."""
    pair = boxed_pair()
    state = _state(pair).replace(step=1000)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", state)
        ckptr.wait_until_finished()
    report = convert(tmp_path / "linen", tmp_path / "nnx", pair)
    assert report.step_dtype == "int64"
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    with ocp.StandardCheckpointer() as ckptr:
        want, got = ckptr.restore(tmp_path / "linen"), ckptr.restore(tmp_path / "back")
    assert np.asarray(got["step"]).dtype == np.asarray(want["step"]).dtype == np.int64
    assert int(got["step"]) == 1000


def test_a_state_saved_unboxed_comes_back_unboxed(tmp_path):
    """Params unboxed before ``TrainState.create`` (``nn.meta.unbox``), a common loop: the round trip
    writes them unboxed too, so the loop restores it with its own abstract state (it wrote boxes,
    which that restore rejects)."""
    pair = boxed_pair()
    boxed = _state(pair)
    state = boxed.replace(params=nn.meta.unbox(boxed.params), opt_state=nn.meta.unbox(boxed.opt_state))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", state)
        ckptr.wait_until_finished()
    assert convert(tmp_path / "linen", tmp_path / "nnx", pair).unboxed == []
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(tmp_path / "back", abstract)
    kernel = restored.params["blocks"]["up"]["kernel"]
    assert not isinstance(kernel, nn.LogicallyPartitioned)
    np.testing.assert_array_equal(kernel, state.params["blocks"]["up"]["kernel"])
    for got, want in zip(jax.tree.leaves(restored.opt_state), jax.tree.leaves(state.opt_state)):
        np.testing.assert_array_equal(got, want)


def test_cli_to_linen_and_refusals(tmp_path, capsys):
    twins = import_file(TWINS_FILE)
    twins.save_orbax(twins.trained_state("cnn"), tmp_path / "linen")
    spec = f"{TWINS_FILE}:cnn_pair"
    assert main(["convert", str(tmp_path / "linen"), str(tmp_path / "nnx"), "--spec", spec]) == 0
    args = ["convert", "--to", "linen", str(tmp_path / "nnx"), str(tmp_path / "back"), "--spec", spec]
    assert main(args) == 0
    assert main(args) == 2 and "already exists" in capsys.readouterr().err
    want_def, want = _flat(tmp_path / "linen")
    got_def, got = _flat(tmp_path / "back")
    assert want_def == got_def
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))
    (tmp_path / "plain").mkdir()
    with pytest.raises(L2NError, match="no conversion report"):
        convert_to_linen(tmp_path / "plain", tmp_path / "x", twins.cnn_pair())
    assert read_report(tmp_path / "nnx")["step_dtype"] == "int32"


# ---- --verify ------------------------------------------------------------------------------------
class _Big(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Dict(kernel=nnx.Param(jnp.zeros((256, 256))))
        self.bias = nnx.Param(jnp.zeros(3))


def _big_source(tmp_path: Path) -> Path:
    root = tmp_path / "linen"
    kernel = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(root, {"params": {"dense": {"kernel": kernel}, "bias": np.ones(3, np.float32)}})
        ckptr.wait_until_finished()
    return root


def test_report_holds_a_checksum_of_every_written_array(tmp_path):
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    convert(_big_source(tmp_path), tmp_path / "nnx", pair)
    stored = read_report(tmp_path / "nnx")
    assert stored["verified"] is True
    sums = stored["checksums"]["model"]
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(tmp_path / "nnx")
    assert sums["dense/kernel/value"] == checksum(restored["dense"]["kernel"]["value"])
    assert sums["bias/value"] == checksum(np.ones(3, np.float32))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_written_data_that_does_not_read_back_is_never_published(tmp_path, monkeypatch):
    real = verify.verify_payload

    def corrupt_then_verify(item_dir: Path, expected, budget):
        data = max((p for p in item_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)  # a disk that lost a block
        data.write_bytes(bytes(raw))
        return real(item_dir, expected, budget)

    monkeypatch.setattr(verify, "verify_payload", corrupt_then_verify)
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    with pytest.raises(
        L2NError, match=r"(verify: dense/kernel/value reads back as|cannot read array dense/kernel)"
    ):
        convert(_big_source(tmp_path), tmp_path / "nnx", pair)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linen"]
    monkeypatch.setattr(verify, "verify_payload", real)
    convert(_big_source(tmp_path / "again"), tmp_path / "nnx", pair, verify=False)
    assert read_report(tmp_path / "nnx")["verified"] is False


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_one_flipped_byte_of_a_written_array_is_caught(tmp_path, monkeypatch):
    """One byte of the largest data file flipped between the write and the read-back: the array it
    belongs to does not read back as written, and nothing is published."""
    real = verify.verify_payload

    def flip_then_verify(item_dir: Path, expected, budget):
        data = max((p for p in item_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        return real(item_dir, expected, budget)

    monkeypatch.setattr(verify, "verify_payload", flip_then_verify)
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    with pytest.raises(
        L2NError, match=r"(verify: dense/kernel/value reads back as|cannot read array dense/kernel)"
    ):
        convert(_big_source(tmp_path), tmp_path / "nnx", pair)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linen"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_an_array_of_several_chunks_reads_back_by_chunk_and_a_flipped_byte_is_caught(tmp_path, monkeypatch):
    """Written in 64 KB chunks, the kernel is read back a chunk at a time (each zstd chunk streamed
    into a chunk buffer, then copied into its box): it verifies and restores bit for bit, and one
    flipped byte of one chunk's stored bytes is caught."""
    import asyncio

    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    from linen2nnx.checkpoint_convert import arrays, write, zstd_chunk

    monkeypatch.setattr(write, "TARGET_FILE_BYTES", 64 << 10)
    monkeypatch.setattr(zstd_chunk, "PIECE_BYTES", 4096)
    monkeypatch.setattr(zstd_chunk, "WINDOW_BYTES", 3000)
    filled: list[int] = []
    real_fill = zstd_chunk.fill

    async def fill(spec, dest, context, **kw):
        done = await real_fill(spec, dest, context, **kw)
        filled.append(dest.size if done else 0)
        return done

    monkeypatch.setattr(zstd_chunk, "fill", fill)
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    src = _big_source(tmp_path)
    convert(src, tmp_path / "nnx", pair)
    assert 256 * 256 in filled and read_report(tmp_path / "nnx")["verified"] is True
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "nnx")
    np.testing.assert_array_equal(back["dense"]["kernel"]["value"], np.arange(256 * 256).reshape(256, 256))
    how = arrays.storage(tmp_path / "nnx")
    path = ("dense", "kernel", "value")
    stored = asyncio.run(
        arrays.open_stored(tmp_path / "nnx", how, path, (256, 256), np.float32, ts_utils.get_ts_context())
    )
    assert how == ("zarr", True) and np.prod(stored.chunk_layout.read_chunk.shape) * 4 <= 64 << 10
    real = verify.verify_payload

    def flip_then_verify(item_dir: Path, expected, budget):
        data = max((p for p in item_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        return real(item_dir, expected, budget)

    monkeypatch.setattr(verify, "verify_payload", flip_then_verify)
    with pytest.raises(
        L2NError, match=r"(verify: dense/kernel/value reads back as|cannot read array dense/kernel)"
    ):
        convert(src, tmp_path / "nnx-flipped", pair)
    assert not (tmp_path / "nnx-flipped").exists()


def test_read_back_names_the_array_whose_checksum_differs(tmp_path):
    """Every array of a payload is read back and compared, the last of a group included (their
    checksums are taken on another thread while the next array is read)."""
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    convert(_big_source(tmp_path), tmp_path / "nnx", pair)
    sums = read_report(tmp_path / "nnx")["checksums"]["model"]
    verify.verify_payload(tmp_path / "nnx", sums, 1 << 20)
    for name in sums:
        wrong = {**sums, name: "crc32:00000000"}
        for budget in (16, 1 << 20):  # an array per group, and one group
            with pytest.raises(L2NError, match=f"verify: {name} reads back as {sums[name]}"):
                verify.verify_payload(tmp_path / "nnx", wrong, budget)


def test_dry_run_with_mesh_shows_each_leaf_s_target_sharding(linen_root, monkeypatch, capsys):
    """--dry-run --mesh on a host with one device plans an 8-device mesh from metadata alone: every
    param and its adam moments get the NNX layout convert --mesh writes; no array is read."""
    from linen2nnx.checkpoint_convert import arrays
    from linen2nnx.checkpoint_convert.dryrun import dry_run, render

    reads: list[int] = []
    monkeypatch.setattr(arrays, "restore_hooks", [reads.append])
    root, _ = linen_root
    plan = dry_run(root, boxed_pair(), mesh={"data": 2, "fsdp": 2, "tensor": 2})
    assert reads == [] and plan.problems == [] and jax.device_count() == 1
    for name in ("params", "opt_state/0/mu", "opt_state/0/nu"):
        assert plan.targets[f"{name}/blocks/up/kernel"] == "P(None, 'fsdp', 'tensor')"
    text = render(plan)
    assert "target sharding" in text and "P('tensor', 'fsdp')" in text
    with pytest.raises(L2NError, match="mesh axis 'fsdp'"):
        dry_run(root, boxed_pair(), mesh={"data": 8})


def test_to_linen_reads_in_bounded_groups(linen_root, tmp_path):
    """--to linen reads the NNX arrays only while it writes them, at most the budget alive at once."""
    from linen2nnx.checkpoint_convert import memory

    root, _ = linen_root
    pair = boxed_pair()
    convert(root, tmp_path / "nnx", pair)
    before = memory.in_flight.held
    memory.in_flight.reset()
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair, budget=4096)
    peak = memory.in_flight.peak - before
    memory.in_flight.reset()
    assert 0 < peak <= 4096 < 38 * 1024  # the tree is 38 KiB
    want_def, want = _flat(root / "1000" / "state")
    got_def, got = _flat(tmp_path / "back")
    assert want_def == got_def
    for k, w in want.items():
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(w), err_msg=jax.tree_util.keystr(k))


def test_convert_json_may_not_replace_the_source_the_spec_or_land_in_the_output(tmp_path, capsys):
    from linen2nnx.cli import main

    src, spec = tmp_path / "ck.msgpack", tmp_path / "spec.py"
    src.write_bytes(b"\x80")
    spec.write_text("PAIR = 1\n")
    for target, what in (
        (src, "the source checkpoint"),
        (spec, "is the spec"),
        (tmp_path / "out" / "r.json", "lies inside"),
    ):
        assert (
            main(
                ["convert", str(src), str(tmp_path / "out"), "--spec", f"{spec}:pair", "--json", str(target)]
            )
            == 2
        )
        assert what in capsys.readouterr().err
    assert (
        src.read_bytes() == b"\x80" and spec.read_text() == "PAIR = 1\n" and not (tmp_path / "out").exists()
    )
