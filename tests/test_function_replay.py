"""Module-level functions of another file that build and apply a module (``ops.norm(x, train=...)``):
replayed at each call statement of ``@nn.compact`` (function_replay.py), the package reaches parity in
eval and train mode (``batch_stats`` updated), and a function whose names the caller cannot reach is
left alone, its calls reported."""

import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import LinenSide, ModelPair

OPS = """import flax.linen as nn
import jax.numpy as jnp
from flax.linen.module import merge_param

EPS = 1e-5


class Norm(nn.Module):
    use_running_average: bool | None = None
    momentum: float = 0.9
    scale_init: object = nn.initializers.ones

    @nn.compact
    def __call__(self, x, use_running_average: bool | None = None):
        use_running_average = merge_param("use_running_average", self.use_running_average, use_running_average)
        features = x.shape[-1:]
        initializing = self.is_mutable_collection("params")
        mean = self.variable("batch_stats", "mean", jnp.zeros, features)
        if use_running_average:
            center = mean.value
        else:
            center = jnp.mean(x, axis=0)
            if not initializing:
                mean.value = self.momentum * mean.value + (1 - self.momentum) * center
        return (x - center) * self.param("scale", self.scale_init, features)


def norm(x, train, momentum=0.9, weights=None):
    if weights is None:
        x = Norm(momentum=momentum, use_running_average=not train)(x)
    else:
        x = Norm(momentum=momentum, scale_init=lambda *_: jnp.asarray(weights["scale"]),
                 use_running_average=not train)(x)
    return x


def shifted(x):
    x = Norm(use_running_average=True)(x) + EPS
    return x
"""

MODEL = """import flax.linen as nn
import jax.numpy as jnp

from . import ops


class Block(nn.Module):
    features: int
    weights: dict | None = None

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Dense(self.features)(x)
        x = ops.norm(x, train=train, momentum=0.5, weights=None if self.weights is None else self.weights["n"])
        return nn.relu(x)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        x = Block(4)(x, train)
        x = Block(6)(x, train)
        x = ops.norm(x, train)
        return x
"""

UNREACHABLE = """import flax.linen as nn

from .ops import shifted


class Head(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(3)(x)
        x = shifted(x)
        return x
"""


def _package(root: Path) -> Path:
    pkg = root / "rpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(OPS)
    (pkg / "model.py").write_text(MODEL)
    return pkg


def _import(root: Path, name: str):
    for mod in [m for m in sys.modules if m == "rpkg" or m.startswith("rpkg.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(root))
    try:
        module = __import__(f"rpkg.{name}", fromlist=[name])
        return module
    finally:
        sys.path.remove(str(root))


def _side(model, train: bool) -> LinenSide:
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    return LinenSide(
        model=model,
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
        mutable=("batch_stats",) if train else (),
    )


def test_imported_function_is_replayed_and_reaches_parity(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    _package(src)
    trace = trace_linen(_side(_import(src, "model").Net(), train=True))
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out, trace=trace)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "rpkg" / "model.py").read_text()
    assert "self.norm_0 = ops.Norm(momentum=0.5, x_shape=(1, self.features), rngs=rngs)" in migrated
    assert "x = self.norm_0(x, use_running_average=not train)" in migrated
    code_lines = [line for line in migrated.splitlines() if not line.strip().startswith("#")]
    assert not [line for line in code_lines if "ops.norm(" in line]  # no call left, only the notes

    side = _side(_import(src, "model").Net(), train=True)
    variables = perturbed(side.init_variables())
    net = _import(out, "model").Net
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: net(in_features=5, rngs=rngs),
        name_map=out / "linen2nnx-map.json",
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


def test_function_reading_what_the_caller_cannot_reach_stays_a_finding(tmp_path):
    """``shifted`` reads its module's ``EPS`` and ``Norm``; imported by name, the caller reaches
    neither: the call stays, and the verifier reports it."""
    src = tmp_path / "src"
    pkg = _package(src)
    (pkg / "head.py").write_text(UNREACHABLE)
    result = migrate_paths([src], Mode.CHECK)
    head = next(r for r in result.files if r.rel.endswith("head.py"))
    assert "x = shifted(x)" in head.output
    assert [f.rule for f in head.findings if f.rule.startswith("L2N-VERIFY")] == ["L2N-VERIFY-002"]


def test_function_whose_import_the_caller_lacks_is_not_replayed(tmp_path):
    """``norm`` reads ``jnp`` (in its lambda); a caller that imports ``jax.numpy`` under another name
    does not see it, so the call is not replayed."""
    src = tmp_path / "src"
    pkg = _package(src)
    (pkg / "model.py").write_text(MODEL.replace("import jax.numpy as jnp", "import jax.numpy as np"))
    result = migrate_paths([src], Mode.CHECK)
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert "ops.norm(x, train" in model.output  # left as written
    assert any(f.rule == "L2N-VERIFY-002" for f in model.findings)
    shutil.rmtree(src)
