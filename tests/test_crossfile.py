"""Classes used across files: a base class and submodules imported (absolutely and relatively) from
another file of the run are migrated with their interface, and the package reaches parity."""

import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate.discovery import import_levels, module_name_for
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.namemap import NameMap
from linen2nnx.spec import LinenSide, ModelPair

FIXTURE = Path(__file__).parent / "fixtures" / "crossfile"


def _import_tower(root: Path):
    """Import ``pkg.model.Tower`` from ``root`` (both sides use the package name ``pkg``)."""
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        import pkg.model

        return pkg.model.Tower
    finally:
        sys.path.remove(str(root))


def test_files_are_migrated_after_the_files_they_import(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE, src)
    files = sorted((src / "pkg").glob("*.py"))
    work = [(f, f.name, module_name_for(f)) for f in files]
    order = [work[i][1] for level in import_levels(work) for i in level]
    assert order.index("blocks.py") < order.index("model.py")


def test_crossfile_package_reaches_parity(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(FIXTURE, src)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "model.py").read_text()
    assert "Block(hidden=2 * self.width, in_features=self.width, rngs=rngs)" in migrated
    assert "def __init__(\n        self,\n        classes: int," in migrated  # the base's field comes first

    linen_tower = _import_tower(src)
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    side = LinenSide(
        model=linen_tower(classes=3),
        batch={"x": x},
        loss=lambda o, b: jnp.mean(o**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    nnx_tower = _import_tower(out)
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_tower(classes=3, in_features=5, rngs=rngs),
        name_map=out / "linen2nnx-map.json",
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == 14  # dense_0 + 2 blocks x 2 Dense + head (Dense, LayerNorm)


def test_classes_from_outside_the_run_are_flagged(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE, src)
    result = migrate_paths([src / "pkg" / "model.py"], Mode.DIFF)  # blocks.py is not part of this run
    manual = [f for f in result.findings if f.rule == "L2N-MOD-006"]
    assert [f.message.split(" ")[0] for f in manual] == ["Tower"]  # its base Head is unknown
    assert "# TODO(linen2nnx): L2N-MOD-006" in result.files[0].output

    (src / "pkg" / "model.py").write_text(
        "import flax.linen as nn\n\nfrom pkg.blocks import Block\n\n\nclass Stack(nn.Module):\n"
        "    @nn.compact\n    def __call__(self, x):\n        return Block(hidden=4)(x)\n"
    )
    result = migrate_paths([src / "pkg" / "model.py"], Mode.DIFF)
    assert [f.message.split("(")[0] for f in result.findings if f.rule == "L2N-MOD-006"] == ["Block"]


def test_files_that_import_each_other_see_each_others_classes(tmp_path):
    """A cycle of imports puts both files in one level; each is migrated a second time knowing the
    other's classes, so the block built in the other file gets its rngs instead of Linen's name=."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "blocks.py").write_text(
        "import flax.linen as nn\n\nfrom . import model\n\n\nclass Block(nn.Module):\n    features: int\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.features)(x) * model.SCALE\n"
    )
    (pkg / "model.py").write_text(
        "import flax.linen as nn\n\nfrom . import blocks\n\nSCALE = 2.0\n\n\nclass Tower(nn.Module):\n"
        "    def setup(self):\n        self.block = blocks.Block(4, name='block')\n\n"
        "    def __call__(self, x):\n        return self.block(x)\n"
    )
    files = [(f, f.name, module_name_for(f)) for f in sorted(pkg.glob("*.py"))]
    assert any(len(level) > 1 for level in import_levels(files))  # the cycle: one level
    result = migrate_paths([pkg], Mode.CHECK)
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert "self.block = blocks.Block(4, in_features=" in model.output and "rngs=rngs)" in model.output
    assert not [f for f in model.findings if f.rule.startswith("L2N-VERIFY")]


def test_a_cycle_is_migrated_again_until_its_classes_settle(tmp_path):
    """``C2`` (one file) applies the other file's ``C1`` to its Dense: its first pass does not know
    ``C1`` and its second gains ``in_features``, which ``D1``'s second pass (the other file) had not
    seen; a third pass builds ``C2`` with it (it used to be built without, exit 0, TypeError)."""
    pkg = tmp_path / "big"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "c1.py").write_text(
        "import flax.linen as nn\nfrom big import c2\n\n\nclass C1(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.Dense(3)(x)\n\n\nclass D1(nn.Module):\n"
        "    @nn.compact\n    def __call__(self, x):\n        return c2.C2()(x)\n"
    )
    (pkg / "c2.py").write_text(
        "import flax.linen as nn\nfrom big import c1\n\n\nclass C2(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return c1.C1()(nn.Dense(5)(x))\n"
    )
    result = migrate_paths([pkg], Mode.CHECK)
    c1 = next(r for r in result.files if r.rel.endswith("c1.py"))
    assert "self.c2_0 = c2.C2(in_features=in_features, rngs=rngs)" in c1.output
    assert not [f for f in result.findings if f.severity == "manual"]


INHERITED = {
    "__init__.py": "",
    "encoder.py": (
        "import flax.linen as nn\n\n\nclass Encoder(nn.Module):\n    vocab: int = 11\n    width: int = 4\n\n"
        "    def setup(self):\n        self.embed = nn.Embed(self.vocab, self.width)\n"
        "        self.norm = nn.LayerNorm()\n\n    def __call__(self, ids):\n"
        "        return self.norm(self.embed(ids))\n"
    ),
    "model.py": (
        "import flax.linen as nn\n\nfrom pkg import encoder\n\n\nclass Scaled(encoder.Encoder):\n"
        "    scale: float = 2.0\n\n    def __call__(self, ids):\n        return super().__call__(ids) * self.scale\n"
    ),
}


def _import_class(root: Path, module: str, name: str):
    for loaded in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        del sys.modules[loaded]
    sys.path.insert(0, str(root))
    try:
        return getattr(__import__(f"pkg.{module}", fromlist=[name]), name)
    finally:
        sys.path.remove(str(root))


def _class_parity(src: Path, out: Path, module: str, name: str, x: np.ndarray, **nnx_kwargs: int):
    """Linen ``pkg.<module>.<name>`` of ``src``, built with its defaults, against its migration in ``out``
    (given ``nnx_kwargs``), through the written name map: the check, asserted to pass."""
    side = LinenSide(
        model=_import_class(src, module, name)(),
        batch={"x": x},
        loss=lambda o, b: jnp.mean(o**2),
        train_kwargs={},
        eval_kwargs={},
    )
    nnx_class = _import_class(out, module, name)
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_class(**nnx_kwargs, rngs=rngs),
        name_map=out / "linen2nnx-map.json",
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]
    return parity


def test_subclass_of_another_files_class_builds_what_the_base_builds(tmp_path):
    """Linen runs the base's setup for a subclass that does not override it; the NNX subclass's
    __init__ calls the base's, and its weights convert through the base's entry of the name map."""
    src, out = tmp_path / "src", tmp_path / "out"
    for name, text in INHERITED.items():
        (src / "pkg").mkdir(parents=True, exist_ok=True)
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    assert "L2N-MOD-010" in {f.rule for f in result.findings}
    assert "super().__init__(vocab=vocab, width=width, rngs=rngs)" in (out / "pkg" / "model.py").read_text()

    ids = np.random.default_rng(0).integers(0, 11, (2, 5))
    parity = _class_parity(src, out, "model", "Scaled", ids)
    assert len(parity.by_check()["grad"]) == 3  # embedding, norm scale and bias


PRESETS = {
    "__init__.py": "",
    "encoder.py": INHERITED["encoder.py"],
    # never says "linen": a preset that only overrides a field default of a class of the run
    "presets.py": "from pkg import encoder\n\n\nclass Wide(encoder.Encoder):\n    width: int = 6\n",
}


def test_preset_in_a_file_that_never_says_linen_is_migrated(tmp_path):
    """A subclass that only overrides field defaults needs no Linen import, yet left as it is it sets a
    class attribute on an NNX class, which has no fields: ``Wide()`` would build the base's width."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in PRESETS.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    written = (out / "pkg" / "presets.py").read_text()
    assert "def __init__(self, vocab: int = 11, width: int = 6, *, rngs: nnx.Rngs):" in written

    ids = np.random.default_rng(0).integers(0, 11, (2, 5))
    side = LinenSide(
        model=_import_class(src, "presets", "Wide")(),
        batch={"x": ids},
        loss=lambda o, b: jnp.mean(o**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    assert variables["params"]["embed"]["embedding"].shape == (11, 6)
    nnx_wide = _import_class(out, "presets", "Wide")
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_wide(rngs=rngs), name_map=out / "linen2nnx-map.json"
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


def test_a_build_in_a_file_that_never_says_linen_is_reported(tmp_path):
    """A config or script that builds the model of another file (``model=gm.nn.Gemma3_4B(...)``) never
    says ``linen``; once the class is NNX, its build lacks ``rngs``: a located finding, not silence."""
    (tmp_path / "pkg").mkdir()
    for name, text in PRESETS.items():
        (tmp_path / "pkg" / name).write_text(text)
    (tmp_path / "pkg" / "config.py").write_text(
        "from pkg import encoder\n\n\ndef model():\n    return encoder.Encoder(width=3)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    found = [
        (f.path.rsplit("/", 1)[-1], f.line, f.rule) for f in result.findings if f.severity.value == "manual"
    ]
    assert found == [("config.py", 5, "L2N-VERIFY-002")]
    config = next(r for r in result.files if r.rel.endswith("config.py"))
    assert "# TODO(linen2nnx): L2N-VERIFY-002 encoder.Encoder(...) misses rngs" in config.output


def test_a_build_of_another_files_class_names_the_sizes_it_misses(tmp_path):
    """The size arguments a class of another file gained are required (keyword-only) like ``rngs``:
    a Linen-style build misses them too, and the finding names them all."""
    (tmp_path / "blocks.py").write_text(
        "import flax.linen as nn\n\n\nclass Block(nn.Module):\n    features: int = 4\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.features)(x)\n"
    )
    (tmp_path / "config.py").write_text("import blocks\n\nMODEL = blocks.Block(features=3)\n")
    result = migrate_paths([tmp_path], Mode.CHECK)
    [finding] = [f for f in result.findings if f.severity.value == "manual"]
    assert finding.message == "blocks.Block(...) misses in_features, rngs, which its __init__ requires"


def test_a_class_a_package_reexports_is_that_class(tmp_path):
    """``pkg/__init__.py`` re-exports ``Encoder``: ``pkg.Encoder`` and ``from pkg import Encoder`` name
    the class of ``pkg/encoder.py``, so a preset of it is migrated and a build of it is checked."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.encoder import Encoder\n")
    (tmp_path / "pkg" / "encoder.py").write_text(INHERITED["encoder.py"])
    (tmp_path / "app" / "main.py").write_text(
        "import pkg\nfrom pkg import Encoder\n\n\nclass Wide(pkg.Encoder):\n    width: int = 6\n\n\n"
        "def model():\n    return Encoder(width=3)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    main = next(r for r in result.files if r.rel.endswith("main.py"))
    assert "def __init__(self, vocab: int = 11, width: int = 6, *, rngs: nnx.Rngs):" in main.output
    assert [(f.line, f.rule) for f in main.findings if f.severity.value == "manual"] == [
        (10, "L2N-VERIFY-002")
    ]


def test_a_package_reexporting_relatively_comes_after_the_module_it_reads(tmp_path):
    """``from .encoder import Encoder`` in ``pkg/__init__.py`` counts from ``pkg`` itself: the package
    comes after ``pkg/encoder.py`` (which itself comes after a file it imports), so its re-export is
    known, and ``pkg.Encoder(width=3)`` in a config is checked (it was silent)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .encoder import Encoder\n")
    (tmp_path / "pkg" / "util.py").write_text("SCALE = 2\n")
    (tmp_path / "pkg" / "encoder.py").write_text(
        "import flax.linen as nn\nfrom pkg import util\n\n\nclass Encoder(nn.Module):\n    width: int = 4\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.width * util.SCALE)(x)\n"
    )
    (tmp_path / "app" / "main.py").write_text("import pkg\n\nMODEL = pkg.Encoder(width=3)\n")
    files = [(f, f.name, module_name_for(f)) for f in sorted((tmp_path / "pkg").glob("*.py"))]
    order = [files[i][1] for level in import_levels(files) for i in level]
    assert order.index("util.py") < order.index("encoder.py") < order.index("__init__.py")
    result = migrate_paths([tmp_path], Mode.CHECK)
    assert [(f.path.rsplit("/", 1)[-1], f.rule) for f in result.findings if f.severity.value == "manual"] == [
        ("main.py", "L2N-VERIFY-002")
    ]


def _block_package(tmp_path, init: str) -> None:
    """``pkg`` with ``pkg/blocks.py`` defining a Linen ``Block`` (a Dense of ``width``), and ``init``
    as its ``__init__.py``."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(init)
    (tmp_path / "pkg" / "blocks.py").write_text(
        "import flax.linen as nn\n\n\nclass Block(nn.Module):\n    width: int = 4\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.width)(x)\n"
    )


def test_a_build_under_another_name_is_checked(tmp_path):
    """A class of the run built under a name its summary does not know: imported ``as`` another name
    (at module level or in a function, also one a fallback rebinds), bound to another name
    (``Alias = pkg.blocks.Block``) or re-exported by its package under a public name. Each build lacks
    ``rngs`` once the class is NNX; all used to be silent (the verifier matched summary names only,
    and skipped any name the function binds). A parameter named like an alias is not the class."""
    _block_package(tmp_path, "from pkg.blocks import Block as PublicBlock\n")
    (tmp_path / "pkg" / "use.py").write_text(
        "import pkg\nfrom pkg.blocks import Block as B\n\n\ndef first():\n    return B(width=3)\n\n\n"
        "def second():\n    return pkg.PublicBlock(width=5)\n\n\n"
        "def third():\n    from pkg.blocks import Block as Local\n\n    return Local(width=2)\n\n\n"
        "def unrelated(B=dict):\n    return B(width=1)\n\n\n"
        "Alias = pkg.blocks.Block\n\n\ndef fourth():\n    return Alias(width=4)\n\n\n"
        "def fifth():\n    try:\n        from pkg.blocks import Block as T\n    except ImportError:\n"
        "        T = None\n    return T(width=6)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    use = next(r for r in result.files if r.rel.endswith("use.py"))
    assert [(f.line, f.rule) for f in use.findings if f.severity.value == "manual"] == [
        (6, "L2N-VERIFY-002"),
        (10, "L2N-VERIFY-002"),
        (16, "L2N-VERIFY-002"),
        (27, "L2N-VERIFY-002"),
        (35, "L2N-VERIFY-002"),
    ]
    assert "B(...) misses in_features, rngs" in use.findings[0].message


def test_an_alias_bound_in_one_function_is_that_function_s_only(tmp_path):
    """``B = pkg.blocks.Block`` in one function makes that function's ``B(...)`` a build of the
    class; a parameter ``B``, another function's local ``B`` bound to something else, and a method's
    ``cls(...)`` are not (they were all flagged once any function bound the alias)."""
    _block_package(tmp_path, "")
    (tmp_path / "pkg" / "use.py").write_text(
        "import dataclasses\n\nimport mylib\n\nimport pkg\n\n\n"
        "def setup_models():\n    B = pkg.blocks.Block\n    return B(width=1)\n\n\n"
        "def unrelated(B):\n    return B(width=2)\n\n\n"
        "def unrelated2():\n    B = mylib.make\n    return B(width=3)\n\n\n"
        "@dataclasses.dataclass\nclass Config:\n    width: int = 3\n\n    @classmethod\n"
        "    def make(cls, d):\n        return cls(width=d['width'])\n\n\n"
        "def build(rngs):\n    cls = pkg.blocks.Block\n    return cls(width=3, in_features=2, rngs=rngs)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    use = next(r for r in result.files if r.rel.endswith("use.py"))
    assert [(f.line, f.rule) for f in use.findings if f.severity.value == "manual"] == [
        (10, "L2N-VERIFY-002")
    ]


def test_a_file_importing_a_cycle_comes_after_it():
    """Files that import each other share a level; a file that only imports them comes in a later
    level, so it sees their classes on its one pass (it used to be lumped in with the cycle)."""
    from linen2nnx.migrate.discovery import _levels

    # 0 <-> 1 form a cycle, 2 imports the cycle, 3 imports 2, 4 is independent
    assert _levels([{1}, {0}, {0}, {2}, set()]) == [([0, 1, 4], [0, 1]), ([2], []), ([3], [])]
    long_chain = [set()] + [{i} for i in range(5000)]  # deep import chains do not recurse
    assert len(_levels(long_chain)) == 5001


def test_size_from_a_local_of_another_files_class_stays_unknown(tmp_path):
    """``Unit`` of another file sizes its output with its own local (``nout = self.nmid * 4``): that name
    means nothing in the caller, so the caller's layer gets the size-unknown finding, never ``nout``;
    a size of the submodule's fields alone (``self.nmid * 4``) is still spelled out in the caller's terms."""
    unit = (
        "import flax.linen as nn\n\n\nclass Unit(nn.Module):\n    nmid: int\n\n    @nn.compact\n"
        "    def __call__(self, x):\n        nout = self.nmid * 4\n        h = nn.Dense(self.nmid)(x)\n"
        "        return nn.Dense({out})(h)\n"
    )
    model = (
        "import flax.linen as nn\n\nfrom layers_a import Unit\n\n\nclass M(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        h = Unit(2)(x)\n        return nn.Dense(5)(h)\n"
    )
    (tmp_path / "model_b.py").write_text(model)
    (tmp_path / "layers_a.py").write_text(unit.format(out="nout"))
    result = migrate_paths([tmp_path / "layers_a.py", tmp_path / "model_b.py"], Mode.DIFF)
    out = next(f.output for f in result.files if f.path.name == "model_b.py")
    assert "nout" not in out
    assert [
        f.rule for f in result.findings if f.path.endswith("model_b.py") and f.severity.value == "manual"
    ] == ["L2N-SHAPE-003"]

    (tmp_path / "layers_a.py").write_text(unit.format(out="self.nmid * 4"))
    result = migrate_paths([tmp_path / "layers_a.py", tmp_path / "model_b.py"], Mode.DIFF)
    out = next(f.output for f in result.files if f.path.name == "model_b.py")
    assert "nnx.Linear(2 * 4, 5, rngs=rngs)" in out
    assert not [f for f in result.findings if f.severity.value == "manual"]


LAYER_SUBCLASS = {
    "__init__.py": "",
    "convs.py": (
        "import jax.numpy as jnp\nimport flax.linen as nn\n\n\n"
        "class StdConv(nn.Conv):\n"
        "    def param(self, name, *a, **kw):\n"
        "        param = super().param(name, *a, **kw)\n"
        "        if name == 'kernel':\n"
        "            param = param - jnp.mean(param, axis=[0, 1, 2])\n"
        "        return param\n"
    ),
    "net.py": (
        "import jax\nimport jax.numpy as jnp\nimport flax.linen as nn\n"
        "from pkg.convs import StdConv\n\n\n"
        "class ScaledStdConv(StdConv):\n"
        "    def param(self, name, *a, **kw):\n"
        "        return super().param(name, *a, **kw) * 2.0\n\n\n"
        "def make():\n    return StdConv(4, (1, 1))\n\n\n"
        "class Net(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return StdConv(8, (3, 3))(x)\n\n\n"
        "model = ScaledStdConv(4, (3, 3))\n"
        "variables = model.init(jax.random.key(0), jnp.ones((1, 8, 8, 3)))\n"
    ),
}


def test_uses_of_another_files_converted_layer_subclass_are_flagged(tmp_path):
    """A layer subclass converted in its own file is NNX there: a file importing it that subclasses,
    builds or initialises it the Linen way outside the classes the run rewrites gets a located finding
    at each use (not silence, and not 'not part of this run'); a class of the run builds it the NNX way."""
    import pickle

    from linen2nnx.migrate.layer_subclass_uses import LayerSubclassFact

    (tmp_path / "pkg").mkdir()
    for name, text in LAYER_SUBCLASS.items():
        (tmp_path / "pkg" / name).write_text(text)
    result = migrate_paths([tmp_path / "pkg"], Mode.DIFF)
    net = [f for f in result.findings if f.path.endswith("net.py")]
    assert "L2N-MOD-006" not in {f.rule for f in net}
    located = sorted((f.line, f.col) for f in net if f.rule == "L2N-API-002")
    # the subclass's base (its own uses then stand with it), make()'s build; Net's submodule converts
    assert [line for line, _ in located] == [7, 13], [f.format_text() for f in net]
    assert all("StdConv" in f.message for f in net if f.rule == "L2N-API-002")
    net_out = next(r.output for r in result.files if r.path.name == "net.py")
    assert "StdConv(in_features, 8, (3, 3), rngs=rngs)" in net_out
    facts = [f for r in result.files for f in r.factories.values() if isinstance(f, LayerSubclassFact)]
    assert [f.key for f in facts] == ["pkg.convs.StdConv"]
    assert pickle.loads(pickle.dumps(facts[0])) == facts[0]  # handed to worker processes under -j N

    (tmp_path / "pkg" / "net2.py").write_text(LAYER_SUBCLASS["net.py"])  # two importers: one level, a pool
    parallel = migrate_paths([tmp_path / "pkg"], Mode.DIFF, jobs=2)
    for name in ("net.py", "net2.py"):
        found = [f.line for f in parallel.findings if f.path.endswith(name) and f.rule == "L2N-API-002"]
        assert found == [7, 13], name


STD_ROOT = (
    "import flax.linen as nn\n\nfrom pkg import convs\nfrom pkg.convs import StdConv\n\n\n"
    "class Root(nn.Module):\n    width: int = 4\n\n    @nn.compact\n    def __call__(self, x):\n"
    "        x = convs.StdConv(self.width, (3, 3), use_bias=False, name='conv_root')(x)\n"
    "        x = nn.GroupNorm(num_groups=2, name='gn_root')(x)\n"
    "        return StdConv(3, (1, 1))(nn.relu(x))\n"
)


def test_another_files_layer_subclass_built_by_a_class_of_the_run_reaches_parity(tmp_path):
    """``convs.StdConv(...)`` (and ``StdConv`` imported by name) inside a Linen class of the run: built
    in __init__ the NNX way, as written, with its input size; the weights it standardises convert
    and the package reaches parity (BiT / hybrid ViT roots built from another file's StdConv)."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in {**LAYER_SUBCLASS, "net.py": STD_ROOT}.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "net.py").read_text()
    assert "convs.StdConv(in_features, self.width, (3, 3), use_bias=False, rngs=rngs)" in migrated
    assert "StdConv(self.width, 3, (1, 1), rngs=rngs)" in migrated

    parity = _std_root_parity(src, out)
    assert {leaf.path for leaf in parity.by_check()["grad"]} >= {"conv_root/kernel", "std_conv_0/kernel"}


def _std_root_parity(src: Path, out: Path):
    """Linen ``pkg.net.Root`` of ``src`` against its migration in ``out``, through the written name map."""
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype(np.float32)
    return _class_parity(src, out, "net", "Root", x, in_features=3)


STD_BY_ATTRIBUTE = (
    "import flax.linen as nn\n\nfrom pkg import convs\nimport pkg.convs\nfrom pkg.convs import StdConv as SC\n\n\n"
    "class Root(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
    "        x = convs.StdConv(4, (3, 3))(x)\n"
    "        x = pkg.convs.StdConv(4, (3, 3))(nn.relu(x))\n"
    "        return SC(3, (1, 1))(nn.relu(x))\n"
)


def test_another_files_layer_subclass_is_auto_named_by_its_own_class_name(tmp_path):
    """Linen names an unnamed ``convs.StdConv(...)`` / ``pkg.convs.StdConv(...)`` / ``SC(...)`` (an alias)
    ``StdConv_<n>``, by ``type(self).__name__``: the attribute is ``std_conv_<n>``, not ``self.convs.…``
    (which did not build: AttributeError) nor ``sc_0`` (whose weights had no NNX home)."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in {**LAYER_SUBCLASS, "net.py": STD_BY_ATTRIBUTE}.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "net.py").read_text()
    assert "self.std_conv_0 = convs.StdConv(in_features, 4, (3, 3), rngs=rngs)" in migrated
    assert "self.std_conv_1 = pkg.convs.StdConv(4, 4, (3, 3), rngs=rngs)" in migrated
    assert "self.std_conv_2 = SC(4, 3, (1, 1), rngs=rngs)" in migrated
    parity = _std_root_parity(src, out)
    assert {leaf.path for leaf in parity.by_check()["grad"]} >= {f"std_conv_{i}/kernel" for i in range(3)}


FIELD_BLOCKS = (
    "import flax.linen as nn\n\n\n"
    "class Block(nn.Module):\n    width: int\n\n    @nn.compact\n    def __call__(self, x):\n"
    "        return nn.relu(nn.Dense(self.width)(x))\n"
)
FIELD_NETS = (
    "from typing import Any\n\nimport flax.linen as nn\n\n{imported}\n\n\n"
    "class Net(nn.Module):\n    stages: Any = (1, 2)\n    block_cls: Any = {default}\n\n"
    "    @nn.compact\n    def __call__(self, x):\n"
    "        for i, n in enumerate(self.stages):\n            for j in range(n):\n"
    "                x = self.block_cls(8)(x)\n"
    "        return nn.Dense(3)(x)\n"
)


@pytest.mark.parametrize(
    "imported, default",
    [("from pkg import blocks", "blocks.Block"), ("from pkg.blocks import Block as B", "B")],
)
def test_a_factory_field_of_another_files_class_built_in_a_loop_nest_maps_that_class(
    tmp_path, imported, default
):
    """``block_cls: Any = blocks.Block`` built in a loop nest: the map's list child names the class
    where it is defined (``pkg.blocks.Block``); it named ``pkg.nets.Block``, which no class is, so no
    weight of the blocks converted ("no NNX home")."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    nets = FIELD_NETS.format(imported=imported, default=default)
    for name, text in {"__init__.py": "", "blocks.py": FIELD_BLOCKS, "nets.py": nets}.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    assert not [f for f in result.findings if f.severity.value == "manual"]
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    parity = _class_parity(src, out, "nets", "Net", x, in_features=5)
    assert {leaf.path for leaf in parity.by_check()["grad"]} >= {
        f"block/{i}/dense_0/kernel" for i in range(3)
    }


STD_KEPT = (
    "import flax.linen as nn\n\nfrom pkg import convs\n\n\n"
    "class Root(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
    "        x = convs.StdConv(4, (3, 3), name='conv_root')(x)\n"
    "        while x.shape[-1] < 8:\n            x = nn.Dense(8)(x)\n        return x\n"
)


def test_another_files_layer_subclass_in_a_class_kept_as_linen_is_flagged(tmp_path):
    """A class the run keeps as Linen (behind the bridge) builds another file's layer subclass the Linen
    way, which the NNX class it became does not take: a located finding with its inline marker on the
    Linen copy's statement, never a bridged class that silently fails to build."""
    (tmp_path / "pkg").mkdir()
    for name, text in {**LAYER_SUBCLASS, "net.py": STD_KEPT}.items():
        (tmp_path / "pkg" / name).write_text(text)
    result = migrate_paths([tmp_path / "pkg"], Mode.DIFF)
    net = [f for f in result.findings if f.path.endswith("net.py")]
    assert "L2N-MOD-007" in {f.rule for f in net}
    flagged = [f for f in net if f.rule == "L2N-API-002" and "StdConv" in f.message]
    assert [(f.line, f.col) for f in flagged] == [(9, 13)], [f.format_text() for f in net]
    out = next(r.output for r in result.files if r.path.name == "net.py")
    marked = out.splitlines()[
        out.splitlines().index("        x = convs.StdConv(4, (3, 3), name='conv_root')(x)") - 1
    ]
    assert "TODO(linen2nnx): L2N-API-002 convs.StdConv" in marked


KEYWORD_INPUT = {
    "__init__.py": "",
    "blocks.py": (
        "import flax.linen as nn\n\n\nclass Attn(nn.Module):\n    width: int\n\n    @nn.compact\n"
        "    def __call__(self, hidden_states, context=None):\n"
        "        h = nn.Dense(self.width)(hidden_states)\n"
        "        return h if context is None else h + context\n"
    ),
    "model.py": (
        "import flax.linen as nn\n\nfrom pkg.blocks import Attn\n\n\nclass Model(nn.Module):\n"
        "    width: int = 4\n\n    def setup(self):\n        self.attn = Attn(self.width)\n"
        "        self.norm = nn.LayerNorm()\n\n    def __call__(self, x):\n"
        "        return self.norm(self.attn(context=None, hidden_states=x))\n"
    ),
}


def test_input_passed_by_keyword_to_another_files_class_is_sized(tmp_path):
    """``self.attn(context=None, hidden_states=x)`` of a class another file defines: its summary carries
    its ``__call__``'s parameters, so the keyword is read as its first input and sized by ``x`` (Flux's
    blocks call their attention this way), with no size finding; the package reaches parity."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in KEYWORD_INPUT.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert not [f for f in result.findings if f.severity.value == "manual"], [
        f.format_text() for f in result.findings
    ]
    assert "Attn(self.width, in_features=in_features, rngs=rngs)" in (out / "pkg" / "model.py").read_text()
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    _class_parity(src, out, "model", "Model", x, in_features=5)


DOTTED_USES = (
    "import jax\nimport jax.numpy as jnp\nimport flax.linen as nn\n"
    "import pkg.convs as convs\nfrom pkg import convs as convs2\nimport pkg.convs\n\n\n"
    "def make():\n    return convs.StdConv(8, (3, 3))\n\n\n"
    "def make2():\n    return convs2.StdConv(8, (3, 3))\n\n\n"
    "def make3():\n    return pkg.convs.StdConv(8, (3, 3))\n\n\n"
    "class Scaled(convs.StdConv):\n"
    "    def param(self, name, *a, **kw):\n"
    "        return super().param(name, *a, **kw) * 2.0\n\n\n"
    "model = convs.StdConv(4, (3, 3))\n"
    "variables = model.init(jax.random.key(0), jnp.ones((1, 8, 8, 3)))\n"
)


def test_dotted_uses_of_another_files_converted_layer_subclass_are_flagged(tmp_path):
    """``convs.StdConv(...)`` through ``import pkg.convs as convs`` (or ``from pkg import convs``, or
    ``pkg.convs.StdConv``) builds the class the run rewrites as NNX, just as the bare name does: each use
    outside the Linen classes the run migrates is a located finding, not left silently Linen."""
    (tmp_path / "pkg").mkdir()
    for name, text in {**LAYER_SUBCLASS, "net.py": DOTTED_USES}.items():
        (tmp_path / "pkg" / name).write_text(text)
    result = migrate_paths([tmp_path / "pkg"], Mode.DIFF)
    net = [f for f in result.findings if f.path.endswith("net.py") and f.rule == "L2N-API-002"]
    assert sorted((f.line, f.col) for f in net) == [(10, 12), (14, 12), (18, 12), (21, 14), (26, 9)], [
        f.format_text() for f in net
    ]
    assert all("StdConv (an nn.Conv subclass with a param override" in f.message for f in net)
    assert "subclasses convs.StdConv" in next(f.message for f in net if f.line == 21)


NAMESPACE_BLOCKS = """
import flax.linen as nn


class Block(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features)(x)
"""
NAMESPACE_MODEL = """
import flax.linen as nn

from {imported} import blocks


class Model(nn.Module):
    def setup(self):
        self.block = blocks.Block(3)

    def __call__(self, x):
        return self.block(x)
"""


def test_a_file_in_a_namespace_folder_is_found_by_either_name(tmp_path):
    """``pkg/research/sub/blocks.py`` with no ``research/__init__.py``: a script beside it imports
    ``sub.blocks``, a package user ``pkg.research.sub.blocks``; the run finds the class by both names
    (before, the longer one named nothing of the run, and the model kept a manual finding)."""
    for imported in ("sub", "pkg.research.sub"):
        root = tmp_path / imported.replace(".", "_")
        for name, text in {
            "pkg/__init__.py": "",
            "pkg/research/sub/__init__.py": "",
            "pkg/research/sub/blocks.py": NAMESPACE_BLOCKS,
            "pkg/research/sub/model.py": NAMESPACE_MODEL.format(imported=imported),
        }.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        result = migrate_paths([root], mode=Mode.CHECK)
        model = next(r for r in result.files if r.path.name == "model.py")
        assert [f.rule for f in model.findings if f.severity.value == "manual"] == [], imported
        assert "self.block = blocks.Block(3, in_features=in_features, rngs=rngs)" in model.output


ANNOTATED_BASE = """
from typing import Optional

import flax.linen as nn


class Base(nn.Module):
    width: Optional[int] = None
    depth: int = 2
"""
ANNOTATED_SUB = """
import flax.linen as nn

from pkg.base import Base


class Sub(Base):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width or 3)(x)
"""


def test_an_inherited_annotation_this_file_cannot_evaluate_is_written_as_a_string(tmp_path):
    """The subclass's __init__ repeats its base's fields; ``Optional`` is bound in the base's file
    only, so the subclass's file writes that annotation as a string and imports without a NameError."""
    for name, text in {
        "pkg/__init__.py": "",
        "pkg/base.py": ANNOTATED_BASE,
        "pkg/sub.py": ANNOTATED_SUB,
    }.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text)
    result = migrate_paths([tmp_path / "src"], mode=Mode.OUT_DIR, out_dir=tmp_path / "out")
    sub = next(r for r in result.files if r.path.name == "sub.py")
    assert 'width: "Optional[int]" = None' in sub.output
    assert "depth: int = 2" in sub.output
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
            del sys.modules[name]
        import pkg.sub

        assert pkg.sub.Sub.__init__.__annotations__["width"] == "Optional[int]"
    finally:
        sys.path.remove(str(tmp_path / "out"))
        for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
            del sys.modules[name]


DEFAULTED_BASE = """
import enum

import flax.linen as nn

SCALE = 2


class Remat(enum.Enum):
    LEGACY = "legacy"
    FULL = "full"


class Base(nn.Module):
    remat: Remat = Remat.LEGACY
    width: int = SCALE * 3
    pick: object = lambda x: x * SCALE
"""
DEFAULTED_SUBS = {
    "pkg/sub_attr.py": """
import flax.linen as nn

from pkg import base


class ByModule(base.Base):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)
""",
    "pkg/sub_name.py": """
import flax.linen as nn

from .base import Base


class ByName(Base):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)
""",
}


def test_an_inherited_default_reads_the_names_it_lacks_through_the_base_module(tmp_path):
    """A default is evaluated when ``__init__`` is defined, so ``Remat.LEGACY`` and ``SCALE * 3``, bound
    in the base's file only, would fail the subclass's file at import (a NameError, with the class
    reported clean). They are read through the base's module: the module the file already names the
    base by, else the base's module, imported; a lambda's own parameter stays as it is."""
    files = {"pkg/__init__.py": "", "pkg/base.py": DEFAULTED_BASE, **DEFAULTED_SUBS}
    for name, text in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text)
    out = tmp_path / "out" / "pkg"
    result = migrate_paths([tmp_path / "src" / "pkg"], mode=Mode.OUT_DIR, out_dir=out)
    by = {r.path.name: r for r in result.files}
    assert 'remat: "Remat" = base.Remat.LEGACY' in by["sub_attr.py"].output
    assert "width: int = base.SCALE * 3" in by["sub_attr.py"].output
    assert "pick: object = lambda x: x * base.SCALE" in by["sub_attr.py"].output
    assert "import pkg.base\n" in by["sub_name.py"].output
    assert 'remat: "Remat" = pkg.base.Remat.LEGACY' in by["sub_name.py"].output
    assert not [f for r in result.files for f in r.findings if f.severity.value in ("manual", "error")]
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
            del sys.modules[name]
        import jax.numpy as jnp
        import pkg.sub_attr
        import pkg.sub_name
        from flax import nnx

        for cls in (pkg.sub_attr.ByModule, pkg.sub_name.ByName):
            model = cls(in_features=2, rngs=nnx.Rngs(0))
            assert model.remat.value == "legacy" and model.width == 6 and model.pick(1) == 2
            assert model(jnp.ones((1, 2))).shape == (1, 6)
    finally:
        sys.path.remove(str(tmp_path / "out"))
        for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
            del sys.modules[name]


@pytest.mark.parametrize(
    "default, written",
    [
        ("Remat.LEGACY", "m.Remat.LEGACY"),
        ("staticmethod(\n    (attend)\n)", "staticmethod(\n    (m.attend)\n)"),
        ("init(stddev=SCALE)", "m.init(stddev=m.SCALE)"),
        ("lambda x: x * SCALE", "lambda x: x * m.SCALE"),
        ("tuple(i for i in AXES)", "tuple(i for i in m.AXES)"),
        ("jnp.float32", "jnp.float32"),
        ("None", "None"),
    ],
)
def test_an_inherited_default_qualifies_only_the_names_the_file_lacks(default, written):
    from linen2nnx.migrate.annotation_names import qualified_default

    assert qualified_default(default, frozenset({"jnp"}), "m") == written


PREPROCESSED = {
    "__init__.py": "",
    "base.py": """
import flax.linen as nn
import jax.numpy as jnp


def preprocess_inputs(x):
    return x.astype(jnp.float32) / 255.0


def summarise(x):
    return jnp.mean(x, axis=-1)
""",
    "nets.py": """
import flax.linen as nn

from pkg import base
from pkg.base import summarise


class Net(nn.Module):
    preprocessed: bool = False

    @nn.compact
    def __call__(self, x):
        if not self.preprocessed:
            x = base.preprocess_inputs(x)
        x = nn.Dense(8)(x)
        return x


class Pooled(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(summarise(x)[..., None])
""",
}


def test_another_files_helper_that_keeps_the_last_axis_keeps_the_size(tmp_path):
    """``base.preprocess_inputs(x)`` of another file of the run keeps ``x``'s last axis: the Dense after
    it is sized from the input on both paths; a helper that reduces the last axis gives nothing."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in PREPROCESSED.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    manual = [f for f in result.findings if f.severity.value == "manual"]
    assert [f.message.split(" is unknown")[0] for f in manual] == [
        "input feature size of Pooled.dense_0 (from an indexed value)"
    ], [f.format_text() for f in manual]
    assert "nnx.Linear(in_features, 8, rngs=rngs)" in (out / "pkg" / "nets.py").read_text()

    x = np.random.default_rng(0).uniform(0, 255, (2, 5)).astype(np.float32)
    _class_parity(src, out, "nets", "Net", x, in_features=5)


def test_a_helper_file_that_never_says_linen_still_tells_its_importers_what_it_keeps(tmp_path):
    """``ops.py`` holds only ``def act(x): return jnp.tanh(x)``: it was skipped (no ``linen`` in it),
    so the Dense after ``act(...)`` in another file needed a size argument; now the file's functions
    are read for its importers and the file itself is left as it is."""
    pkg = tmp_path / "src" / "q"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    ops = "import jax.numpy as jnp\n\n\ndef act(x):\n    return jnp.tanh(x)\n"
    (pkg / "ops.py").write_text(ops)
    (pkg / "m.py").write_text(
        "import flax.linen as nn\n\nfrom q.ops import act\n\n\nclass Net(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.Dense(3)(act(nn.Dense(16)(x)))\n"
    )
    out = tmp_path / "out"
    result = migrate_paths([tmp_path / "src"], Mode.OUT_DIR, out_dir=out)
    assert not [f for f in result.findings if f.severity.value == "manual"]
    assert "nnx.Linear(16, 3, rngs=rngs)" in (out / "q" / "m.py").read_text()
    assert (out / "q" / "ops.py").read_text() == ops


def test_a_package_below_a_namespace_folder_is_found_by_its_longer_name(tmp_path):
    """``src/ns/sub/layers.py`` with no ``ns/__init__.py``: ``from ns.sub.layers import Blk`` names a
    class of the run (it was "not part of this run", and the class using it stayed Linen)."""
    sub = tmp_path / "src" / "ns" / "sub"
    sub.mkdir(parents=True)
    (sub / "__init__.py").write_text("")
    (sub / "layers.py").write_text(
        "import flax.linen as nn\n\n\nclass Blk(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.Dense(4)(x)\n"
    )
    (sub / "model.py").write_text(
        "import flax.linen as nn\n\nfrom ns.sub.layers import Blk\n\n\nclass M(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.Dense(2)(Blk()(x))\n"
    )
    result = migrate_paths([tmp_path / "src"], Mode.CHECK)
    assert not [f.format_text() for f in result.findings if f.severity.value == "manual"]
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    assert "self.blk_0 = Blk(in_features=in_features, rngs=rngs)" in model.output


def test_a_submodule_width_from_its_field_default_reads_as_the_caller_file_sees_it(tmp_path):
    """``features: int = HIDDEN`` (a constant of the other file) and ``other: int = WIDTH`` (of the class
    body): the caller's layer after the block is sized ``pkg.layers.HIDDEN`` / ``Block.WIDTH``, names
    the caller's file reads as the block's (it wrote the bare names: a NameError at build, or the
    caller's own ``HIDDEN``, another value), and reaches parity."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "layers.py").write_text(
        "import flax.linen as nn\n\nHIDDEN = 6\n\n\n"
        "class Block(nn.Module):\n    WIDTH = 5\n    features: int = HIDDEN\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.features)(x)\n\n\n"
        "class Wide(nn.Module):\n    WIDTH = 5\n    features: int = WIDTH\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.features)(x)\n"
    )
    (src / "pkg" / "model.py").write_text(
        "import flax.linen as nn\n\nfrom pkg.layers import Block, Wide\n\nHIDDEN = 2  # not the block's\n\n\n"
        "class Model(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return nn.Dense(3)(Block()(x)) + nn.Dense(3)(Wide()(x))\n"
    )
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "model.py").read_text()
    assert "nnx.Linear(pkg.layers.HIDDEN, 3" in migrated and "nnx.Linear(Wide.WIDTH, 3" in migrated

    x = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    _class_parity(src, out, "model", "Model", x, in_features=4)


def test_same_named_files_in_folders_without_init_keep_one_map_entry_each(tmp_path):
    """``pkg/sub/a/_m.py`` and ``pkg/sub/b/_m.py`` (``sub``, ``a``, ``b`` without ``__init__.py``) are both
    module ``_m`` to Python's climb: each keeps its own name in the map (``pkg.sub.a._m``), where one
    class's entry silently overwrote the other's."""
    src, out = tmp_path / "src", tmp_path / "out"
    for part in ("a", "b"):
        (src / "pkg" / "sub" / part).mkdir(parents=True)
        (src / "pkg" / "sub" / part / "_m.py").write_text(
            "import flax.linen as nn\n\n\nclass Block(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
            f"        return nn.Dense(4, name='proj_{part}')(x)\n"
        )
    (src / "pkg" / "__init__.py").write_text("")
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    entries = {k: set(c.children) for k, c in result.name_map.classes.items()}
    assert entries == {"pkg.sub.a._m.Block": {"proj_a"}, "pkg.sub.b._m.Block": {"proj_b"}}


def test_a_linen_partial_of_a_third_file_handed_to_a_factory_field_is_reported(tmp_path):
    """``Block(dense=DenseNB)`` with ``DenseNB = partial(nn.Dense, use_bias=False)`` in a third file: the
    Block of another file builds its ``dense`` field the NNX way (``dense: Callable = nnx.Linear``), so
    the Linen partial it is handed would fail there (``use_bias`` twice); the call is a finding (it was
    silent, Model reported clean). A built-in Linen layer handed so is reported where it is written."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text(
        "from functools import partial\n\nimport flax.linen as nn\n\nDenseNB = partial(nn.Dense, use_bias=False)\n"
    )
    (pkg / "layers.py").write_text(
        "from typing import Callable\n\nimport flax.linen as nn\n\n\nclass Block(nn.Module):\n"
        "    dense: Callable = nn.Dense\n\n    @nn.compact\n    def __call__(self, x):\n"
        "        return self.dense(4)(x)\n"
    )
    (pkg / "model.py").write_text(
        "import flax.linen as nn\n\nfrom .common import DenseNB\nfrom .layers import Block\n\n\n"
        "class Model(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n        return Block(dense=DenseNB)(x)\n\n\n"
        "class Plain(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n        return Block()(x)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    model = next(r for r in result.files if r.rel.endswith("model.py"))
    manual = [(f.line, f.rule) for f in model.findings if f.severity.value == "manual"]
    assert (10, "L2N-MOD-008") in manual and all(line < 13 for line, _ in manual), manual
    assert "DenseNB is handed to the module-factory field 'dense' of Block" in model.output


def test_a_module_imported_from_a_package_folder_on_the_path_is_found_by_its_shorter_name(tmp_path):
    """A project whose root and folders are all packages (``proj/__init__.py``,
    ``proj/transformer/__init__.py``) imports ``from transformer import blocks`` when run from the
    project's root: the run finds ``proj.transformer.blocks`` by that shorter name too (it was "not part of
    this run", and the class using it stayed Linen). A shorter name two files share names neither."""
    proj = tmp_path / "proj"
    for name, text in {
        "__init__.py": "",
        "transformer/__init__.py": "",
        "transformer/blocks.py": NAMESPACE_BLOCKS,
        "transformer/memory/model.py": NAMESPACE_MODEL.format(imported="transformer"),
    }.items():
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        (proj / name).write_text(text)
    result = migrate_paths([proj], mode=Mode.CHECK)
    model = next(r for r in result.files if r.path.name == "model.py")
    assert [f.rule for f in model.findings if f.severity.value == "manual"] == []
    assert "self.block = blocks.Block(3, in_features=in_features, rngs=rngs)" in model.output
    (proj / "other" / "transformer").mkdir(parents=True)
    for name in ("other/__init__.py", "other/transformer/__init__.py"):
        (proj / name).write_text("")
    (proj / "other" / "transformer" / "blocks.py").write_text(NAMESPACE_BLOCKS)
    result = migrate_paths([proj], mode=Mode.CHECK)
    model = next(r for r in result.files if r.path.name == "model.py")
    assert "L2N-MOD-006" in {f.rule for f in model.findings}  # two files answer: neither is assumed


_STAR_LAYERS = """import flax.linen as nn

__all__ = ["Block", "_Gate"]


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(self.width)(x)


class _Gate(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x * nn.sigmoid(nn.Dense(x.shape[-1])(x))
"""
_STAR_MODEL = """import flax.linen as nn
{imp}


class Tower(nn.Module):
    def setup(self):
        self.b = Block(5)
        self.g = _Gate()
        self.seq = nn.Sequential([Block(5)])

    def __call__(self, x):
        return self.seq(self.g(self.b(x)))


class Stack(nn.Module):
    @nn.compact
    def __call__(self, x):
        return Block(5)(x)
"""


@pytest.mark.parametrize("imp", ["from pkg.layers import *", "from .layers import *"])
def test_classes_a_star_import_of_the_run_binds_are_the_run_s(tmp_path, imp):
    """``from pkg.layers import *`` binds the names ``pkg/layers.py`` exports (its literal ``__all__``,
    else its public module-level names): ``Block`` and ``_Gate`` are its classes, so ``setup()``
    builds them with their sizes and rngs, and ``nn.Sequential([Block(5)])`` is reported as it is for
    an explicit import. Before, the names resolved to nothing: ``self.b = Block(5)`` stayed as written,
    no finding, and the NNX class did not build (TypeError: missing in_features, rngs)."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "layers.py").write_text(_STAR_LAYERS)
    (src / "pkg" / "model.py").write_text(_STAR_MODEL.format(imp=imp))
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    manual = sorted((f.rule, f.line) for f in result.findings if f.severity.value == "manual")
    assert manual == [("L2N-VERIFY-002", 9)], [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "model.py").read_text()
    assert "self.b = Block(5, in_features=in_features, rngs=rngs)" in migrated
    assert "self.g = _Gate(in_features=in_features, rngs=rngs)" in migrated  # `__all__` names it
    assert "Block(5, in_features=in_features, rngs=rngs)(x)" not in migrated  # Stack's is hoisted
    assert "self.block_0 = Block(5, in_features=in_features, rngs=rngs)" in migrated
    again = migrate_paths([out], Mode.DIFF)
    assert all(r.output in (None, r.source) for r in again.files)  # idempotent
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        del sys.modules[name]
    sys.path.insert(0, str(out))
    try:
        import pkg.model
        from flax import nnx

        stack = pkg.model.Stack(in_features=5, rngs=nnx.Rngs(0))
        assert stack(jnp.ones((2, 5))).shape == (2, 5)
    finally:
        sys.path.remove(str(out))


def test_a_class_a_star_import_outside_the_run_may_bind_is_reported(tmp_path):
    """``from pkg.layers import *`` of a file outside the run: what ``Block`` is cannot be told, so
    its build in a converted class without rngs is a finding, not silence (before: none, and the
    NNX class did not build when ``Block`` is a class the other run made NNX)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "layers.py").write_text(_STAR_LAYERS)
    model = tmp_path / "pkg" / "model.py"
    model.write_text(
        "import flax.linen as nn\nfrom pkg.layers import *\n\n\nclass Tower(nn.Module):\n"
        "    def setup(self):\n        self.b = Block(5)\n        self.d = nn.Dense(3)\n\n"
        "    def __call__(self, x):\n        return self.d(self.b(x))\n"
    )
    result = migrate_paths([model], Mode.DIFF)
    manual = [(f.rule, f.line, f.message) for f in result.findings if f.rule.startswith("L2N-VERIFY")]
    assert [(r, line) for r, line, _ in manual] == [("L2N-VERIFY-001", 7)], manual
    assert "`from pkg.layers import *` may bind" in manual[0][2]


def test_builds_of_the_run_s_classes_through_a_table_partial_getattr_or_splat_are_reported(tmp_path):
    """``REGISTRY[name]()``, ``functools.partial(Net, depth=3)()``, ``getattr(nets, name)()`` and
    ``nets.Net(**kw)`` of ``kw = dict(depth=1)`` build an NNX class without its sizes and rngs
    (TypeError); before, none was reported. A mapping that may hold rngs, or a call passing them, is not."""
    (tmp_path / "nets.py").write_text(
        "import flax.linen as nn\n\n\nclass Net(nn.Module):\n    depth: int = 2\n\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(4)(x)\n"
    )
    (tmp_path / "factory.py").write_text(
        "import functools\nimport nets\nfrom nets import Net\n\nREGISTRY = {'net': Net}\n\n\n"
        "def a(name):\n    return REGISTRY[name]()\n\n\n"  # 9
        "def b():\n    return functools.partial(Net, depth=3)()\n\n\n"  # 13
        "def c(name):\n    return getattr(nets, name)()\n\n\n"  # 17
        "def d():\n    kw = dict(depth=1)\n    return nets.Net(**kw)\n\n\n"  # 22
        "def fine(cfg, rngs):\n    return nets.Net(**cfg), REGISTRY['net'](rngs=rngs), "
        "functools.partial(Net, rngs=rngs)(in_features=3)\n"
    )
    result = migrate_paths([tmp_path], Mode.CHECK)
    found = sorted((f.rule, f.line) for f in result.findings if f.severity.value == "manual")
    assert found == [
        ("L2N-VERIFY-002", 9),
        ("L2N-VERIFY-002", 13),
        ("L2N-VERIFY-002", 17),
        ("L2N-VERIFY-002", 22),
    ]


_BOUND_BLOCKS = """
import flax.linen as nn
class Small(nn.Module):
    width: int
    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width)(x)
class Big(nn.Module):
    width: int
    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.width * 2)(x)
"""
_BOUND_BASE = """
from typing import Any
import flax.linen as nn
from pkg import blocks

class Base(nn.Module):
    block_cls: Any = blocks.Small
    width: int = 4
    @nn.compact
    def __call__(self, x):
        x = self.block_cls(self.width)(x)
        return nn.Dense(2)(x)
"""
_BOUND_DERIVED = """
import functools
from typing import Any
from pkg import blocks
from pkg.base import Base
from pkg.blocks import Big

class BigNet(Base):
    block_cls: Any = Big
    width: int = 5

BaseBig = functools.partial(Base, block_cls=Big)
Narrow = functools.partial(Base, width=3)
Same = functools.partial(Base, block_cls=blocks.Small)
"""


def test_a_factory_field_bound_in_another_file_is_reported(tmp_path):
    """``block_cls: Any = blocks.Small`` in base.py, bound to ``Big`` by a subclass's default and by a
    partial in derived.py: base.py's build, sizes and name map follow only its own file's bindings
    (``Small_0``; the Dense after it sized from Small's width), so each binding is a located
    L2N-MOD-008. Before: no finding (exit 0), the map had no ``Big_0`` and the NNX BigNet raised at
    its first call (10 vs 5). A partial that leaves the field alone or binds its default is silent."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "blocks.py").write_text(_BOUND_BLOCKS)
    (src / "pkg" / "base.py").write_text(_BOUND_BASE)
    (src / "pkg" / "derived.py").write_text(_BOUND_DERIVED)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    manual = sorted(
        (f.rule, Path(f.path).name, f.line) for f in result.findings if f.severity.value == "manual"
    )
    assert manual == [("L2N-MOD-008", "derived.py", 9), ("L2N-MOD-008", "derived.py", 12)], manual
    again = migrate_paths([out], Mode.DIFF)
    assert all(r.output in (None, r.source) for r in again.files)  # idempotent


def test_a_subclass_handing_its_input_to_another_files_base_twice_is_sized_from_it(tmp_path):
    """A self-attention subclass (``return super().__call__(x, x, mask)``) of a query / key-value
    attention of another file, whose methods this file cannot walk: its size arguments are the base's,
    renumbered (key / value from its input 0), and it gives back the base's output. Before: a blocking
    L2N-MOD-004 on every such subclass of another file's base (t5x's and flaxformer's tests)."""
    text = (
        Path(__file__).parent / "fixtures" / "migrate" / "L2N-MOD-010" / "inherited_passthrough_in.py"
    ).read_text()
    head, rest = text.split("\nclass CrossAttention", 1)
    base, derived = rest.split("\nclass SelfAttention", 1)
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "attention.py").write_text(f"{head}\nclass CrossAttention{base}")
    (src / "pkg" / "model.py").write_text(
        f"{head}\nfrom pkg.attention import CrossAttention\n\n\nclass SelfAttention{derived}"
    )
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert result.exit_code() == 0, [f.format_text() for f in result.findings]
    migrated = (out / "pkg" / "model.py").read_text()
    assert "SelfAttention(in_features=5, inputs_kv_features=5, rngs=rngs)" in migrated
    assert "CrossAttention(features=4, in_features=6, inputs_kv_features=5, rngs=rngs)" in migrated

    ids = np.random.default_rng(0).integers(0, 11, (2, 3))
    parity = _class_parity(src, out, "model", "Model", ids)
    assert len(parity.by_check()["grad"]) == 17  # embedding + 2 attentions x 4 Dense x (kernel, bias)


FEED_FORWARDS = {
    "__init__.py": "",
    "ffn.py": """import flax.linen as nn


class Gated(nn.Module):
    @nn.compact
    def __call__(self, x):
        gate = nn.sigmoid(nn.Dense(4, name="wi_1")(x))
        return nn.Dense(4, name="wo")(nn.Dense(4, name="wi_0")(x) * gate)


class Plain(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4, name="wo")(nn.relu(nn.Dense(4, name="wi")(x)))
""",
    "layer.py": """import flax.linen as nn

from pkg.ffn import Gated, Plain


class Layer(nn.Module):
    gated: bool = False

    def setup(self):
        if self.gated:
            self.ff = Gated()
        else:
            self.ff = Plain()

    def __call__(self, x):
        return self.ff(x)
""",
}


def test_classes_of_another_file_a_config_chooses_between_are_alternatives_in_the_map(tmp_path):
    """The imported file's summaries carry its name-map entries: ``Gated`` and ``Plain`` hold ``wo``
    under the same attribute, so the map lists both under ``ff`` (no L2N-MOD-013), and a checkpoint of
    the second branch converts through the alternative."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    for name, text in FEED_FORWARDS.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    assert "L2N-MOD-013" not in {f.rule for f in result.findings}, [f.format_text() for f in result.findings]
    child = NameMap.load(out / "linen2nnx-map.json").classes["pkg.layer.Layer"].children["ff"]
    assert (child.linen_class, child.alternatives) == ("pkg.ffn.Gated", ["pkg.ffn.Plain"])
    parity = _class_parity(src, out, "layer", "Layer", np.ones((2, 4), np.float32), in_features=4)
    assert len(parity.by_check()["grad"]) == 4  # wi and wo, kernel and bias


def test_a_candidate_class_with_blocking_findings_keeps_the_caveat(tmp_path):
    """``Plain`` builds a layer under a condition on a call-time value (a blocking L2N-MOD-004): what it
    names there is in no entry, so its entry cannot show it alike to ``Gated``; L2N-MOD-013 stays."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "pkg").mkdir(parents=True)
    blocked = FEED_FORWARDS["ffn.py"].replace(
        'return nn.Dense(4, name="wo")(nn.relu(nn.Dense(4, name="wi")(x)))',
        'h = nn.Dense(4, name="wi")(x)\n        return nn.Dense(4, name="wo")(h) if h.sum() > 0 else h',
    )
    for name, text in {**FEED_FORWARDS, "ffn.py": blocked}.items():
        (src / "pkg" / name).write_text(text)
    result = migrate_paths([src], Mode.OUT_DIR, out_dir=out)
    rules = {(f.path.rpartition("/")[2], f.rule) for f in result.findings}
    assert ("ffn.py", "L2N-MOD-004") in rules and ("layer.py", "L2N-MOD-013") in rules, rules
