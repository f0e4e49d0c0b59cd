"""convert at scale, part 3: a checkpoint saved sharded on 8 devices converts on 1 and on 4.

Orbax refuses to restore it without a target ("Topology mismatch"); the converter restores every
leaf onto a target built from the checkpoint's own metadata, so the device count of the converting
machine does not matter. The saved and converted weights must be identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from linen2nnx.checkpoint_convert import arrays, read_report
from linen2nnx.checkpoint_convert.stream import load_arrays, open_orbax

WORKER = Path(__file__).with_name("convert_mesh_worker.py")


def _run(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run([sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    ckpt = tmp_path_factory.mktemp("sharded") / "ckpt"
    _run("save", "8", str(ckpt))
    return ckpt


def _flat(tree) -> dict[str, np.ndarray]:
    def plain(v):
        return jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(k): np.asarray(plain(v)) for k, v in leaves}


def test_saved_sharding_is_in_the_metadata(sharded):
    flat = arrays.flat_metadata(open_orbax(sharded).tree)
    kernel = flat[("params", "dense1", "kernel")]
    assert list(kernel.sharding.partition_spec) == [None, "d"] and kernel.sharding.shape == [8]


@pytest.mark.parametrize("devices", [1, 4])
def test_checkpoint_saved_on_8_devices_converts_on_fewer(sharded, tmp_path, devices):
    dst = tmp_path / f"nnx{devices}"
    _run("convert", str(devices), str(sharded), str(dst))
    with ocp.StandardCheckpointer() as ckptr:
        got = _flat(ckptr.restore(dst))
    linen = load_arrays(open_orbax(sharded))  # restored here on this process's devices
    report = read_report(dst)
    for leaf in report["mapped"]:
        coll, *path = leaf["linen"].split("/")
        want = linen.collections[coll]
        for k in path:
            want = want[k]
        key = "".join(f"[{int(p) if p.isdigit() else repr(p)}]" for p in leaf["nnx"].split("/"))
        np.testing.assert_array_equal(got[f"{key}['value']"] if f"{key}['value']" in got else got[key], want)


def test_mesh_output_is_written_with_the_nnx_shardings(tmp_path):
    """--mesh data=2,fsdp=2,tensor=2 on 8 devices: the boxed, scanned stack is written sharded as the
    NNX model's logical names and the pair's rules say (layers unsharded, embed on fsdp, mlp on
    tensor), its adam moment the same way, and it loads back sharded with the Linen values; converted
    back to Linen on the mesh, the stack is written with the Linen rules' layout and its values."""
    import json

    out = tmp_path / "mesh.json"
    _run("mesh", "8", str(tmp_path), str(out))
    got = json.loads(out.read_text())
    assert got["devices"] == 8 and got["saved_mesh"] == [2, 2, 2]
    assert got["saved_spec"] == [None, "fsdp", "tensor"] == got["loaded_spec"] == got["mu_spec"]
    assert got["equal"]
    # --to linen --mesh: the Linen stack written as its logical names ("layers", "embed", "mlp") say
    assert got["back_spec"] == [None, "fsdp", "tensor"] and got["back_equal"]
    # ... from a source saved unboxed too (unboxing there applied a constraint to abstract values: a crash)
    assert got["back_plain_spec"] == [None, "fsdp", "tensor"]


def test_two_processes_convert_onto_one_mesh(tmp_path):
    """Multi-host on one machine: 2 processes x 2 host devices, mesh fsdp=2,tensor=2. Each restores
    and writes its own shards; process 0 publishes; both load the result back sharded."""
    import json
    import socket

    from test_convert_roundtrip import _state, boxed_pair

    state = _state(boxed_pair())
    np.save(tmp_path / "kernel.npy", np.asarray(state.params["blocks"]["up"]["kernel"].value))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", state)
        ckptr.wait_until_finished()
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    worker = Path(__file__).with_name("convert_multihost_worker.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(i), port, str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    for i in (0, 1):
        got = json.loads((tmp_path / f"result{i}.json").read_text())
        assert got["process_count"] == 2 and got["shards"] == 2 and got["equal"]
        assert got["leftovers"] == []


@pytest.fixture(scope="module")
def boxed_on_8(tmp_path_factory) -> Path:
    ckpt = tmp_path_factory.mktemp("boxed8") / "ckpt"
    _run("save_boxed", "8", str(ckpt))
    return ckpt


@pytest.mark.parametrize("devices", [1, 4])
def test_mesh_conversion_in_bounded_groups_equals_the_ungrouped_one(boxed_on_8, tmp_path, devices):
    """The boxed pair saved on 8 devices, converted with --mesh on 4 and on 1 with a budget of the
    largest array: every restore call holds at most the budget (or one leaf), the restored bytes
    alive at once stay within it, and what is written (arrays, dtypes, layouts, checksums) is bit
    for bit what one group over the whole tree writes."""
    import json

    out = tmp_path / "groups.json"
    _run("groups", str(devices), str(boxed_on_8), str(out))
    got = json.loads(out.read_text())
    grouped, whole = got["grouped"], got["whole"]
    # one read per payload (model, optimizer) with every array of it
    assert [n for n, _ in whole["calls"]] == [9, 19]
    assert len(grouped["calls"]) > 8 and sum(n for n, _ in grouped["calls"]) == 28
    assert all(size <= got["largest"] for _, size in grouped["calls"])
    assert 0 < grouped["peak"] <= got["largest"] < whole["peak"]
    assert grouped["payloads"] == whole["payloads"] and grouped["checksums"] == whole["checksums"]
    kernel = grouped["payloads"][""]["['blocks']['up']['kernel']['value']"]
    assert kernel[1] == ["None", "fsdp", "tensor"]  # the NNX layout (axes of size 1 on one device)


def test_checksum_of_a_sharded_array_is_taken_from_its_shards(tmp_path):
    """The checksum --mesh records (no whole host copy) equals the whole array's, for every layout."""
    import json

    out = tmp_path / "sums.json"
    _run("checksum", "8", str(out))
    assert json.loads(out.read_text()) == {"cases": 6, "bad": []}
