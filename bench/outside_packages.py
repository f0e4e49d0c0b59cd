"""Real Linen packages from PyPI, end to end: ``migrate --trace`` of the package, ``convert``, ``check``.

    python bench/outside_packages.py [--models gpt2] [--src DIR] [--keep DIR] [--json FILE]
                                     [--require-pass] [-v]

Where ``bench/outside_parity.py`` runs single files of the Flax examples, this script runs models that
live in packages written by others, whose files import each other relatively (``from . import ops``)
and build layers through module-level factory functions (``ops.linear(...)(x)``). For each model the
package's sdist is fetched with ``pip download --no-deps --no-binary :all:`` (``--src`` takes a folder
of already extracted sdists instead), the package is copied into a work folder, and then, with no
edit of its code:

1. the Linen model (a tiny config: the trace spec in ``bench/outside_traces/``, which
   ``bench/outside_corpus.py`` uses too) is traced on an example batch;
2. the package folder is migrated with that trace (``Mode.OUT_DIR``), keeping its structure;
3. the pair spec the migration writes imports the migrated package beside the Linen one;
4. ``check`` compares forward (eval and train), loss and every gradient with perturbed weights,
   each leaf within ``1e-5 * (1 + max|ref|)``, fp32.

The environment, not the code, is adapted where a package predates this JAX: its download-only
dependencies (``h5py``, ``requests``, ...) are stubbed for import, and APIs that JAX has since removed
get a shim that both sides run under (named per model in the table's notes).

The models:

- ``griffin``: recurrentgemma 1.0.1 ``Griffin`` (width 8, a recurrent and a local-attention residual
  block, remat of each block, vocabulary 11), tokens (2, 6) with their positions, logits compared. Its
  blocks are built in ``setup()`` by a comprehension through a local that ``gradient_checkpointing``
  wraps in ``nn.remat``; the block kind is chosen by a ``match`` on an enum of ``common.py``, a module
  the migration leaves alone and that both sides share.
  Its pure-Python dependencies (einops, jaxtyping, typeguard) are pip-installed into the work folder.
- ``gpt2``: flaxmodels 0.1.3 ``GPT2Model`` (2 layers, width 12, 2 heads, vocabulary 11), token ids
  (2, 5). Its layers come from ``ops.linear`` / ``ops.layer_norm`` / ``ops.embedding`` (factory
  functions of another file); the token embedding is built only when no ``input_embds`` is given,
  which ``--unsafe-fixes`` builds always, as the traced call did (``L2N-MOD-009``). Shim:
  ``jnp.reshape(newshape=...)`` (removed from JAX).
- ``resnet18``: flaxmodels 0.1.3 ``ResNet`` (``architecture='resnet18'``, ``pretrained=None``: random
  init, 5 classes), images (2, 16, 16, 3), logits compared, ``batch_stats`` updated in train mode. Its
  normalisation goes through ``ops.batch_norm(x, train=..., params=...)``, a module-level function of
  another file that builds the package's own ``BatchNorm`` (from pretrained ``params`` when given) and
  applies it; each call is replayed in its block, the ``BatchNorm``'s ``x_shape`` comes from the
  block's own width in each traced instance, and the four stages' blocks, whose input is the previous
  block's ``out_features``, are appended one by one. The ``Bottleneck`` blocks, which resnet18 does not
  build, keep their unknown ``x_shape`` findings.
- ``vgg16``: flaxmodels 0.1.3 ``VGG16`` (random weights, no head, inputs normalised), images
  (2, 32, 32, 3). Its layers are built by helper methods (``self._conv_block(x, features=64,
  num_layers=2, block_num=1, ...)``) that name them ``f'conv{block_num}_{l + 1}'`` in a loop; each call
  is replayed in ``__call__`` and every layer becomes an attribute of its Linen name. The head's input
  size is not traced (no head is built), so its constructor argument defaults to None.

Exit status: 0, unless ``--require-pass`` is given and a model did not reach parity (then 1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from outside_parity import (
    TOL_FACTOR,
    ModelReport,
    SourceUnavailable,
    _first_line,
    _safe_extract,
    chosen_models,
    init_variables,
    perturb,
    pip_download_sdist,
    pip_install_pure,
    print_notes,
    render_table,
    stub_missing_packages,
    work_folder,
)

# imported by flaxmodels only to fetch pretrained weights, which no check here uses
FLAXMODELS_DOWNLOAD_ONLY = ("h5py", "requests", "tqdm", "regex", "filelock")


@contextlib.contextmanager
def flaxmodels_environment(newshape: bool = False) -> Iterator[None]:
    """What flaxmodels' trace specs run under: its download-only imports stubbed and, for the models
    that still call it, ``jnp.reshape(newshape=)`` accepted."""
    with (
        stub_missing_packages(FLAXMODELS_DOWNLOAD_ONLY),
        reshape_newshape() if newshape else contextlib.nullcontext(),
    ):
        yield


@contextlib.contextmanager
def reshape_newshape() -> Iterator[None]:
    """``jnp.reshape(a, newshape=...)``, removed from JAX, accepted again while active (both sides)."""
    import jax.numpy as jnp

    original = jnp.reshape

    def reshape(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, **kw: Any) -> Any:
        return original(a, shape if shape is not None else newshape, order=order, **kw)

    jnp.reshape = reshape
    try:
        yield
    finally:
        jnp.reshape = original


TRACES = Path(__file__).resolve().parent / "outside_traces"


def spec_from_trace(trace_file: str, example: str, function: str = "linen_side") -> str:
    """The Linen spec written beside the copied package: it builds the Linen side with ``function`` of
    the trace spec ``bench/outside_traces/<trace_file>`` (one tiny config per model, shared with
    ``bench/outside_corpus.py``), given ``example``, the traced file's path below the spec's folder."""
    bench = TRACES.parent
    return f'''"""Linen side from bench/outside_traces/{trace_file}, written by bench/outside_packages.py."""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the copied package
sys.path.insert(0, {str(bench)!r})  # the helpers the trace spec imports
_loader = importlib.util.spec_from_file_location("_outside_trace_spec", {str(TRACES / trace_file)!r})
_trace_spec = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(_trace_spec)


def linen_side():
    return _trace_spec.{function}(HERE / {example!r})
'''


@dataclasses.dataclass(frozen=True)
class Package:
    name: str
    requirement: str  # what pip downloads: flaxmodels==0.1.3
    package: str  # the import package inside the sdist
    migrate: str | tuple[str, ...]  # what is migrated: folders / files (relative to the package's parent)
    spec: str
    stubs: tuple[str, ...] = ()  # download-only dependencies, stubbed for import
    shims: tuple[tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]], ...] = ()
    unsafe_fixes: bool = False
    notes: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # pure-Python dependencies pip installs into the work folder


MODELS = {
    "gpt2": Package(
        "gpt2",
        "flaxmodels==0.1.3",
        "flaxmodels",
        "flaxmodels/gpt2",
        spec_from_trace("flaxmodels_gpt2.py", "flaxmodels/gpt2/gpt2.py"),
        stubs=FLAXMODELS_DOWNLOAD_ONLY,
        shims=(("jnp.reshape(newshape=)", reshape_newshape),),
        unsafe_fixes=True,
        notes=("--unsafe-fixes: the token embedding is built only when input_embds is None (L2N-MOD-009)",),
    ),
    "vgg16": Package(
        "vgg16",
        "flaxmodels==0.1.3",
        "flaxmodels",
        "flaxmodels/vgg",
        spec_from_trace("flaxmodels_vgg.py", "flaxmodels/vgg/vgg.py"),
        stubs=FLAXMODELS_DOWNLOAD_ONLY,
        notes=("no head (include_head=False: the head needs 224x224 inputs), 32x32 images, normalize on",),
    ),
    "resnet18": Package(
        "resnet18",
        "flaxmodels==0.1.3",
        "flaxmodels",
        "flaxmodels/resnet",
        spec_from_trace("flaxmodels_resnet.py", "flaxmodels/resnet/resnet.py"),
        stubs=FLAXMODELS_DOWNLOAD_ONLY,
    ),
    "griffin": Package(
        "griffin",
        "recurrentgemma==1.0.1",
        "recurrentgemma",
        "recurrentgemma/jax",
        spec_from_trace("recurrentgemma_griffin.py", "recurrentgemma/jax/griffin.py"),
        stubs=("sentencepiece",),
        requires=("einops<1", "jaxtyping<1", "typeguard<3", "wadler_lindig"),
    ),
}


def sdist_package(requirement: str, package: str, scratch: Path, src: Path | None) -> Path:
    """The extracted import package ``package`` of ``requirement``'s sdist (from ``src`` if it holds
    one, else ``pip download``)."""
    name, _, version = requirement.partition("==")
    if src is not None:
        for pattern in (f"{name}-{version or '*'}/{package}", f"{name}-{version or '*'}/src/{package}"):
            for cand in sorted(src.glob(pattern)):
                return cand
    archive = pip_download_sdist(requirement, scratch / "download")
    _safe_extract(archive, scratch / "src", lambda member: True)
    found = sorted((scratch / "src").glob(f"*/{package}")) or sorted(
        (scratch / "src").glob(f"*/src/{package}")
    )
    if not found:
        raise SourceUnavailable(f"{archive.name}: no {package}/ folder inside")
    return found[0]


def run_package(model: Package, src: Path | None, work: Path) -> ModelReport:
    """Every stage for one model; the first stage that raises is recorded and ends this model only."""
    from linen2nnx.equivalence import check
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.findings import Severity
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side, load_pair

    report = ModelReport(model.name, source=model.requirement, notes=list(model.notes))
    t0 = time.perf_counter()
    stage = "download"
    try:
        package = sdist_package(model.requirement, model.package, work / "sdist", src)
        linen = work / "linen"
        shutil.copytree(package, linen / model.package)
        spec_path = linen / "linen_spec.py"
        spec_path.write_text(model.spec)
        stage = "dependencies"
        paths = pip_install_pure(model.requires, work / "deps")
        with contextlib.ExitStack() as stack:
            sys.path[:0] = paths
            stack.callback(lambda: [sys.path.remove(p) for p in paths])
            stubbed = stack.enter_context(stub_missing_packages(model.stubs))
            for _, shim in model.shims:
                stack.enter_context(shim())
            stage = "trace"
            ref = f"{spec_path}:linen_side"
            side = load_linen_side(ref)
            trace = trace_linen(side, ref)
            stage = "migrate"
            out_dir = work / "nnx"
            report.out_dir = str(out_dir)
            targets = (model.migrate,) if isinstance(model.migrate, str) else model.migrate
            result = migrate_paths(
                [linen / target for target in targets],
                Mode.OUT_DIR,
                out_dir=out_dir,
                trace=trace,
                unsafe_fixes=model.unsafe_fixes,
            )
            report.migrate_exit = result.exit_code()
            flagged = [f for f in result.findings if f.severity in (Severity.MANUAL, Severity.ERROR)]
            report.findings = [f.format_text() for f in flagged]
            report.manual_rules = sorted({f.rule for f in flagged if f.severity is Severity.MANUAL})
            stage = "pair spec"
            pair = load_pair(str(write_pair_spec(out_dir, trace, result)))
            stage = "check"
            tolerances = {"base": {"float32": TOL_FACTOR, "float64": TOL_FACTOR}}
            parity = check(pair, perturb(init_variables(side)), tolerances=tolerances)
            stage = "done"
        report.passed = parity.passed
        report.leaves, report.failed_leaves = len(parity.leaves), len(parity.failures)
        worst = parity.worst()
        if worst is not None:
            report.worst = f"{worst.check}:{worst.path}"
            report.worst_max_abs, report.worst_tol = worst.max_abs, worst.tol
        if stubbed:
            report.notes.append(f"not installed, stubbed for import: {', '.join(sorted(set(stubbed)))}")
        report.notes += [f"shim: {name}" for name, _ in model.shims]
    except Exception as e:
        report.error = f"{stage}: {_first_line(e, work)}"
        report.error_trace = traceback.format_exc()
    report.seconds = time.perf_counter() - t0
    return report


def run_cli(
    argv: list[str] | None, description: str, models: dict[str, Package], title: str, prefix: str
) -> int:
    """The command line of a bench over ``models`` (this one's, bench/outside_transformers.py's): run
    each chosen model's stages, print the table and notes, write ``--json``; the exit status."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default=",".join(models), help=f"comma-separated subset of {tuple(models)}"
    )
    parser.add_argument("--src", type=Path, help="a folder of extracted sdists (default: pip download)")
    parser.add_argument("--json", type=Path, help="write the per-model results here")
    parser.add_argument("--keep", type=Path, help="work in this folder (kept) instead of a temp dir")
    parser.add_argument(
        "--require-pass", action="store_true", help="exit 1 unless every model reaches parity"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print findings and tracebacks")
    args = parser.parse_args(argv)
    names = chosen_models(parser, args.models, tuple(models))

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    with contextlib.ExitStack() as stack:
        work = work_folder(stack, args.keep, prefix)
        reports = [run_package(models[n], args.src, work / n) for n in names]
        console.print(render_table(reports, title))
        print_notes(console, reports, args.verbose)
        if args.json:
            args.json.write_text(json.dumps({"models": [r.to_json() for r in reports]}, indent=2) + "\n")
    failed = [r.model for r in reports if not r.ok]
    return 1 if args.require_pass and failed else 0


def main(argv: list[str] | None = None) -> int:
    title = "Linen packages from PyPI → NNX: migrate --trace + convert + check"
    return run_cli(argv, __doc__.split("\n\n")[0], MODELS, title, "linen2nnx-packages-")


if __name__ == "__main__":
    sys.exit(main())
