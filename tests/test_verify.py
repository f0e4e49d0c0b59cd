"""The verifier: Linen left in a class the output calls NNX is a located manual finding with a marker;
``migrate --trace --out-dir`` builds what it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from linen2nnx import cli, zoo
from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.sites import MARKER
from linen2nnx.migrate.verify import verify_output

FIXTURES = Path(__file__).parent / "fixtures" / "migrate"

# (rule, line, col) of every verifier finding each case gives, in the input's coordinates
EXPECTED = {
    # a submodule list built by a filtered comprehension in setup() (not converted), each block given
    # Linen's name=
    "L2N-VERIFY-002/setup_comprehension_filtered": [("L2N-VERIFY-006", 21, 23), ("L2N-VERIFY-002", 21, 24)],
    # a tied embedding read through self.embed.variables[...] (converted: L2N-VAR-005) and applied
    # with .apply of weights that are not a literal dict (a literal one converts: L2N-VAR-006)
    "L2N-VAR-006/tied_apply": [("L2N-VERIFY-003", 40, 16), ("L2N-VERIFY-003", 55, 16)],
    # a class of the run built with name= in a dict comprehension (the Linen Dense of the next line is
    # marked by L2N-API-002 already: no second finding)
    "L2N-VERIFY-006/named_heads": [("L2N-VERIFY-006", 22, 22), ("L2N-VERIFY-002", 22, 36)],
    # a dropout key drawn through self.scope from a stream a field names
    "L2N-VERIFY-004/scope_rng": [("L2N-VERIFY-004", 20, 41)],
    # a class migrated by hand half-way: @nn.compact left on its __call__ (the Linen LayerNorm is marked
    # by L2N-API-002 already)
    "L2N-VERIFY-005/half_migrated": [("L2N-VERIFY-005", 14, 5)],
    # a module-level function that builds and applies a Linen layer, called inside the class (the
    # function itself is marked by L2N-API-002)
    "L2N-VERIFY-001/linen_helper": [("L2N-VERIFY-001", 15, 13), ("L2N-VERIFY-001", 16, 16)],
}


def _migrate(case: str, **kwargs):
    src = (FIXTURES / f"{case}_in.py").read_text()
    return src, migrate_source(src, f"{case.split('/')[1]}_in.py", **kwargs)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_verifier_findings_are_located_and_marked(case):
    src, result = _migrate(case)
    assert result.output == (FIXTURES / f"{case}_out.py").read_text()
    header = src.splitlines()[0].removeprefix("# findings: ").split(", ")
    assert header == sorted({f.rule for f in result.findings})
    found = [(f.rule, f.line, f.col) for f in result.findings if f.rule.startswith("L2N-VERIFY")]
    assert found == EXPECTED[case]
    assert all(f.severity is Severity.MANUAL for f in result.findings if f.rule.startswith("L2N-VERIFY"))
    out_lines = result.output.splitlines()
    for f in result.findings:
        if f.rule.startswith("L2N-VERIFY"):
            marker = f"{MARKER} {f.rule} {f.message}"
            assert sum(line.strip() == marker for line in out_lines) == 1, marker
    compile(result.output, case, "exec")


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_second_run_changes_nothing(case):
    _, first = _migrate(case)
    second = migrate_source(first.output, f"{case}_out.py")
    assert second.output == first.output
    assert sorted(f.rule for f in second.findings if f.rule.startswith("L2N-VERIFY")) == sorted(
        rule for rule, _, _ in EXPECTED[case]
    )


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_ignore_switches_the_verifier_off(case):
    _, checked = _migrate(case)
    _, ignored = _migrate(case, ignore=["L2N-VERIFY"])
    assert not [f for f in ignored.findings if f.rule.startswith("L2N-VERIFY")]
    assert f"{MARKER} L2N-VERIFY" not in ignored.output
    without_markers = "".join(
        line
        for line in checked.output.splitlines(True)
        if not line.strip().startswith(f"{MARKER} L2N-VERIFY")
    )
    assert ignored.output == without_markers


CLEAN_NNX = """
import flax.linen as nn
from flax import nnx


class Block(nnx.Module):
    def __init__(self, features: int, *, rngs: nnx.Rngs):
        self.dense = nnx.Linear(features, features, kernel_init=nn.initializers.lecun_normal(), rngs=rngs)
        self.rngs = rngs

    def __call__(self, x):
        x = nn.with_logical_constraint(nn.gelu(self.dense(x)), ("batch", "embed"))
        return nnx.Dropout(0.1, rngs=self.rngs)(x, deterministic=True)


class Stack(nnx.Module):
    def __init__(self, n: int, *, rngs: nnx.Rngs):
        self.layers = nnx.List([Block(4, rngs=rngs) for _ in range(n)])
        self.variables = {"note": 1}  # an attribute of its own that happens to be called `variables`

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x + self.variables["note"]


class HeadLinen(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x) + self.param("b", nn.initializers.zeros, (2,))


class Head(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.linen = nnx.bridge.ToNNX(HeadLinen(), rngs=rngs)
"""


def _verify(source: str):
    return verify_output(
        source, source, path="f.py", module_name="f", external={}, rule_enabled=lambda _: True
    )


def test_clean_nnx_code_and_kept_linen_classes_get_no_finding():
    assert _verify(CLEAN_NNX) == (CLEAN_NNX, [])


LEFTOVERS = """
import flax.linen as nn
from flax import nnx


class Inner(nnx.Module):
    def __init__(self, features: int, *, rngs: nnx.Rngs):
        self.features = features


class Model(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.inner = Inner(4, 5, rngs=rngs)
        self.norm = nn.LayerNorm()
        self.w = self.param("w", nn.initializers.zeros, (3,))

    @nn.compact
    def __call__(self, x):
        y = nn.remat(lambda m, v: v)(self, x)
        return self.inner.init(None, y)
"""


def test_each_leftover_of_linen_is_reported():
    output, findings = _verify(LEFTOVERS)
    found = [(f.rule, f.line) for f in findings]
    assert found == [
        ("L2N-VERIFY-002", 13),
        ("L2N-VERIFY-001", 14),
        ("L2N-VERIFY-004", 15),
        ("L2N-VERIFY-005", 17),
        ("L2N-VERIFY-005", 19),
        ("L2N-VERIFY-003", 20),
    ]
    messages = {f.rule: f.message for f in findings}
    assert output.count(f"{MARKER} L2N-VERIFY") == len(findings)
    assert "passes 2 positional arguments, its __init__ takes 1" in messages["L2N-VERIFY-002"]
    assert "(without rngs=)" in messages["L2N-VERIFY-001"]


def test_a_linen_class_written_below_the_class_that_builds_it_is_reported():
    """A Linen layer subclass the file defines *after* the class whose ``setup()`` builds it (vdm's
    ``DenseMonotone``): the verifier knows it as Linen there too; the class is not reported clean."""
    source = (
        "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Schedule(nn.Module):\n"
        "    def setup(self):\n        self.l2 = PositiveDense(4)\n\n"
        "    def __call__(self, t):\n        return self.l2(t)\n\n\n"
        "class PositiveDense(nn.Dense):\n    @nn.compact\n    def __call__(self, x):\n"
        "        k = self.param('kernel', self.kernel_init, (x.shape[-1], self.features))\n"
        "        return x @ jnp.abs(k)\n"
    )
    result = migrate_source(source, "schedule.py")
    assert [(f.rule, f.line) for f in result.findings if f.rule.startswith("L2N-VERIFY")] == [
        ("L2N-VERIFY-001", 7)
    ]


def _package(tmp_path: Path, ops: str, model: str) -> dict[str, object]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(ops)
    (pkg / "model.py").write_text(model)
    return {r.rel.rsplit("/", 1)[-1]: r for r in migrate_paths([pkg], Mode.CHECK).files}


MODEL = (
    "import flax.linen as nn\n\nfrom . import ops\n\n\nclass Head(nn.Module):\n"
    "    @nn.compact\n    def __call__(self, x):\n        return ops.linear(x, 3)\n"
)


def test_a_linen_helper_of_another_file_is_reported(tmp_path):
    """``ops.linear(x, 3)`` in an NNX class, ``linear`` a function of another file of the run that
    still builds ``nn.Dense``: the importing file learns of it through the run and reports the call."""
    ops = "import flax.linen as nn\n\n\ndef linear(x, features):\n    return nn.Dense(features)(x)\n"
    model = _package(tmp_path, ops, MODEL)["model.py"]
    found = [(f.rule, f.line, f.col) for f in model.findings if f.rule.startswith("L2N-VERIFY")]
    assert found == [("L2N-VERIFY-001", 9, 16)]
    message = next(f.message for f in model.findings if f.rule == "L2N-VERIFY-001")
    assert "ops.linear(x, 3) builds a Linen module (flax.linen.Dense)" in message
    assert "pkg.ops.linear" in message
    assert f"{MARKER} L2N-VERIFY-001" in model.output


def test_a_function_of_another_file_building_a_converted_class_is_reported(tmp_path):
    """``ops.norm(x)`` in an NNX class, ``norm`` applying ``Scale()`` -- a class of the run, converted,
    whose __init__ now needs rngs: the call would build it at call time without them (the flaxmodels
    ``ops.batch_norm`` pattern), so the importing file reports the call."""
    ops = (
        "import flax.linen as nn\n\n\nclass Scale(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return x * self.param('s', nn.initializers.ones, (3,))\n\n\n"
        "def norm(x):\n    return Scale()(x)\n"
    )
    files = _package(tmp_path, ops, MODEL.replace("ops.linear(x, 3)", "ops.norm(x)"))
    model = files["model.py"]
    found = [(f.rule, f.line) for f in model.findings if f.rule.startswith("L2N-VERIFY")]
    assert found == [("L2N-VERIFY-002", 9)]
    message = next(f.message for f in model.findings if f.rule == "L2N-VERIFY-002")
    assert "ops.norm(x) builds Scale at call time inside NNX class Head" in message
    assert "pkg.ops.norm" in message


def test_a_layer_factory_of_another_file_builds_the_submodule(tmp_path):
    """``ops.linear(3)(x)``, ``linear`` returning ``nn.Dense`` in another file: that file's function
    takes the input size and rngs, and this class builds its submodule through it in __init__."""
    ops = "import flax.linen as nn\n\n\ndef linear(features, bias=True):\n    return nn.Dense(features, use_bias=bias)\n"
    files = _package(tmp_path, ops, MODEL.replace("ops.linear(x, 3)", "ops.linear(3, bias=False)(x)"))
    assert "def linear(features, bias=True, *, in_features: int, rngs: nnx.Rngs):" in files["ops.py"].output
    assert "return nnx.Linear(in_features, features, use_bias=bias, rngs=rngs)" in files["ops.py"].output
    model = files["model.py"]
    assert "self.dense_0 = ops.linear(3, bias=False, in_features=in_features, rngs=rngs)" in model.output
    assert "return self.dense_0(x)" in model.output
    assert not [f for f in model.findings if f.severity is not Severity.CONVERTED]
    child = model.name_map.classes["pkg.model.Head"].children["Dense_0"]
    assert (child.attr, child.linen_class) == ("dense_0", "flax.linen.Dense")


# ---- migrate --trace --out-dir builds what it wrote ----------------------------------------------
def _traced_migrate(tmp_path: Path, capsys) -> tuple[int, str]:
    code = cli.main(
        [
            "migrate",
            str(zoo.model_source("mlp")),
            "--trace",
            zoo.spec_ref("mlp"),
            "--out-dir",
            str(tmp_path / "out"),
            "--report",
            str(tmp_path / "report.txt"),
        ]
    )
    return code, (tmp_path / "report.txt").read_text() if (tmp_path / "report.txt").exists() else ""


def test_trace_builds_the_written_model(tmp_path, capsys):
    code, report = _traced_migrate(tmp_path, capsys)
    assert code == 0, report
    assert "L2N-VERIFY-010" not in report
    assert (tmp_path / "out" / "linen2nnx_spec.py").is_file()


def test_trace_reports_a_model_that_does_not_build(tmp_path, capsys, monkeypatch):
    from linen2nnx.spec import ModelPair

    def broken(self, seed=0):
        raise RuntimeError("the migrated model raised")

    monkeypatch.setattr(ModelPair, "make_nnx", broken)
    code, report = _traced_migrate(tmp_path, capsys)
    assert code == 1
    source = zoo.model_source("mlp").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.startswith("class MLP("))
    assert (
        f"model.py:{line}:1: L2N-VERIFY-010 [manual] MLP does not build and run from linen2nnx_spec.py: "
        "RuntimeError: the migrated model raised" in report
    )


def test_a_statement_an_earlier_run_marked_gets_no_new_words():
    """On a second run the other files' classes are NNX, so the verifier may see the same leftover
    another way: the statement keeps the markers it has, and the output is a fixed point; the finding
    is reported all the same."""
    body = (
        "from flax import nnx\n\n\nclass Head(nnx.Module):\n"
        "    def __init__(self, *, rngs: nnx.Rngs):\n        self.rngs = rngs\n\n"
        "    def __call__(self, x):\n{marker}"
        '        return make_dense(name="key")(x)\n'
    )
    fresh = body.format(marker="")
    kwargs = dict(path="head.py", module_name="head", external={}, rule_enabled=lambda rule: True)
    output, findings = verify_output(fresh, fresh, **kwargs)
    assert [f.rule for f in findings] == ["L2N-VERIFY-001"] and output != fresh
    earlier = body.format(marker=f"        {MARKER} L2N-VERIFY-002 make_dense(...) passes name=\n")
    output, findings = verify_output(earlier, earlier, **kwargs)
    assert output == earlier and [f.rule for f in findings] == ["L2N-VERIFY-001"]  # reported, not re-marked


SIZED_LEFTOVER = f"""
from flax import nnx


class Block(nnx.Module):
    def __init__(self, features: int, *, rngs: nnx.Rngs):
        self.features = features


class Stack(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        {MARKER} L2N-SHAPE-003 in_features of Block is unknown statically
        self.layers = [Block(4, rngs=rngs) for _ in range(2)]
"""


def test_a_size_marker_hides_no_leftover():
    """A statement's L2N-SHAPE-003 marker goes when the class's builders pass the size
    (caller_sizes.py): a leftover on the same statement is reported now, not on a second run."""
    output, findings = _verify(SIZED_LEFTOVER)
    assert [f.rule for f in findings] == ["L2N-VERIFY-006"]
    assert f"{MARKER} L2N-VERIFY-006" in output


UNBOUND_DEFAULT = """
import enum

from flax import nnx

SCALE = 2


class Block(nnx.Module):
    K = 3

    def __init__(
        self,
        remat: str = LayerRemat.LEGACY,
        width: int = SCALE * K,
        pick: object = lambda x: x * SCALE,
        axes: tuple = tuple(i for i in range(K)),
        *,
        rngs: nnx.Rngs,
    ):
        self.remat = remat
"""


def test_an_init_default_reading_a_name_the_file_does_not_bind_is_reported():
    """A default is evaluated when the class is defined: ``LayerRemat`` (bound nowhere in the file)
    would fail the module at import with a NameError. Names of the module, of the class body above, of
    a lambda's parameters or a comprehension, and builtins are bound."""
    output, findings = _verify(UNBOUND_DEFAULT)
    assert [(f.rule, f.line, f.message) for f in findings] == [
        ("L2N-VERIFY-008", 14, "the default of remat reads LayerRemat, which this file does not bind")
    ]
    assert f"    {MARKER} L2N-VERIFY-008 the default of remat reads LayerRemat" in output


def test_an_unbound_init_default_is_reported_in_a_class_the_run_did_not_rewrite():
    """A bridge wrapper is no class the run converted, but its ``__init__`` defaults are evaluated at
    import like any other: ``out_features: int = features`` (a Linen class-body name) took the file down
    with no finding. Only that check reaches such classes: their other code is not the run's."""
    _, findings = verify_output(
        UNBOUND_DEFAULT,
        UNBOUND_DEFAULT,
        path="f.py",
        module_name="f",
        external={},
        rule_enabled=lambda _: True,
        converted=frozenset(),
    )
    assert [(f.rule, f.line) for f in findings] == [("L2N-VERIFY-008", 14)]


UNBOUND_CLASS_ATTRIBUTE = """
from flax import nnx

SCALE = 2


class Block(nnx.Module):
    K = 3
    rot = SCALE * K
    table: tuple = (hidden_dim // heads, K)
    label = __qualname__ + str(K)
    early = late * 2
    late = 1

    def __init__(self, hidden_dim: int = 72, heads: int = 3, *, rngs: nnx.Rngs):
        self.hidden_dim = hidden_dim
"""


def test_a_class_attribute_reading_a_name_the_file_does_not_bind_is_reported():
    """A class attribute is evaluated when the class is defined too: one that reads what were the Linen
    fields (class attributes of the Linen class, ``__init__`` parameters now) fails at import."""
    output, findings = _verify(UNBOUND_CLASS_ATTRIBUTE)
    message = "the class attribute {} reads {}, which neither this file nor the class binds above it"
    assert [(f.rule, f.line, f.message) for f in findings] == [
        ("L2N-VERIFY-008", 10, message.format("table", "heads")),
        ("L2N-VERIFY-008", 10, message.format("table", "hidden_dim")),
        ("L2N-VERIFY-008", 12, message.format("early", "late")),  # bound below: not yet
    ]
    assert f"    {MARKER} L2N-VERIFY-008 the class attribute table reads heads" in output
    assert _verify(output)[0] == output  # marked once: a second run adds nothing


def test_a_linen_class_picked_from_another_files_table_is_reported(tmp_path):
    """``ops.NORMS[self.norm](...)(x)`` and ``ops.pick(self.norm)(...)(x)`` in NNX classes, ``NORMS`` a table
    of Linen classes and ``pick`` a function returning one, in another file of the run: the class was
    reported converted and built a Linen module at call time (CallCompactUnboundModuleError). The
    importing file learns of both through the run and reports each call."""
    ops = (
        "import flax.linen as nn\n\nNORMS = {'ln': nn.LayerNorm, 'rms': nn.RMSNorm}\n\n\n"
        "def pick(name):\n    return NORMS[name]\n"
    )
    model = MODEL.replace("ops.linear(x, 3)", "ops.NORMS[self.norm](epsilon=1e-3)(x)")
    model += (
        "\n\nclass Picked(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return ops.pick(self.norm)(epsilon=1e-3)(x)\n"
    )
    found = _package(tmp_path, ops, model)["model.py"].findings
    messages = {f.line: f.message for f in found if f.rule == "L2N-VERIFY-001"}
    assert "chosen from the table pkg.ops.NORMS inside NNX class Head" in messages[9]
    assert (
        "ops.pick(self.norm) gives a Linen class (flax.linen.LayerNorm) inside NNX class Picked"
        in messages[15]
    )
