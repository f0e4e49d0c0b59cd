"""The demo's last stage: train the converted NNX model a few steps from the converted checkpoint,
and show that its first loss is the Linen loss at that step (the run continues Linen's)."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEMO_TRAIN_STEPS = 5
RUN_DIR = "nnx_train"
LOSS_RTOL = 1e-5  # fp32: the same weights, batch and program order give the same loss up to rounding


@dataclasses.dataclass
class DemoTraining:
    step: int
    nnx_loss: float
    linen_loss: float
    last_loss: float
    steps: int
    out: Path

    @property
    def continues_linen(self) -> bool:
        """The first NNX loss is the Linen loss at that step (within fp32 rounding): the NNX run picks up
        where Linen left off. When it does not, the demo fails: a converted checkpoint that trains from
        somewhere else is exactly the silent failure the chain is there to catch."""
        return abs(self.nnx_loss - self.linen_loss) <= LOSS_RTOL * (1 + abs(self.linen_loss))

    def summary(self) -> str:
        verdict = "" if self.continues_linen else " — DIFFERS from Linen"
        return (
            f"NNX step {self.step}: loss {self.nnx_loss:.6f} (Linen at that step: {self.linen_loss:.6f}, "
            f"|Δ| {abs(self.nnx_loss - self.linen_loss):.2g}) -> {self.last_loss:.6f} after {self.steps} "
            f"steps; run in {self.out}{verdict}"
        )

    def readme(self, spec_path: Path, nnx_ckpt: Path, env: str = "", mesh_opt: str = "") -> str:
        q = shlex.quote
        return f"""
## Keep training in NNX

`nnx_train/` continues the Linen run from the converted checkpoint (optimizer state and step included),
with dropout off so each step can be compared with Linen's. Its first step is Linen step {self.step}:

| step | NNX loss (`nnx_train/metrics.jsonl`) | Linen loss, same weights and batch |
|---|---|---|
| {self.step} | {self.nnx_loss:.7f} | {self.linen_loss:.7f} |

```bash
{env}linen2nnx train {q(str(spec_path))} --init-from {q(str(nnx_ckpt))} --out {q(str(self.out.parent / (RUN_DIR + "_again")))} --steps {self.steps} --deterministic{mesh_opt}
```
gives the same losses again; `--out {q(str(self.out))} --resume --steps 20` continues the demo's run.
"""


def train_stage(
    pair: Any, linen_ckpt: Path, nnx_ckpt: Path, out: Path, mesh: Mapping[str, int] | None = None
) -> DemoTraining:
    """Train ``DEMO_TRAIN_STEPS`` steps into ``out/nnx_train`` and the Linen loss of its first batch."""
    from linen2nnx.train import TrainConfig, run_training
    from linen2nnx.train.linen_reference import linen_loss

    cfg = TrainConfig(
        out=out / RUN_DIR,
        steps=DEMO_TRAIN_STEPS,
        init_from=nnx_ckpt,
        deterministic=True,
        mesh=dict(mesh) if mesh else None,
    )
    result = run_training(pair, cfg)
    from linen2nnx.train.data import SyntheticData

    batch_size = len(next(iter(pair.linen.batch.values())))
    first = SyntheticData(pair.linen.batch, batch_size, cfg.seed).batch_at(0)
    return DemoTraining(
        step=result.start_step,
        nnx_loss=result.losses[0],
        linen_loss=linen_loss(pair, linen_ckpt, first),
        last_loss=result.losses[-1],
        steps=cfg.steps,
        out=cfg.out,
    )
