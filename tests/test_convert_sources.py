"""convert at scale, part 1: where the checkpoint is (root / step / item, --step, unfinished steps),
what an interrupted run leaves (and how the next run cleans it up), and errors that name the leaf.

Checkpoints are the tiny MLP TrainState of fixtures/twins/zoo_twins.py, saved the way a training
loop with a CheckpointManager saves it (``ROOT/<step>/state`` plus a JSON ``metrics`` item).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from linen2nnx.checkpoint_convert import commit, convert, convert_state, read_report
from linen2nnx.checkpoint_convert.source import UnfinishedStepError, resolve_source
from linen2nnx.checkpoint_convert.stream import load_arrays, open_orbax
from linen2nnx.errors import L2NError
from linen2nnx.spec import LinenSide, ModelPair, import_file

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
twins = import_file(TWINS_FILE)


@pytest.fixture(scope="module")
def manager_root(tmp_path_factory) -> Path:
    """Finished steps 1 and 2, and a step 3 whose save never finished (no marker files)."""
    root = tmp_path_factory.mktemp("mgr") / "run"
    state = twins.trained_state("mlp")
    with ocp.CheckpointManager(root) as mgr:
        for step in (1, 2):
            mgr.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), metrics=ocp.args.JsonSave({"loss": 0.5})
                ),
            )
        mgr.wait_until_finished()
    shutil.copytree(root / "2", root / "3")
    for marker in ("_CHECKPOINT_METADATA", "commit_success.txt"):
        (root / "3" / marker).unlink(missing_ok=True)
    return root


def _params(dst: Path) -> dict[str, np.ndarray]:
    import jax

    with ocp.StandardCheckpointer() as ckptr:
        tree = ckptr.restore(dst)

    def plain(v):
        return jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v

    return {
        jax.tree_util.keystr(k): np.asarray(plain(v))
        for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def test_root_with_unfinished_newest_step_is_refused_naming_the_finished_one(manager_root, tmp_path):
    with pytest.raises(
        UnfinishedStepError, match=r"step 3 is not finished.*--step 2 takes the newest finished"
    ):
        convert(manager_root, tmp_path / "out", twins.mlp_pair())
    with pytest.raises(UnfinishedStepError, match=r"3: step 3 is not finished"):
        convert(manager_root / "3", tmp_path / "out", twins.mlp_pair())
    with pytest.raises(UnfinishedStepError, match=r"3/state: step 3 is not finished"):
        convert(manager_root / "3" / "state", tmp_path / "out", twins.mlp_pair())
    with pytest.raises(L2NError, match=r"no step 9 \(steps: 1, 2, 3\)"):
        convert(manager_root, tmp_path / "out", twins.mlp_pair(), step=9)
    assert not (tmp_path / "out").exists()


def test_root_step_and_item_dirs_convert_to_the_same_checkpoint(manager_root, tmp_path):
    pair = twins.mlp_pair()
    report = convert(manager_root, tmp_path / "root", pair, step=2)
    assert report.step == 2
    assert report.ignored["item metrics"].startswith("not an Orbax pytree item")
    convert(manager_root / "2", tmp_path / "step", pair)
    convert(manager_root / "2" / "state", tmp_path / "item", pair)
    want = _params(tmp_path / "root")
    for other in ("step", "item"):
        got = _params(tmp_path / other)
        assert want.keys() == got.keys()
        for k in want:
            np.testing.assert_array_equal(want[k], got[k])
    assert read_report(tmp_path / "item")["step"] == 2
    assert resolve_source(manager_root, 1).item_dir == manager_root / "1" / "state"


def test_leftovers_of_an_interrupted_run_are_removed_by_the_next(manager_root, tmp_path):
    dst = tmp_path / "out"
    commit.partial_dir(dst).mkdir(parents=True)
    (commit.partial_dir(dst) / "junk").write_text("half written")
    legacy = tmp_path / ".out.x1y2.partial"
    legacy.mkdir()
    convert(manager_root, dst, twins.mlp_pair(), step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_destination_named_with_glob_characters_cleans_only_its_own_leftovers(manager_root, tmp_path):
    """``out?`` must not match another conversion's staging folder (``.outA.linen2nnx-partial``, a run
    in flight): recovery removes the leftovers of this destination only."""
    other = commit.partial_dir(tmp_path / "outA")
    other.mkdir()
    (other / "data").write_text("in flight")
    commit.partial_dir(tmp_path / "out?").mkdir()
    convert(manager_root, tmp_path / "out?", twins.mlp_pair(), step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([other.name, "out?"])


def test_a_symbolic_link_destination_is_refused(manager_root, tmp_path):
    """``--force`` onto a link used to publish over it, crash, and leave the link where every later
    run failed; the link and its folder are left as they are."""
    (tmp_path / "real").mkdir()
    (tmp_path / "latest").symlink_to("real")
    with pytest.raises(L2NError, match="latest: is a symbolic link"):
        convert(manager_root, tmp_path / "latest", twins.mlp_pair(), step=2, force=True)
    assert (tmp_path / "latest").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "real",
    ]


@pytest.mark.parametrize(
    ("step", "words"), [(np.array([5, 6]), r"shape \(2,\)"), (np.float32(7.5), "not a whole")]
)
def test_a_step_that_is_not_one_whole_number_is_refused(step, words, tmp_path):
    """A float step was truncated (7.9 -> 7) and a vector one crashed the Orbax reader."""
    variables = twins.mlp_pair().linen.init_variables()
    root = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(root, {"params": variables["params"], "step": step})
        ckptr.wait_until_finished()
    with pytest.raises(L2NError, match=words):
        convert(root, tmp_path / "out", twins.mlp_pair())
    assert not (tmp_path / "out").exists()


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after the abort point runs, no handler cleans up."""


@pytest.mark.parametrize(
    ("point", "exchange"),
    [("staged", True), ("committed", True), ("staged", False), ("renamed-old", False), ("committed", False)],
)
def test_force_interrupted_anywhere_never_loses_both_checkpoints(
    manager_root, tmp_path, monkeypatch, point, exchange
):
    """``exchange``: one renameat2 swap; else the two-rename fallback that recover() completes."""
    if not exchange:
        monkeypatch.setenv(commit.NO_EXCHANGE_ENV, "1")
    pair = twins.mlp_pair()
    dst = tmp_path / "out"
    convert(manager_root, dst, pair, step=1)
    (dst / "old-marker").write_text("old")

    def abort(name: str) -> None:
        if name == point:
            raise _Killed(name)

    monkeypatch.setattr(commit, "abort_point", abort)
    with pytest.raises(_Killed):
        convert(manager_root, dst, pair, step=2, force=True)
    old_or_new = dst.exists() or commit.old_dir(dst).exists()
    assert old_or_new
    if exchange:
        assert dst.exists()  # one atomic swap: DST is never missing
    monkeypatch.setattr(commit, "abort_point", lambda name: None)
    report = convert(manager_root, dst, pair, step=2, force=True)
    assert report.step == 2 and not (dst / "old-marker").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_recover_puts_the_old_checkpoint_back_after_a_kill_between_renames(tmp_path):
    dst = tmp_path / "out"
    commit.old_dir(dst).mkdir()
    (commit.old_dir(dst) / "weights").write_text("old")
    assert commit.recover(dst) == [f"restored out from {commit.old_dir(dst).name} (an interrupted --force)"]
    assert (dst / "weights").read_text() == "old"


@pytest.mark.parametrize(
    ("point", "force", "exchange"),
    [("staged", False, True), ("committed", True, True), ("renamed-old", True, False)],
)
def test_kill_9_then_rerun(manager_root, tmp_path, point, force, exchange):
    """The real thing: SIGKILL (LINEN2NNX_ABORT_AT) at a named point, then a clean rerun."""
    dst = tmp_path / "out"
    if force:
        convert(manager_root, dst, twins.mlp_pair(), step=1)
    code = (
        "import sys; from linen2nnx.spec import import_file; from linen2nnx.checkpoint_convert import convert;"
        f"t = import_file({str(TWINS_FILE)!r}); convert(sys.argv[1], sys.argv[2], t.mlp_pair(), step=2, force=True)"
    )
    env = {**os.environ, commit.ABORT_ENV: point, "PYTHONPATH": str(Path(__file__).parents[1])}
    if not exchange:
        env[commit.NO_EXCHANGE_ENV] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(manager_root), str(dst)], env=env, capture_output=True
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    if force:  # old or new, never neither (after the fallback's first rename: parked, put back below)
        assert dst.exists() or commit.old_dir(dst).exists()
    else:
        assert not dst.exists() and commit.partial_dir(dst).exists()
    report = convert(manager_root, dst, twins.mlp_pair(), step=2, force=True)
    assert report.step == 2 and read_report(dst)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


class _Big(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Dict(kernel=nnx.Param(jnp.zeros((256, 256))))
        self.bias = nnx.Param(jnp.zeros(3))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_truncated_array_names_the_leaf_and_where_it_is_stored(tmp_path):
    """A kernel big enough for its own OCDBT data file (small ones are inlined), cut in half."""
    root = tmp_path / "ckpt"
    big = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(root, {"params": {"dense": {"kernel": big}, "bias": np.ones(3, np.float32)}})
        ckptr.wait_until_finished()
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    convert(root, tmp_path / "good", pair)
    data = max((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    for read in (lambda: load_arrays(open_orbax(root)), lambda: convert(root, tmp_path / "bad", pair)):
        with pytest.raises(L2NError) as err:
            read()
        msg = str(err.value)
        assert msg.startswith(f"{root}: cannot read array params/dense/kernel")
        assert "params.dense.kernel" in msg and len(msg.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "good"]  # no partial output left


def test_msgpack_source_refuses_step(tmp_path):
    from flax import serialization

    f = tmp_path / "ckpt.msgpack"
    f.write_bytes(serialization.to_bytes(twins.trained_state("mlp")))
    convert_state(f, twins.mlp_pair())
    with pytest.raises(L2NError, match="--step needs"):
        convert(f, tmp_path / "out", twins.mlp_pair(), step=3)


def _kernel_source(root: Path, **layout: bool) -> np.ndarray:
    big = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    with ocp.PyTreeCheckpointer(**layout) as ckptr:
        item = {"params": {"dense": {"kernel": big}, "bias": np.ones(3, np.float32)}}
        ckptr.save(root, args=ocp.args.PyTreeSave(item))
    return big


def test_arrays_are_read_without_an_orbax_restore_per_group(tmp_path, monkeypatch):
    """Where ``_METADATA`` says how the item is stored, groups (and the read-back) go to
    TensorStore directly; Orbax's ``restore`` is left to the step alone. Same bytes either way."""
    from linen2nnx.checkpoint_convert import arrays

    calls: list[int] = []
    real = arrays._restore
    for name, save in (("ocdbt", {}), ("zarr3", {"use_zarr3": True}), ("plain", {"use_ocdbt": False})):
        src = tmp_path / name
        big = _kernel_source(src, **save)
        assert arrays.storage(src) == ("zarr3" if name == "zarr3" else "zarr", name != "plain")
        monkeypatch.setattr(arrays, "_restore", lambda *a: calls.append(1) or real(*a))
        convert(src, tmp_path / f"{name}-nnx", ModelPair(LinenSide(None, {}, None), _Big), budget=1024)
        monkeypatch.setattr(arrays, "_restore", real)
        assert calls == [] and read_report(tmp_path / f"{name}-nnx")["verified"] is True
        with ocp.StandardCheckpointer() as ckptr:
            back = ckptr.restore(tmp_path / f"{name}-nnx")
        np.testing.assert_array_equal(back["dense"]["kernel"]["value"], big)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_a_missing_chunk_is_an_error_not_zeros(tmp_path):
    """zarr reads a chunk that is not there as its fill value unless told otherwise: the direct
    reads use Orbax's read spec, so a lost chunk file stops the conversion and names the leaf."""
    root = tmp_path / "ckpt"
    _kernel_source(root, use_ocdbt=False)
    chunks = [p for p in (root / "params.dense.kernel").iterdir() if not p.name.startswith(".")]
    assert chunks
    chunks[0].unlink()
    with pytest.raises(L2NError, match=r"cannot read array params/dense/kernel"):
        convert(root, tmp_path / "bad", ModelPair(LinenSide(None, {}, None), _Big))
    assert not (tmp_path / "bad").exists()


def _random_source(root: Path, **layout: bool) -> np.ndarray:
    big = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    with ocp.PyTreeCheckpointer(**layout) as ckptr:
        item = {"params": {"dense": {"kernel": big}, "bias": np.ones(3, np.float32)}}
        ckptr.save(root, args=ocp.args.PyTreeSave(item))
    return big


@pytest.fixture
def streamed(monkeypatch):
    """Every source array stored as one zstd chunk streamed, 4 KB at a time, decoded (and
    checksummed) 3,000 bytes at a time, across element and piece boundaries; those streamed listed."""
    from linen2nnx.checkpoint_convert import zstd_chunk

    monkeypatch.setattr(zstd_chunk, "MIN_BYTES", 0)
    monkeypatch.setattr(zstd_chunk, "PIECE_BYTES", 4096)
    monkeypatch.setattr(zstd_chunk, "WINDOW_BYTES", 3000)
    decoded: list[str] = []
    real = zstd_chunk.read

    async def read(spec, shape, dtype, context):
        got = await real(spec, shape, dtype, context)
        if got is not None:
            decoded.append(spec["path"].rsplit("/", 1)[-1])
        return got

    monkeypatch.setattr(zstd_chunk, "read", read)
    assert zstd_chunk._libzstd() is not None
    return decoded


def test_a_source_array_stored_as_one_chunk_is_streamed_bit_for_bit(tmp_path, streamed):
    """A zstd chunk read in pieces and decoded straight into its array (never its stored bytes whole
    beside it): the same bytes as TensorStore's read, OCDBT or not; zarr3 is left to TensorStore."""
    for name, save in (("ocdbt", {}), ("plain", {"use_ocdbt": False}), ("zarr3", {"use_zarr3": True})):
        src = tmp_path / name
        big = _random_source(src, **save)
        streamed.clear()
        convert(src, tmp_path / f"{name}-nnx", ModelPair(LinenSide(None, {}, None), _Big))
        with ocp.StandardCheckpointer() as ckptr:
            back = ckptr.restore(tmp_path / f"{name}-nnx")
        np.testing.assert_array_equal(back["dense"]["kernel"]["value"], big)
        want = [] if name == "zarr3" else ["params.bias", "params.dense.kernel"]
        assert sorted(streamed) == want


def test_arrays_read_into_the_ring_one_by_one_convert_bit_for_bit(tmp_path, streamed, monkeypatch):
    """One array a unit: each streamed straight into its stretch of the reused buffer, its checksum
    taken as it decodes; the read-back agrees with every checksum and the weights are the same."""
    from linen2nnx.checkpoint_convert import pipeline, zstd_chunk

    monkeypatch.setattr(pipeline, "UNIT_BYTES", 1)
    filled: list[
        tuple[tuple[int, ...], bool]
    ] = []  # (shape, checksummed): the source read, not the read-back
    real_fill = zstd_chunk.fill

    async def fill(spec, dest, context, **kw):
        filled.append((dest.shape, kw.get("summed") is not None))
        return await real_fill(spec, dest, context, **kw)

    monkeypatch.setattr(zstd_chunk, "fill", fill)
    big = _random_source(tmp_path / "src")
    convert(tmp_path / "src", tmp_path / "nnx", ModelPair(LinenSide(None, {}, None), _Big), budget=300_000)
    assert ((256, 256), True) in filled and read_report(tmp_path / "nnx")["verified"] is True
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "nnx")
    np.testing.assert_array_equal(back["dense"]["kernel"]["value"], big)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_a_streamed_source_chunk_cut_short_or_lost_names_the_leaf(tmp_path, streamed):
    """A data file cut in half (OCDBT), a chunk file cut or removed (plain zarr): an error that names
    the leaf and the chunk, never a partly decoded array."""
    pair = ModelPair(LinenSide(None, {}, None), _Big)
    cases = {
        "ocdbt-cut": ({}, lambda root: max(root.rglob("d/*"), key=lambda p: p.stat().st_size)),
        "plain-cut": ({"use_ocdbt": False}, lambda root: root / "params.dense.kernel" / "0.0"),
        "plain-lost": ({"use_ocdbt": False}, lambda root: root / "params.dense.kernel" / "0.0"),
    }
    for name, (save, stored) in cases.items():
        root = tmp_path / name
        _random_source(root, **save)
        data = stored(root)
        if name.endswith("lost"):
            data.unlink()
        else:
            with open(data, "r+b") as f:
                f.truncate(data.stat().st_size // 2)
        with pytest.raises(L2NError) as err:
            convert(root, tmp_path / f"{name}-nnx", pair)
        msg = str(err.value)
        assert msg.startswith(f"{root}: cannot read array params/dense/kernel"), msg
        assert "params.dense.kernel" in msg and len(msg.splitlines()) == 1
        assert not (tmp_path / f"{name}-nnx").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's event loop, on error
def test_a_missing_array_database_is_named_as_such(tmp_path):
    """``_METADATA`` readable, the OCDBT manifest gone: the error says the array database is missing or
    damaged and what the folder holds (it said ``'NoneType' object has no attribute 'tree'``)."""
    root = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(
            root,
            {"params": {"dense": {"kernel": np.ones((4, 4), np.float32)}, "bias": np.ones(3, np.float32)}},
        )
        ckptr.wait_until_finished()
    (root / "manifest.ocdbt").unlink()
    with pytest.raises(
        L2NError, match=r"the array database .* is missing or damaged; the folder holds .*_METADATA"
    ):
        convert(root, tmp_path / "out", ModelPair(LinenSide(None, {}, None), _Big))
    assert not (tmp_path / "out").exists()


def test_a_folder_of_legacy_flax_checkpoints_names_the_file_to_pass(tmp_path):
    """A ``flax.training.checkpoints`` folder (``ckpt_20``, ``ckpt_30``: one msgpack file per step) is no
    Orbax checkpoint: the error says which files it holds and names the newest to pass."""
    from flax.serialization import msgpack_serialize

    folder = tmp_path / "legacy"
    folder.mkdir()
    for step in (20, 30):
        (folder / f"ckpt_{step}").write_bytes(msgpack_serialize({"params": {"w": np.ones(2, np.float32)}}))
    with pytest.raises(L2NError, match=r"flax.training.checkpoints files \(ckpt_20, ckpt_30\).*ckpt_30"):
        resolve_source(folder)


def test_a_folder_of_orbax_checkpoint_items_names_the_newest_by_its_number(tmp_path):
    """``flax.training.checkpoints`` with Orbax writes ``checkpoint_3``, ``checkpoint_40``, ... items into
    one folder: the error points at the newest by number, not the first in alphabetical order."""
    folder = tmp_path / "ckpts"
    with ocp.StandardCheckpointer() as ckptr:
        for step in (3, 40, 100):
            ckptr.save(folder / f"checkpoint_{step}", {"params": {"w": np.full(2, step, np.float32)}})
    with pytest.raises(
        L2NError,
        match=r"\(checkpoint_3, checkpoint_40, checkpoint_100\); pass the folder .* \(newest: .*checkpoint_100\)",
    ):
        resolve_source(folder)
