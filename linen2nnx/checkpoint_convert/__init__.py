"""Linen checkpoint -> NNX checkpoint, validated against the NNX model before anything is written.

Pipeline, one module a step: :mod:`.read` (Orbax dir, msgpack file or in-memory tree, boxes
stripped) -> :mod:`.mapping` (name map, or structural matching that refuses ambiguity) ->
:mod:`.validate` (shapes, dtypes, coverage; every problem named) -> :mod:`.write` (atomic Orbax
payload + JSON report). :mod:`.optimizer` adds the optax state; :mod:`.api` ties them together.

Example::

    from linen2nnx.checkpoint_convert import convert, load_nnx_checkpoint
    report = convert("runs/linen/ckpt", "runs/nnx/ckpt", pair)
    model = load_nnx_checkpoint("runs/nnx/ckpt", pair)
"""

from linen2nnx.checkpoint_convert.api import (
    Converted,
    Plan,
    convert,
    convert_state,
    convert_tree,
    plan_conversion,
    resolve_name_map,
)
from linen2nnx.checkpoint_convert.optimizer import restore_optimizer
from linen2nnx.checkpoint_convert.read import LinenCheckpoint, read_linen_checkpoint
from linen2nnx.checkpoint_convert.report import ConversionReport, KeptLeaf, MappedLeaf
from linen2nnx.checkpoint_convert.write import (
    REPORT_FILENAME,
    load_nnx_checkpoint,
    load_optimizer_state,
    read_report,
    write_nnx_checkpoint,
)

__all__ = [
    "REPORT_FILENAME",
    "ConversionReport",
    "Converted",
    "KeptLeaf",
    "LinenCheckpoint",
    "MappedLeaf",
    "Plan",
    "convert",
    "convert_state",
    "convert_tree",
    "load_nnx_checkpoint",
    "load_optimizer_state",
    "plan_conversion",
    "read_linen_checkpoint",
    "read_report",
    "resolve_name_map",
    "restore_optimizer",
    "write_nnx_checkpoint",
]
