"""How well does ``migrate`` do on Linen code we did not write?

Copies a Linen source tree (e.g. the ``examples/`` of the Flax sdist) into a temp folder, migrates
it into another temp folder, and prints a table per file and in total:

- **parsed**: the output parses with ``ast.parse``;
- **idempotent**: migrating the output again changes nothing;
- **classes**: module classes that subclass a Linen ``Module`` in the input (directly, or through
  another such class of the tree);
- **converted**: of those, classes the codemod rewrote (an ``L2N-MOD-001`` finding on the class);
- **clean**: converted classes with no ``manual`` / ``error`` finding inside the class's line range
  of the INPUT file (findings carry input line numbers);
- findings by severity and by rule.

Trace specs (``bench/outside_traces/*.py``: ``EXAMPLE = "jax/griffin.py"`` and ``linen_side(example)``)
migrate the folder of their example again with ``--trace`` (several specs of one example: their traces
merged, ``trace_merge.merge_traces``, for configs that build different classes; several examples of one
folder: their traces merged too, so the folder's one migration sees every example's classes; a spec
whose example is not under DIR is named on stderr). The tree is copied under its own folder
name, with that name's parent on ``sys.path`` while tracing, so a package that imports itself by name
(``from recurrentgemma.jax import modules``) is traced as that package; a spec's optional
``environment()`` context stubs download-only imports and shims removed JAX APIs while tracing, its
optional ``PIP = ("jraph",)`` names pure-Python dependencies installed with ``pip --no-deps`` into the
run's temp folder, and ``--build-path`` folders hold the corpus's own dependencies. A traced folder's clean classes are built
inside the whole migrated tree, so the rest of the package is there to import.

It is a measurement, not a gate: it exits 0 (``--min-clean-pct P`` makes it exit 1 below P%).
Nothing is ever written outside the temp folders.

    python bench/outside_corpus.py /tmp/flaxsrc/flax-0.12.8/examples --jobs 2 --json outside.json
    python bench/outside_corpus.py --download      # pip-downloads the installed flax's sdist first
    python bench/outside_corpus.py /tmp/src/recurrentgemma-1.0.1/recurrentgemma --build-path /tmp/rgdeps
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LINEN_MODULE = {
    "flax.linen.Module",
    "flax.linen.module.Module",
    "flax.linen.RNNCellBase",
    "flax.linen.recurrent.RNNCellBase",
}
BLOCKING = ("manual", "error")
TRACES = Path(__file__).resolve().parent / "outside_traces"


# ---- Linen module classes of the input, by static resolution of imports -----------------------------
@dataclasses.dataclass
class ClassInfo:
    name: str
    qualname: str  # module.Class
    start: int  # first line (decorators included)
    line: int  # the line of the ``class`` keyword
    end: int
    bases: list[str]  # resolved dotted names of the bases


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):  # Generic[...]-style bases
        return _dotted(node.value)
    return None


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _aliases(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Local name -> dotted name it stands for, from every import in the file (any depth)."""
    out: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
    return out


def _resolve(dotted: str, aliases: dict[str, str]) -> str:
    head, _, rest = dotted.partition(".")
    if head in aliases:
        return aliases[head] + (f".{rest}" if rest else "")
    return dotted


def classes_of(source: str, rel: Path) -> list[ClassInfo]:
    """Every class of a file with its line range and resolved bases (syntax errors: none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    module = _module_name(rel)
    aliases = _aliases(tree, module, rel.name == "__init__.py")
    local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = []
            for b in node.bases:
                d = _dotted(b)
                if d is None:
                    continue
                bases.append(f"{module}.{d}" if d in local and d not in aliases else _resolve(d, aliases))
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append(
                ClassInfo(
                    node.name,
                    f"{module}.{node.name}",
                    start,
                    node.lineno,
                    node.end_lineno or node.lineno,
                    bases,
                )
            )
    return out


def linen_classes(by_file: dict[str, list[ClassInfo]]) -> dict[str, list[ClassInfo]]:
    """The classes that subclass a Linen Module, through any chain of classes of the tree."""
    linen: set[str] = set()
    changed = True
    while changed:
        changed = False
        for infos in by_file.values():
            for c in infos:
                if c.qualname not in linen and any(b in LINEN_MODULE or b in linen for b in c.bases):
                    linen.add(c.qualname)
                    changed = True
    return {f: [c for c in infos if c.qualname in linen] for f, infos in by_file.items()}


# ---- the measurement --------------------------------------------------------------------------------
@dataclasses.dataclass
class FileRow:
    path: str
    parsed: bool
    idempotent: bool
    classes: int
    converted: int
    clean: int
    severities: Counter
    rules: Counter
    skipped: bool
    clean_classes: list[str] = dataclasses.field(default_factory=list)
    builds: list = dataclasses.field(default_factory=list)  # clean_builds.BuildResult of each clean class
    # what keeps each converted class from being clean: its manual / error findings
    blockers: list[dict] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "parsed": self.parsed,
            "idempotent": self.idempotent,
            "classes": self.classes,
            "converted": self.converted,
            "clean": self.clean,
            "skipped": self.skipped,
            "findings": dict(self.severities),
            "by_rule": dict(sorted(self.rules.items())),
            "builds": [dataclasses.asdict(b) for b in self.builds],
            "blockers": self.blockers,
        }


def _file_rows(tree: Path, out: Path, first: Any, jobs: int) -> dict[Path, FileRow]:
    """One row per input file of a migrate run over ``tree`` written to ``out``; idempotency is
    checked by migrating ``out`` again (with no trace: a migrated file must be a fixed point)."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    by_rel = {Path(r.path).resolve().relative_to(tree.resolve()): r for r in first.files}
    again = {}
    if out.exists():
        second = migrate_paths([out], Mode.CHECK, jobs=jobs)
        again = {Path(r.path).resolve().relative_to(out.resolve()): r for r in second.files}
    sources = {rel: (r.source or "") for rel, r in by_rel.items()}
    found = linen_classes({str(rel): classes_of(s, rel) for rel, s in sources.items()})
    rows = {}
    for rel, r in by_rel.items():
        parsed = False
        if r.output is not None and not r.failed:
            try:
                ast.parse(r.output)
                parsed = True
            except SyntaxError:
                parsed = False
        redo = again.get(rel)
        idempotent = parsed and redo is not None and not redo.changed and not redo.failed
        classes = found.get(str(rel), [])
        converted = clean = 0
        clean_names = []
        blockers = []
        for c in classes:
            inside = [f for f in r.findings if c.start <= f.line <= c.end]
            if not any(f.rule == "L2N-MOD-001" and c.start <= f.line <= c.line for f in inside):
                continue
            converted += 1
            blocking = [f for f in inside if f.severity.value in BLOCKING]
            if not blocking:
                clean += 1
                clean_names.append(c.name)
            blockers += [
                {"class": c.name, "line": f.line, "rule": f.rule, "message": f.message} for f in blocking
            ]
        rows[rel] = FileRow(
            str(rel),
            parsed,
            idempotent,
            len(classes),
            converted,
            clean,
            Counter(f.severity.value for f in r.findings),
            Counter(f.rule for f in r.findings),
            r.skipped,
            clean_names,
            blockers=blockers,
        )
    return rows


def measure(
    src: Path,
    jobs: int = 1,
    traces: Sequence[TraceSpec] = (),
    builds: bool = True,
    build_paths: Sequence[str] = (),
) -> tuple[list[FileRow], dict]:
    """Migrate the copied tree; then each folder a trace spec covers again, with its trace, and
    those folders' rows replace the untraced ones (``traced`` in the total says which). With
    ``builds``, every clean class is then built from the migrated files (:mod:`clean_builds`), with
    the traced configs where a trace covers its folder; ``build_paths`` go on ``sys.path`` for that."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    traced_folders = []
    with tempfile.TemporaryDirectory(prefix="l2n-outside-") as tmp:
        tree = Path(tmp) / "in" / src.name  # under its own name: a package that imports itself by name
        shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", ".git", "*.pyc"))
        out = Path(tmp) / "out"
        first = migrate_paths(
            [tree], Mode.OUT_DIR, out_dir=out, jobs=jobs, name_map_path=Path(tmp) / "map.json"
        )
        rows = _file_rows(tree, out, first, jobs)
        build_paths = [*build_paths, *install_spec_deps(traces, tree, Path(tmp) / "deps")]
        build_jobs = []  # (migrated root, Linen root, files of it, traced configs)
        for folder, trace, names in _folder_traces(tree, traces, [str(tree.parent), *build_paths], src):
            traced_out = Path(tmp) / "traced" / folder.relative_to(tree)
            result = migrate_paths(
                [folder],
                Mode.OUT_DIR,
                out_dir=traced_out,
                jobs=jobs,
                trace=trace,
                name_map_path=traced_out.parent / f"{folder.name}-map.json",
            )
            for rel, row in _file_rows(folder, traced_out, result, jobs).items():
                rows[folder.relative_to(tree) / rel] = dataclasses.replace(
                    row, path=str(folder.relative_to(tree) / rel)
                )
            build_jobs.append((traced_out, folder, folder.relative_to(tree), _traced_configs(trace, result)))
            traced_folders.extend(names)
        if builds:
            _build_clean(rows, out, tree, src.name, build_jobs, build_paths)
    rows_list = [rows[rel] for rel in sorted(rows, key=str)]
    total = {
        "files": len(rows_list),
        "parsed": sum(r.parsed for r in rows_list),
        "idempotent": sum(r.idempotent for r in rows_list),
        "classes": sum(r.classes for r in rows_list),
        "converted": sum(r.converted for r in rows_list),
        "clean": sum(r.clean for r in rows_list),
        "findings": dict(sum((r.severities for r in rows_list), Counter())),
        "by_rule": dict(sorted(sum((r.rules for r in rows_list), Counter()).items())),
        "traced": traced_folders,
    }
    total["builds"] = dict(sum((Counter(b.status for b in r.builds) for r in rows_list), Counter()))
    total["clean_pct"] = 100.0 * total["clean"] / total["classes"] if total["classes"] else 100.0
    total["converted_pct"] = 100.0 * total["converted"] / total["classes"] if total["classes"] else 100.0
    return rows_list, total


def _build_clean(
    rows: dict[Path, FileRow],
    out: Path,
    tree: Path,
    package: str,
    traced: Sequence[tuple[Path, Path, Path, dict]],
    build_paths: Sequence[str],
) -> None:
    """Build every clean class of ``rows`` from the migrated files: those of a traced folder from its
    traced output with the trace's configs, the others from ``out`` (see :mod:`clean_builds`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from clean_builds import check_tree

    covered: set[Path] = set()
    for i, (traced_out, _folder, rel_folder, instances) in enumerate(traced):
        files = {rel: row for rel, row in rows.items() if rel.is_relative_to(rel_folder)}
        covered |= set(files)
        configs = {q.rsplit(".", 1)[-1]: v for q, v in instances.items()}
        clean = {str(rel): row.clean_classes for rel, row in files.items()}
        whole = out.parent / f"whole-{i}"  # the traced folder in the whole tree:
        shutil.copytree(out, whole)  # its package imports the rest of it by name
        shutil.copytree(traced_out, whole / rel_folder, dirs_exist_ok=True)
        for b in check_tree(whole, clean, configs, tree, package, build_paths):
            rows[Path(b.file)].builds.append(b)
    clean = {str(rel): row.clean_classes for rel, row in rows.items() if rel not in covered}
    for b in check_tree(out, clean, None, tree, package, build_paths):
        rows[Path(b.file)].builds.append(b)


def _traced_configs(trace: Any, result: Any) -> dict[str, list[dict]]:
    """Class name -> the configs of its traced instances, each with the constructor arguments the
    migration added from the input's sizes (``input:i`` / ``input_shape:i`` / ``input_leaf:i:.field``): the root's from the
    example batch, any other class's from the inputs the trace saw it called with."""
    configs = {q.rsplit(".", 1)[-1]: [dict(c) for c in v] for q, v in trace.instances.items()}
    for key, entry in result.name_map.classes.items():
        name = key.rsplit(".", 1)[-1]
        if name == trace.root_class.rsplit(".", 1)[-1]:
            inputs = list(trace.root_inputs)
            leaves = trace.root_leaves  # `input_leaf:0:.nodes`: a field of an input
        else:
            calls = trace.own_inputs.get(name) or [()]
            inputs = list(calls[0])
            leaves = trace.own_leaves.get(name, {})
        added = {}
        axes = {}
        for arg, how in entry.new_args.items():
            kind, _, index = how.partition(":")
            if kind == "input_axis":
                index, _, expr = index.partition(":")
                axes[arg] = (
                    (inputs[int(index)], expr) if index.isdigit() and int(index) < len(inputs) else None
                )
            if kind in ("input", "input_shape") and index.isdigit() and int(index) < len(inputs):
                shape = inputs[int(index)]
                added[arg] = shape[-1] if kind == "input" else tuple(shape)
            elif kind == "input_leaf" and leaves.get(index):
                added[arg] = leaves[index][-1]
        for config in configs.get(name, []):
            config.update(added)
            for arg, (shape, expr) in ((a, v) for a, v in axes.items() if v is not None and v[0] is not None):
                size = _input_axis(expr, shape, config)
                if size is not None:
                    config[arg] = size
    return configs


def _input_axis(expr: str, shape: tuple[int, ...], config: dict) -> int | None:
    """The size ``expr`` (``x[:, self.index].shape[1]``, as the Linen source wrote it: see
    ``namemap.ClassEntry.new_args``) reads of an input of ``shape`` in an instance of ``config``;
    None when it does not evaluate here."""
    import re
    from types import SimpleNamespace

    import numpy as np

    name = re.match(r"[A-Za-z_]\w*", expr)
    if name is None:
        return None
    scope = {"self": SimpleNamespace(**config), name.group(): np.broadcast_to(np.float32(0), shape)}
    try:
        return int(eval(expr, {"__builtins__": {}}, scope))
    except Exception:
        return None


# ---- trace specs: our own example batches for models whose sizes depend on the input ----------------
@dataclasses.dataclass
class TraceSpec:
    path: Path
    example: str  # the example file it builds a model of, relative to the tree (``ppo/models.py``)
    pip: tuple[str, ...] = ()  # ``PIP = ("jraph",)``: pure-Python dependencies of the example

    def trace(self, example: Path, import_roots: Sequence[str] = ()) -> Any:
        """Run the spec's ``linen_side(example)`` on the copied example and trace it, with
        ``import_roots`` (the copied tree's parent, so its package imports itself by name, and the
        corpus's dependencies) on ``sys.path`` and inside the spec's ``environment()`` when it has one
        (stubs of download-only imports, shims of removed JAX APIs)."""
        from linen2nnx.migrate.trace import trace_linen
        from linen2nnx.spec import import_file

        module = import_file(self.path)
        environment = getattr(module, "environment", contextlib.nullcontext)
        added = [p for p in import_roots if p not in sys.path]
        sys.path[:0] = added
        try:
            with environment():
                return trace_linen(module.linen_side(example), spec_ref=str(self.path))
        finally:
            for p in added:
                sys.path.remove(p)


def _folder_traces(
    tree: Path, specs: Sequence[TraceSpec], import_roots: Sequence[str], src: Path
) -> list[tuple[Path, Any, list[str]]]:
    """(folder, its trace, ``"example (specs)"`` per traced example) for each folder of ``tree`` that
    the specs' examples lie in. A folder is migrated once, so the traces of its several examples
    (``models/vit.py`` and ``models/bit.py``) are merged into one (``trace_merge.merge_traces``: the
    sizer reads each class's own records, whichever root model built it; the written spec and its
    build check are the first example's). A spec whose example is not under ``src`` is named on
    stderr, one line for all of them; an example whose trace fails leaves the folder's other
    examples traced."""
    from linen2nnx.migrate.trace_merge import merge_traces

    groups = _by_example(specs)
    missing = [g for g in groups if not (tree / g[0].example).is_file()]
    if missing:
        named = "; ".join(f"{g[0].example} ({', '.join(s.path.name for s in g)})" for g in missing)
        print(f"trace specs whose example is not under {src}, not applied: {named}", file=sys.stderr)
    by_folder: dict[Path, list[list[TraceSpec]]] = {}
    for group in groups:
        if group not in missing:
            by_folder.setdefault((tree / group[0].example).parent, []).append(group)
    found = []
    for folder, folder_groups in by_folder.items():
        traces, names = [], []
        for group in folder_groups:
            example, specs_of = group[0].example, ", ".join(s.path.name for s in group)
            try:
                traces.append(merge_traces([s.trace(tree / example, import_roots) for s in group]))
            except Exception as e:  # the example does not run here: its untraced rows stand
                print(f"trace spec {specs_of} failed, {example} stays untraced: {e}", file=sys.stderr)
                continue
            names.append(f"{example} ({specs_of})")
        if traces:
            found.append((folder, merge_traces(traces), names))
    return found


def _by_example(specs: Sequence[TraceSpec]) -> list[list[TraceSpec]]:
    """The specs grouped by the example they trace, in order: several specs of one example trace the
    configs that build different classes (a ResNet18's ``BasicBlock``, a ResNet50's ``Bottleneck``),
    and their traces are merged into one for that example's migration."""
    groups: dict[str, list[TraceSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.example, []).append(spec)
    return list(groups.values())


def load_trace_specs(folder: Path) -> list[TraceSpec]:
    """Every ``*.py`` in ``folder`` that names its example (``EXAMPLE = "ppo/models.py"``)."""
    specs = []
    for path in sorted(folder.glob("*.py")):
        values = {
            ast.unparse(node.targets[0]): ast.literal_eval(node.value)
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and ast.unparse(node.targets[0]) in ("EXAMPLE", "PIP")
        }
        if isinstance(values.get("EXAMPLE"), str):
            specs.append(TraceSpec(path, values["EXAMPLE"], tuple(values.get("PIP", ()))))
    return specs


def install_spec_deps(specs: Sequence[TraceSpec], tree: Path, deps: Path) -> list[str]:
    """``pip install --no-deps --target deps`` of what the specs of examples in ``tree`` name in
    ``PIP`` (pure-Python packages the example imports, e.g. jraph): the folders to put on
    ``sys.path``, none when nothing is named or pip fails (those examples then stay untraced)."""
    names = sorted({n for s in specs if (tree / s.example).is_file() for n in s.pip})
    if not names:
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from outside_parity import SourceUnavailable, pip_install_pure

    try:
        return pip_install_pure(names, deps)
    except SourceUnavailable as e:
        print(e, file=sys.stderr)
        return []


def _severity_cell(c: Counter) -> str:
    return " ".join(f"{k[0]}{c[k]}" for k in ("error", "manual", "unsafe", "converted") if c[k]) or "-"


def render(rows: list[FileRow], total: dict, title: str, all_files: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    probe = Console()
    console = Console(highlight=False, width=None if probe.is_terminal else 200)
    table = Table(
        title=title,
        title_justify="left",
        caption="findings: e=error m=manual u=unsafe c=converted",
        show_footer=True,
    )
    pct = f"{total['clean_pct']:.1f}%"
    shown = [r for r in rows if all_files or not r.skipped or r.classes or not r.parsed]
    cols = [
        ("file", f"TOTAL ({total['files']} files)"),
        ("parsed", f"{total['parsed']}/{total['files']}"),
        ("idempotent", f"{total['idempotent']}/{total['files']}"),
        ("classes", str(total["classes"])),
        ("converted", f"{total['converted']} ({total['converted_pct']:.1f}%)"),
        ("clean", f"{total['clean']} ({pct})"),
        ("findings", _severity_cell(Counter(total["findings"]))),
        ("top rules", ""),
    ]
    for name, footer in cols:
        table.add_column(
            name,
            footer=footer,
            justify="left" if name in ("file", "findings", "top rules") else "right",
            no_wrap=name != "top rules",
        )
    for r in shown:
        top = ", ".join(f"{k.removeprefix('L2N-')}×{n}" for k, n in r.rules.most_common(3))
        table.add_row(
            r.path,
            "yes" if r.parsed else "[red]NO[/]",
            "yes" if r.idempotent else "[red]NO[/]",
            str(r.classes),
            str(r.converted),
            str(r.clean),
            _severity_cell(r.severities),
            top,
        )
    console.print(table)
    if len(shown) < len(rows):
        console.print(
            f"({len(rows) - len(shown)} files without Linen were copied unchanged; --all-files lists them)"
        )
    rules = Table(title="findings by rule (all files)", title_justify="left")
    for name in ("rule", "severity", "findings"):
        rules.add_column(name, justify="right" if name == "findings" else "left")
    from linen2nnx.migrate.rules import RULES

    for rule_id, n in sorted(total["by_rule"].items(), key=lambda kv: (-kv[1], kv[0])):
        rules.add_row(rule_id, RULES[rule_id].severity.value if rule_id in RULES else "?", str(n))
    console.print(rules)
    if total.get("traced"):
        console.print("traced with `--trace` (own example batches): " + ", ".join(total["traced"]))
    if total.get("builds"):
        b = Counter(total["builds"])
        console.print(
            f"clean classes built from the migrated files (nnx.eval_shape): {b['built']} built, "
            f"[red]{b['failed']} failed[/], {b['blocked']} failed inside a class with a manual finding, "
            f"{b['unchecked']} unchecked (no config known), {b['abstract']} abstract, "
            f"{b['unimportable']} not importable, {b['environment']} not importable here (Linen neither)"
        )
        for r in rows:
            for x in r.builds:
                if x.status in ("failed", "unimportable", "blocked"):
                    console.print(f"  {r.path}: {x.cls}: {x.status}: {x.detail}")
    console.print(
        f"TOTAL: {total['files']} files, {total['parsed']} parse, {total['idempotent']} idempotent; "
        f"{total['classes']} Linen module classes, {total['converted']} converted, "
        f"{total['clean']} converted with no manual finding = {pct}"
    )


def download_examples(dest: Path) -> Path:
    """``pip download`` the installed flax's sdist into ``dest`` and return its ``examples/``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from outside_parity import SourceUnavailable, download_flax_sdist

    try:
        return download_flax_sdist(dest) / "examples"
    except SourceUnavailable as e:
        raise SystemExit(str(e)) from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", metavar="DIR", help="a Linen source tree (read only; copied first)")
    ap.add_argument(
        "--download",
        action="store_true",
        help="without DIR: pip-download the installed flax's sdist and use its examples/",
    )
    ap.add_argument("-j", "--jobs", type=int, default=1, help="processes; 0 = one per CPU (default: 1)")
    ap.add_argument("--json", metavar="FILE", help="also write per-file rows and totals as JSON")
    ap.add_argument(
        "--min-clean-pct", type=float, metavar="P", help="exit 1 when fewer than P%% of classes are clean"
    )
    ap.add_argument("--all-files", action="store_true", help="list files without Linen too")
    ap.add_argument(
        "--traces",
        metavar="DIR",
        default=str(TRACES),
        help="trace specs (EXAMPLE = 'folder/file.py' + linen_side(example)): each covered folder is "
        "migrated again with `--trace` (default: bench/outside_traces)",
    )
    ap.add_argument("--no-traces", action="store_true", help="migrate everything without a trace")
    ap.add_argument(
        "--no-builds", action="store_true", help="skip building the clean classes (bench/clean_builds.py)"
    )
    ap.add_argument(
        "--build-path",
        action="append",
        default=[],
        metavar="DIR",
        help="put DIR on sys.path while building (where the corpus's own dependencies are installed)",
    )
    ap.add_argument(
        "--require-builds", action="store_true", help="exit 1 when a clean class fails to build or import"
    )
    args = ap.parse_args(argv)
    jobs = args.jobs or os.cpu_count() or 1

    with tempfile.TemporaryDirectory(prefix="l2n-sdist-") as dl:
        if args.dir:
            src = Path(args.dir)
            if not src.is_dir():
                ap.error(f"{src}: not a folder")
        elif args.download:
            src = download_examples(Path(dl))
        else:
            ap.error("give DIR or --download")
        traces = [] if args.no_traces else load_trace_specs(Path(args.traces))
        rows, total = measure(src, jobs, traces, builds=not args.no_builds, build_paths=args.build_path)
        render(rows, total, f"linen2nnx migrate on {src} (jobs={jobs})", all_files=args.all_files)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"source": str(src), "total": total, "files": [r.to_json() for r in rows]}, indent=2)
            + "\n"
        )
    broken = total.get("builds", {}).get("failed", 0) + total.get("builds", {}).get("unimportable", 0)
    if args.require_builds and broken:
        print(f"{broken} clean classes do not build", file=sys.stderr)
        return 1
    if args.min_clean_pct is not None and total["clean_pct"] < args.min_clean_pct:
        print(f"clean {total['clean_pct']:.1f}% < --min-clean-pct {args.min_clean_pct:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
