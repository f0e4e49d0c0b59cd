"""How close is ``migrate``'s NNX of MaxText's ``decoders.py`` to the authors' ``nnx_decoders.py``?

    python bench/maxtext_decoders.py [--mirror GIT_DIR] [--rev REV] [--src DIR] [--scan off,on]
                                     [--blocks llama2,gemma,...] [--deps DIR] [--offline] [--json FILE]

MaxText's ``layers/decoders.py`` is a Linen ``Decoder`` (``nn.scan``, remat, the pipeline) around
NNX layers wrapped back into Linen; its authors' NNX version is ``layers/nnx_decoders.py``. This
script builds, for one tiny config of MaxText's own config system (``base.yml``, two layers, every
dimension small; ``scan_layers`` off and on; other decoder blocks with ``--blocks``), three state trees without allocating arrays:

- ``authors``: ``NNXDecoder`` under ``nnx.eval_shape``;
- ``linen``: ``Decoder.init`` under ``jax.eval_shape`` (its ``params``; the names of the
  ``LogicallyPartitioned`` boxes), its paths sent through the name map ``migrate`` wrote;
- ``migrated``: the ``Decoder`` that ``migrate`` writes from ``decoders.py``, under ``nnx.eval_shape``;

then calls the migrated ``Decoder`` once (built for real, the model is tiny) to show where the
submodules it still builds at call time stop it, and prints every difference of ``migrated`` and of
the mapped ``linen`` tree from ``authors``: paths on one side only, shapes, dtypes, partition
(sharding) names, with totals. Parameters and the other state (RNG keys and counts) are counted apart.

The source is copied to a temporary folder (``--mirror``: ``git archive`` of ``src/maxtext``;
``--src``: a checkout). Its Python dependencies are installed there with ``pip install --no-deps``
one missing module at a time; modules that only download or only run on accelerators are stubbed,
and the run says which. On a Python older than 3.12 the few ``type X = ...`` aliases are rewritten
as plain assignments in the copy. Exit 0 when the comparison ran (differences are the result), 2
without a source, 3 when MaxText cannot be imported (the missing module is named).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TREES = BENCH / "maxtext_decoders_trees.py"
SRC = "src/maxtext"
MIGRATED_MODULE = "maxtext.layers.linen2nnx_migrated_decoders"
ROOT_CLASS = "maxtext.layers.decoders.Decoder"
# Imported by MaxText's modules but needed neither to build nor to shape the decoder.
STUBS = {
    "pathwaysutils": "Pathways runtime of TPU clusters",
    "tokamax": "GPU / TPU attention and matmul kernels",
    "huggingface_hub": "downloads from the Hugging Face Hub",
    "transformers": "Hugging Face models, for checkpoint conversion only",
}
PIP_NAMES = {"aqt": "aqtp", "yaml": "PyYAML"}  # where the distribution is not named as the module
MAX_INSTALLS = 40
KINDS = ("only on this side", "only in authors", "shape", "dtype", "sharding")


@functools.cache
def _pipeline_helpers() -> Any:
    """``bench/maxtext_pipeline.py``: its mirror default and its findings table are shared."""
    spec = importlib.util.spec_from_file_location("bench_maxtext_pipeline", BENCH / "maxtext_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ImportProblem(Exception):
    """MaxText does not import here: ``missing`` is the module, ``detail`` what was tried."""

    def __init__(self, missing: str, detail: str) -> None:
        super().__init__(f"MaxText cannot be imported: no module named {missing!r} ({detail})")
        self.missing = missing


# ---- the source ----------------------------------------------------------------------------------
def extract_tree(dest: Path, mirror: Path | None, rev: str, src: Path | None) -> Path:
    """``src/maxtext`` copied under ``dest``; returns the folder to put on ``sys.path``."""
    root = dest / "src"
    if src is not None:
        inner = src / SRC if (src / SRC).is_dir() else src / "maxtext"
        if not inner.is_dir():
            raise FileNotFoundError(f"{src} holds neither {SRC} nor maxtext/")
        shutil.copytree(inner, root / "maxtext", ignore=shutil.ignore_patterns("__pycache__", "assets"))
        return root
    archive = dest / "maxtext.tar"
    with archive.open("wb") as out:  # assets (tokenizers) are large and may be absent from a mirror
        cmd = ["git", "--git-dir", str(mirror), "archive", rev, SRC, f":(exclude){SRC}/assets"]
        subprocess.run(cmd, stdout=out, check=True, stderr=subprocess.DEVNULL)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return root


TYPE_ALIAS = re.compile(r"^(\s*)type ([A-Za-z_]\w*)\s*=", re.MULTILINE)


def patch_for_python(root: Path) -> list[str]:
    """Python 3.12 ``type X = ...`` aliases as ``X = ...`` when this Python is older (the copy only)."""
    if sys.version_info >= (3, 12):
        return []
    patched = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        new = TYPE_ALIAS.sub(r"\1\2 =", text)
        if new != text:
            path.write_text(new)
            patched.append(str(path.relative_to(root)))
    return patched


# ---- the environment -----------------------------------------------------------------------------
def run_trees(root: Path, deps: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """The tree builder in a child process with MaxText on its path: exit code, JSON, stderr tail."""
    env_path = f"{root}:{deps}"
    cmd = [sys.executable, str(TREES), "--stubs", ",".join(STUBS), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=900, env=_env(env_path))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    data = json.loads(lines[-1]) if lines else {}
    return proc.returncode, data, "\n".join(proc.stderr.strip().splitlines()[-6:])


def _env(pythonpath: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=pythonpath, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")


def pip_install(name: str, deps: Path) -> str | None:
    """``pip install --no-deps --target deps NAME``; the error's last line, or None."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(deps), name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode == 0:
        return None
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
    return (errors or proc.stderr.strip().splitlines() or ["?"])[-1]


def ensure_deps(root: Path, deps: Path, offline: bool) -> list[str]:
    """Install what MaxText's decoders import, one missing module at a time; the names installed."""
    installed: list[str] = []
    for _ in range(MAX_INSTALLS):
        rc, data, err = run_trees(root, deps, "--probe")
        if rc == 0:
            return installed
        missing = data.get("missing")
        if not missing:
            raise ImportProblem("?", f"the import failed otherwise: {err}")
        top = missing.split(".")[0]
        name = PIP_NAMES.get(top, top)
        if offline or name in installed:
            why = "--offline" if offline else f"{name} was installed and it is still missing"
            raise ImportProblem(missing, why)
        failure = pip_install(name, deps)
        if failure:
            raise ImportProblem(missing, f"pip install {name}: {failure}")
        installed.append(name)
    raise ImportProblem("?", f"still missing modules after {MAX_INSTALLS} installs")


# ---- migrate -------------------------------------------------------------------------------------
def run_migrate(root: Path, out: Path) -> tuple[Path, Any, list[Any]]:
    """``migrate --out-dir`` of ``layers/decoders.py``; the output goes back into the copied tree."""
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.namemap import NameMap

    source = root / "maxtext" / "layers" / "decoders.py"
    map_path = out / "linen2nnx-map.json"
    result = migrate_paths([source], Mode.OUT_DIR, out_dir=out, name_map_path=map_path)
    written = next(Path(r.target) for r in result.files if r.target is not None)
    target = root / Path(*MIGRATED_MODULE.split(".")).with_suffix(".py")
    shutil.copy(written, target)
    return target, NameMap.load(map_path), list(result.findings)


def markers_above(path: Path, line: int) -> list[str]:
    """The rules of the ``TODO(linen2nnx)`` comments right above ``line`` of a migrated file."""
    lines = path.read_text().splitlines()[: max(line - 1, 0)]
    rules = []
    for text in reversed(lines):
        if not text.strip().startswith("#"):
            break
        found = re.search(r"TODO\(linen2nnx\): (L2N-[A-Z]+-\d+)", text)
        if found:
            rules.append(found.group(1))
    return rules[::-1]


def map_linen(leaves: dict[str, Any], name_map: Any) -> tuple[dict[str, Any], list[str]]:
    """The Linen paths through the name map; those it cannot place keep their path and are listed."""
    out, unplaced = {}, []
    for path, info in leaves.items():
        parts = tuple(int(p) if p.isdigit() else p for p in path.split("/"))
        try:
            new = "/".join(map(str, name_map.to_nnx_path(ROOT_CLASS, "params", parts)))
        except KeyError:
            new = path
            unplaced.append(path)
        out[new] = {**info, "type": "Param"}
    return out, unplaced


# ---- comparing -----------------------------------------------------------------------------------
def _is_param(info: dict[str, Any]) -> bool:
    return info.get("type") in ("Param", "params")


def diff_trees(left: dict[str, Any], right: dict[str, Any]) -> list[dict[str, Any]]:
    """Every difference of ``left`` from ``right``: one row per path and kind, sorted by path."""
    rows = []
    for path in sorted(set(left) | set(right)):
        a, b = left.get(path), right.get(path)
        group = "params" if _is_param(a or b) else "other state"
        if a is None or b is None:
            kind = "only in authors" if a is None else "only on this side"
            rows.append({"group": group, "kind": kind, "path": path, "this": _show(a), "authors": _show(b)})
            continue
        for field in ("shape", "dtype", "sharding"):
            if a[field] != b[field]:
                rows.append(
                    {"group": group, "kind": field, "path": path, "this": a[field], "authors": b[field]}
                )
    return rows


def _show(info: dict[str, Any] | None) -> str:
    if info is None:
        return "-"
    names = ",".join(str(n) for n in info["sharding"]) if info.get("sharding") else "-"
    return f"{info['type']} {tuple(info['shape'])} {info['dtype']} ({names})"


def totals(rows: list[dict[str, Any]], left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Per group (params, other state): the leaves on each side and the differences by kind."""
    out: dict[str, Any] = {}
    for group in ("params", "other state"):
        want = group == "params"
        mine = [r for r in rows if r["group"] == group]
        out[group] = {
            "this side": sum(1 for i in left.values() if _is_param(i) == want),
            "authors": sum(1 for i in right.values() if _is_param(i) == want),
        }
        for kind in KINDS:
            out[group][kind] = sum(1 for r in mine if r["kind"] == kind)
    return out


def compare_config(built: dict[str, Any], name_map: Any) -> dict[str, Any]:
    """The comparisons of one config: ``migrated`` and mapped ``linen`` against ``authors``."""
    authors = built["authors"].get("leaves")
    out: dict[str, Any] = {"config": built["config"], "sides": {}, "comparisons": {}}
    if "migrated call" in built:
        out["migrated call"] = built["migrated call"]
    for side in ("authors", "linen", "migrated"):
        entry = built.get(side, {"error": "not built"})
        out["sides"][side] = (
            {"built": True, "leaves": len(entry["leaves"])}
            if "leaves" in entry
            else {"built": False, "error": entry["error"], "where": entry.get("where")}
        )
    if authors is None:
        return out
    trees = {}
    if "leaves" in built.get("migrated", {}):
        trees["migrated"] = built["migrated"]["leaves"]
    if "leaves" in built["linen"]:
        trees["linen (name map)"], out["unplaced"] = map_linen(built["linen"]["leaves"], name_map)
    for name, tree in trees.items():
        rows = diff_trees(tree, authors)
        out["comparisons"][name] = {"totals": totals(rows, tree, authors), "rows": rows}
    return out


def compare(mirror: Path | None, rev: str, src: Path | None, args: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="l2n-maxtext-decoders-") as tmp:
        root = extract_tree(Path(tmp), mirror, rev, src)
        patched = patch_for_python(root)
        deps = Path(args.deps) if args.deps else Path(tmp) / "deps"
        deps.mkdir(parents=True, exist_ok=True)
        installed = ensure_deps(root, deps, args.offline)
        migrated, name_map, findings = run_migrate(root, Path(tmp) / "out")
        configs, stubbed = [], set()
        for block, scan in [(b, s) for b in args.blocks for s in args.scan]:
            extra = ["--block", block] if block else []
            rc, built, err = run_trees(
                root, deps, "--scan", str(int(scan)), "--migrated", MIGRATED_MODULE, *extra
            )
            if rc != 0 or "authors" not in built:
                raise RuntimeError(
                    f"building the trees failed ({block or 'base.yml'}, scan_layers={scan}): {err}"
                )
            stubbed |= set(built.pop("stubbed", []))
            call = built.get("migrated call", {})
            if call.get("where", "").startswith(migrated.name):
                call["marked"] = markers_above(migrated, call["line"])
            configs.append(compare_config(built, name_map))
    return {
        "rev": rev if src is None else str(src),
        "environment": {
            "installed": installed,
            "kept deps folder": args.deps,
            "stubbed": {s: STUBS[s] for s in sorted(stubbed)},
            "patched for this Python": patched,
        },
        "findings": _pipeline_helpers().findings_by_rule(findings),
        "configs": configs,
    }


# ---- output --------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return "(" + ", ".join(str(v) for v in value) + ")"
    return str(value).replace("|", "/")


def report_config(entry: dict[str, Any]) -> None:
    cfg = entry["config"]
    print(f"\n## {cfg['decoder_block']}, {cfg['layers']} layers, scan_layers={cfg['scan_layers']}\n")
    for side, state in entry["sides"].items():
        if state["built"]:
            print(f"- {side}: built, {state['leaves']} leaves")
        else:
            print(f"- {side}: NOT BUILT at {state['where']}: {state['error']}")
    call = entry.get("migrated call", {})
    if "output" in call:
        print(f"- migrated, called once: ran, output {call['output']}")
    elif call:
        marked = ", ".join(call.get("marked", [])) or "no finding marks it"
        print(f"- migrated, called once: STOPPED at {call['where']} ({marked}): {call['error']}")
    if entry.get("unplaced"):
        print(f"- linen paths the name map cannot place (kept as they are): {len(entry['unplaced'])}")
    for name, comp in entry["comparisons"].items():
        print(f"\n### {name} vs authors\n")
        print("| group | this side | authors | " + " | ".join(KINDS) + " |")
        print("|---" * (3 + len(KINDS)) + "|")
        for group, t in comp["totals"].items():
            cells = [group, t["this side"], t["authors"], *(t[k] for k in KINDS)]
            print("| " + " | ".join(str(c) for c in cells) + " |")
        if comp["rows"]:
            print("\n| group | difference | path | this side | authors |\n|---|---|---|---|---|")
        for r in comp["rows"]:
            cells = (r["group"], r["kind"], f"`{r['path']}`", _cell(r["this"]), _cell(r["authors"]))
            print("| " + " | ".join(cells) + " |")


def report_summary(configs: list[dict[str, Any]]) -> None:
    """One line per config and comparison: the totals of the tables above."""
    print("\n## Totals\n")
    print(
        "| config | compared with authors | params (this / authors) | "
        + " | ".join(KINDS)
        + " | other state (this / authors) |"
    )
    print("|---" * (4 + len(KINDS)) + "|")
    for entry in configs:
        cfg = entry["config"]
        label = f"{cfg['decoder_block'].split('.')[-1].lower()}, scan {'on' if cfg['scan_layers'] else 'off'}"
        for name, comp in entry["comparisons"].items():
            p, o = comp["totals"]["params"], comp["totals"]["other state"]
            cells = [label, name, f"{p['this side']} / {p['authors']}", *(p[k] for k in KINDS)]
            cells.append(f"{o['this side']} / {o['authors']}")
            print("| " + " | ".join(str(c) for c in cells) + " |")


def report(numbers: dict[str, Any]) -> None:
    env = numbers["environment"]
    print(
        f"MaxText decoders at {numbers['rev']}: `migrate` of decoders.py and its Linen tree vs nnx_decoders.py"
    )
    kept = (
        f" (into {env['kept deps folder']}, which holds earlier runs' too)" if env["kept deps folder"] else ""
    )
    print(f"\ninstalled (pip --no-deps){kept}: {', '.join(env['installed']) or 'nothing new'}")
    stubbed = "; ".join(f"{k} ({v})" for k, v in env["stubbed"].items())
    print(f"stubbed: {stubbed or 'nothing'}")
    if env["patched for this Python"]:
        print(f"`type X =` aliases rewritten for this Python: {', '.join(env['patched for this Python'])}")
    _pipeline_helpers().print_findings(numbers["findings"])
    for entry in numbers["configs"]:
        report_config(entry)
    report_summary(numbers["configs"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mirror", type=Path, default=_pipeline_helpers().MIRROR, help="a MaxText git directory"
    )
    parser.add_argument("--rev", default="HEAD", help="the revision to read from --mirror")
    parser.add_argument(
        "--src", type=Path, help="a MaxText checkout (holding src/maxtext) instead of --mirror"
    )
    parser.add_argument("--scan", default="off,on", help="scan_layers values to build: off, on or off,on")
    parser.add_argument(
        "--blocks",
        default="",
        help="MaxText decoder_block values, comma-separated (default: base.yml's, llama2)",
    )
    parser.add_argument("--deps", help="install the dependencies here and keep them (default: a temp folder)")
    parser.add_argument(
        "--offline", action="store_true", help="install nothing; name the first missing module"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    args = parser.parse_args(argv)
    args.scan = [s.strip() == "on" for s in args.scan.split(",") if s.strip()]
    args.blocks = [b.strip() for b in args.blocks.split(",") if b.strip()] or [""]
    if args.src is None and not args.mirror.exists():
        print(f"error: no MaxText git directory at {args.mirror} (pass --mirror or --src)", file=sys.stderr)
        return 2
    try:
        numbers = compare(None if args.src else args.mirror, args.rev, args.src, args)
    except ImportProblem as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    report(numbers)
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
