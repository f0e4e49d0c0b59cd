"""Run checkpoints: an Orbax ``CheckpointManager`` over ``OUT/checkpoints``.

Each checkpoint step holds two items, written together and committed atomically by Orbax (a step
directory appears under its final name only once complete, so a run killed mid-save leaves the
previous step as the latest):

- ``state``: the whole ``nnx.State`` of ``(model, optimizer)``: params, every other model variable
  (BatchNorm statistics, the RNG key and counter of every stream, so dropout continues), the
  optimizer state and its step;
- ``meta``: JSON: the data iterator's position, the run's start step, and the settings a resume must
  repeat (seed, ``--deterministic``, batch size, micro-batches, data source: run_settings.py).

Saves are asynchronous: the train loop continues while the arrays are written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from linen2nnx.train.state import CheckpointError, TrainState, _with_shardings, fit_problems

UNFINISHED = ".orbax-checkpoint-tmp"  # the name part of a save that never finished (Orbax's)


def finished_entries(root: Path) -> list[Path]:
    """What ``root`` holds but the folders of saves a killed run left unfinished."""
    return [p for p in root.iterdir() if UNFINISHED not in p.name]


def has_finished_step(root: Path) -> bool:
    """Whether ``root`` holds a step folder a save finished (Orbax renames ``<step>.orbax-checkpoint-tmp-*``
    to ``<step>`` when it does): read from the folder names, without opening a checkpoint manager."""
    return root.is_dir() and any(p.is_dir() and p.name.isdigit() for p in finished_entries(root))


def nothing_to_resume(root: Path) -> CheckpointError:
    return CheckpointError(
        f"{root}: no finished checkpoint to resume from (a run stopped before its first save "
        "leaves none); run without --resume to start it anew"
    )


class RunCheckpoints:
    """Save every ``save_every`` steps (0: only the final step), keep the newest ``keep``."""

    def __init__(self, root: str | Path, *, save_every: int = 0, keep: int = 3) -> None:
        import orbax.checkpoint as ocp

        self.root = Path(root).expanduser().absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            save_interval_steps=save_every or 1,
            enable_async_checkpointing=True,
            create=True,
            cleanup_tmp_directories=True,  # a save a kill interrupted: never a step, removed on open
        )
        self.save_every = save_every
        handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
        self.manager = ocp.CheckpointManager(self.root, options=options, item_handlers=handlers)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def due(self, step: int, *, final: bool = False) -> bool:
        """Whether ``step`` is saved: every ``save_every`` steps and the final one, once."""
        if not final and (not self.save_every or step % self.save_every):
            return False
        return step not in self.manager.all_steps()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> bool:
        """Start an async save of ``step`` (see :meth:`due`); True if one started."""
        import orbax.checkpoint as ocp

        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        return bool(self.manager.save(step, args=args, force=True))

    def restore(self, target: TrainState, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """``(state, meta)`` of ``step`` (default: the latest), onto ``target``'s structure and shardings."""
        import orbax.checkpoint as ocp

        step = self.latest_step() if step is None else step
        if step is None:
            raise nothing_to_resume(self.root)
        where = self.root / str(step)
        try:
            meta = self.manager.item_metadata(step)
            fit_problems(meta["state"], target.state, where / "state", "checkpointed train state")
            abstract = _with_shardings(target.state, target.shardings)
            args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
            restored = self.manager.restore(step, args=args)
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{where}: cannot restore the checkpoint: {type(e).__name__}: {e}") from e
        return restored["state"], dict(restored["meta"])

    def read_meta(self, step: int) -> dict[str, Any]:
        """The JSON ``meta`` item of ``step`` alone (the run's settings, before a state to restore onto exists)."""
        import orbax.checkpoint as ocp

        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        except Exception as e:
            raise CheckpointError(
                f"{self.root / str(step)}: cannot read the run's meta: {type(e).__name__}: {e}"
            ) from e
        return dict(restored["meta"])

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
