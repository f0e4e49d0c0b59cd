"""The suite compiles hundreds of tiny, different programs: XLA's CPU compiler is set for compile time.

Nearly every test builds a small Linen model and its NNX twin and jits their forwards, losses and
gradients once; XLA's CPU backend spends most of that time optimising code that then runs for
microseconds. Without backend optimisation and with the classic (non-emitter) fusion codegen, a tiny
model compiles about three times faster (``model.init`` of 40 fixture models: 45 s -> 15 s on two
cores). Both sides of every comparison are compiled the same way, so parity is unaffected; what the
benchmarks in ``bench/`` measure is run with XLA's defaults, outside this suite.

XLA reads ``XLA_FLAGS`` when jax first starts its CPU backend, so they are set here, before any test
runs; subprocesses the tests start inherit them. Flags the caller already set win.
"""

from __future__ import annotations

import os

COMPILE_FAST = {
    "--xla_backend_optimization_level": "0",
    "--xla_cpu_use_fusion_emitters": "false",
}


def _with_compile_fast(flags: str) -> str:
    given = {f.split("=", 1)[0] for f in flags.split()}
    extra = [f"{name}={value}" for name, value in COMPILE_FAST.items() if name not in given]
    return " ".join([*flags.split(), *extra])


os.environ["XLA_FLAGS"] = _with_compile_fast(os.environ.get("XLA_FLAGS", ""))
