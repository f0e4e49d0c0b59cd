"""Find the Orbax item to convert, whether SRC names a CheckpointManager root, a step or an item.

Training loops save either with ``StandardCheckpointer().save(path, state)`` (``path`` is the item)
or through a ``CheckpointManager`` (``ROOT/<step>/<item>/``, e.g. ``ROOT/5/state`` next to
``ROOT/5/metrics``). Users pass whichever folder they have at hand, so all three are accepted:

- an item dir (it holds ``_METADATA``): converted as is;
- a step dir (``ROOT/5``): its one item with a top-level ``params`` tree; other items (iterator
  state, metrics, ...) are listed as ignored in the report;
- a root: the newest *finished* step, or ``step`` when given.

A step is finished when Orbax wrote its ``_CHECKPOINT_METADATA`` (the last file of a save) or its
``commit_success.txt`` marker. The newest step being unfinished usually means a save was
interrupted or is still running: that is refused with :class:`UnfinishedStepError`, which names
the newest finished step ``--step`` could take, rather than silently converting an older one.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from linen2nnx.errors import L2NError

FINISHED_MARKERS = ("_CHECKPOINT_METADATA", "commit_success.txt")
ITEM_MARKER = "_METADATA"
_STEP = re.compile(r"\d+")


class UnfinishedStepError(L2NError):
    """The step asked for (or the newest one) was not completely written."""


@dataclasses.dataclass
class Source:
    """The resolved Orbax item and where it came from."""

    item_dir: Path
    step: int | None = None
    ignored_items: dict[str, str] = dataclasses.field(default_factory=dict)


def is_finished(step_dir: Path) -> bool:
    """Whether Orbax completed the save of ``step_dir`` (one of its final markers is there)."""
    return any((step_dir / m).exists() for m in FINISHED_MARKERS)


def step_dirs(root: Path) -> dict[int, Path]:
    """The numeric step folders of a CheckpointManager root (Orbax's ``*.orbax-checkpoint-tmp-*`` ignored)."""
    return {int(p.name): p for p in root.iterdir() if p.is_dir() and _STEP.fullmatch(p.name)}


def resolve_source(path: str | Path, step: int | None = None) -> Source:
    """The item dir to convert; raises :class:`L2NError` naming the folder when there is none."""
    path = Path(path).expanduser().absolute()
    if not path.exists():
        raise L2NError(f"{path}: checkpoint not found")
    if not path.is_dir():
        raise L2NError(f"{path}: not an Orbax checkpoint directory")
    if (path / ITEM_MARKER).exists():
        if step is not None:
            raise L2NError(f"{path}: --step {step} needs a CheckpointManager root, this is one item")
        if not _is_step_dir(path.parent) or (path / FINISHED_MARKERS[0]).exists():
            return Source(path, _step_of(path.parent) if _is_step_dir(path.parent) else None)
        if not is_finished(path.parent):  # a CheckpointManager item (it has no metadata of its own)
            raise UnfinishedStepError(
                f"{path}: step {path.parent.name} is not finished (no _CHECKPOINT_METADATA)"
            )
        return Source(path, _step_of(path.parent))
    steps = step_dirs(path)
    if steps and not _items(path):
        return _from_root(path, steps, step)
    if step is not None:
        raise L2NError(f"{path}: --step {step} needs a CheckpointManager root, this is one step")
    return _from_step(path)


def _from_root(root: Path, steps: dict[int, Path], step: int | None) -> Source:
    finished = sorted(s for s, p in steps.items() if is_finished(p))
    hint = f"--step {finished[-1]} takes the newest finished step" if finished else "no step is finished"
    if step is None:
        step = max(steps)
    elif step not in steps:
        have = ", ".join(map(str, sorted(steps)))
        raise L2NError(f"{root}: no step {step} (steps: {have})")
    if step not in finished:
        missing = " or ".join(FINISHED_MARKERS)
        raise UnfinishedStepError(
            f"{steps[step]}: step {step} is not finished (no {missing}; an interrupted or running save); {hint}"
        )
    return _from_step(steps[step])


def _from_step(step_dir: Path) -> Source:
    if _is_step_dir(step_dir) and not is_finished(step_dir):
        raise UnfinishedStepError(
            f"{step_dir}: step {step_dir.name} is not finished (no _CHECKPOINT_METADATA)"
        )
    items = _items(step_dir)
    if not items:
        raise L2NError(
            f"{step_dir}: not an Orbax checkpoint directory (no _METADATA file){_legacy_hint(step_dir)}"
        )
    with_params = [p for p in items if _has_params(p)]
    if len(with_params) != 1:
        names = ", ".join(p.name for p in with_params or items)
        pick = f"; pass the folder of the one to convert (newest: {with_params[-1]})" if with_params else ""
        raise L2NError(
            f"{step_dir}: expected one Orbax item with a top-level 'params' tree, found {len(with_params)} "
            f"({names}){pick}"
        )
    item = with_params[0]
    ignored = {f"item {p.name}": "extra CheckpointManager item, not converted" for p in items if p != item}
    for p in sorted(step_dir.iterdir()):
        if p.is_dir() and p not in items:
            ignored[f"item {p.name}"] = "not an Orbax pytree item (JSON or custom handler), not converted"
    return Source(item, _step_of(step_dir), ignored)


def _items(step_dir: Path) -> list[Path]:
    """The folder's Orbax items in natural order (``checkpoint_3`` before ``checkpoint_40``), so the
    last is the newest of a ``flax.training.checkpoints`` series."""
    items = [p for p in step_dir.iterdir() if p.is_dir() and (p / ITEM_MARKER).exists()]
    return sorted(items, key=_natural_key)


def _natural_key(path: Path) -> tuple[str, int, str]:
    """``checkpoint_40`` -> ``("checkpoint_", 40, ...)``: a trailing number compares as a number."""
    m = re.fullmatch(r"(.*?)(\d+)", path.name)
    return (m.group(1), int(m.group(2)), path.name) if m else (path.name, -1, path.name)


def _has_params(item_dir: Path) -> bool:
    """Whether the item's tree metadata has a top-level ``params`` key (read from JSON, no array)."""
    try:
        meta = json.loads((item_dir / ITEM_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    entries = meta.get("tree_metadata", {}) if isinstance(meta, dict) else {}
    return any(_first_key(k) == "params" for k in entries)


def _first_key(key: str) -> str:
    """``"('params', 'dense', 'kernel')"`` -> ``params`` (Orbax stores keypaths as tuple strings)."""
    m = re.match(r"\(\s*'([^']*)'", key)
    return m.group(1) if m else key


def _is_step_dir(path: Path) -> bool:
    return bool(_STEP.fullmatch(path.name)) and not (path / ITEM_MARKER).exists()


def _step_of(step_dir: Path) -> int | None:
    return int(step_dir.name) if _STEP.fullmatch(step_dir.name) else None


def _legacy_hint(folder: Path) -> str:
    """What to pass instead of a folder of ``flax.training.checkpoints`` files (``ckpt_20``, ``ckpt_30``:
    a prefix and a step), each a msgpack checkpoint of its own: the newest, named."""
    try:
        files = [p for p in folder.iterdir() if p.is_file() and re.fullmatch(r".*?\d+", p.name)]
    except OSError:
        return ""
    if not files:
        return ""
    newest = max(files, key=lambda p: int(re.search(r"(\d+)$", p.name).group(1)))  # type: ignore[union-attr]
    return (
        f"; it holds flax.training.checkpoints files ({', '.join(sorted(p.name for p in files))}): "
        f"pass one of them, e.g. {newest}"
    )
