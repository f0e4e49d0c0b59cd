"""Linen checkpoint -> NNX checkpoint, validated against the NNX model before anything is written.

Pipeline, one module a step: :mod:`.source` (root / step / item, finished steps only) ->
:mod:`.stream` (plan from Orbax metadata; arrays later, in bounded groups, via :mod:`.arrays` and
:mod:`.lazy`, or :mod:`.sharded` onto a mesh) -> :mod:`.read` (msgpack file or in-memory tree,
boxes stripped) -> :mod:`.mapping` (name map, or structural matching that refuses ambiguity) ->
:mod:`.validate` (shapes, dtypes, coverage; every problem named) -> :mod:`.write` (Orbax payload +
JSON report with checksums, :mod:`.verify` reads it back, :mod:`.commit` publishes it with one
rename). :mod:`.optimizer` adds the optax state; :mod:`.api` ties them together; :mod:`.dryrun`
prints the plan; :mod:`.to_linen` is the way back.

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
from linen2nnx.checkpoint_convert.dryrun import DryRun, dry_run
from linen2nnx.checkpoint_convert.optimizer import restore_optimizer
from linen2nnx.checkpoint_convert.read import LinenCheckpoint, read_linen_checkpoint
from linen2nnx.checkpoint_convert.report import ConversionReport, KeptLeaf, MappedLeaf
from linen2nnx.checkpoint_convert.source import UnfinishedStepError, resolve_source
from linen2nnx.checkpoint_convert.to_linen import convert_to_linen
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
    "DryRun",
    "KeptLeaf",
    "LinenCheckpoint",
    "MappedLeaf",
    "Plan",
    "UnfinishedStepError",
    "convert",
    "convert_state",
    "convert_to_linen",
    "convert_tree",
    "dry_run",
    "load_nnx_checkpoint",
    "load_optimizer_state",
    "plan_conversion",
    "read_linen_checkpoint",
    "read_report",
    "resolve_name_map",
    "resolve_source",
    "restore_optimizer",
    "write_nnx_checkpoint",
]
