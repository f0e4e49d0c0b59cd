"""Parameter helpers (``mk(self, ...)``, see param_helpers.py) whose replay would not be what Linen
runs: each call stays a located VERIFY-004, never a silently different parameter; and a parameter
created in each branch of an ``if`` keeps the branch's value in ``__init__``."""

import importlib.util
import sys

import jax
import numpy as np
from flax import nnx

from linen2nnx.migrate import migrate_source

HELPER = """import flax.linen as nn
import jax.numpy as jnp


def mk(self, name, width):
    std = 1.0 / width
    return self.param(name, nn.initializers.normal(std), (width,))


def mk_big(self, name, width):
    return self.param(name, nn.initializers.normal(1.0), (width * 2,))
"""


def _verify_lines(source: str, name: str) -> list[tuple[str, int]]:
    result = migrate_source(source, f"{name}.py", module_name=name)
    return [(f.rule, f.line) for f in result.findings if f.rule.startswith("L2N-VERIFY")]


def test_a_helper_name_the_caller_rebinds_is_not_replayed():
    """``mk = mk_big`` in the caller: its ``mk(self, ...)`` calls ``mk_big``, not the module's ``mk``."""
    source = (
        HELPER
        + """

class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        mk = mk_big
        p = mk(self, "p", 3)
        return x.sum() + p.sum()
"""
    )
    assert _verify_lines(source, "shadow") == [("L2N-VERIFY-004", 18)]


def test_a_second_replay_binding_the_same_local_is_not_replayed():
    """Both replays bind ``std``: ``__init__`` would compute both before either parameter, so the
    first would read the second's value. The second call stays."""
    source = (
        HELPER
        + """

class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        a = mk(self, "a", 3)
        b = mk(self, "b", 4)
        return a.sum() + b.sum()
"""
    )
    assert _verify_lines(source, "twice") == [("L2N-VERIFY-004", 18)]


def test_a_default_reading_a_rebound_module_name_is_not_replayed():
    """``n=N`` was evaluated when the def ran (``N`` was 4); a replay would read ``N``'s last value."""
    source = """import flax.linen as nn

N = 4


def mk(self, name, width, n=N):
    return self.param(name, nn.initializers.normal(1.0), (n, width))


N = 6


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        p = mk(self, "p", 3)
        return x @ p.T
"""
    assert _verify_lines(source, "defaults") == [("L2N-VERIFY-004", 16)]


def test_a_name_made_at_call_time_keeps_only_its_own_call():
    """An f-string name stays a located call; the file's other calls of the helper are replayed."""
    source = (
        HELPER
        + """

class Inner(nn.Module):
    prefix: str = "enc"

    def setup(self):
        self.pos = mk(self, "pos_embedding", 3)
        self.other = mk_big(self, f"{self.prefix}_scale", 3)

    def __call__(self, x):
        return x * self.pos + self.other[:3]
"""
    )
    result = migrate_source(source, "names.py", module_name="names")
    verify = [(f.rule, f.line) for f in result.findings if f.rule.startswith("L2N-VERIFY")]
    assert verify == [("L2N-VERIFY-004", 19)]
    assert 'mk(self, "pos_embedding"' not in result.output


def test_a_function_handing_self_to_a_helper_is_a_located_finding():
    """``outer(self, ...)`` calls ``inner(self, ...)``, which calls ``self.param``: a helper too."""
    source = """import flax.linen as nn


def inner(self, name, width):
    return self.param(name, nn.initializers.normal(), (width, width))


def outer(self, name, width):
    return inner(self, name, width)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = outer(self, "w", 3)
        return x @ w
"""
    assert _verify_lines(source, "nested") == [("L2N-VERIFY-004", 15)]


BRANCHES = """import flax.linen as nn


def mk(self, name, width):
    return self.param(name, nn.initializers.normal(1.0), (width,))


class Helper(nn.Module):
    kind: str = "a"

    @nn.compact
    def __call__(self, x):
        if self.kind == "a":
            p = mk(self, "p", 3)
        elif self.kind == "b":
            p = mk(self, "p", 5)
        else:
            p = mk(self, "p", 7)
        return x.sum() + p.sum()


class Direct(nn.Module):
    flag: bool = True

    @nn.compact
    def __call__(self, x):
        if self.flag:
            p = self.param("p", nn.initializers.normal(1.0), (3,))
        else:
            p = self.param("p", nn.initializers.normal(1.0), (5,))
        return x.sum() + p.sum()
"""


def _load(source: str, name: str, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_parameter_created_in_each_branch_keeps_the_branch_taken(tmp_path):
    """Each branch's parameter replaces the ``None`` of the branches before it: the second ``if``
    must not reset what the first set, whichever branch the config takes."""
    result = migrate_source(BRANCHES, "branches.py", module_name="branches")
    assert not [f for f in result.findings if f.severity.value != "converted"], result.findings
    linen = _load(BRANCHES, "branches_linen", tmp_path)
    migrated = _load(result.output, "branches_nnx", tmp_path)
    x = np.ones((2, 3), np.float32)
    cases = [("Helper", {"kind": k}) for k in "abc"] + [("Direct", {"flag": f}) for f in (True, False)]
    for cls, config in cases:
        params = getattr(linen, cls)(**config).init(jax.random.key(0), x)["params"]
        module = getattr(migrated, cls)(**config, rngs=nnx.Rngs(0))
        assert module.p.shape == params["p"].shape, (cls, config)
        module.p[...] = params["p"]
        want = getattr(linen, cls)(**config).apply({"params": params}, x)
        np.testing.assert_allclose(module(x), want, rtol=1e-6)


def test_another_files_function_handing_self_to_a_helper_is_a_located_finding(tmp_path):
    """The same across files: ``helpers.outer(self, ...)`` is reported in the file calling it."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    pkg = tmp_path / "hpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(
        "import flax.linen as nn\n\n\n"
        "def inner(self, name, width):\n"
        "    return self.param(name, nn.initializers.normal(), (width, width))\n\n\n"
        "def outer(self, name, width):\n"
        "    return inner(self, name, width)\n"
    )
    (pkg / "model.py").write_text(
        "import flax.linen as nn\n\n"
        "from . import helpers\n\n\n"
        "class Net(nn.Module):\n"
        "    @nn.compact\n"
        "    def __call__(self, x):\n"
        '        w = helpers.outer(self, "w", 3)\n'
        "        return x @ w\n"
    )
    result = migrate_paths([pkg], Mode.CHECK)
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert [(f.rule, f.line) for f in model.findings if f.rule.startswith("L2N-VERIFY")] == [
        ("L2N-VERIFY-004", 9)
    ]
