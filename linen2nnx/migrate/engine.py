"""The migration engine: one codemod pass per file (files found by ``discovery.py``), modes and safe writing.

Each file is processed independently (``-j N`` spreads them over processes); a file that fails
(syntax error, undecodable bytes, unwritable output, internal error) gets an ``error`` finding,
is left untouched, and never stops the others.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import multiprocessing
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.codemod import CodemodContext

from linen2nnx.errors import L2NError
from linen2nnx.io_utils import atomic_write_text
from linen2nnx.migrate import caller_sizes, gc_tuning, record_facts
from linen2nnx.migrate.after_module import after_module_pass, facts_for_importers
from linen2nnx.migrate.axes_params import migrate_restated
from linen2nnx.migrate.cst_meta import forget_syntax_children, parse_module
from linen2nnx.migrate.discovery import (
    discover,
    import_graph,
    module_name_for,
    namespace_names,
    package_suffixes,
    read_run,
    reexported,
    relative_to_root,
    unique_module_names,
)
from linen2nnx.migrate.earlier_markers import add_earlier_markers
from linen2nnx.migrate.file_errors import internal_error, syntax_error
from linen2nnx.migrate.file_state import IMPORTED_KEY
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.prefilter import read_by_module_pass
from linen2nnx.migrate.replay_migration import explained, migrate_replayed
from linen2nnx.migrate.rules import IO_002, IO_003
from linen2nnx.migrate.run_io import check_writable, refuse_overwriting_sources, source_encoding
from linen2nnx.migrate.shared_helpers import KEY as SHARED_HELPERS_KEY
from linen2nnx.migrate.shared_helpers import run_shared_helpers
from linen2nnx.migrate.star_imports import KEY as STARS_KEY
from linen2nnx.migrate.star_imports import lazy_resolver, run_star_exports
from linen2nnx.migrate.table_changes import KEY as TABLE_CHANGES_KEY
from linen2nnx.migrate.table_changes import run_changes
from linen2nnx.migrate.trace import Trace
from linen2nnx.migrate.training.driver import names_flagged
from linen2nnx.migrate.training.planner import sows_values
from linen2nnx.migrate.training.sharding import gives_sharding_names
from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME
from linen2nnx.namemap import NameMap


class Mode(str, enum.Enum):
    DIFF = "diff"  # print a unified diff, change nothing
    CHECK = "check"  # change nothing; exit 1 if anything would change
    WRITE = "write"  # rewrite files in place (atomically)
    OUT_DIR = "out-dir"  # write the migrated tree under another folder
    STDOUT = "stdout"  # source read from stdin, migrated source written to stdout


@dataclasses.dataclass
class FileResult:
    path: Path
    rel: str
    source: str | None
    output: str | None
    findings: list[Finding]
    name_map: NameMap
    skipped: bool = False  # pre-filter: never imports flax.linen
    target: Path | None = None  # where the output was written
    summaries: dict[str, Any] = dataclasses.field(default_factory=dict)  # class key -> ClassSummary
    factories: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # function key -> FunctionFactory (rewritten) / LinenFactory (still builds Linen)
    module: str = ""  # the file's module name (the prefix of its class keys)
    built: frozenset[str] = (
        frozenset()
    )  # keys of the run's classes its NNX classes build, every argument given
    encoding: str = "utf-8"  # the file's own (a coding declaration, a byte-order mark): written back in it

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def changed(self) -> bool:
        return self.output is not None and self.source is not None and self.output != self.source

    def diff(self) -> str:
        if not self.changed:
            return ""
        assert self.source is not None and self.output is not None
        return "".join(
            difflib.unified_diff(
                self.source.splitlines(True), self.output.splitlines(True), f"a/{self.rel}", f"b/{self.rel}"
            )
        )


@dataclasses.dataclass
class MigrationResult:
    files: list[FileResult]
    name_map: NameMap
    mode: Mode
    written: list[Path] = dataclasses.field(default_factory=list)
    extra_outputs: list[Path] = dataclasses.field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings]

    def counts(self) -> Counter[str]:
        return Counter(f.severity.value for f in self.findings)

    def exit_code(self) -> int:
        counts = self.counts()
        if counts[Severity.ERROR.value]:
            return 2
        if counts[Severity.MANUAL.value]:
            return 1
        if self.mode in (Mode.DIFF, Mode.CHECK) and any(r.changed for r in self.files):
            return 1
        return 0


def rule_selector(
    select: Sequence[str] | None = None, ignore: Sequence[str] | None = None
) -> Callable[[str], bool]:
    """ruff-style selection: a rule is on when it matches a ``select`` prefix (all if none) and no ``ignore`` prefix."""
    chosen, dropped = tuple(select or ()), tuple(ignore or ())

    def enabled(rule_id: str) -> bool:
        return (not chosen or rule_id.startswith(chosen)) and not rule_id.startswith(dropped)

    return enabled


def migrate_source(
    source: str,
    path: str,
    module_name: str = "",
    trace: Trace | None = None,
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    unsafe_fixes: bool = False,
    external: Mapping[str, Any] | None = None,
    factories: Mapping[str, Any] | None = None,
    replay_helpers: bool = True,
    restate_axes: bool = True,
    settle_sizes: bool = True,
) -> FileResult:
    """Migrate one file's text. Never raises for bad input: failures become ``error`` findings.

    ``select`` / ``ignore`` are rule-id prefixes (``L2N-SHAPE``); ``unsafe_fixes`` applies fixes that
    rest on a stated assumption (e.g. a traced literal size) instead of leaving them manual.
    ``external`` holds the summaries of Linen classes other files of the run define (see
    :func:`migrate_paths`), so submodules and base classes imported from them are migrated too;
    ``factories`` their module-level functions that build layers (rewritten ones, which calls here
    build through, and ones still building Linen, which NNX classes here must not call).
    First, ``replay_helpers`` helper methods' calls in ``@nn.compact`` (helper_calls.py) and
    ``restate_axes`` restates ``param_with_axes`` calls as ``self.param`` (axes_params.py).
    ``settle_sizes``: the sizes classes of the file building a class pass it are settled (:mod:`.caller_sizes`;
    :func:`migrate_paths` settles those of other files). The text passes read the module pass's findings;
    one resolver of the parsed tree serves every step that reads it."""
    from linen2nnx.migrate.module_rewrite import MigrateModules

    file_path = Path(path)
    if not read_by_module_pass(source, module_name, external, factories):
        facts = record_facts.of_source(source, module_name, path)  # its data classes for importers
        return FileResult(file_path, path, source, source, [], NameMap(), skipped=True, factories=facts)
    try:
        tree = parse_module(source)  # = cst.parse_module(source), cheaper
    except cst.ParserSyntaxError as e:
        return FileResult(file_path, path, source, None, [syntax_error(source, path, e)], NameMap())
    options = dict(
        select=select, ignore=ignore, unsafe_fixes=unsafe_fixes, external=external, factories=factories
    )
    steps, reasons = (restate_axes, replay_helpers), {}  # reasons: why a replay left a class Linen
    names, rule_enabled = lazy_resolver(tree, factories, module_name), rule_selector(select, ignore)
    if any(steps) and (
        kept := _prepassed(tree, source, path, module_name, trace, options, steps, names, reasons)
    ):
        return _finished(kept, source, path, rule_enabled) if settle_sizes else kept
    kept_options = {k: v for k, v in options.items() if k not in ("select", "ignore")}
    context = CodemodContext(filename=path, full_module_name=module_name or None)
    command = MigrateModules(
        context, path=path, module_name=module_name, trace=trace, rule_enabled=rule_enabled, **kept_options
    )
    try:
        out_tree = command.transform_module(tree, source, names() if names.cache_info().currsize else None)
        built: set[str] = set()
        output, own_factories, train_findings, verify_findings = after_module_pass(
            out_tree, source, path, module_name, command, external, factories, rule_enabled, built
        )
        own_factories.update(facts_for_importers(tree, module_name, command))
    except Exception as e:  # an internal bug must not take the other files down
        if os.environ.get("LINEN2NNX_RAISE"):  # for debugging the codemod itself: the full traceback
            raise
        return FileResult(file_path, path, source, None, [internal_error(path, e)], NameMap())
    finally:
        forget_syntax_children()  # the walks' memo of this file's trees
    findings = sorted(
        [*command.findings, *train_findings, *verify_findings], key=lambda f: (f.line, f.col, f.rule)
    )
    facts = {"summaries": _flagged(command, source, external), "factories": own_factories}
    result = FileResult(file_path, path, source, output, findings, command.name_map, **facts)
    result = explained(result, reasons)  # replay_migration.py
    result.module, result.built = module_name, frozenset(built)
    return _release(command, _finished(result, source, path, rule_enabled) if settle_sizes else result)


def _flagged(command: Any, source: str, external: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``command``'s summaries (what importing files see), each marked ``partitioned`` where its file
    gives weights sharding names, and ``sows`` where its file sows or names a class of another file that
    does, with its class's name-map entry (what a choice between classes compares: alike_builds.py)."""
    partitioned = gives_sharding_names(source)
    sows = sows_values(source) or names_flagged(external or {}, source, "sows")
    for summary in command.summaries.values():
        summary.partitioned = summary.partitioned or partitioned
        summary.sows = summary.sows or sows
        summary.entry = command.name_map.classes.get(summary.key)
    return command.summaries


def _finished(result: FileResult, source: str, path: str, rule_enabled: Callable[[str], bool]) -> FileResult:
    """An outer call's result: the sizes its own builders pass settled, and the work an earlier run's
    markers still owe reported (earlier_markers.py)."""
    return add_earlier_markers(caller_sizes.settle_file(result, result.built), source, path, rule_enabled)


def _release(command: Any, result: FileResult) -> FileResult:
    """Drop what the module pass knew of the file once its result is taken. Its parts refer to each
    other (a plan holds a planner's method, the planner the file's state, the state the plans), and
    so do the resolver's scopes and bindings: left as they are, the file's trees and indices live on
    until the cyclic collector traverses them all (``gc_tuning.settle``, after each file); with the
    cycles broken, reference counting frees them at once. Returns ``result``, taken before."""
    state = command.state
    if state.resolver is not None:
        state.resolver.release()
    vars(state).clear()
    return result


unsettled = functools.partial(migrate_source, settle_sizes=False)  # what the text passes read


def _prepassed(
    tree: cst.Module,
    source: str,
    path: str,
    module_name: str,
    trace: Trace | None,
    options: dict[str, Any],
    steps: tuple[bool, bool],
    names: Callable[[], NameResolver] | None = None,
    reasons: dict[str, Finding] | None = None,
) -> FileResult | None:
    """The file migrated after the text passes ``steps`` asks for (restating ``param_with_axes``,
    replaying helper calls), in that order; None when neither applies. ``names``: the resolver of
    ``tree``, built on first use."""
    restate_axes, replay_helpers = steps
    if restate_axes and (
        kept := migrate_restated(unsettled, tree, source, path, module_name, trace, options, replay_helpers)
    ):
        return kept
    if replay_helpers:
        return migrate_replayed(unsettled, tree, source, path, module_name, trace, options, names, reasons)
    return None


@dataclasses.dataclass(frozen=True)
class _Options:
    """What every file of one run shares; sent to each worker process once, not once per file."""

    trace: Trace | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool = False


_WORKER_OPTIONS = _Options()


def _migrate_file(
    args: tuple[Path, str, str, Mapping[str, Any], Mapping[str, Any]], options: _Options | None = None
) -> FileResult:
    path, rel, module_name, external, factories = args
    options = options or _WORKER_OPTIONS
    encoding = "utf-8"
    try:
        data = path.read_bytes()
        encoding = source_encoding(data)
        source = data.decode(encoding)
    except (UnicodeDecodeError, SyntaxError, LookupError) as e:
        where = f" at byte {e.start}" if isinstance(e, UnicodeDecodeError) else f": {e}"
        finding = Finding.of(
            IO_002,
            rel,
            1,
            1,
            f"cannot decode as {encoding}{where}",
            "re-encode the file as UTF-8 (or as its coding declaration says); it was left untouched",
        )
        return FileResult(path, rel, None, None, [finding], NameMap())
    except OSError as e:
        finding = Finding.of(IO_002, rel, 1, 1, f"cannot read: {e.strerror}", "")
        return FileResult(path, rel, None, None, [finding], NameMap())
    result = migrate_source(
        source,
        rel,
        module_name,
        options.trace,
        select=options.select,
        ignore=options.ignore,
        unsafe_fixes=options.unsafe_fixes,
        external=external,
        factories=factories,
    )
    result.path = path
    result.encoding = encoding
    gc_tuning.settle()  # what the file left joins the heap the collector skips
    return result


def resolve_jobs(jobs: int | None) -> int:
    """``None`` -> 1; ``0`` -> one per CPU; a negative count is a usage error."""
    if jobs is None:
        return 1
    if jobs < 0:
        raise L2NError(f"--jobs must be >= 0 (0 = one per CPU), got {jobs}")
    return jobs or os.cpu_count() or 1


def migrate_paths(
    paths: Sequence[str | Path],
    mode: Mode = Mode.DIFF,
    *,
    out_dir: str | Path | None = None,
    trace: Trace | None = None,
    jobs: int | None = 1,
    exclude: Sequence[str] = (),
    include: Sequence[str] = ("*.py",),
    base: str | Path | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    unsafe_fixes: bool = False,
    name_map_path: str | Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[FileResult], None] | None = None,
) -> MigrationResult:
    """Migrate every Python file under ``paths`` according to ``mode``.

    ``select`` / ``ignore`` / ``unsafe_fixes`` are passed to :func:`migrate_source` for each file;
    ``include`` / ``exclude`` / ``base`` go to :func:`discover`. ``jobs=0`` means one process per
    CPU. ``on_start(total)`` is called once discovery is done and ``on_file(result)`` once per file,
    in discovery order (results are always in that order, whatever ``jobs`` is).
    """
    if mode is Mode.OUT_DIR and out_dir is None:
        raise L2NError("--out-dir needs a folder")
    jobs = resolve_jobs(jobs)
    files = discover(paths, exclude, include, base)
    if mode is Mode.OUT_DIR:
        refuse_overwriting_sources(files, Path(out_dir))  # type: ignore[arg-type]
    if on_start:
        on_start(len(files))
    options = _Options(
        trace, tuple(select) if select is not None else None, tuple(ignore or ()), unsafe_fixes
    )
    work = unique_module_names([(f, _display(f), module_name_for(f)) for f, _ in files])
    with gc_tuning.tuned():
        results = list(_run(work, jobs, on_file, options))
    caller_sizes.settle(results)  # sizes classes of other files pass
    name_map = NameMap()
    for r in results:
        name_map.merge(r.name_map)
    result = MigrationResult(results, name_map, mode)
    target = None
    if mode in (Mode.WRITE, Mode.OUT_DIR) and name_map.classes:
        # default: at the root of the migrated tree (the out dir, or the root of the files rewritten in
        # place), where a spec or a later convert looks for it -- never wherever the command ran
        root = Path(out_dir) if mode is Mode.OUT_DIR else files[0][1]
        target = Path(name_map_path) if name_map_path else root / NAME_MAP_FILENAME
        check_writable(target, "the name map")  # before any source is rewritten
    if mode is Mode.WRITE:
        for r in results:
            if r.changed and not r.failed:
                _write(r, r.path, result, in_place=True)
    elif mode is Mode.OUT_DIR:
        assert out_dir is not None
        out_root = Path(out_dir)
        for (f, root), r in zip(files, results):
            if r.output is not None and not r.failed:
                _write(r, out_root / relative_to_root(f, root), result, root=out_root)
    if target is not None:
        try:
            name_map.save(target)
        except OSError as e:
            raise L2NError(f"{target}: cannot write the name map: {e.strerror or e}") from e
        result.extra_outputs.append(target)
    return result


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _warm_up() -> None:
    """Import the codemod and fill the caches it reads from flax (signatures, same-object tables).

    Run in the parent before forking workers, so that each worker starts with them instead of
    importing flax and libcst.matchers itself; or, where workers are not forked, in each worker once.
    """
    try:
        from linen2nnx.layers import LAYER_RULES, nnx_ctor_params
        from linen2nnx.migrate import linen_api, module_rewrite  # noqa: F401

        linen_api.feature_preserving_functions()
        for layer in LAYER_RULES:
            layer.linen_arg_order()
            nnx_ctor_params(layer.nnx)
    except Exception:  # only an optimisation: the codemod fills them itself if anything moved
        pass


def _init_worker(options: _Options, warm: bool) -> None:
    global _WORKER_OPTIONS
    _WORKER_OPTIONS = options
    if warm:
        _warm_up()
    gc_tuning.tune_process()


def _jax_started() -> bool:
    """True once a JAX backend runs (e.g. after ``--trace``): its native threads make ``fork`` unsafe."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def _pool_context() -> tuple[multiprocessing.context.BaseContext, bool]:
    """``fork`` where it is safe and cheap (Linux, no threads, no JAX backend yet): workers inherit the
    warm parent. Elsewhere ``spawn``, and each worker warms itself up once."""
    if sys.platform == "linux" and threading.active_count() == 1 and not _jax_started():
        return multiprocessing.get_context("fork"), True
    return multiprocessing.get_context("spawn"), False


def _run(
    work: list, jobs: int, on_file: Callable[[FileResult], None] | None, options: _Options
) -> Iterable[FileResult]:
    """Migrate level by level (see :func:`import_levels`), each file seeing the classes of the files
    it imports; results come back in discovery order."""
    results: dict[int, FileResult] = {}
    external: dict[str, Any] = {}  # the classes of the files already migrated (their summaries)
    factories: dict[str, Any] = {}  # ... and their functions that build layers
    if len(work) > 1:  # which tables of activations some file may change (the files see it as a fact)
        run = read_run(w[0] for w in work)  # every file read once for both scans
        factories[TABLE_CHANGES_KEY] = run_changes(run)
        factories[SHARED_HELPERS_KEY] = run_shared_helpers(run)  # kept from replay
    # a file known by a longer name for being one of several of one short name (unique_module_names)
    # is still imported by that short name by a script beside it (`import models`)
    aliases = [
        (*namespace_names(path), module_name_for(path), *suffixes) if module else ()
        for (path, _, module), suffixes in zip(work, package_suffixes(work))
    ]  # and by a shorter name through a package folder on the path (package_suffixes)
    if len(work) > 1 and run.complete:  # what `from <file of the run> import *` binds
        factories[STARS_KEY] = run_star_exports(work, run.sources, aliases)
    levels, imported = import_graph(work)
    factories[IMPORTED_KEY] = frozenset(work[i][2] for i in imported)  # whose summaries are read
    for level, cyclic in levels:
        classes, functions = dict(external), dict(factories)  # what this level sees, shared by its files
        items = [(*work[i], classes, functions) for i in level]
        for i, r in zip(level, _run_level(items, jobs, options)):
            results[i] = r
        if cyclic:
            _settle_cycle(work, level, cyclic, results, (classes, functions), aliases, jobs, options)
        for i in level:
            if on_file:
                on_file(results[i])
            external.update(_aliased(results[i].summaries, work[i][2], aliases[i]))
            factories.update(_aliased(results[i].factories, work[i][2], aliases[i]))
        for i in level:
            external.update(_reexports(work[i], results[i], external, aliases[i]))
    return [results[i] for i in range(len(work))]


def _settle_cycle(
    work: list,
    level: list[int],
    cyclic: list[int],
    results: dict[int, FileResult],
    seen: tuple[dict[str, Any], dict[str, Any]],
    aliases: list[tuple[str, ...]],
    jobs: int,
    options: _Options,
) -> None:
    """Files importing each other: migrate them again, each seeing the others' classes (``seen``: what
    the level sees, updated in place), until no file's summaries change. One round is not enough: a
    class another file's first pass could not size (its callee unknown then) gains an argument in the
    second, which the importer's second pass did not know yet and would build it without."""
    classes, functions = seen
    for _ in range(len(cyclic) + 1):
        for i in level:
            classes.update(_aliased(results[i].summaries, work[i][2], aliases[i]))
            functions.update(_aliased(results[i].factories, work[i][2], aliases[i]))
        for i in level:
            classes.update(_reexports(work[i], results[i], classes, aliases[i]))
        before = [(results[i].summaries, results[i].factories) for i in cyclic]
        again = [(*work[i], classes, functions) for i in cyclic]
        results.update(zip(cyclic, _run_level(again, jobs, options)))
        if before == [(results[i].summaries, results[i].factories) for i in cyclic]:
            return


def _reexports(
    item: tuple[Path, str, str], result: FileResult, known: Mapping[str, Any], aliases: tuple[str, ...]
) -> dict[str, Any]:
    """A package ``__init__.py``'s re-exports of the run's classes (:func:`.discovery.reexported`),
    under each name the package goes by."""
    path, _, module = item
    if path.name != "__init__.py" or not result.source:
        return {}
    return _aliased(reexported(result.source, module, known), module, aliases)


def _aliased(facts: dict[str, Any], module: str, aliases: tuple[str, ...]) -> dict[str, Any]:
    """A file's facts for importers, also under each longer name the file may be imported by
    (:func:`namespace_names`): a key that names ``module.X`` (after any ``prefix:``) is repeated as
    ``alias.X``, the fact itself unchanged."""
    if not aliases:
        return facts
    out = dict(facts)
    for key, value in facts.items():
        head, colon, rest = key.rpartition(":")
        if rest.startswith(f"{module}."):
            for alias in aliases:
                out[f"{head}{colon}{alias}{rest[len(module) :]}"] = value
    return out


def _run_level(work: list, jobs: int, options: _Options) -> Iterable[FileResult]:
    if jobs > 1 and len(work) > 1:
        context, forked = _pool_context()
        if forked:
            _warm_up()
        workers = min(jobs, len(work))
        # a few chunks per worker: little IPC, and the slowest chunk cannot hold the run up for long
        chunksize = max(1, len(work) // (workers * 8))
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(options, not forked)
        ) as pool:
            yield from pool.map(_migrate_file, work, chunksize=chunksize)  # results in input order
    else:
        for item in work:
            yield _migrate_file(item, options)


def _write(
    r: FileResult, target: Path, result: MigrationResult, in_place: bool = False, root: Path | None = None
) -> None:
    """Write ``r``'s output to ``target``: in place (``--write``) through a symlink to the file it
    names; elsewhere (``--out-dir`` ``root``) replacing a link that is there, never writing where it
    points, nor into a folder of the tree that links out of it (into the sources)."""
    assert r.output is not None
    try:
        if root is not None and not target.parent.resolve().is_relative_to(root.resolve()):
            raise OSError(f"its folder {target.parent} links out of the output folder {root}")
        atomic_write_text(target, r.output, encoding=r.encoding, follow_symlinks=in_place)
        result.written.append(target)
        r.target = target
    except OSError as e:
        r.findings.append(
            Finding.of(
                IO_003,
                r.rel,
                1,
                1,
                f"cannot write {target}: {e.strerror or e}",
                "nothing was written for this file",
            )
        )
