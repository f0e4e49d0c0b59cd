"""A converted checkpoint is on disk before the rename that publishes it: the save writes without
an ``fsync`` per TensorStore write, and every file and folder of the staged checkpoint is synced,
once, before ``publish`` renames it (then the folder that holds it, for the rename)."""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from linen2nnx.checkpoint_convert import convert, durable, write
from linen2nnx.spec import LinenSide, ModelPair


class _Small(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Dict(kernel=nnx.Param(jnp.zeros((64, 32))))
        self.bias = nnx.Param(jnp.zeros(3))


def _source(tmp_path: Path) -> Path:
    root = tmp_path / "linen"
    kernel = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(root, {"params": {"dense": {"kernel": kernel}, "bias": np.ones(3, np.float32)}})
        ckptr.wait_until_finished()
    return root


def test_every_staged_file_and_folder_is_synced_before_the_rename(tmp_path, monkeypatch):
    synced: list[str] = []
    real_sync = durable.sync_path

    def sync(path):
        synced.append(os.path.abspath(path))
        real_sync(path)

    monkeypatch.setattr(durable, "sync_path", sync)
    monkeypatch.setattr(write, "sync_path", sync)
    at_publish: dict[str, list[str]] = {}
    real_publish = write.publish

    def publish(staged, dst):
        at_publish["synced"] = list(synced)
        at_publish["staged"] = [os.path.abspath(r) for r, _, _ in os.walk(staged)]
        at_publish["staged"] += [
            os.path.join(os.path.abspath(r), f) for r, _, fs in os.walk(staged) for f in fs
        ]
        real_publish(staged, dst)

    monkeypatch.setattr(write, "publish", publish)
    pair = ModelPair(LinenSide(None, {}, None), _Small)
    convert(_source(tmp_path), tmp_path / "nnx", pair)
    missing = set(at_publish["staged"]) - set(at_publish["synced"])
    assert not missing and any(p.endswith("manifest.ocdbt") for p in at_publish["staged"])
    assert synced[-1] == str(tmp_path)  # after the rename: the folder that now holds dst
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "nnx")
    np.testing.assert_array_equal(back["dense"]["kernel"]["value"], np.arange(64 * 32).reshape(64, 32))


def test_a_file_changed_after_its_background_sync_is_synced_again(tmp_path, monkeypatch):
    synced: list[str] = []
    real_sync = durable.sync_path
    monkeypatch.setattr(durable, "sync_path", lambda p: (synced.append(str(p)), real_sync(p)))
    (tmp_path / "a").write_bytes(b"1")
    (tmp_path / "b").write_bytes(b"2")
    with durable.Flusher() as flusher:
        flusher.submit(tmp_path)
        flusher.wait()
        first = list(synced)
        (tmp_path / "b").write_bytes(b"22")  # changed (size): synced again
        (tmp_path / "c").write_bytes(b"3")  # new
        flusher.finish(tmp_path)
    again = synced[len(first) :]
    assert sorted(os.path.basename(p) for p in first) == ["a", "b"]
    assert {os.path.basename(p) for p in again} == {"b", "c", os.path.basename(tmp_path)}


def test_the_save_s_tensorstore_context_does_not_sync_each_write(tmp_path):
    """Every leaf of one save gets the same context (one OCDBT writer), with ``file_io_sync`` off."""
    seen = []
    with durable.unsynced_checkpointer() as ckptr:
        impl = ckptr._handler._handler_impl
        real = impl._get_param_infos

        def spy(*args, **kwargs):
            infos = real(*args, **kwargs)
            seen.extend(i.ts_context for i in jax_leaves(infos))
            return infos

        impl._get_param_infos = spy
        ckptr.save(tmp_path / "c", args=ocp.args.PyTreeSave({"a": np.ones(4), "b": np.zeros(3)}))
    assert len(seen) == 2 and seen[0] is seen[1]
    assert seen[0]["file_io_sync"].to_json() is False
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "c")
    np.testing.assert_array_equal(back["a"], np.ones(4))


def jax_leaves(tree):
    import jax
    from orbax.checkpoint._src.serialization.types import ParamInfo

    return jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, ParamInfo))
