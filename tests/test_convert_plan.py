"""convert at scale, part 2: plan from Orbax metadata alone (``--dry-run``), validate against the
abstract NNX model before any array is read, and print tables that keep whole paths in a pipe."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
import pytest

from linen2nnx.checkpoint_convert import arrays, convert
from linen2nnx.checkpoint_convert.dryrun import dry_run
from linen2nnx.cli import main
from linen2nnx.errors import ConversionError
from linen2nnx.spec import import_file

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
twins = import_file(TWINS_FILE)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mgr") / "run"
    with ocp.CheckpointManager(root) as mgr:
        mgr.save(4, args=ocp.args.Composite(state=ocp.args.StandardSave(twins.trained_state("cnn"))))
        mgr.wait_until_finished()
    return root


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """How many leaves each restore call fetched: the dry run must make none."""
    seen: list[int] = []
    monkeypatch.setattr(arrays, "restore_hooks", [seen.append])
    return seen


def test_dry_run_lists_every_leaf_from_metadata_alone(root, reads, capsys):
    spec = f"{TWINS_FILE}:cnn_pair"
    assert main(["convert", str(root), str(root.parent / "never"), "--spec", spec, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert reads == [] and not (root.parent / "never").exists()
    assert f"dry run: {root / '4' / 'state'} -> " in out and ", step 4" in out
    kernel = next(line for line in out.splitlines() if line.startswith("params/Dense_1/kernel "))
    assert kernel.split()[1] == "dense_1/kernel"
    assert "(16, 3)  float32  single device   192 B" in " ".join(kernel.split("  ")) or "192 B" in kernel
    assert "single device" in kernel and "float32" in kernel
    opt = [line for line in out.splitlines() if line.startswith("opt_state/")]
    assert opt and any("/mu/" in line for line in opt) and "0 problem(s)" in out
    # --mesh: a target sharding column, planned for 64 devices this host does not have
    args = [
        "convert",
        str(root),
        str(root.parent / "never"),
        "--spec",
        spec,
        "--dry-run",
        "--mesh",
        "data=64",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    kernel = next(line for line in out.splitlines() if line.startswith("params/Dense_1/kernel "))
    assert "target sharding" in out and kernel.split()[-3:] == ["P()", "192", "B"]  # replicated: no rules
    assert reads == [] and not (root.parent / "never").exists()


def test_dry_run_reports_every_problem_without_reading(root, reads, capsys):
    plan = dry_run(root, twins.cnn_pair(), step=4)
    assert plan.problems == [] and plan.total_bytes > 0
    spec = f"{TWINS_FILE}:mlp_pair"  # the wrong model: nothing fits
    assert main(["convert", str(root), str(root.parent / "x"), "--spec", spec, "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "no NNX home: Linen params/" in out and "not filled: NNX " in out
    assert reads == []


def test_a_mismatch_is_refused_before_any_array_is_read(root, reads, tmp_path):
    with pytest.raises(ConversionError, match="nothing written"):
        convert(root, tmp_path / "out", twins.mlp_pair())
    assert reads == [] and not (tmp_path / "out").exists()
    convert(root, tmp_path / "ok", twins.cnn_pair())
    assert sum(reads) > 0


def test_table_in_a_pipe_keeps_whole_paths(root, tmp_path, capsys):
    dst = tmp_path / ("a_rather_long_folder_name_" * 4) / "converted_checkpoint"
    assert main(["convert", str(root), str(dst), "--spec", f"{TWINS_FILE}:cnn_pair"]) == 0
    err = capsys.readouterr().err
    assert str(dst) in err.replace("\n", "") and "…" not in err


def test_arrays_are_read_in_groups_within_the_budget(root, reads, tmp_path):
    """With a 1 KiB budget every group but those of a single bigger leaf stays under it, and the
    converted weights are the same as with one big group."""
    from linen2nnx.checkpoint_convert.stream import lazy_arrays, open_orbax

    opened = open_orbax(root)
    sizes = {p: arrays.nbytes(m) for p, m in arrays.flat_metadata(opened.tree).items()}
    groups = list(arrays.groups(sizes, 1024))
    assert all(len(g) == 1 or sum(sizes[p] for p in g) <= 1024 for g in groups) and len(groups) > 3
    seen: list[tuple[int, int, int, int]] = []
    convert(root, tmp_path / "small", twins.cnn_pair(), budget=1024, progress=lambda *a: seen.append(a))
    assert len(reads) > 3 and seen[-1][0] == seen[-1][2] and seen[-1][1] == seen[-1][3]
    ckpt = lazy_arrays(opened)
    n_leaves = sum(1 for _ in ckpt.leaves())
    assert seen[-1][2] > n_leaves  # the optimizer moments are streamed too
    convert(root, tmp_path / "big", twins.cnn_pair(), budget=1 << 30)
    small, big = _restored(tmp_path / "small"), _restored(tmp_path / "big")
    assert small.keys() == big.keys() and len(small) > 10
    for k in small:
        np.testing.assert_array_equal(small[k], big[k])


def _restored(path: Path) -> dict[str, np.ndarray]:
    import jax

    with ocp.StandardCheckpointer() as ckptr:
        tree = ckptr.restore(path)
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        jax.tree_util.keystr(k): np.asarray(v)
        for k, v in leaves
        if not jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
    }


def test_arrays_held_at_once_stay_within_the_budget(root, tmp_path):
    """Counted by their real lifetimes (a finaliser per restored array), the arrays alive at once
    never come to more than the budget, or the one leaf bigger than it, while the checkpoint is
    written and read back; none is left alive after ``convert``. This is the bound the memory
    figure of docs/convert.md rests on, without timing or RSS in the test."""
    from linen2nnx.checkpoint_convert import memory
    from linen2nnx.checkpoint_convert.stream import open_orbax

    sizes = [arrays.nbytes(m) for m in arrays.flat_metadata(open_orbax(root).tree).values()]
    gc.collect()  # arrays an earlier test's failed conversion left in a traceback cycle
    before = memory.in_flight.held
    for budget in (1024, 4096):
        memory.in_flight.reset()
        convert(root, tmp_path / f"b{budget}", twins.cnn_pair(), budget=budget)
        assert memory.in_flight.peak - before <= max(budget, max(sizes))
        assert memory.in_flight.held == before
    memory.in_flight.reset()
    convert(root, tmp_path / "all", twins.cnn_pair(), budget=1 << 30)
    assert memory.in_flight.peak - before > 4096  # the counter sees a whole group when it is one


def test_units_are_read_ahead_of_their_writes_within_the_budget(monkeypatch):
    """The next units are read while the ones before are written, as long as those held, the new
    one included, fit in the budget, each on its own bytes of the one reused buffer; a unit bigger
    than the budget is read alone, into memory of its own; writes keep the stored order."""
    import asyncio

    from linen2nnx.checkpoint_convert import pipeline

    monkeypatch.setattr(pipeline, "UNIT_BYTES", 1)  # one key a unit
    sizes = {"a": 60, "b": 30, "c": 30, "d": 100, "e": 10, "f": 150, "g": 40, "h": 50, "i": 20}
    held: dict[str, tuple[int, int] | None] = {}
    events: list[tuple[str, str]] = []
    base: list[int] = []

    async def read(unit, where):
        (key,) = unit
        assert not held or sum(sizes[k] for k in held) + sizes[key] <= 100
        span = None
        if where is not None:
            base.extend([] if base else [where.ctypes.data])  # the first read starts the buffer
            span = (where.ctypes.data - base[0], where.ctypes.data - base[0] + where.nbytes)
            assert span[1] <= 100 and where.nbytes == sizes[key]
            assert all(b <= span[0] or span[1] <= a for a, b in filter(None, held.values()))
        assert (where is None) == (sizes[key] > 100)
        held[key] = span
        events.append(("read", key))
        await asyncio.sleep(0)
        return key

    async def write(unit, got):
        assert got == unit[0]
        await asyncio.sleep(0.01)
        del held[got]
        events.append(("write", got))

    cuts = pipeline.units(sizes, 100)
    assert cuts == [[k] for k in sizes]
    asyncio.run(pipeline.run(cuts, sizes, 100, read, write))
    assert [k for e, k in events if e == "write"] == list(sizes)
    assert events.index(("read", "b")) < events.index(("write", "a"))  # read ahead
    assert events.index(("read", "i")) < events.index(("write", "h"))  # around the buffer's end

    async def failing(unit, where):
        raise ValueError(f"cannot read {unit[0]}")

    with pytest.raises(ValueError, match="cannot read a"):
        asyncio.run(pipeline.run(cuts, sizes, 100, failing, write))


def test_heap_modes_nest_and_set_back_what_they_found(monkeypatch):
    """``convert`` serves big buffers from ``mmap`` (:func:`memory.heap_returned`), the read-back
    inside it from the heap (:func:`memory.heap_reused`); each block sets back the thresholds it
    found and trims the heap."""
    from linen2nnx.checkpoint_convert import memory

    calls: list[tuple[str, int, int]] = []

    class FakeLibc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append(("mallopt", param, value))
            return 1

        def malloc_trim(self, pad: int) -> int:
            calls.append(("trim", pad, 0))
            return 1

    monkeypatch.setattr(memory, "_LIBC", [FakeLibc()])
    mmap_threshold = lambda: [v for op, p, v in calls if op == "mallopt" and p == -3][-1]  # noqa: E731
    with memory.heap_returned():
        assert mmap_threshold() == memory.MMAP_BYTES
        assert [v for op, p, v in calls if op == "mallopt" and p == -1][-1] == memory.TRIM_BYTES
        with memory.heap_reused():
            assert mmap_threshold() == 32 << 20
        assert mmap_threshold() == memory.MMAP_BYTES and calls[-1][0] == "trim"
    assert mmap_threshold() == 32 << 20 and calls[-1][0] == "trim"
    assert memory._MODE == ["glibc"]


def test_a_doubled_params_level_and_other_dtypes_are_named_once(tmp_path):
    """Two mistakes that give a page of problems each get one line saying what they mean: a whole
    variables dict saved as the params, and a bfloat16 checkpoint for a float32 model (never cast)."""
    import jax
    import jax.numpy as jnp

    params = twins.trained_state("mlp").params
    doubled, low = tmp_path / "doubled", tmp_path / "bf16"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(doubled, {"params": {"params": params}})
        checkpointer.save(low, {"params": jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)})
    with pytest.raises(ConversionError) as doubled_error:
        convert(doubled, tmp_path / "a", twins.mlp_pair())
    assert "hint: every unplaced leaf is under params/params/" in str(doubled_error.value)
    assert "does not cast" not in str(doubled_error.value)
    with pytest.raises(ConversionError) as low_error:
        convert(low, tmp_path / "b", twins.mlp_pair())
    assert "dtype mismatch" in str(low_error.value) and "convert does not cast" in str(low_error.value)
    assert "params/params" not in str(low_error.value)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_collection_a_bridged_linen_part_registers_is_converted(tmp_path):
    """A Linen class kept behind ``nnx.bridge.ToNNX`` with a collection of its own (``stats``): its name
    is registered only as the NNX model is built, after the checkpoint's metadata was read. It was
    ignored there and then matched without its arrays (TypeError on ArrayMetadata, exit 1); ``check``
    applied the Linen model without it. Now it is adopted once the model is built, and converted."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from linen2nnx.checkpoint_convert import load_nnx_checkpoint
    from linen2nnx.equivalence import check
    from linen2nnx.spec import LinenSide, ModelPair

    class Noisy(nn.Module):
        @nn.compact
        def __call__(self, x):
            u = self.variable("stats_of_bridge", "u", lambda: jnp.full((1, 3), 0.5))
            return nn.Dense(3)(x) + u.value

    x = np.ones((2, 4), np.float32)

    def make(rngs):
        model = nnx.bridge.ToNNX(Noisy(), rngs=rngs)
        nnx.bridge.lazy_init(model, x)
        return model

    side = LinenSide(
        model=Noisy(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        mutable=("stats_of_bridge",),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(linen=side, nnx_factory=make)
    variables = jax.tree.map(lambda a: a + 1.0, side.init_variables())
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "linen", variables)
    report = convert(tmp_path / "linen", tmp_path / "nnx", pair)
    assert "stats_of_bridge" not in report.ignored
    state = nnx.state(load_nnx_checkpoint(tmp_path / "nnx", pair))
    np.testing.assert_allclose(state["u"].get_value(), 1.5)
    assert check(pair, str(tmp_path / "linen")).passed


def test_a_cache_the_nnx_model_creates_on_its_first_call_is_ignored_with_its_reason(tmp_path):
    """``self.variable('cache', 'c', lambda: jnp.ones(h.shape))``: Linen's init creates it, so every Linen
    checkpoint holds it; the migrated model creates it on its first call (L2N-VAR-004). The tool's own
    spec failed check ("no NNX home: Linen cache/c"): now the entry is ignored with its reason, and the
    cache the first call makes is compared after the train forward."""
    import flax.linen as nn
    import jax.numpy as jnp
    from flax import nnx

    from linen2nnx.checkpoint_convert.first_call import FIRST_CALL
    from linen2nnx.equivalence import check
    from linen2nnx.spec import LinenSide, ModelPair

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.Dense(4)(x)
            c = self.variable("cache", "c", lambda: jnp.ones(h.shape, h.dtype))
            if train:
                c.value = c.value * 2.0
            return h * c.value

    class ModelNNX(nnx.Module):
        def __init__(self, rngs):
            self.dense_0 = nnx.Linear(3, 4, rngs=rngs)

        def __call__(self, x, train: bool = False):
            h = self.dense_0(x)
            if not hasattr(self, "c"):
                self.c = nnx.Cache(jnp.ones(h.shape, h.dtype))
            if train:
                self.c.set_value(self.c[...] * 2.0)
            return h * self.c[...]

    side = LinenSide(
        model=Model(),
        batch={"x": np.ones((2, 3), np.float32)},
        loss=lambda out, b: jnp.mean(out**2),
        mutable=("cache",),
    )
    pair = ModelPair(linen=side, nnx_factory=ModelNNX)
    result = check(pair, long_batch=False)
    assert result.passed, result.failure_table()
    assert [lf.path for lf in result.leaves if lf.check == "cache"] == ["c"]
    report = convert(side.init_variables(), tmp_path / "nnx", pair)
    assert report.ignored["cache/c"] == FIRST_CALL
