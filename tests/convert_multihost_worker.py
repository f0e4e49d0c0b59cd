"""One of two processes (2 host CPU devices each) converting one checkpoint onto a 4-device mesh.

    python tests/convert_multihost_worker.py PROCESS_ID PORT WORKDIR

``tests/test_convert_topology.py`` saves the boxed, scanned pair's Linen checkpoint in
``WORKDIR/linen`` and starts two of these; together they run ``convert(..., mesh=fsdp=2,tensor=2)``
(each process restores and writes its own shards, process 0 publishes), then load the result back
sharded and write ``WORKDIR/result<ID>.json``: whether every shard this process holds equals the
Linen values.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"

import json
from pathlib import Path


def main(pid: int, port: str, work: Path) -> None:
    import jax

    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    from test_convert_roundtrip import boxed_pair

    from linen2nnx.checkpoint_convert import convert, load_nnx_checkpoint
    from linen2nnx.equivalence.mesh import mesh_scope

    pair = boxed_pair()
    shape = {"data": 1, "fsdp": 2, "tensor": 2}
    convert(work / "linen", work / "nnx", pair, mesh=shape)
    with mesh_scope(pair, shape):
        model = load_nnx_checkpoint(work / "nnx", pair)
    kernel = model.blocks.up.kernel.get_value()
    want = np.load(work / "kernel.npy")  # saved by the test: the Linen stack's values
    shards = kernel.addressable_shards
    ok = all(np.array_equal(np.asarray(s.data), want[s.index]) for s in shards)
    report = json.loads((work / "nnx" / "linen2nnx-conversion.json").read_text())
    leftovers = sorted(p.name for p in work.iterdir() if p.name.startswith("."))
    result = {
        "process_count": jax.process_count(),
        "shards": len(shards),
        "equal": ok,
        "leftovers": leftovers,
    }
    result["checksums"] = len(report["checksums"]["model"])
    (work / f"result{pid}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
