"""Tables of activations (elementwise.py): a lookup keeps the feature size only when every value of
the table does and nothing changes the table; a table of another file of the run is known by its fact."""

from pathlib import Path

import pytest

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.discovery import read_run
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.table_changes import run_changes

TABLE = """from functools import partial

import flax.linen as nn
import jax


def swish_ish(x):
    return x * jax.nn.sigmoid(1.5 * x)


ACTS = {"gelu": partial(nn.gelu, approximate=False), "relu": nn.relu, "swish_ish": swish_ish}
"""

MLP = """
class Mlp(nn.Module):
    cfg: object

    def setup(self):
        self.up = nn.Dense(self.cfg.inner)
        self.act = ACTS[self.cfg.act]
        self.down = nn.Dense(self.cfg.width)

    def __call__(self, x):
        return self.down(self.act(self.up(x)))
"""


def _unsized(source: str) -> list[str]:
    result = migrate_source(source, "m.py", module_name="m")
    return [f.message for f in result.findings if f.rule == "L2N-SHAPE-003"]


def test_a_table_of_activations_keeps_the_size():
    assert _unsized(TABLE + MLP) == []


@pytest.mark.parametrize(
    "value",
    [
        "lambda x: x",
        "lambda y: nn.leaky_relu(y, negative_slope=0.2)",
        "lambda x: swish_ish(x)",
        "lambda x, _: x",  # parameters after x that the body never reads
        "lambda x, *rest, flag=False: nn.relu(x)",
    ],
)
def test_a_table_entry_that_is_an_elementwise_lambda_keeps_the_size(value):
    """``'id': lambda x: x`` (init2winit's table), or a lambda that applies one elementwise function."""
    table = TABLE.replace('"swish_ish": swish_ish}', f'"swish_ish": swish_ish, "other": {value}}}')
    assert _unsized(table + MLP) == []


@pytest.mark.parametrize(
    "change",
    [
        'ACTS["sum"] = lambda x: x.sum(-1)\n',  # an item set after the display
        "ACTS.update(extra=jax.nn.softmax)\n",  # a mutating method
        "register(ACTS)\n",  # a call that receives the table may change it
        "ACTS = dict(ACTS)\n",  # bound twice
        'def add():\n    global ACTS\n    ACTS = {"x": len}\n',  # rebound through `global`
        "from os.path import join as ACTS\n",  # rebound by an import
        '_T = ACTS\n_T["glu"] = jax.nn.glu\n',  # changed through another name
        "def table():\n    return ACTS\n",  # handed out
        "def pick(table=ACTS):\n    return table\n",  # a default argument
        "ACTS |= {}\n",  # an in-place operator
    ],
)
def test_a_changed_table_keeps_the_finding(change):
    assert len(_unsized(TABLE + change + MLP)) == 1


@pytest.mark.parametrize(
    "shadow",
    [
        '        ACTS = {"glu": nn.glu}\n',  # a local of the same name
        "        ACTS = self.cfg.table\n",
    ],
)
def test_a_local_named_like_the_table_is_not_the_table(shadow):
    shadowed = MLP.replace("        self.act = ACTS", shadow + "        self.act = ACTS")
    assert len(_unsized(TABLE + shadowed)) == 1


def test_a_parameter_named_like_the_table_is_not_the_table():
    call = """
class Mlp(nn.Module):
    act: str

    @nn.compact
    def __call__(self, x, ACTS={"glu": nn.glu}):
        return nn.Dense(3)(ACTS[self.act](nn.Dense(8)(x)))
"""
    assert len(_unsized(TABLE + call)) == 1


@pytest.mark.parametrize(
    "value",
    [
        "partial(nn.gelu, True)",  # a positional argument takes x's place
        "lambda x: x.sum(-1)",  # a lambda that reduces
        "lambda x, y: y",  # the other parameter
        "lambda x, y: nn.leaky_relu(x, y)",  # another parameter read too
        "lambda x, **kw: nn.gelu(x, **kw)",
        "lambda *x: x",
        "lambda x=1: x",
        "lambda x: jax.nn.leaky_relu(x, x)",  # x read again as another argument
        "lambda x: jax.nn.leaky_relu(negative_slope=0.1, x=x)",  # x not the first positional argument
        "lambda x: first_row(x)",
        "jax.nn.one_hot",  # not feature-preserving
        "jax.nn.logmeanexp",  # a reduction (with an axis)
        "jax.nn.scaled_matmul",  # a contraction
        "mean_last",  # a function of the file that reduces the last axis, keeping it as 1
        "first_row",  # a function of the file that does not keep its input's last axis
    ],
)
def test_a_table_with_another_value_keeps_the_finding(value):
    """A lambda is looked into only as the identity or one elementwise call of its one parameter."""
    helper = "def first_row(x):\n    return x[0]\n\n\ndef mean_last(x):\n    return x.mean(axis=-1, keepdims=True)\n\n\n"
    table = TABLE.replace('"swish_ish": swish_ish}', f'"swish_ish": swish_ish, "other": {value}}}')
    assert len(_unsized(helper + table + MLP)) == 1


def test_a_table_of_another_file_of_the_run_keeps_the_size(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "acts.py").write_text(TABLE)
    (pkg / "mlp.py").write_text("import flax.linen as nn\n\nfrom .acts import ACTS\n\n" + MLP)
    result = migrate_paths([tmp_path], Mode.OUT_DIR, out_dir=tmp_path / "out")
    assert [f.format_text() for f in result.findings if f.severity == "manual"] == []
    changed = "import flax.linen as nn\n\nfrom .acts import ACTS\n\nACTS['x'] = len\n" + MLP
    (pkg / "mlp.py").write_text(changed)  # the importing file changes the table
    result = migrate_paths([tmp_path / "pkg"], Mode.OUT_DIR, out_dir=tmp_path / "out2")
    assert [f.rule for f in result.findings if f.severity == "manual"] == ["L2N-SHAPE-003"]


@pytest.mark.parametrize(
    "change",
    [
        "import flax.linen as nn\n\nfrom .acts import ACTS\n\nACTS['x'] = len\n",
        "import flax.linen as nn\n\nfrom . import acts\n\nacts.ACTS['x'] = len\n",
        "import flax.linen as nn\n\nfrom .acts import ACTS as T\n\nT['x'] = len\n",
    ],
)
def test_a_table_another_file_of_the_run_changes_keeps_the_finding(tmp_path: Path, change):
    """Any file of the run may change a table it imports: then no file trusts it, the defining one
    included."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "acts.py").write_text(TABLE + MLP)
    (pkg / "mlp.py").write_text("import flax.linen as nn\n\nfrom .acts import ACTS\n\n" + MLP)
    (pkg / "register.py").write_text(change)
    result = migrate_paths([tmp_path / "pkg"], Mode.OUT_DIR, out_dir=tmp_path / "out")
    unsized = sorted(Path(f.path).name for f in result.findings if f.rule == "L2N-SHAPE-003")
    assert unsized == ["acts.py", "mlp.py"]


def test_an_imported_table_changed_through_its_module_keeps_the_finding(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "acts.py").write_text(TABLE)
    mlp = MLP.replace("ACTS[", "acts.ACTS[")
    (pkg / "mlp.py").write_text("import flax.linen as nn\n\nfrom . import acts\n\n" + mlp)
    result = migrate_paths([tmp_path / "pkg"], Mode.OUT_DIR, out_dir=tmp_path / "out")
    assert [f.rule for f in result.findings if f.severity == "manual"] == []
    (pkg / "mlp.py").write_text(
        "import flax.linen as nn\n\nfrom . import acts\n\nacts.ACTS['x'] = len\n" + mlp
    )
    result = migrate_paths([tmp_path / "pkg"], Mode.OUT_DIR, out_dir=tmp_path / "out2")
    assert [f.rule for f in result.findings if f.severity == "manual"] == ["L2N-SHAPE-003"]


def test_the_run_scan_counts_every_name_of_a_file_it_cannot_parse(tmp_path: Path):
    (tmp_path / "acts.py").write_text(TABLE)
    (tmp_path / "odd.py").write_text("ACTS['x'] = len\ndef (:\n")
    (tmp_path / "use.py").write_text("from acts import ACTS\nf = ACTS['relu']\nok = 'relu' in ACTS\n")
    scanned = run_changes(read_run([tmp_path / "acts.py", tmp_path / "use.py"]))
    assert scanned.complete and scanned.trusts("ACTS") and scanned.trusts("acts.ACTS")
    assert not run_changes(read_run(sorted(tmp_path.iterdir()))).trusts("ACTS")
    assert not run_changes(read_run([tmp_path / "missing.py"])).trusts("OTHER")


@pytest.mark.parametrize(
    "table",
    [
        'A = B = {"relu": nn.relu}',
        'x = 1; A = {"relu": nn.relu}',
        'A = (\n    {"relu": nn.relu}\n)',
        "A = {}",
    ],
)
def test_the_run_scan_parses_only_files_that_spell_a_table_and_still_sees_every_change(tmp_path, table):
    """The text search that picks the files to parse finds every way a module binds a dict display."""
    (tmp_path / "acts.py").write_text(f"import flax.linen as nn\n{table}\n")
    (tmp_path / "register.py").write_text("from acts import A\nA['glu'] = None\n")
    (tmp_path / "other.py").write_text("def f(x):\n    return x\n")
    assert not run_changes(read_run(sorted(tmp_path.glob("*.py")))).trusts("A")
    (tmp_path / "register.py").write_text("from acts import A\ny = A['relu']\n")
    assert run_changes(read_run(sorted(tmp_path.glob("*.py")))).trusts("A")


ACTOR = """import flax.linen as nn


class Actor(nn.Module):
    kind: str = "tanh"

    @nn.compact
    def __call__(self, x, scale=None):
{choice}
        return nn.Dense(2)(activation(nn.Dense(8)(x)))
"""


@pytest.mark.parametrize(
    "choice",
    [
        '        if self.kind == "relu":\n            activation = nn.relu\n        else:\n'
        "            activation = nn.tanh",
        '        activation = nn.relu if self.kind == "relu" else nn.gelu',
        '        activation = nn.relu\n        if self.kind == "silu":\n            activation = nn.silu',
    ],
)
def test_a_local_activation_chosen_by_config_keeps_the_size(choice):
    assert _unsized(ACTOR.format(choice=choice)) == []


@pytest.mark.parametrize(
    "choice",
    [
        # one of the values does not keep the last axis
        '        if self.kind == "relu":\n            activation = nn.relu\n        else:\n'
        "            activation = lambda v: v[..., :2]",
        '        activation = nn.relu if self.kind == "relu" else (lambda v: v.sum(-1))',
        # a binding that is no plain assignment of a value
        "        activation = nn.relu\n        for activation in (nn.tanh, jnp.sum):\n            pass",
        "        activation = nn.relu\n        activation += scale",
        "        activation = scale or nn.relu",
    ],
)
def test_a_local_not_always_an_activation_leaves_the_size_unknown(choice):
    source = ACTOR.format(choice=choice).replace(
        "import flax.linen as nn", "import flax.linen as nn\nimport jax.numpy as jnp"
    )
    assert len(_unsized(source)) == 1
