"""The settings that make a resumed run the continuation of the one it resumes.

A run's checkpoints hold its state and the data iterator's position, but the batches it draws and the
steps it takes also depend on flags of the command: the seed (the synthetic data and every RNG
stream), ``--deterministic`` (dropout off), the batch size, the micro-batches per step and the data
source. A ``--resume`` that leaves one out, or gives another value, trains something else and still
exits 0. So each checkpoint's meta records them (:func:`recorded`), and a resume takes them from
there (:func:`resumed`): a flag left out gets the run's value, a flag given with another value is an
error naming both. The mesh and ``--remat`` may change on resume: they change how a step runs, not
what it computes. ``--save-every`` and ``--keep`` may change too, but left out they keep the run's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from linen2nnx.errors import L2NError

#: TrainConfig field -> the flag a person gives it with.
SETTINGS = {
    "seed": "--seed",
    "deterministic": "--deterministic",
    "batch_size": "--batch-size",
    "grad_accum": "--grad-accum",
    "data": "--data",
}


#: TrainConfig field -> flag of the settings a resume carries over when left out, but may change: how
#: often the run checkpoints and how many it keeps (a bare ``--resume`` of a run saving every 50 steps
#: went on saving its final step only, so a crash lost everything since the resume).
CARRIED = {
    "save_every": "--save-every",
    "keep": "--keep",
}


def recorded(cfg: Any, batch_size: int) -> dict[str, Any]:
    """What a checkpoint's meta records of ``cfg`` (the batch size as resolved from the spec)."""
    values = {name: getattr(cfg, name) for name in (*SETTINGS, *CARRIED)}
    values["batch_size"] = batch_size
    return values


def resumed(cfg: Any, meta: dict[str, Any], where: str) -> Any:
    """``cfg`` with the settings of the run ``meta`` (a checkpoint's) belongs to: those the command left
    out taken from it; one given with another value raises. ``cfg.given`` names the fields the command
    set (None: all of them, as a caller of the Python API does). A checkpoint written before the
    settings were recorded holds only the seed."""
    saved = meta.get("settings") or ({"seed": meta["seed"]} if "seed" in meta else {})
    given = {*SETTINGS, *CARRIED} if cfg.given is None else set(cfg.given)
    changes = {}
    for name, flag in SETTINGS.items():
        if name not in saved or saved[name] is None:
            continue
        value = getattr(cfg, name)
        if name in given and value is not None and value != saved[name]:  # None: left to the default
            raise L2NError(
                f"{where}: the run was trained with {flag} {saved[name]!r}, this command gives {value!r}; "
                f"--resume continues the same run: leave {flag} out (or start a new run with another --out)"
            )
        changes[name] = saved[name]
    for name in CARRIED:
        if name not in given and saved.get(name) is not None:
            changes[name] = saved[name]
    return dataclasses.replace(cfg, **changes)
