"""Write a converted NNX checkpoint atomically, and load it back the standard NNX way.

Layout of ``dst`` (one directory, nothing written beside it)::

    dst/                          Orbax StandardCheckpointer payload of nnx.state(model) (full state)
    dst/linen2nnx-conversion.json the conversion report (Orbax ignores unknown entries)
    dst/optimizer/                only when optax state was converted: payload of nnx.state(optimizer)

The model payload restores with the plain recipe (docs/nnx_facts.md#restoring-an-nnx-checkpoint), so no linen2nnx code is needed
to use it::

    graphdef, abstract = nnx.split(nnx.eval_shape(make_model))
    model = nnx.merge(graphdef, ocp.StandardCheckpointer().restore(dst, abstract))

The directory is built in a fixed hidden sibling and moved into place by one rename only when
complete (:mod:`.commit`): a failed or killed run leaves no ``dst``, the next run removes its
leftovers, and replacing ``dst`` (``force``) always leaves the old or the new checkpoint there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from linen2nnx.checkpoint_convert.commit import (
    barrier,
    is_primary,
    partial_dir,
    publish,
    recover,
    recover_all,
)
from linen2nnx.checkpoint_convert.durable import Flusher, sync_path, unsynced_checkpointer
from linen2nnx.errors import L2NError

REPORT_FILENAME = "linen2nnx-conversion.json"
OPTIMIZER_DIR = "optimizer"
TARGET_FILE_BYTES = 8 << 20
"""OCDBT data files of about this size; an array bigger than this is also stored in chunks of at
most this size, so reading it back (``--verify``, and every later restore) decodes it a chunk at a
time instead of needing its stored bytes and its decoded bytes whole at once, and writing it
(two chunks at a time, :func:`.arrays.write_by_chunk`) holds two chunks' encoded bytes. 16 MB
chunks held 10-25 MB more while the largest array was written, at 1.1 GB."""


def write_nnx_checkpoint(
    dst: str | Path,
    state: Any,
    report: dict[str, Any] | None = None,
    *,
    optimizer_state: Any = None,
    force: bool = False,
    verify: bool = True,
    budget: int = 256 << 20,
) -> Path:
    """Save ``state`` (an ``nnx.State``) to ``dst`` with Orbax, plus the JSON report; all or nothing.

    The report gets a checksum per array (``checksums``); with ``verify`` the staged payload is
    read back and compared (``budget`` bytes at a time) before it is published.
    """
    import jax

    dst = Path(dst).expanduser().absolute()
    recover_all(dst)
    if dst.exists() and not dst.is_dir():
        raise L2NError(f"{dst}: exists and is not a directory")
    if dst.exists() and not force:
        raise L2NError(f"{dst}: already exists (pass --force to replace it)")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(dst)
    payloads = {"model": (tmp, state)}
    if optimizer_state is not None:
        payloads[OPTIMIZER_DIR] = (tmp / OPTIMIZER_DIR, optimizer_state)
    try:
        with Flusher() as flusher:
            sums = _save_and_verify(payloads, verify, budget, flusher)
            if report is not None and is_primary():
                report = {**report, "checksums": sums, "verified": verify and jax.process_count() == 1}
                (tmp / REPORT_FILENAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            flusher.finish(tmp)  # every file and folder on disk before the rename publishes them
    except BaseException:
        if is_primary():
            recover(dst)  # this run's partial output, Orbax's temp folder included
        raise
    barrier("staged")
    if is_primary():
        publish(tmp, dst)
        sync_path(dst.parent)  # the rename itself on disk
    barrier("published")
    return dst


def _save_and_verify(
    payloads: dict[str, tuple[Path, Any]], verify: bool, budget: int, flusher: Flusher
) -> dict[str, Any]:
    """Save every payload (every process writes its shards), checksum, and read back; each
    payload's files go to disk on ``flusher``'s thread while the next is written and read back.

    Verification reads whole arrays on the host, so a multi-host job records the checksums of the
    arrays each process can address and skips the read-back.
    """
    import jax
    import orbax.checkpoint as ocp

    from linen2nnx.checkpoint_convert.verify import state_checksums, verify_payload

    others = tuple(path.name for path, _ in payloads.values())[1:]  # nested in the first one's folder
    # the PyTree handler (StandardCheckpointer's own format) also takes lazy leaves, see .lazy
    with unsynced_checkpointer() as ckptr:
        for path, tree in payloads.values():
            ckptr.save(path, args=ocp.args.PyTreeSave(tree, ocdbt_target_data_file_size=TARGET_FILE_BYTES))
            flusher.submit(path, skip=others if path == payloads["model"][0] else ())
    sums = {name: state_checksums(tree) for name, (_, tree) in payloads.items()}
    if verify and jax.process_count() == 1:  # Orbax restores are collective: no primary-only read
        for name, (path, _) in payloads.items():
            verify_payload(path, sums[name], budget)
    return sums


def load_nnx_checkpoint(path: str | Path, pair: Any) -> Any:
    """Restore a converted checkpoint onto ``pair.make_nnx()``'s structure; returns the NNX module.

    Uses the standard recipe only (abstract model + ``StandardCheckpointer.restore``), which is the
    point: a converted checkpoint must not need linen2nnx to be loaded.
    """
    import orbax.checkpoint as ocp
    from flax import nnx

    path = Path(path).expanduser().absolute()
    if not (path / "_METADATA").exists():
        what = "not found" if not path.exists() else "not an Orbax checkpoint directory (no _METADATA)"
        raise L2NError(f"{path}: NNX checkpoint {what}")
    import jax

    abstract_model = nnx.eval_shape(pair.make_nnx)
    graphdef, abstract = nnx.split(abstract_model)
    mesh = jax.sharding.get_mesh()
    if not mesh.empty:  # sharded restore, as nnx.get_abstract_model does: under jax.set_mesh the abstract
        # leaves carry AbstractMesh shardings, which Orbax cannot restore onto
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            abstract,
            nnx.get_named_sharding(abstract, mesh),
        )
    try:
        with ocp.StandardCheckpointer() as ckptr:
            state = ckptr.restore(path, abstract)
    except Exception as e:
        raise L2NError(
            f"{path}: cannot restore onto {type(abstract_model).__name__}: {type(e).__name__}: {e}"
        ) from e
    return nnx.merge(graphdef, state)


def load_optimizer_state(path: str | Path, abstract_optimizer_state: Any) -> Any:
    """Restore ``dst/optimizer`` onto ``nnx.state(nnx.eval_shape(lambda: nnx.Optimizer(...)))``."""
    import orbax.checkpoint as ocp

    opt_path = Path(path).expanduser().absolute() / OPTIMIZER_DIR
    if not (opt_path / "_METADATA").exists():
        raise L2NError(f"{opt_path}: no converted optimizer state")
    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(opt_path, abstract_optimizer_state)


def read_report(path: str | Path) -> dict[str, Any]:
    """The conversion report stored in a converted checkpoint."""
    p = Path(path) / REPORT_FILENAME
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise L2NError(f"{p}: no conversion report") from e
