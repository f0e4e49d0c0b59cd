"""The conversion report: what went where, what was kept from init, what was ignored.

It is written next to the NNX payload (``linen2nnx-conversion.json``) so that anyone holding the
converted checkpoint can see how every tensor got there, and it is what the equivalence stage uses
to map Linen gradients onto NNX paths.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SCHEMA = "linen2nnx-conversion/1"


@dataclasses.dataclass
class MappedLeaf:
    collection: str
    linen_path: tuple[Any, ...]
    """Path below the collection, as in the Linen ``variables[collection]`` tree."""
    nnx_path: tuple[Any, ...]
    """Path in ``nnx.state(model)`` (int elements for ``nnx.List`` indices)."""
    var_type: str
    shape: tuple[int, ...]
    dtype: str
    how: str
    """``name map``, ``identical`` or ``normalised``."""

    @property
    def linen(self) -> str:
        return "/".join(map(str, (self.collection, *self.linen_path)))

    @property
    def nnx(self) -> str:
        return "/".join(map(str, self.nnx_path))


@dataclasses.dataclass
class KeptLeaf:
    nnx_path: tuple[Any, ...]
    var_type: str
    shape: tuple[int, ...]
    dtype: str
    why: str = ""  # empty: state NNX keeps from init by design (rng counts); else the reason

    @property
    def nnx(self) -> str:
        return "/".join(map(str, self.nnx_path))


@dataclasses.dataclass
class ConversionReport:
    """Everything a person or CI needs to trust a converted checkpoint."""

    source: str
    target: str
    """The NNX model class the checkpoint was validated against."""
    strategy: str
    """``name map`` (with the root class key) or ``structural``."""
    mapped: list[MappedLeaf] = dataclasses.field(default_factory=list)
    kept_from_init: list[KeptLeaf] = dataclasses.field(default_factory=list)
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)
    unboxed: list[str] = dataclasses.field(default_factory=list)
    source_format: str = ""
    destination: str | None = None
    step: int | None = None
    step_dtype: str | None = None
    """The Linen step's dtype, so that ``convert --to linen`` writes it back unchanged."""
    optimizer: list[MappedLeaf] | None = None
    """The optax state leaves, when an ``nnx.Optimizer`` state was converted too."""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def param_table(self, collection: str = "params") -> dict[tuple[Any, ...], tuple[Any, ...]]:
        """Linen path (below ``collection``) -> NNX path, for one collection."""
        return {m.linen_path: m.nnx_path for m in self.mapped if m.collection == collection}

    def summary(self) -> str:
        n_opt = f", {len(self.optimizer)} optimizer leaves" if self.optimizer else ""
        return (
            f"converted {len(self.mapped)} leaves ({self.strategy}){n_opt}, "
            f"kept {len(self.kept_from_init)} from init, ignored {len(self.ignored)}"
        )

    def to_json(self) -> dict[str, Any]:
        """A stable, JSON-ready dict (paths as ``a/b/0`` strings, shapes as lists)."""

        def leaf(m: MappedLeaf) -> dict[str, Any]:
            return {
                "linen": m.linen,
                "nnx": m.nnx,
                "type": m.var_type,
                "shape": list(m.shape),
                "dtype": m.dtype,
                "how": m.how,
            }

        return {
            "schema": SCHEMA,
            "source": self.source,
            "source_format": self.source_format,
            "destination": self.destination,
            "target": self.target,
            "strategy": self.strategy,
            "step": self.step,
            "step_dtype": self.step_dtype,
            "mapped": [leaf(m) for m in self.mapped],
            "kept_from_init": [
                {"nnx": k.nnx, "type": k.var_type, "shape": list(k.shape), "dtype": k.dtype}
                | ({"why": k.why} if k.why else {})
                for k in self.kept_from_init
            ],
            "optimizer": None if self.optimizer is None else [leaf(m) for m in self.optimizer],
            "ignored": dict(sorted(self.ignored.items())),
            "unboxed": list(self.unboxed),
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
        }
