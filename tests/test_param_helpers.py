"""Module-level functions handed the module that create a parameter on it (``pos.make(self, ...)``),
defined in another file of the run: each ``target = f(self, ...)`` in ``setup`` or a compact method is
replayed (param_helpers.py), a call inside an expression that always runs first moved into a local,
and the package reaches parity; a call that cannot be replayed (one that may not run, or a caller
lacking the function's imports) stays a located VERIFY-004, never silence."""

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.spec import LinenSide, ModelPair

POS = """import flax.linen as nn
import jax.numpy as jnp
import numpy as np


def fixed(length, width, dtype=jnp.float32):
    return jnp.cos(jnp.arange(length * width, dtype=dtype).reshape(1, length, width) / 5.0)


def make(self, kind, length, width, name, dtype=jnp.float32):
    if kind == "learn":
        return self.param(name, nn.initializers.normal(stddev=1 / np.sqrt(width)), (1, length, width), dtype)
    elif kind == "fixed":
        return fixed(length, width, dtype=dtype)
    else:
        raise ValueError(kind)
"""

MODEL = """import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from . import pos


class Tower(nn.Module):
    width: int = 4
    length: int = 3

    def setup(self):
        self.enc_pos = pos.make(self, "learn", self.length, self.width, "enc_pos")
        self.proj = nn.Dense(self.width)

    def __call__(self, x):
        return self.proj(x + self.enc_pos)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        p = pos.make(self, "learn", 3, 4, "dec_pos")
        return Tower(name="tower")(x * p)
"""

EXPRESSION = """import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from . import pos


class Head(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + pos.make(self, "learn", x.shape[1], x.shape[-1], "p")
"""


def _package(root: Path) -> None:
    pkg = root / "ppkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pos.py").write_text(POS)
    (pkg / "model.py").write_text(MODEL)
    (pkg / "head.py").write_text(EXPRESSION)


def _import(root: Path, name: str):
    for mod in [m for m in sys.modules if m == "ppkg" or m.startswith("ppkg.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(root))
    try:
        return __import__(f"ppkg.{name}", fromlist=[name])
    finally:
        sys.path.remove(str(root))


def test_imported_param_helper_is_replayed_and_reaches_parity(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    _package(src)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert not [f for f in model.findings if f.severity.value != "converted"], model.findings
    migrated = (out / "ppkg" / "model.py").read_text()
    assert "pos.make(" not in migrated
    assert "pos.fixed(self.length, self.width, dtype=jnp.float32)" in migrated  # its module's name

    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    side = LinenSide(
        model=_import(src, "model").Net(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    net = _import(out, "model").Net
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: net(in_features=4, rngs=rngs),
        name_map=out / "linen2nnx-map.json",
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


def test_param_helper_call_in_an_expression_is_hoisted_and_reaches_parity(tmp_path):
    """``return x + pos.make(self, ...)``: the call runs whenever the statement does, so it moves into a
    local named after the parameter (``p = ...``, replayed) and the statement reads the local; the
    parameter's shape reads the input, which ``__init__`` takes as ``x_shape``."""
    src, out = tmp_path / "src", tmp_path / "out"
    _package(src)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    head = next(r for r in result.files if r.rel.endswith("head.py"))
    assert not [f for f in head.findings if f.severity.value != "converted"], head.findings
    migrated = (out / "ppkg" / "head.py").read_text()
    assert "pos.make(" not in migrated and "return x + p\n" in migrated
    assert "nnx.initializers.normal(" in migrated and "nn.initializers" not in migrated
    again = migrate_paths([out], Mode.CHECK)
    assert not any(r.changed for r in again.files)  # a fixed point

    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    side = LinenSide(
        model=_import(src, "head").Head(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    head_class = _import(out, "head").Head
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: head_class(in_features=4, x_shape=x.shape, rngs=rngs),
        name_map=out / "linen2nnx-map.json",
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


CONDITIONAL = """import flax.linen as nn

from . import pos


class Gated(nn.Module):
    use_pos: bool = True

    @nn.compact
    def __call__(self, x):
        return x + (pos.make(self, "learn", 3, 4, "p") if self.use_pos else 0.0)


class Twice(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + pos.make(self, "learn", 3, 4, "a") * pos.make(self, "learn", 3, 4, "b")
"""


def test_param_helper_call_that_may_not_run_stays_a_located_finding(tmp_path):
    """A call under a conditional expression runs only when its test holds: moving it before the
    statement would create the parameter when Linen does not. Two calls in one statement are left too.
    Each stays a located VERIFY-004, the call as written."""
    src = tmp_path / "src"
    _package(src)
    (src / "ppkg" / "gated.py").write_text(CONDITIONAL)
    result = migrate_paths([src], Mode.CHECK)
    gated = next(r for r in result.files if r.rel.endswith("gated.py"))
    assert gated.output.count("pos.make(self") == 3
    assert [(f.rule, f.line) for f in gated.findings if f.rule.startswith("L2N-VERIFY")] == [
        ("L2N-VERIFY-004", 11),
        ("L2N-VERIFY-004", 17),
        ("L2N-VERIFY-004", 17),
    ]


def test_param_helper_reading_a_name_the_caller_binds_otherwise_is_not_replayed(tmp_path):
    """``make`` reads ``np`` (numpy); a caller whose ``np`` is ``jax.numpy`` would read another
    module, so the calls stay, each a located finding."""
    src = tmp_path / "src"
    _package(src)
    model = src / "ppkg" / "model.py"
    model.write_text(MODEL.replace("import numpy as np\n", "import jax.numpy as np\n"))
    result = migrate_paths([src], Mode.CHECK)
    row = next(r for r in result.files if r.rel.endswith("model.py"))
    assert row.output.count("pos.make(self") == 2
    assert [f.rule for f in row.findings if f.rule.startswith("L2N-VERIFY")] == ["L2N-VERIFY-004"] * 2


def test_param_helper_import_the_caller_lacks_is_added(tmp_path):
    """A caller that neither imports nor uses ``np``: the replay adds ``import numpy as np`` (and
    ``from flax import linen as nn`` is already there), so the call is replayed all the same."""
    src, out = tmp_path / "src", tmp_path / "out"
    _package(src)
    model = src / "ppkg" / "model.py"
    model.write_text(MODEL.replace("import numpy as np\n", ""))
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    row = next(r for r in result.files if r.rel.endswith("model.py"))
    assert not [f for f in row.findings if f.severity.value != "converted"], row.findings
    migrated = (out / "ppkg" / "model.py").read_text()
    assert "import numpy as np\n" in migrated and "pos.make(" not in migrated
    again = migrate_paths([out], Mode.CHECK)
    assert not any(r.changed for r in again.files)  # a fixed point


CLASH = """import flax.linen as nn


def make(self, n, width, name):
    scale = 0.02
    return self.param(name, nn.initializers.normal(stddev=scale), (1, n, width))


class Clobbers(nn.Module):
    @nn.compact
    def __call__(self, x):
        scale = 3.0
        p = make(self, 6, 4, "p")
        return x * scale + p


class Shadows(nn.Module):
    scale: int = 6

    @nn.compact
    def __call__(self, x):
        p = make(self, self.scale, 4, "p")
        return x + p
"""


def test_param_helper_whose_locals_meet_the_callers_is_not_replayed():
    """``make`` binds ``scale``: replayed where the caller has a ``scale`` of its own it would clobber
    it (and an argument reading the caller's ``scale`` would read the helper's): both stay located."""
    from linen2nnx.migrate import migrate_source

    result = migrate_source(CLASH, "clash.py", module_name="clash")
    assert [(f.rule, f.line) for f in result.findings if f.rule.startswith("L2N-VERIFY")] == [
        ("L2N-VERIFY-004", 13)
    ]
    assert 'p = make(self, self.scale, 4, "p")' not in result.output  # `self.scale` is no local: replayed
