"""A plain apply of a model that sows, where the sow is two files away from the training code.

Linen's ``apply`` without ``mutable=`` drops sown values; NNX's ``sow`` keeps them in the model, and
raises a TraceContextError under a ``jax.jit`` that closes over it. The training file runs such an apply
on a copy of the model; whether the model may sow reaches it through the summaries of the files it
names (``ClassSummary.sows``), here through a file that itself never sows.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid

import numpy as np
import pytest

from linen2nnx.migrate import Severity
from linen2nnx.migrate.engine import Mode, migrate_paths

LAYERS = """
import flax.linen as nn
import jax.numpy as jnp


class Probe(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4, kernel_init=nn.initializers.ones)(x)
        self.sow("intermediates", "h", h)
        return jnp.tanh(h)
"""

MODEL = """
import flax.linen as nn

from .layers import Probe


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2, kernel_init=nn.initializers.ones)(Probe()(x))
"""

TRAIN = """
import jax
import jax.numpy as jnp

from .model import Net


def evaluate(x):
    model = Net()
    variables = model.init(jax.random.key(0), x)

    @jax.jit
    def forward(x):
        return model.apply(variables, x)

    return [float(jnp.sum(forward(x * i))) for i in range(3)]
"""


def test_a_model_whose_layer_of_another_file_sows_is_applied_on_a_copy(tmp_path):
    name = f"sows_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for file, text in (("layers", LAYERS), ("model", MODEL), ("train", TRAIN)):
        (pkg / f"{file}.py").write_text(textwrap.dedent(text))
    result = migrate_paths([pkg], Mode.DIFF)
    assert not [
        f for r in result.files for f in r.findings if f.severity in (Severity.MANUAL, Severity.ERROR)
    ]
    out = tmp_path / f"{name}_nnx"
    out.mkdir()
    for r in result.files:
        (out / r.path.name).write_text(r.output if r.output is not None else r.source)
    train = next(r for r in result.files if r.path.name == "train.py")
    assert "nnx.merge(*nnx.split(variables), copy=True)" in train.output
    x = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    sys.path.insert(0, str(tmp_path))
    try:
        linen = importlib.import_module(f"{name}.train").evaluate(x)
        nnx_side = importlib.import_module(f"{name}_nnx.train").evaluate(x)
    finally:
        sys.path.remove(str(tmp_path))
    assert nnx_side == pytest.approx(linen, rel=1e-5)
