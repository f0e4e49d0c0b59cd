"""``convert --dry-run``: the whole mapping and every problem, from Orbax metadata alone.

A large checkpoint takes minutes to convert; finding out after those minutes that one leaf has no
NNX home is the slow way. The dry run resolves the source, reads the item's metadata (tree, shapes,
dtypes, saved shardings), maps and validates it against ``nnx.eval_shape`` of the target, plans the
optimizer state the same way, and prints one row per leaf. No array is read (msgpack files and
in-memory trees have no metadata apart from their data, so for them the data is read).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.checkpoint_convert.api import plan_with_problems
from linen2nnx.checkpoint_convert.mapping import Problem, join
from linen2nnx.checkpoint_convert.read import LinenCheckpoint, read_linen_checkpoint
from linen2nnx.checkpoint_convert.validate import dtype_name, problem_hints
from linen2nnx.namemap import NameMap

HEADERS = ("Linen", "NNX", "shape", "dtype", "saved sharding", "bytes")


@dataclasses.dataclass
class DryRun:
    """What ``convert`` would do: rows ``(linen, nnx, shape, dtype, sharding, bytes)`` and problems."""

    source: str
    target: str
    strategy: str
    step: int | None
    rows: list[tuple[str, str, str, str, str, int]]
    kept: list[str]
    ignored: dict[str, str]
    problems: list[Problem]
    targets: dict[str, str] = dataclasses.field(default_factory=dict)
    """With ``--mesh``: Linen path -> the sharding it is written with (``convert --mesh``)."""

    @property
    def total_bytes(self) -> int:
        return sum(r[-1] for r in self.rows)


def dry_run(
    src: Any,
    pair: Any,
    name_map: NameMap | str | Path | None = None,
    step: int | None = None,
    mesh: dict[str, int] | None = None,
) -> DryRun:
    """Plan the conversion of ``src`` onto ``pair``'s NNX model; nothing is written, no array read.
    With ``mesh`` (an Orbax source), each leaf's target sharding on it too."""
    targets: dict[str, str] = {}
    if isinstance(src, (str, Path)) and Path(src).expanduser().is_dir():
        from linen2nnx.checkpoint_convert.stream import open_orbax

        opened = open_orbax(src, step)
        ckpt = opened.checkpoint
        if mesh is not None:
            from linen2nnx.checkpoint_convert.sharded import planned_shardings

            planned = planned_shardings(opened, pair, name_map, dict(mesh))
            targets = {k: _spec_name(v) for k, v in planned.items()}
    else:
        ckpt = read_linen_checkpoint(src)
    plan, problems = plan_with_problems(ckpt, pair, name_map)
    leaves = {(coll, path): leaf for coll, path, leaf in ckpt.leaves()}
    rows = []
    for m in sorted(plan.matches, key=lambda m: m.leaf.name):
        leaf = leaves[(m.leaf.collection, m.leaf.path)]
        rows.append(_row(m.leaf.name, join(m.nnx_path), leaf))
    opt_rows, opt_problems = _optimizer_rows(ckpt, pair, plan)
    return DryRun(
        ckpt.source,
        plan.target.name,
        plan.strategy,
        ckpt.step,
        rows + opt_rows,
        [
            join(s.path)
            + (f" ({plan.never_in_linen[join(s.path)]})" if join(s.path) in plan.never_in_linen else "")
            for s in plan.kept
        ],
        dict(ckpt.ignored),
        problems + opt_problems,
        targets,
    )


def _optimizer_rows(ckpt: LinenCheckpoint, pair: Any, plan: Any) -> tuple[list[Any], list[Problem]]:
    tx = getattr(pair.linen, "optimizer", None)
    if tx is None or ckpt.opt_state is None:
        return [], []
    from linen2nnx.checkpoint_convert.optimizer import _flatten, plan_opt_state

    table = {m.leaf.path: m.nnx_path for m in plan.matches if m.leaf.collection == "params"}
    step = ckpt.step if ckpt.step is not None or ckpt.step_dtype is None else 0  # saved, not read
    kept = frozenset(plan.never_in_linen)
    _, _, mapped, problems = plan_opt_state(ckpt.opt_state, step, table, pair.make_nnx, tx, kept)
    leaves = {tuple(map(str, p)): leaf for p, leaf in _flatten(ckpt.opt_state)}
    rows = [
        _row(m.linen, join(m.nnx_path), leaves.get(tuple(map(str, m.linen_path))), m.shape, m.dtype)
        for m in mapped
    ]
    return rows, [dataclasses.replace(p, kind=f"optimizer {p.kind}") for p in problems]


def _row(linen: str, nnx_path: str, leaf: Any, shape: Any = None, dtype: Any = None) -> Any:
    shape = tuple(getattr(leaf, "shape", shape if shape is not None else ()))
    dtype = getattr(leaf, "dtype", dtype)
    size = int(np.prod(shape, dtype=np.int64)) * (np.dtype(dtype).itemsize if dtype is not None else 0)
    return (linen, nnx_path, str(shape), dtype_name(dtype), sharding_name(leaf), size)


def sharding_name(leaf: Any) -> str:
    """A short spelling of a leaf's saved sharding (Orbax metadata) or live sharding."""
    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        return "host"
    spec = getattr(sharding, "partition_spec", None) or getattr(sharding, "spec", None)
    if spec is not None:
        mesh = getattr(sharding, "shape", None) or getattr(getattr(sharding, "mesh", None), "shape", None)
        axes = getattr(sharding, "axis_names", None)
        where = (
            f" on {dict(zip(axes, mesh))}" if axes and mesh is not None and not isinstance(mesh, dict) else ""
        )
        return f"P{tuple(spec)}{where}"
    return "single device"


def _spec_name(sharding: Any) -> str:
    return f"P{tuple(sharding.spec)}"


def render(dry: DryRun) -> str:
    """The plan as plain text: aligned columns, whole paths (never cut to a terminal's width)."""
    if dry.targets:  # --mesh: the target sharding beside the saved one ("host": the step, an int)
        cells = [(*HEADERS[:-1], "target sharding", HEADERS[-1])]
        cells += [(*r[:-1], dry.targets.get(r[0], "host"), _bytes(r[-1])) for r in dry.rows]
    else:
        cells = [HEADERS] + [(*r[:-1], _bytes(r[-1])) for r in dry.rows]
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(cells[0]))]
    lines = [
        f"dry run: {dry.source} -> {dry.target} ({dry.strategy}), step {dry.step}",
        *("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells),
    ]
    lines += [f"kept from init: {k}" for k in dry.kept]
    lines += [f"ignored: {k}: {why}" for k, why in sorted(dry.ignored.items())]
    lines.append(f"{len(dry.rows)} leaves, {_bytes(dry.total_bytes)}; {len(dry.problems)} problem(s)")
    lines += [f"  - {p}" for p in sorted({str(p) for p in dry.problems})]
    lines += [f"  hint: {hint}" for hint in problem_hints(dry.problems)]
    return "\n".join(lines) + "\n"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover
