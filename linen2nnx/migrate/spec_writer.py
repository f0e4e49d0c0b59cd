"""Write a model pair spec next to migrated output, so convert / check run with no glue code.

Written when ``migrate --trace SPEC --out-dir DIR`` migrated the traced model's class: the spec
pairs the Linen side named by SPEC with the migrated class, filling the constructor arguments the
migration added (input feature sizes) from the example batch.
"""

from __future__ import annotations

import os
from pathlib import Path

from linen2nnx.errors import L2NError
from linen2nnx.io_utils import atomic_write_text
from linen2nnx.migrate.discovery import module_name_for
from linen2nnx.migrate.engine import MigrationResult
from linen2nnx.migrate.trace import Trace
from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME
from linen2nnx.spec import WRITTEN_SPEC

SPEC_FILENAME = WRITTEN_SPEC

TEMPLATE = '''"""Model pair spec written by `linen2nnx migrate --trace`: {root} (Linen) and its migrated NNX twin.

Use it with every stage, e.g. `linen2nnx check --spec {spec_name}:pair --ckpt LINEN_CKPT`.
Edit freely: it is ordinary Python.
"""

from pathlib import Path

from linen2nnx.errors import SpecError
from linen2nnx.isolated_import import import_migrated
from linen2nnx.spec import ModelPair, input_leaf, load_linen_side, nnx_ctor_kwargs

HERE = Path(__file__).resolve().parent
LINEN_SPEC = {linen_spec!r}
# the migrated modules by their import names (imported as a package, beside the Linen original)
MIGRATED_MODULE = {module!r}
MIGRATED_FILES = {files!r}
SOURCE_ROOTS = {roots!r}  # where the modules of the package that the run left alone are found
NNX_CLASS = {nnx_class!r}
# constructor arguments the migration added -> index of the positional input whose last axis they are
INPUT_FEATURE_ARGS = {input_args!r}
# ... and those whose value is that input's whole shape (parameters sized from several input axes)
INPUT_SHAPE_ARGS = {shape_args!r}
# ... and those that are the last axis of a leaf of an input (`.nodes` of a NamedTuple of arrays)
INPUT_LEAF_ARGS = {leaf_args!r}
# ... and those no config expression explains, as the trace saw them: right for the traced model's
# config (the Linen side below), not for another one
TRACED_ARGS = {traced!r}
UNRESOLVED_ARGS = {unresolved!r}
# classes kept as Linen behind nnx.bridge.ToNNX create their variables on a first call
LAZY_INIT = {lazy_init!r}


def migrated_module():
    """The migrated module that defines NNX_CLASS, imported as part of its package."""
    files = {{name: HERE / path for name, path in MIGRATED_FILES.items()}}
    return import_migrated(MIGRATED_MODULE, files, search_paths=SOURCE_ROOTS)


def pair() -> ModelPair:
    if UNRESOLVED_ARGS:
        raise SpecError(f"{{__file__}}: give values for {{UNRESOLVED_ARGS}} (see the migration report)")
    linen = load_linen_side(LINEN_SPEC)
    nnx_module = migrated_module()
    nnx_class = getattr(nnx_module, NNX_CLASS)
    args, _ = linen.call_args(train=False)
    kwargs = nnx_ctor_kwargs(linen.model, nnx_module)  # Linen classes in the config: their NNX twins
    kwargs.update({{  # an optional input the example leaves out has no size (its argument defaults to None)
        name: int(args[index].shape[-1])
        for name, index in INPUT_FEATURE_ARGS.items()
        if index < len(args) and args[index] is not None
    }})
    kwargs.update({{name: tuple(args[index].shape) for name, index in INPUT_SHAPE_ARGS.items()}})
    for name, (index, accessor) in INPUT_LEAF_ARGS.items():
        kwargs[name] = int(input_leaf(args[index], accessor).shape[-1])
    kwargs.update(TRACED_ARGS)

    def build(rngs):
        model = nnx_class(**kwargs, rngs=rngs)
        if LAZY_INIT:
            from flax import nnx

            call_args, call_kwargs = linen.call_args(train=False)
            nnx.bridge.lazy_init(model, *call_args, **call_kwargs)
        return model

    return ModelPair(
        linen=linen,
        nnx_factory=build,
        name_map=HERE / {name_map!r},
        source=str(Path(__file__)),
    )
'''


def write_pair_spec(
    out_dir: Path, trace: Trace, result: MigrationResult, name_map: Path | None = None
) -> Path:
    """``linen2nnx_spec.py`` in ``out_dir``: the traced Linen side paired with its migrated class, the
    name map read from ``name_map`` (default: beside the spec), named relative to the spec."""
    key = result.name_map.find_class(trace.root_class, trace.root_module)
    if key is None:
        raise L2NError(f"--trace: class {trace.root_class} of {trace.spec_ref} was not migrated by this run")
    entry = result.name_map.classes[key]
    file_result = next((r for r in result.files if r.rel == entry.file), None)
    if file_result is None or file_result.target is None:
        raise L2NError(f"--trace: the migrated {entry.file} was not written")
    input_args = {a: int(how.split(":")[1]) for a, how in entry.new_args.items() if how.startswith("input:")}
    shape_args = {
        a: int(how.split(":")[1]) for a, how in entry.new_args.items() if how.startswith("input_shape:")
    }
    leaf_args = {
        a: (int(index), accessor)
        for a, how in entry.new_args.items()
        if how.startswith("input_leaf:")
        for index, _, accessor in [how.removeprefix("input_leaf:").partition(":")]
    }
    summary = file_result.summaries.get(key)
    known = dict(summary.traced_sizes) if summary is not None and not entry.bridge else {}
    traced = {a: v for a, v in known.items() if a in entry.new_args}
    unresolved = sorted(
        a
        for a, how in entry.new_args.items()
        if not how.startswith(("input:", "input_shape:", "input_leaf:"))
        and how != "unresolved_if"  # None: not built
        and not entry.bridge  # a class kept as Linen: its wrapper takes the sizes and ignores them
        and a not in traced
    )
    linen_spec = trace.spec_ref
    target_part, sep, func = linen_spec.rpartition(":")
    probe = target_part if sep else linen_spec
    if probe.endswith(".py") or Path(probe).is_file():
        linen_spec = str(Path(probe).resolve()) + (f":{func}" if sep else "")
    spec_path = Path(out_dir) / SPEC_FILENAME
    files, roots = _migrated_modules(Path(out_dir), result)
    text = TEMPLATE.format(
        root=trace.root_class,
        spec_name=SPEC_FILENAME,
        linen_spec=linen_spec,
        module=file_result.module or module_name_for(file_result.path),
        files=files,
        roots=roots,
        nnx_class=trace.root_class,
        input_args=input_args,
        unresolved=unresolved,
        traced=traced,
        shape_args=shape_args,
        leaf_args=leaf_args,
        lazy_init=any(c.bridge for c in result.name_map.classes.values()),
        name_map=os.path.relpath(name_map, out_dir) if name_map is not None else NAME_MAP_FILENAME,
    )
    atomic_write_text(spec_path, text)
    result.extra_outputs.append(spec_path)
    return spec_path


def _migrated_modules(out_dir: Path, result: MigrationResult) -> tuple[dict[str, str], list[str]]:
    """Each written file's import name -> its path under ``out_dir``; and the folders holding the top
    packages of the sources (the modules of a package the run did not include are found there)."""
    files: dict[str, str] = {}
    roots: list[str] = []
    for r in result.files:
        if r.target is None:
            continue
        name = r.module or module_name_for(r.path)  # a name several files share: the run's longer one
        if not name:
            continue
        try:
            files[name] = str(r.target.resolve().relative_to(out_dir.resolve()))
        except ValueError:
            continue
        depth = len(name.split(".")) + (1 if r.path.name == "__init__.py" else 0)
        root = str(r.path.resolve().parents[depth - 1])
        if root not in roots:
            roots.append(root)
    return files, roots
