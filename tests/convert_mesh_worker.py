"""Save a Linen checkpoint sharded on N host devices, or convert one, in a process that sees N devices.

    python tests/convert_mesh_worker.py save N CKPT          (the MLP TrainState, sharded on N devices)
    python tests/convert_mesh_worker.py convert N CKPT DST   (linen2nnx convert with N devices)
    python tests/convert_mesh_worker.py mesh 8 WORKDIR OUT.json  (convert --mesh data=2,fsdp=2,tensor=2 of
                                                              the boxed, scanned pair; what was written)
    python tests/convert_mesh_worker.py checksum 8 OUT.json     (checksums of sharded arrays from their shards)
    python tests/convert_mesh_worker.py save_boxed 8 CKPT     (the boxed pair's TrainState, sharded on 8)
    python tests/convert_mesh_worker.py groups N CKPT OUT.json   (convert --mesh on N devices in small groups
                                                              and in one; the arrays, layouts, restore calls)

XLA reads ``--xla_force_host_platform_device_count`` once, when jax first initialises its CPU
backend, so each device count needs a fresh process with the flag set before jax is imported;
``tests/test_convert_topology.py`` starts these and compares what they write.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before jax is imported anywhere
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f
    ]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={int(sys.argv[2])}"])
    os.environ["JAX_PLATFORMS"] = "cpu"

from pathlib import Path

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"


def save_sharded(n: int, ckpt: Path) -> None:
    """Every array whose last axis divides by ``n`` is split over the ``n`` devices along it."""
    import jax
    import orbax.checkpoint as ocp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    from linen2nnx.spec import import_file

    twins = import_file(TWINS_FILE)
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Auto,))

    def place(x):
        if not hasattr(x, "shape"):
            return x
        split = x.ndim and x.shape[-1] % n == 0
        spec = PartitionSpec(*([None] * (x.ndim - 1)), "d") if split else PartitionSpec()
        return jax.device_put(x, NamedSharding(mesh, spec))

    state = jax.tree.map(place, twins.trained_state("mlp"))
    assert len(jax.devices()) == n
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(ckpt, state)
        ckptr.wait_until_finished()


def convert_on(n: int, ckpt: Path, dst: Path) -> None:
    import jax

    from linen2nnx.checkpoint_convert import convert
    from linen2nnx.spec import import_file

    assert len(jax.devices()) == n
    twins = import_file(TWINS_FILE)
    convert(ckpt, dst, twins.mlp_pair(), twins.mlp_name_map())


def convert_on_mesh(work: Path, out: Path) -> None:
    """Save the boxed pair's Linen TrainState unsharded, convert it onto a 2x2x2 mesh, report layouts."""
    import json

    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from test_convert_roundtrip import _state, boxed_pair

    from linen2nnx.checkpoint_convert import convert, load_nnx_checkpoint
    from linen2nnx.equivalence.mesh import mesh_scope

    pair = boxed_pair()
    state = _state(pair)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(work / "linen", state)
        ckptr.wait_until_finished()
    shape = {"data": 2, "fsdp": 2, "tensor": 2}
    convert(work / "linen", work / "nnx", pair, mesh=shape)
    with ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(work / "nnx").item_metadata.tree
        opt_meta = ckptr.metadata(work / "nnx" / "optimizer").item_metadata.tree
    mu = opt_meta["opt_state"]["0"]["mu"]["blocks"]["up"]["kernel"]["value"].sharding
    from linen2nnx.checkpoint_convert.to_linen import convert_to_linen

    convert_to_linen(work / "nnx", work / "back", pair, mesh=shape)  # and back, onto the Linen layout
    with ocp.StandardCheckpointer() as ckptr:
        back_meta = ckptr.metadata(work / "back").item_metadata.tree
        back = ckptr.restore(work / "back")
    back_kernel = back["params"]["blocks"]["up"]["kernel"]["value"]
    back_spec = back_meta["params"]["blocks"]["up"]["kernel"]["value"].sharding.partition_spec
    # a training loop that unboxed its params before TrainState.create saved no boxes: back onto the mesh
    from linen2nnx.equivalence.mesh import strip_boxes

    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(work / "linen_plain", strip_boxes(state))
        ckptr.wait_until_finished()
    convert(work / "linen_plain", work / "nnx_plain", pair, mesh=shape)
    convert_to_linen(work / "nnx_plain", work / "back_plain", pair, mesh=shape)
    with ocp.StandardCheckpointer() as ckptr:
        plain_meta = ckptr.metadata(work / "back_plain").item_metadata.tree
    plain_spec = plain_meta["params"]["blocks"]["up"]["kernel"].sharding.partition_spec
    with mesh_scope(pair, shape):
        model = load_nnx_checkpoint(work / "nnx", pair)
    kernel = model.blocks.up.kernel
    saved = meta["blocks"]["up"]["kernel"]["value"].sharding
    result = {
        "saved_spec": [
            None if a is None else (list(a) if isinstance(a, (list, tuple)) else a)
            for a in saved.partition_spec
        ],
        "saved_mesh": [int(x) for x in saved.shape],
        "loaded_spec": [
            None if a is None else (list(a) if isinstance(a, (list, tuple)) else a)
            for a in kernel.get_value().sharding.spec
        ],
        "equal": bool(
            np.array_equal(np.asarray(kernel[...]), np.asarray(state.params["blocks"]["up"]["kernel"].value))
        ),
        "devices": len(jax.devices()),
        "back_spec": [None if a is None else a for a in back_spec],
        "back_plain_spec": [None if a is None else a for a in plain_spec],
        "back_equal": bool(
            np.array_equal(np.asarray(back_kernel), np.asarray(state.params["blocks"]["up"]["kernel"].value))
        ),
        "mu_spec": [
            None if a is None else (list(a) if isinstance(a, (list, tuple)) else a) for a in mu.partition_spec
        ],
    }
    out.write_text(json.dumps(result))


def save_boxed(n: int, ckpt: Path) -> None:
    """The boxed, scanned pair's TrainState, every array split over ``n`` devices where it divides."""
    import jax
    import orbax.checkpoint as ocp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec
    from test_convert_roundtrip import _state, boxed_pair

    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Auto,))

    def place(x):
        if not hasattr(x, "shape"):
            return x
        split = x.ndim and x.shape[0] % n == 0
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec("d") if split else PartitionSpec()))

    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(ckpt, jax.tree.map(place, _state(boxed_pair())))
        ckptr.wait_until_finished()


def convert_in_groups(n: int, ckpt: Path, out: Path) -> None:
    """``convert --mesh`` of ``ckpt`` on ``n`` devices with a budget of the largest array (many
    groups) and with one above the whole tree (one group: the ungrouped conversion); reports each
    payload's arrays (bytes as hex) and layouts, the leaves and bytes of every restore call, and the
    most restored bytes alive at once."""
    import json

    from test_convert_roundtrip import boxed_pair

    from linen2nnx.checkpoint_convert import arrays, convert, lazy_sharded, memory
    from linen2nnx.checkpoint_convert.stream import open_orbax

    pair = boxed_pair()
    shape = {"data": 1, "fsdp": 2, "tensor": 2} if n >= 4 else {"data": 1, "fsdp": 1, "tensor": 1}
    sizes = [arrays.nbytes(m) for m in arrays.flat_metadata(open_orbax(ckpt).tree).values()]
    result = {"largest": max(sizes), "total": sum(sizes)}
    calls: list[list[int]] = []
    read_group = lazy_sharded.read_group

    async def counted(src, leaves):  # the source reads of the writes only, not verify's read-back
        calls.append([len(leaves), sum(v.nbytes for v in leaves)])
        return await read_group(src, leaves)

    lazy_sharded.read_group = counted
    for name, budget in (("grouped", max(sizes)), ("whole", 2 * sum(sizes))):
        calls = []
        memory.in_flight.reset()
        dst = out.parent / f"nnx-{n}-{name}"
        convert(ckpt, dst, pair, mesh=shape, budget=budget)
        result[name] = {"calls": calls, "peak": memory.in_flight.peak - memory.in_flight.held}
        result[name]["payloads"] = {p: _written(dst / p) for p in ("", "optimizer")}
        result[name]["checksums"] = json.loads((dst / "linen2nnx-conversion.json").read_text())["checksums"]
    out.write_text(json.dumps(result))


def checksums_from_shards(out: Path) -> None:
    """``sharded_checksum`` against ``checksum`` of the whole array, for layouts that split several
    axes, replicate some, and slabs small enough that one C-order row spans several shards."""
    import json

    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from linen2nnx.checkpoint_convert.verify import checksum, sharded_checksum

    mesh = jax.make_mesh((2, 2, 2), ("a", "b", "c"))
    rng = np.random.default_rng(0)
    cases = [
        ((6, 8, 4), P(None, "a", "b")),
        ((8,), P("a")),
        ((4, 6), P(("a", "b"))),
        ((2, 3, 4, 8), P("a", None, "b", "c")),
    ]
    cases += [((), P()), ((4, 4), P())]
    bad = []
    for shape, spec in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        a = jax.device_put(x, NamedSharding(mesh, spec))
        bad += [
            f"{shape} {spec} {slab}"
            for slab in (4, 20, 100, 1 << 20)
            if sharded_checksum(a, slab) != checksum(x)
        ]
    out.write_text(json.dumps({"cases": len(cases), "bad": bad}))


def _written(item: Path) -> dict[str, list]:
    """Stored path -> [dtype, spec, the array's bytes in hex] of one written payload."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(item).item_metadata.tree
        tree = ckptr.restore(item)
    specs = {jax.tree_util.keystr(k): m.sharding for k, m in jax.tree_util.tree_flatten_with_path(meta)[0]}
    out = {}
    for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            v = jax.random.key_data(v)
        spec = specs[jax.tree_util.keystr(k)]
        spec = [str(a) for a in spec.partition_spec] if spec is not None else None
        out[jax.tree_util.keystr(k)] = [str(v.dtype), spec, np.asarray(v).tobytes().hex()]
    return out


if __name__ == "__main__":
    mode, n, ckpt = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if mode == "save":
        save_sharded(n, ckpt)
    elif mode == "checksum":
        checksums_from_shards(ckpt)
    elif mode in ("save_boxed", "groups"):
        sys.path.insert(0, str(Path(__file__).parent))
        save_boxed(n, ckpt) if mode == "save_boxed" else convert_in_groups(n, ckpt, Path(sys.argv[4]))
    elif mode == "mesh":
        sys.path.insert(0, str(Path(__file__).parent))
        convert_on_mesh(ckpt, Path(sys.argv[4]))
    else:
        convert_on(n, ckpt, Path(sys.argv[4]))
