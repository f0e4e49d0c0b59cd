"""Does a class that ``migrate`` reports clean actually build?

``bench/outside_corpus.py`` counts a class *clean* when it was converted with no manual finding. That
is a claim about the written code, and this module tests it: every clean class of a migrated tree is
imported from the migrated files and constructed under ``nnx.eval_shape`` (shapes only, nothing
computed), in a fresh Python process per tree so the Linen copy of the same package is never what
gets imported.

A clean class is constructed with

- its defaults, when its ``__init__`` needs nothing but ``rngs`` (or nothing at all);
- else the config of an instance the trace of that folder saw (``Trace.instances``: the Linen
  dataclass fields), when that config has only plain values (numbers, strings, booleans, None,
  tuples of them, dtypes, module-level functions) and gives every argument the NNX ``__init__``
  requires;
- else it counts as built when a class built as above holds a module of it (``nnx.iter_graph`` of
  the abstract module): its parent's ``__init__`` built it with the sizes the migration wired in.

Anything else is *unchecked* (no config is known for it, or it is defined inside a function, out of
reach), never counted as built. The outcome of
each class is ``built``, ``failed`` (with the exception: a clean class that does not build is the
silent failure this tool must never produce), ``blocked`` (it failed inside a class that is not clean,
so the report already names the place), ``abstract`` (an ``abc`` base, abstract in Linen too),
``unchecked`` or ``unimportable`` (the migrated module
does not import here; when the Linen original does not import either, that is the environment — a
dependency this machine lacks — and it is counted apart from the migrated module failing to import).

    python bench/clean_builds.py --worker JOB.json     # what outside_corpus runs per tree
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

PLAIN = (int, float, str, bool, type(None))


@dataclasses.dataclass
class BuildResult:
    file: str  # relative to the tree
    cls: str
    status: str  # built | failed | unchecked | unimportable | environment
    detail: str = ""


def plain_config(config: Mapping[str, Any], keep_unknown: bool = False) -> dict[str, Any] | None:
    """``config`` as JSON the worker can rebuild (see :func:`_decode`), or None when a value is not
    plain: numbers, strings, booleans, None, tuples and lists of them, dtypes (``jnp.float32``),
    importable module-level functions (``nn.relu``), enum members and config objects (dataclasses of an
    importable class, ``SimpleNamespace``) of plain fields are; a module class, a closure are not.
    ``keep_unknown``: such a value is marked instead (``{"__unknown__": type}``); the worker leaves
    the parameter at its default when it has one (an initializer closure rarely changes a shape),
    and does not use the config when it has none."""
    out = {}
    for key, value in config.items():
        encoded = _encode(value)
        if encoded is _UNKNOWN:
            if not keep_unknown:
                return None
            encoded = {"__unknown__": type(value).__name__}
        out[key] = encoded
    return out


def _unknown(value: Any) -> bool:
    return isinstance(value, dict) and "__unknown__" in value


_UNKNOWN = object()


def _encode(value: Any) -> Any:
    import numpy as np

    if isinstance(value, PLAIN):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":  # `np.clip(...)` of an int field
        return value.item()
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):  # a NamedTuple is a config
        items = [_encode(v) for v in value]
        return _UNKNOWN if any(i is _UNKNOWN for i in items) else {"__tuple__": items}
    try:
        if isinstance(value, (np.dtype, type)) and np.dtype(value).kind != "O":  # any class is dtype object
            return {"__dtype__": np.dtype(value).name}
    except (TypeError, ValueError):  # a type that is no dtype
        pass
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if callable(value) and module and qualname and "<" not in qualname and not isinstance(value, type):
        return {"__ref__": f"{module}:{qualname}"}
    return _encode_object(value)


def _encode_object(value: Any) -> Any:
    """Config objects: an enum member, an instance of an importable dataclass or NamedTuple
    (``GriffinConfig``) and a ``SimpleNamespace`` are rebuilt from their fields, when every field is
    plain itself."""
    import dataclasses
    import enum
    from types import SimpleNamespace

    if isinstance(value, type):  # a class (a Linen module class is a dataclass too): not a config
        return _UNKNOWN
    kind = type(value)
    ref = f"{kind.__module__}:{kind.__qualname__}"
    if isinstance(value, enum.Enum) and "<" not in ref:
        return {"__enum__": ref, "name": value.name}
    if isinstance(value, SimpleNamespace):
        fields = vars(value)
    elif dataclasses.is_dataclass(value) and "<" not in ref:
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    elif isinstance(value, tuple) and hasattr(value, "_fields") and "<" not in ref:
        fields = value._asdict()
    else:
        return _UNKNOWN
    encoded = {k: _encode(v) for k, v in fields.items()}
    if any(v is _UNKNOWN for v in encoded.values()):
        return _UNKNOWN
    return {"__object__": None if isinstance(value, SimpleNamespace) else ref, "fields": encoded}


def _imported(ref: str) -> Any:
    import importlib

    module, qualname = ref.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _decode(value: Any) -> Any:
    from types import SimpleNamespace

    import jax.numpy as jnp

    if isinstance(value, dict) and "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if isinstance(value, dict) and "__dtype__" in value:
        return jnp.dtype(value["__dtype__"])
    if isinstance(value, dict) and "__ref__" in value:
        return _imported(value["__ref__"])
    if isinstance(value, dict) and "__enum__" in value:
        return getattr(_imported(value["__enum__"]), value["name"])
    if isinstance(value, dict) and "__object__" in value:
        fields = {k: _decode(v) for k, v in value["fields"].items()}
        return (
            SimpleNamespace(**fields)
            if value["__object__"] is None
            else _imported(value["__object__"])(**fields)
        )
    return value


def check_tree(
    root: Path,
    clean: Mapping[str, Iterable[str]],
    configs: Mapping[str, list[dict[str, Any]]] | None = None,
    linen_root: Path | None = None,
    package: str | None = None,
    search_paths: Iterable[str] = (),
    timeout: float = 600.0,
) -> list[BuildResult]:
    """Build every clean class (``file -> class names``, files relative to ``root``, the migrated
    tree) in worker processes, ``FILES_PER_WORKER`` files each; ``configs``: class name -> traced
    Linen configs; ``linen_root``: the Linen tree, imported when a migrated module fails to import,
    to tell the environment apart;
    ``package``: the name a tree with an ``__init__.py`` is imported as (default: its folder's name);
    ``search_paths``: more of ``sys.path`` (where the corpus's own dependencies are installed)."""
    job = {
        "root": str(root),
        "linen_root": str(linen_root) if linen_root else None,
        "search_paths": list(search_paths),
        "package": package or root.name,
        "clean": {f: sorted(c) for f, c in clean.items() if c},
        "configs": {
            k: [c for c in (plain_config(x, keep_unknown=True) for x in v) if c is not None]
            for k, v in (configs or {}).items()
        },
    }
    if not job["clean"]:
        return []
    files = list(job["clean"])
    if len(files) > FILES_PER_WORKER:  # one process per chunk: a few hundred models at once outgrow memory
        return [
            result
            for start in range(0, len(files), FILES_PER_WORKER)
            for result in _run_worker(
                dict(job, clean={f: job["clean"][f] for f in files[start : start + FILES_PER_WORKER]}),
                timeout,
            )
        ]
    return _run_worker(job, timeout)


FILES_PER_WORKER = 20
"""Files whose clean classes one worker process builds (the files of one folder sit together)."""


def _run_worker(job: dict[str, Any], timeout: float) -> list[BuildResult]:
    with tempfile.TemporaryDirectory(prefix="l2n-builds-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        try:
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(job_path), str(out_path)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            stderr = proc.stderr
        except subprocess.TimeoutExpired:
            stderr = f"timed out after {timeout:.0f} s"
        if not out_path.exists():
            detail = (stderr.strip().splitlines() or ["no output"])[-1]
            return [
                BuildResult(f, c, "failed", f"worker died: {detail}")
                for f, cs in job["clean"].items()
                for c in cs
            ]
        return [BuildResult(**r) for r in json.loads(out_path.read_text())]


def summary(results: Iterable[BuildResult]) -> Counter:
    return Counter(r.status for r in results)


# ---- the worker: runs in its own process ------------------------------------------------------------
STUBS = ("h5py", "requests", "tqdm", "regex", "filelock", "sentencepiece")
"""Download-only dependencies of the corpora, stubbed for import when absent (besides
``outside_parity.STUB_PACKAGES``): model classes never use them."""


def _module_name(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import(root: Path, rel: str) -> Any:
    """Import ``rel`` of the tree at ``root``: as part of the package ``root`` is (named like its
    folder) when it has an ``__init__.py``; else as a loose file whose folder is first on
    ``sys.path``, after dropping the modules other folders of the tree put in ``sys.modules`` (so two
    folders' ``models.py`` are never mixed up)."""
    import hashlib
    import importlib
    import importlib.util

    if (root / "__init__.py").exists():
        return importlib.import_module(f"{root.name}.{_module_name(rel)}")
    path, folder = root / rel, str((root / rel).parent)
    for key, mod in list(sys.modules.items()):
        file = str(getattr(mod, "__file__", None) or "")
        if file.startswith(str(root)) and str(Path(file).parent) != folder:
            del sys.modules[key]
    sys.path.insert(0, folder)
    name = "_l2n_build_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _required(params: Mapping[str, Any]) -> list[str]:
    """The parameters of an ``__init__`` (``inspect.signature(...).parameters``) a call must give."""
    import inspect

    return [
        p.name
        for p in list(params.values())[1:]
        if p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name != "rngs"
    ]


def _failing_class(error: BaseException) -> type | None:
    """The class of the innermost NNX module whose method was running when ``error`` was raised."""
    from flax import nnx

    found, tb = None, error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nnx.Module):
            found = type(owner)
        tb = tb.tb_next
    return found


def _build(
    cls: type, configs: list[dict[str, Any]], reached: dict[type, str], clean_names: set[str]
) -> tuple[str, str]:
    """(status, detail) of constructing ``cls`` under ``nnx.eval_shape``; the classes of the modules
    the built one holds go into ``reached`` (class -> the class that built it). A failure inside a
    class that is not clean (``clean_names``: it has a manual finding, and a TODO marker at the
    place) is ``blocked``, not ``failed``: the report already points at it."""
    import inspect

    from flax import nnx

    if inspect.isabstract(cls):
        return "abstract", "an abstract base class (its subclasses are what gets built)"
    params = inspect.signature(cls.__init__).parameters
    required = _required(params)
    # with nothing required, a traced config still comes first: defaults need not build (config=None)
    known = [c for c in configs if set(required) <= {k for k, v in c.items() if not _unknown(v)}] or (
        [] if required else [{}]
    )
    if not known:
        return "unchecked", "needs " + ", ".join(required)
    config = known[0]
    kwargs = {k: _decode(v) for k, v in config.items() if k in params and k != "rngs" and not _unknown(v)}
    defaulted = sorted(k for k, v in config.items() if k in params and _unknown(v))
    try:
        # as the written spec builds with no mesh: sharding names stay metadata (eager sharding off)
        with nnx.use_eager_sharding(False):
            built = nnx.eval_shape(
                lambda: cls(**kwargs, **({"rngs": nnx.Rngs(0)} if "rngs" in params else {}))
            )
        for _, node in nnx.iter_graph(built):
            if isinstance(node, nnx.Module) and type(node) is not cls:
                reached.setdefault(type(node), cls.__name__)
    except Exception as e:  # the finding: a clean class that does not build
        first = str(e).splitlines()[0] if str(e) else ""
        where = _failing_class(e)
        if where is not None and where is not cls and where.__name__ not in clean_names:
            return "blocked", f"{where.__name__} (not clean) raised {type(e).__name__}: {first}"[:300]
        return "failed", f"{type(e).__name__}: {first}"[:300]
    if not config:
        return "built", "defaults"
    left = f" ({', '.join(defaulted)} left at the default: not rebuildable here)" if defaulted else ""
    return "built", "traced config" + left


def _as_package(root: Path, scratch: Path, name: str) -> Path:
    """``root`` importable as the package ``name``: a link to it under ``scratch``, on ``sys.path``."""
    if not (root / "__init__.py").exists():
        return root
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / name).symlink_to(root, target_is_directory=True)
    sys.path.insert(0, str(scratch))
    return scratch / name


@contextlib.contextmanager
def _job_tree(job_path: Path) -> Iterator[tuple[dict, Path]]:
    """The job and its tree, importable: its search paths on ``sys.path``, the download-only
    dependencies stubbed, a package tree reachable under its package name."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from outside_parity import STUB_PACKAGES, stub_missing_packages

    job = json.loads(job_path.read_text())
    sys.path[:0] = job.get("search_paths", [])
    _shim_missing_mappings()
    with tempfile.TemporaryDirectory() as tmp, stub_missing_packages(STUB_PACKAGES + STUBS):
        yield job, _as_package(Path(job["root"]), Path(tmp), job["package"])


def _shim_missing_mappings() -> None:
    """``immutabledict`` when absent: a plain ``dict`` subclass, which is all model files ask of it (a
    stub that answers anything would be iterated for ever by ``immutabledict({...})`` constants)."""
    import importlib.util
    import types

    if importlib.util.find_spec("immutabledict") is None:
        module = types.ModuleType("immutabledict")
        module.immutabledict = type("immutabledict", (dict,), {})  # type: ignore[attr-defined]
        sys.modules["immutabledict"] = module


def _worker(job_path: Path, out_path: Path) -> None:
    results: list[BuildResult] = []
    classes_of: dict[int, type] = {}  # index in results -> the class, for those left unchecked
    reached: dict[type, str] = {}
    with _job_tree(job_path) as (job, tree):
        linen_root = job["linen_root"]
        clean_names = {c for cs in job["clean"].values() for c in cs}
        for rel, classes in job["clean"].items():
            try:
                module = _import(tree, rel)
            except BaseException as e:  # any import failure (SystemExit too) is an outcome to report
                env = linen_root is not None and _linen_fails(Path(linen_root), rel, job)
                detail = f"{type(e).__name__}: {e}"[:300]
                results += [
                    BuildResult(rel, c, "environment" if env else "unimportable", detail) for c in classes
                ]
                continue
            nested = _nested_classes(tree / rel)
            for c in classes:
                cls = getattr(module, c, None)
                if isinstance(cls, type):
                    status, detail = _build(cls, job["configs"].get(c, []), reached, clean_names)
                elif c in nested:  # defined inside a function (a test's fake model): not reachable here
                    status, detail = "unchecked", "defined inside a function"
                else:
                    status, detail = "failed", "not in the migrated module"
                if status == "unchecked":
                    classes_of[len(results)] = cls
                results.append(BuildResult(rel, c, status, detail))
    for index, cls in classes_of.items():  # built after all, as a part of a class that was built
        if cls in reached:
            results[index] = dataclasses.replace(
                results[index], status="built", detail=f"inside {reached[cls]}"
            )
    out_path.write_text(json.dumps([dataclasses.asdict(r) for r in results]))


def _nested_classes(path: Path) -> set[str]:
    """The classes ``path`` defines anywhere but at its top level (inside a function or a class)."""
    import ast

    tree = ast.parse(path.read_text())
    top = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)} - top


def _linen_fails(linen_root: Path, rel: str, job: dict) -> bool:
    """Whether the Linen original of ``rel`` fails to import too (in a process of its own)."""
    probe = dict(job, root=str(linen_root), linen_root=None, clean={rel: []})
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "job.json").write_text(json.dumps(probe))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--probe", str(Path(tmp) / "job.json")]
        return subprocess.run(cmd, capture_output=True, timeout=300, check=False).returncode != 0


def _probe(job_path: Path) -> None:
    """Import the one file of the job's tree (exit status 1 when that fails)."""
    with _job_tree(job_path) as (job, tree):
        _import(tree, next(iter(job["clean"])))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        _worker(Path(argv[1]), Path(argv[2]))
        return 0
    if argv[:1] == ["--probe"]:
        _probe(Path(argv[1]))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
