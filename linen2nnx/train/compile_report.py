"""``train --compile-only``: lower and compile the train step for the mesh, run nothing.

The state and batch are abstract (``ShapeDtypeStruct`` with their shardings), so even a model that
would not fit is compiled and measured. XLA's ``memory_analysis()`` is per device: argument, output
and temporary bytes (temp is the activation / scratch peak that remat trades against compute);
``cost_analysis()`` gives the FLOPs of the program one device runs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass
class CompileReport:
    compile_s: float
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    flops: float
    devices: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        mib = 1024.0**2
        return [
            f"compiled for {self.devices} device(s) in {self.compile_s:.2f} s",
            f"per device: arguments {self.argument_bytes / mib:.2f} MiB, outputs {self.output_bytes / mib:.2f} MiB, "
            f"temp {self.temp_bytes / mib:.2f} MiB (aliased {self.alias_bytes / mib:.2f} MiB)",
            f"FLOPs per step per device: {self.flops:.4g}",
        ]


def _abstract_batch(example: Any, batch_size: int, sharding: Any) -> Any:
    import jax
    import numpy as np

    def leaf(x: Any) -> Any:
        x = np.asarray(x)
        return jax.ShapeDtypeStruct((batch_size, *x.shape[1:]), x.dtype, sharding=sharding)

    return jax.tree.map(leaf, dict(example))


def _abstract_state(ts: Any) -> Any:
    import jax

    if ts.shardings is None:
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), ts.state)
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), ts.state, ts.shardings
    )


def compile_step(step_fn: Any, ts: Any, example: Any, batch_size: int, batch_sharding: Any) -> CompileReport:
    """Lower + compile ``step_fn`` (a :class:`~linen2nnx.train.step.JittedStep`) on abstract inputs;
    its memory and FLOPs."""
    import jax

    t0 = time.perf_counter()
    state = jax.tree.leaves(_abstract_state(ts))  # the step takes the state's flat leaves
    compiled = step_fn.lower(state, _abstract_batch(example, batch_size, batch_sharding)).compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    mesh = jax.sharding.get_mesh()
    return CompileReport(
        compile_s=seconds,
        argument_bytes=int(getattr(mem, "argument_size_in_bytes", 0)),
        output_bytes=int(getattr(mem, "output_size_in_bytes", 0)),
        temp_bytes=int(getattr(mem, "temp_size_in_bytes", 0)),
        alias_bytes=int(getattr(mem, "alias_size_in_bytes", 0)),
        flops=float((cost or {}).get("flops", 0.0)),
        devices=1 if mesh.empty else mesh.size,
    )
