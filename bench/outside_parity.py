"""Outside code is the real test: migrate Flax's own Linen examples, then check numeric parity.

    python bench/outside_parity.py [--flax-src DIR] [--models mnist,vae,imagenet] [--json FILE]
                                   [--keep DIR] [--unsafe-fixes] [-v] [--require-pass]

The Flax sdist ships the examples. Without ``--flax-src`` the sdist of the installed flax version is
fetched with ``pip download --no-deps --no-binary :all: flax==VERSION`` into a temp dir and
extracted there; ``--flax-src`` takes an extracted sdist (the folder holding ``examples/``), a
folder holding exactly one such ``flax-*`` folder, or the ``.tar.gz`` itself. Nothing from Flax is
ever written into this repository: every model works in its own temp folder.

For each model: copy the example's folder (so its sibling imports work), write a small Linen spec
(random example batch, loss = sum over output leaves of ``mean(out**2)``, the model's mode keyword
arguments, ``mutable=("batch_stats",)`` where it has BatchNorm), trace it, migrate the model's file
with ``migrate_paths(..., Mode.OUT_DIR, trace=...)``, write the pair spec (``write_pair_spec``), and
run ``check(pair, perturbed_linen_variables)``: fp32 forward (eval and train), loss, per-leaf
gradients and BatchNorm statistics, each leaf within ``1e-5 * (1 + max|ref|)``. A stage that raises
is reported with the model and does not stop the others.

The models and what is compared:

- ``mnist``: the MNIST ``CNN`` (Conv/avg_pool/flatten/Dense), input (4, 28, 28, 1). Up to flax 0.10
  it is ``examples/mnist/train.py``; since 0.11 that example is written in NNX and the identical Linen
  ``CNN`` lives in the Linen quick start, ``docs/quick_start.md``, whose code cell is used instead
  (the table's *source* column says which).
- ``vae``: ``examples/vae/models.py`` ``VAE(latents=20)`` with ``Encoder``/``Decoder``, input
  (4, 784). Its only randomness is the reparameterisation noise ``random.normal(z_rng, ...)``, and
  ``z_rng`` is an explicit call argument, so the whole model is compared with one fixed key: the
  same key gives the same ``eps`` on both sides, so the forward pass (reconstruction, mean,
  log-variance) and every gradient, including those flowing through ``mean + eps * std``, must
  agree exactly — nothing random is left to excuse a difference, nor needs to be disabled.
- ``imagenet``: ``examples/imagenet/models.py`` ``_ResNet1(num_classes=10, num_filters=8)`` (one
  ``ResNetBlock`` stage; ``conv: ModuleDef = nn.Conv`` field, ``functools.partial`` conv/norm factories
  passed as submodule attributes), input (2, 32, 32, 3), ``train=True/False``, BatchNorm updated in
  train mode. The example's BatchNorm says ``axis_name='batch'`` (a cross-device ``pmean`` inside its
  ``pmap`` training loop); the check runs on one device with no ``pmap``, where a one-member
  ``pmean`` is the identity, so during this model's stages both Linen's and NNX's BatchNorm statistics
  ignore ``axis_name`` (see :func:`single_device_batch_axis`). Both sides are treated the same way.

- ``sst2``: ``examples/sst2/models.py`` ``TextClassifier`` (embedding 6, hidden 5, vocabulary 11,
  3 classes, dropout rates 0), two padded token sequences: word embedding, a bidirectional LSTM
  scanned on axis 1 and joined by a concatenation, attention pooling ``weights @ x``; the sizes
  the dataflow can only guess at are confirmed by the trace of this batch.
- ``seq2seq``: ``examples/seq2seq/models.py`` ``Seq2seq`` (teacher forcing, hidden 6, vocabulary 5)
  on one-hot sequences: an ``nn.RNNCellBase`` subclass under ``nn.RNN(split_rngs=...)`` whose inner
  LSTM takes its hidden size from the encoder's carry (the trace shows it). Its second output, the
  tokens it samples with ``make_rng('lstm')``, is compared too: ``check`` gives every draw one fixed key
  on both sides (``linen2nnx/equivalence/randomness.py``), and the tokens agree bit for bit.
- ``ppo``: ``examples/ppo/models.py`` ``ActorCritic(num_outputs=6)`` on two stacks of four 84x84
  frames: the Dense after the flatten reads ``49 * 64`` features, a factor the trace gives.
- ``ogbg``: ``examples/ogbg_molpcba/models.py`` ``GraphConvNet`` on two small molecule graphs, the
  config of the trace spec ``outside_traces/ogbg_models.py``: its layers are applied inside
  ``jraph.GraphMapFeatures`` / ``GraphConvolution``, so the embedder's input size is a leaf of the
  input (``graphs.nodes``) that only the trace shows. ``jraph`` (pure Python) is installed with
  ``pip --no-deps`` into a temp folder for the run.

Weights are perturbed away from init before the check (``x + 0.5*std(x)*N(0,1)``, or ``0.1*N(0,1)``
for constant leaves such as biases and BatchNorm scales; running variances are multiplied by
``exp(0.3*N(0,1))`` so they stay positive), so zero biases and unit scales cannot hide a mistake.

Exit status: 0, unless ``--require-pass`` is given and a model did not reach parity (then 1).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MODELS = ("mnist", "vae", "imagenet", "sst2", "ppo", "seq2seq", "wmt", "wmt_tied", "ogbg")
TRACES = Path(__file__).resolve().parent / "outside_traces"  # trace specs, shared with outside_corpus.py
TOL_FACTOR = 1e-5


class SourceUnavailable(RuntimeError):
    """The Flax sdist is not on disk and cannot be downloaded (e.g. no network)."""


# ---- getting the Flax sources ------------------------------------------------------------------
def installed_flax_version() -> str:
    from importlib.metadata import version

    return version("flax")


def _safe_extract(archive: Path, dest: Path, wanted: Callable[[str], bool]) -> None:
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if wanted(m.name) and (m.isfile() or m.isdir())]
        for m in members:
            target = (dest / m.name).resolve()
            if dest.resolve() not in target.parents and target != dest.resolve():
                raise SourceUnavailable(f"{archive}: unsafe member path {m.name!r}")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # Python < 3.10.12 / 3.11.4: paths were checked above
            tar.extractall(dest, members=members)


def extract_sdist(archive: Path, dest: Path) -> Path:
    """Extract the examples and docs of a Flax sdist; returns the ``flax-X.Y.Z`` folder."""

    def wanted(name: str) -> bool:
        parts = name.split("/")
        return len(parts) >= 2 and parts[1] in ("examples", "docs")

    dest.mkdir(parents=True, exist_ok=True)
    _safe_extract(archive, dest, wanted)
    roots = [p for p in dest.iterdir() if (p / "examples").is_dir()]
    if len(roots) != 1:
        raise SourceUnavailable(f"{archive}: no single flax-*/examples folder inside")
    return roots[0]


def pip_download_sdist(requirement: str, dest: Path, timeout: float = 300) -> Path:
    """``pip download`` the sdist of ``requirement`` (``flax==0.12.8``) into ``dest``; its archive, or
    SourceUnavailable naming pip's own reason."""
    name = requirement.split("==")[0]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "-q", requirement, "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SourceUnavailable(f"pip download {requirement} failed: {e}") from e
    archives = sorted(dest.glob(f"{name}-*.tar.gz"))
    if not archives:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        errors = [ln.strip() for ln in lines if ln.strip().lower().startswith("error")]
        why = (errors or lines or [f"exit status {proc.returncode}"])[-1]
        raise SourceUnavailable(f"pip download {requirement} gave no sdist: {why}")
    return archives[0]


def download_flax_sdist(dest: Path, version: str | None = None, timeout: float = 300) -> Path:
    """``pip download`` the Flax sdist (the installed version by default) and extract it under ``dest``."""
    version = version or installed_flax_version()
    archive = pip_download_sdist(f"flax=={version}", dest / "download", timeout)
    return extract_sdist(archive, dest / "src")


def resolve_flax_src(arg: str | Path, scratch: Path) -> Path:
    """The extracted sdist folder (the one holding ``examples/``) for ``--flax-src``."""
    p = Path(arg)
    if p.is_file() and p.name.endswith((".tar.gz", ".tgz")):
        return extract_sdist(p, scratch / "src")
    if (p / "examples").is_dir():
        return p
    if p.is_dir():
        version = installed_flax_version()
        cands = sorted(c for c in p.glob("flax-*") if (c / "examples").is_dir())
        exact = [c for c in cands if c.name == f"flax-{version}"]
        if exact or len(cands) == 1:
            return (exact or cands)[0]
        tars = sorted(p.glob(f"flax-{version}.tar.gz")) or sorted(p.glob("flax-*.tar.gz"))
        if len(tars) == 1:
            return extract_sdist(tars[0], scratch / "src")
    raise SourceUnavailable(
        f"{p}: not a Flax sdist (no examples/ folder, no single flax-*/ folder or tarball)"
    )


def find_flax_src(flax_src: str | Path | None, scratch: Path) -> Path:
    return resolve_flax_src(flax_src, scratch) if flax_src else download_flax_sdist(scratch)


# ---- importing example files whose training deps are not installed -----------------------------
STUB_PACKAGES = ("tensorflow", "tensorflow_datasets", "ml_collections", "clu", "tensorboard", "absl")


class _Anything:
    """Stands for any attribute of a stubbed module: callable, subscriptable, chainable."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> _Anything:
        if item.startswith("__"):
            raise AttributeError(item)
        return _Anything(f"{self._name}.{item}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything(f"{self._name}()")

    def __getitem__(self, item: Any) -> _Anything:
        return _Anything(f"{self._name}[]")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return _Anything(f"{self.__name__}.{item}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of training-only packages that are not installed get an inert stub module."""

    def __init__(self, tops: tuple[str, ...]) -> None:
        self.tops = tops
        self.used: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        self.used.append(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@contextlib.contextmanager
def stub_missing_packages(tops: tuple[str, ...] = STUB_PACKAGES) -> Iterator[list[str]]:
    """While active, ``import tensorflow`` & co. succeed with stubs when the package is absent.

    Only the model classes of an example file are used; its training loop may import data and logging
    libraries that this environment does not have. Installed packages are imported for real.
    """
    missing = tuple(t for t in tops if t not in sys.modules and importlib.util.find_spec(t) is None)
    finder = _StubFinder(missing)
    sys.meta_path.append(finder)
    try:
        yield finder.used  # the modules actually stubbed so far (filled while the context is active)
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n, m in sys.modules.items() if isinstance(m, _StubModule)]:
            del sys.modules[name]


@contextlib.contextmanager
def single_device_batch_axis() -> Iterator[None]:
    """BatchNorm statistics ignore ``axis_name`` (Linen and NNX alike) while active.

    ``axis_name='batch'`` asks for a ``pmean`` of the batch statistics over the devices of a ``pmap``;
    on one device, outside ``pmap``, that mean over a single member is the identity, but an unbound
    axis name is an error. Both frameworks' ``_compute_stats`` get ``axis_name=None`` so the example
    runs unchanged on one device.
    """
    import flax.linen.normalization as linen_norm
    import flax.nnx.nn.normalization as nnx_norm

    originals = [(mod, mod._compute_stats) for mod in (linen_norm, nnx_norm)]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def compute_stats(*args: Any, **kwargs: Any) -> Any:
            kwargs["axis_name"] = None
            kwargs.pop("axis_index_groups", None)
            return fn(*args, **kwargs)

        return compute_stats

    for mod, fn in originals:
        mod._compute_stats = wrap(fn)
    try:
        yield
    finally:
        for mod, fn in originals:
            mod._compute_stats = fn


def pip_install_pure(names: tuple[str, ...] | list[str], target: Path) -> list[str]:
    """``pip install --no-deps --target`` of pure-Python packages outside code imports (none of them
    a dependency of this project, so they are fetched for the run only): the folder to put on
    ``sys.path``, nothing when no name is given; a failure is :class:`SourceUnavailable`."""
    if not names:
        return []
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q"]
    cmd += ["--target", str(target), *names]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SourceUnavailable(f"pip install {' '.join(names)} failed: {proc.stderr.strip()[-300:]}")
    return [str(target)]


@contextlib.contextmanager
def pure_packages(names: tuple[str, ...]) -> Iterator[None]:
    """The named pure-Python packages importable inside the block (installed into a temp folder)."""
    with tempfile.TemporaryDirectory(prefix="l2n-deps-") as tmp:
        paths = pip_install_pure(names, Path(tmp))
        sys.path[:0] = paths
        try:
            yield
        finally:
            for path in paths:
                sys.path.remove(path)


# ---- the example models ------------------------------------------------------------------------
SPEC_HEADER = '''"""Linen side of Flax's {title} example, written by bench/outside_parity.py."""

import jax
import jax.numpy as jnp
import numpy as np

from linen2nnx.spec import LinenSide, import_file

MODEL_FILE = {model_file!r}


def mean_square(outputs, batch):
    """Sum over output leaves of mean(out ** 2): touches every output, simple and smooth."""
    return sum(jnp.mean(jnp.square(leaf.astype(jnp.float32))) for leaf in jax.tree.leaves(outputs))

'''

MNIST_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    x = np.random.default_rng(0).normal(size=(4, 28, 28, 1)).astype(np.float32)
    return LinenSide(model=module.CNN(), batch={{"x": x}}, loss=mean_square,
                     train_kwargs={{}}, eval_kwargs={{}}, name="mnist/CNN")
"""

VAE_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    x = np.random.default_rng(0).uniform(size=(4, 784)).astype(np.float32)
    z_rng = jax.random.key(42)  # fixed reparameterisation noise: the same eps on both sides
    return LinenSide(model=module.VAE(latents=20), batch={{"x": x, "z_rng": z_rng}}, loss=mean_square,
                     inputs=lambda batch: ((batch["x"], batch["z_rng"]), {{}}),
                     train_kwargs={{}}, eval_kwargs={{}}, name="vae/VAE")
"""

IMAGENET_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    model = module._ResNet1(num_classes=10, num_filters=8)
    return LinenSide(model=model, batch={{"x": x}}, loss=mean_square,
                     train_kwargs={{"train": True}}, eval_kwargs={{"train": False}},
                     mutable=("batch_stats",), name="imagenet/_ResNet1")
"""

SST2_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    model = module.TextClassifier(embedding_size=6, hidden_size=5, vocab_size=11, output_size=3,
                                  dropout_rate=0.0, word_dropout_rate=0.0)
    batch = {{"ids": np.array([[2, 3, 4, 5, 6, 7, 8], [2, 9, 10, 3, 0, 0, 0]], np.int32),
              "lengths": np.array([7, 4], np.int32)}}
    return LinenSide(model=model, batch=batch, loss=mean_square,
                     inputs=lambda b: ((b["ids"], b["lengths"]), {{}}),
                     train_kwargs={{"deterministic": False}}, eval_kwargs={{"deterministic": True}},
                     name="sst2/TextClassifier")
"""

PPO_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    x = np.random.default_rng(0).integers(0, 255, size=(2, 84, 84, 4)).astype(np.float32)
    return LinenSide(model=module.ActorCritic(num_outputs=6), batch={{"x": x}},
                     loss=lambda out, batch: mean_square(out[0], batch) + mean_square(out[1], batch),
                     train_kwargs={{}}, eval_kwargs={{}}, name="ppo/ActorCritic")
"""

SEQ2SEQ_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    rng = np.random.default_rng(0)
    one_hot = np.eye(5, dtype=np.float32)
    batch = {{"encoder": one_hot[rng.integers(0, 5, size=(2, 4))], "decoder": one_hot[rng.integers(0, 5, size=(2, 3))]}}
    return LinenSide(model=module.Seq2seq(teacher_force=True, hidden_size=6, vocab_size=5), batch=batch,
                     loss=lambda out, batch: mean_square(out[0], batch),
                     inputs=lambda b: ((b["encoder"], b["decoder"]), {{}}), train_kwargs={{}}, eval_kwargs={{}},
                     rng_streams=("params", "lstm"), name="seq2seq/Seq2seq")
"""

WMT_SPEC = """
def linen_side():
    module = import_file(MODEL_FILE)
    rng = np.random.default_rng(0)
    config = module.TransformerConfig(
        vocab_size=11, output_vocab_size=11, emb_dim=8, num_heads=2, num_layers=2, qkv_dim=8, mlp_dim=16,
        max_len=16, dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True, decode=False,
        share_embeddings=SHARED, logits_via_embedding=SHARED)
    batch = {{"inputs": rng.integers(1, 11, size=(2, 5)), "targets": rng.integers(1, 11, size=(2, 4))}}
    return LinenSide(model=module.Transformer(config=config), batch=batch,
                     loss=lambda out, batch: mean_square(out, batch),
                     inputs=lambda b: ((b["inputs"], b["targets"]), {{}}), train_kwargs={{}}, eval_kwargs={{}},
                     name="wmt/Transformer")
"""

# the trace spec's own config (one per model, shared with outside_corpus.py), not a second copy of it
OGBG_SPEC = """
def linen_side():
    import importlib.util
    from pathlib import Path

    loader = importlib.util.spec_from_file_location("_ogbg_trace_spec", TRACE_SPEC)
    spec = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(spec)
    return spec.linen_side(Path(MODEL_FILE))
""".replace("TRACE_SPEC", repr(str(TRACES / "ogbg_models.py")))


@dataclasses.dataclass
class Prepared:
    model_file: Path  # the copied example file that is migrated
    source: str  # where it came from, relative to the sdist
    notes: list[str] = dataclasses.field(default_factory=list)


def _copy_example(src: Path, folder: str, work: Path) -> Path:
    dst = work / "linen" / folder
    shutil.copytree(
        src / "examples" / folder, dst, ignore=shutil.ignore_patterns("*.png", "*.ipynb", "results")
    )
    return dst


def _defines_linen_class(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return any("nn.Module" in ast.unparse(b) and "nnx" not in ast.unparse(b) for b in node.bases)
    return False


def _markdown_cell_with(md: Path, needle: str) -> str:
    """The MyST ``{code-cell}`` (or ```python) block of ``md`` that contains ``needle``."""
    for block in re.findall(r"```(?:\{code-cell\}|python)[^\n]*\n(.*?)```", md.read_text(), re.S):
        if needle in block:
            return block
    raise FileNotFoundError(f"{md}: no code cell with {needle!r}")


def prepare_mnist(src: Path, work: Path) -> Prepared:
    example = src / "examples" / "mnist" / "train.py"
    if example.is_file() and _defines_linen_class(example, "CNN"):
        folder = _copy_example(src, "mnist", work)
        return Prepared(folder / "train.py", "examples/mnist/train.py")
    docs = src / "docs" / "quick_start.md"
    if not docs.is_file():
        raise FileNotFoundError(f"{example} defines no Linen CNN and {docs} is missing")
    cell = _markdown_cell_with(docs, "class CNN(nn.Module)")
    folder = work / "linen" / "mnist"
    folder.mkdir(parents=True)
    header = (
        '"""The Linen MNIST CNN, extracted at run time from the code cell of the Flax sdist\'s '
        'docs/quick_start.md."""\n\n'
    )
    (folder / "cnn.py").write_text(header + cell)
    note = "examples/mnist/train.py is NNX in this sdist; Linen CNN taken from docs/quick_start.md"
    return Prepared(folder / "cnn.py", "docs/quick_start.md (CNN cell)", [note])


def prepare_vae(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "vae", work) / "models.py", "examples/vae/models.py")


def prepare_imagenet(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "imagenet", work) / "models.py", "examples/imagenet/models.py")


def prepare_sst2(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "sst2", work) / "models.py", "examples/sst2/models.py")


def prepare_seq2seq(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "seq2seq", work) / "models.py", "examples/seq2seq/models.py")


def prepare_wmt(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "wmt", work) / "models.py", "examples/wmt/models.py")


def prepare_ppo(src: Path, work: Path) -> Prepared:
    return Prepared(_copy_example(src, "ppo", work) / "models.py", "examples/ppo/models.py")


def prepare_ogbg(src: Path, work: Path) -> Prepared:
    folder = _copy_example(src, "ogbg_molpcba", work)
    return Prepared(folder / "models.py", "examples/ogbg_molpcba/models.py", ["jraph installed for the run"])


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    title: str
    prepare: Callable[[Path, Path], Prepared]
    spec: str
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


CASES = {
    "mnist": Case("mnist", "MNIST CNN", prepare_mnist, MNIST_SPEC),
    "vae": Case("vae", "VAE", prepare_vae, VAE_SPEC),
    "imagenet": Case(
        "imagenet", "ImageNet ResNet", prepare_imagenet, IMAGENET_SPEC, single_device_batch_axis
    ),
    "sst2": Case("sst2", "SST-2 text classifier", prepare_sst2, SST2_SPEC),
    "ppo": Case("ppo", "PPO actor-critic", prepare_ppo, PPO_SPEC),
    "seq2seq": Case("seq2seq", "seq2seq LSTM", prepare_seq2seq, SEQ2SEQ_SPEC),
    "wmt": Case("wmt", "WMT encoder-decoder Transformer", prepare_wmt, WMT_SPEC.replace("SHARED", "False")),
    "wmt_tied": Case(  # one embedding shared by encoder, decoder and the logits: one NNX Variable
        "wmt_tied", "WMT Transformer, tied embeddings", prepare_wmt, WMT_SPEC.replace("SHARED", "True")
    ),
    "ogbg": Case(
        "ogbg", "ogbg-molpcba graph network", prepare_ogbg, OGBG_SPEC, lambda: pure_packages(("jraph",))
    ),
}


# ---- running one model -------------------------------------------------------------------------
def perturb(variables: Any, seed: int = 0) -> dict[str, Any]:
    """Move every variable away from its init; running variances stay positive.

    ``x + 0.5*std(x)*N(0,1)`` (``0.1*N(0,1)`` for constant leaves: zero biases, unit scales); a
    running variance is multiplied by ``exp(0.3*N(0,1))``. Done in NumPy: eager JAX would compile
    every small op separately.
    """
    import numpy as np
    from flax.core import unfreeze
    from flax.traverse_util import flatten_dict, unflatten_dict

    rng = np.random.default_rng(seed)
    out = {}
    for path, x in sorted(flatten_dict(unfreeze(variables)).items()):
        x = np.asarray(x)
        noise = rng.standard_normal(x.shape).astype(x.dtype)
        if path[0] == "batch_stats" and path[-1] == "var":
            out[path] = x * np.exp(0.3 * noise)
        else:
            std = float(np.std(x)) if x.size > 1 else 0.0
            out[path] = x + (0.5 * std if std > 0 else 0.1) * noise
    return unflatten_dict(out)


def init_variables(side: Any) -> Any:
    """``side.init_variables()`` under one ``jax.jit`` (eager init compiles op by op: seconds)."""
    import jax

    return jax.jit(side.init_variables)()


@dataclasses.dataclass
class ModelReport:
    model: str
    source: str = ""
    migrate_exit: int | None = None
    findings: list[str] = dataclasses.field(default_factory=list)  # formatted manual/error findings
    manual_rules: list[str] = dataclasses.field(default_factory=list)
    passed: bool | None = None  # None: the check did not run to a verdict
    leaves: int = 0
    failed_leaves: int = 0
    worst: str = ""
    worst_max_abs: float | None = None
    worst_tol: float | None = None
    error: str = ""  # "stage: Type: message" of the first stage that raised
    error_trace: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    out_dir: str = ""
    seconds: float = 0.0
    stage_seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.passed) and not self.error

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"ok": self.ok}


def _first_line(e: BaseException, work: Path | None = None) -> str:
    """``Type: first line`` of the innermost cause (wrappers only repeat it), work paths shortened."""
    while e.__cause__ is not None and str(e.__cause__) and str(e.__cause__) in str(e):
        e = e.__cause__
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0] if lines else ''}"
    items = [ln.strip()[2:] for ln in lines[1:] if ln.strip().startswith("- ")]
    if items:  # a list of problems (e.g. a ConversionError): name the first
        text += f"; first of {len(items)}: {items[0]}"
    if work is not None:
        text = text.replace(str(work) + "/", "")
    return text[:400]


def run_model(case: Case, src: Path, work: Path, unsafe_fixes: bool = False) -> ModelReport:
    """Every stage for one model; the first stage that raises is recorded and ends this model only."""
    from linen2nnx.equivalence import check
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.findings import Severity
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    report = ModelReport(case.name)
    t0 = time.perf_counter()
    stage, stage_t0 = "prepare", t0

    def enter(name: str) -> None:
        nonlocal stage, stage_t0
        now = time.perf_counter()
        report.stage_seconds[stage] = round(now - stage_t0, 3)
        stage, stage_t0 = name, now

    stubbed: list[str] = []
    try:
        with stub_missing_packages() as stubbed, case.context():
            prepared = case.prepare(src, work)
            report.source, report.notes = prepared.source, list(prepared.notes)
            spec_path = work / "linen_spec.py"
            spec_path.write_text(
                SPEC_HEADER.format(title=case.title, model_file=str(prepared.model_file)) + case.spec.format()
            )
            spec_ref = f"{spec_path}:linen_side"
            enter("trace")
            side = load_linen_side(spec_ref)
            trace = trace_linen(side, spec_ref)
            enter("migrate")
            out_dir = work / "nnx"
            report.out_dir = str(out_dir)
            result = migrate_paths(
                [prepared.model_file], Mode.OUT_DIR, out_dir=out_dir, trace=trace, unsafe_fixes=unsafe_fixes
            )
            report.migrate_exit = result.exit_code()
            flagged = [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
            report.findings = [f.format_text() for f in flagged]
            report.manual_rules = sorted({f.rule for f in flagged if f.severity is Severity.MANUAL})
            enter("pair spec")
            pair_spec = write_pair_spec(out_dir, trace, result)
            pair = load_pair(str(pair_spec))
            enter("check")
            parity = check(
                pair,
                perturb(init_variables(side)),
                tolerances={"base": {"float32": TOL_FACTOR, "float64": TOL_FACTOR}},
            )
            enter("done")
            report.passed = parity.passed
            report.leaves, report.failed_leaves = len(parity.leaves), len(parity.failures)
            worst = parity.worst()
            if worst is not None:
                report.worst = f"{worst.check}:{worst.path}" + (f" ({worst.note})" if worst.note else "")
                report.worst_max_abs, report.worst_tol = worst.max_abs, worst.tol
    except Exception as e:
        report.error = f"{stage}: {_first_line(e, work)}"
        report.error_trace = traceback.format_exc()
        enter("failed")
    if stubbed:
        tops = sorted({n.split(".")[0] for n in stubbed})
        report.notes.append(f"not installed, stubbed for import: {', '.join(tops)}")
    report.seconds = time.perf_counter() - t0
    return report


def run_models(
    names: list[str] | tuple[str, ...], src: Path, work: Path, unsafe_fixes: bool = False
) -> list[ModelReport]:
    reports = []
    for name in names:
        model_work = work / name
        model_work.mkdir(parents=True, exist_ok=True)
        reports.append(run_model(CASES[name], src, model_work, unsafe_fixes))
    return reports


# ---- output ------------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def render_table(reports: list[ModelReport], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, show_lines=True)
    for col in (
        "model",
        "source",
        "migrate exit",
        "manual findings",
        "parity",
        "worst leaf",
        "max|Δ| / tol",
        "first error",
    ):
        table.add_column(col, overflow="fold")
    for r in reports:
        rules = ", ".join(r.manual_rules)
        manual = f"{sum('[manual]' in f for f in r.findings)}" + (f" ({rules})" if rules else "")
        verdict = (
            ("[green]PASS[/]" if r.passed else "[red]FAIL[/]") if r.passed is not None else "[yellow]—[/]"
        )
        if r.passed is not None:
            verdict += f"\n{r.leaves - r.failed_leaves}/{r.leaves} leaves"
        ratio = "-"
        if r.worst_max_abs is not None and r.worst_tol:
            ratio = f"{_fmt(r.worst_max_abs)} / {_fmt(r.worst_tol)}\n= {r.worst_max_abs / r.worst_tol:.3g}"
        worst = r.worst or "-"
        if r.worst_max_abs == 0.0 and r.passed:
            worst = f"none: all {r.leaves} leaves bit-identical\n(first: {r.worst})"
        table.add_row(
            r.model,
            r.source,
            "-" if r.migrate_exit is None else str(r.migrate_exit),
            manual,
            verdict,
            worst,
            ratio,
            r.error or "-",
        )
    return table


def chosen_models(parser: argparse.ArgumentParser, models: str, known: tuple[str, ...]) -> list[str]:
    """The comma-separated ``--models``; a usage error names the unknown ones."""
    names = [n.strip() for n in models.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {known}")
    return names


def work_folder(stack: contextlib.ExitStack, keep: Path | None, prefix: str) -> Path:
    """``keep`` (created, kept), else a temporary folder removed when ``stack`` closes."""
    if keep:
        work = keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
        return work
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))


def print_notes(console: Any, reports: list[ModelReport], verbose: bool) -> None:
    """Each model's notes; with ``verbose`` also its findings and the traceback of a failed stage."""
    for r in reports:
        for note in r.notes:
            console.print(f"[dim]{r.model}: {note}[/]")
        if verbose:
            for f in r.findings:
                console.print(f"  {f}", markup=False, highlight=False)
            if r.error_trace:
                console.print(r.error_trace, markup=False, highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--flax-src",
        help="extracted Flax sdist (or a folder holding one, or the .tar.gz); "
        "default: pip download the installed version's sdist",
    )
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {MODELS}")
    parser.add_argument("--json", type=Path, help="write the per-model results here")
    parser.add_argument("--keep", type=Path, help="work in this folder (kept) instead of a temp dir")
    parser.add_argument(
        "--require-pass", action="store_true", help="exit 1 unless every model reaches parity"
    )
    parser.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="migrate with unsafe fixes (e.g. traced literal feature sizes); off by default",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print findings and tracebacks")
    args = parser.parse_args(argv)
    names = chosen_models(parser, args.models, tuple(CASES))

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    with contextlib.ExitStack() as stack:
        work = work_folder(stack, args.keep, "linen2nnx-outside-")
        try:
            src = find_flax_src(args.flax_src, work / "flax-sdist")
        except SourceUnavailable as e:
            console.print(f"[red]no Flax sources:[/] {e}")
            return 1 if args.require_pass else 0
        reports = run_models(names, src, work / "models", args.unsafe_fixes)
        title = f"Flax {installed_flax_version()} examples ({src.name}) → NNX: migrate + parity"
        console.print(render_table(reports, title))
        print_notes(console, reports, args.verbose)
        if args.json:
            payload = {
                "flax": installed_flax_version(),
                "flax_src": str(src),
                "tol_factor": TOL_FACTOR,
                "models": [r.to_json() for r in reports],
            }
            args.json.write_text(json.dumps(payload, indent=2) + "\n")
    failed = [r.model for r in reports if not r.ok]
    return 1 if args.require_pass and failed else 0


if __name__ == "__main__":
    sys.exit(main())
