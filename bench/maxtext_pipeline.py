"""How close does ``migrate`` get to MaxText's own NNX pipeline?

    python bench/maxtext_pipeline.py [--mirror GIT_DIR] [--rev REV] [--src DIR] [--json FILE]

MaxText keeps its Linen pipeline (``layers/pipeline_deprecated.py`` with ``utils/pipeline_utils.py``)
beside the NNX one its authors wrote (``layers/pipeline.py``, which uses the same
``pipeline_utils.py``). This script runs ``migrate`` on the Linen pair and compares the output with
the authors' NNX, statically (``ast``):

- the classes and their bases;
- the lifted transforms called (``nn.*`` / ``nnx.*`` / ``jax.*`` lifts, ``transform_metadata``);
- the partition names given to the vmapped axes (``PARTITION_NAME`` entries);
- Linen transforms left around converted NNX ones (``nn.scan(nnx.remat(...))``), which cannot run;
- the findings ``migrate`` reports, by rule.

The files are read at run time from a MaxText git directory (``--mirror``, ``git show REV:path``) or
a checkout (``--src``); none is kept. Importing MaxText to compare the state trees needs its
dependencies (``aqt``, its config system); the script tries and says why it cannot.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIRROR = Path("/work/.mirror/AI-Hypercomputer+maxtext/repo")
FILES = {
    "linen": "src/maxtext/layers/pipeline_deprecated.py",
    "nnx": "src/maxtext/layers/pipeline.py",
    "utils": "src/maxtext/utils/pipeline_utils.py",
}
LIFTS = (
    "nn.vmap", "nn.scan", "nn.remat", "nn.map_variables", "nnx.vmap", "nnx.scan", "nnx.remat",
    "nnx.transform_metadata", "nnx.bridge.ToNNX", "nnx.split", "nnx.merge", "jax.vmap",
    "jax.lax.scan", "jax.checkpoint", "jax.remat",
)  # fmt: skip
METADATA_KWARGS = ("metadata_params", "transform_metadata")


# ---- getting the files ---------------------------------------------------------------------------
def extract(dest: Path, mirror: Path | None, rev: str, src: Path | None) -> dict[str, Path]:
    """The three MaxText files under ``dest`` (their repository paths kept), from a checkout or git."""
    out = {}
    for key, rel in FILES.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src is not None:
            target.write_text((src / rel).read_text())
        else:
            text = subprocess.run(
                ["git", "--git-dir", str(mirror), "show", f"{rev}:{rel}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            target.write_text(text)
        out[key] = target
    return out


def run_migrate(files: dict[str, Path], out_dir: Path) -> tuple[dict[str, Path], list[Any]]:
    """``migrate --out-dir`` of the Linen pipeline and its utils: the written files and the findings."""
    from linen2nnx.migrate.engine import Mode, migrate_paths

    result = migrate_paths([files["linen"], files["utils"]], Mode.OUT_DIR, out_dir=out_dir)
    written = {Path(r.rel).name: Path(r.target) for r in result.files if r.target is not None}
    return written, list(result.findings)


# ---- static analysis -----------------------------------------------------------------------------
def dotted(node: ast.AST) -> str:
    """``nn.vmap`` for ``nn.vmap``; ``""`` for anything that is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _partition_names(node: ast.Dict) -> list[str]:
    return [
        v.value
        for k, v in zip(node.keys, node.values)
        if k is not None and dotted(k).endswith("PARTITION_NAME") and isinstance(v, ast.Constant)
    ]


def _mixed(call: ast.Call, name: str) -> list[str]:
    """``nn.scan(nnx.remat(...))``: a Linen lift whose arguments hold an NNX lift."""
    if not name.startswith("nn."):
        return []
    inner = [dotted(n.func) for a in call.args for n in ast.walk(a) if isinstance(n, ast.Call)]
    return [f"{name}({i}(...))" for i in inner if i.startswith("nnx.") and i in LIFTS]


def analyse(paths: list[Path]) -> dict[str, Any]:
    """Classes, lift calls, partition names and mixed nests of some source files."""
    classes: dict[str, list[str]] = {}
    lifts: collections.Counter[str] = collections.Counter()
    partitions: set[str] = set()
    mixed: list[str] = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = [ast.unparse(b) for b in node.bases]
            elif isinstance(node, ast.Call):
                name = dotted(node.func)
                if name in LIFTS:
                    lifts[name] += 1
                mixed += _mixed(node, name)
                lifts.update(f"{k.arg}=" for k in node.keywords if k.arg in METADATA_KWARGS)
            elif isinstance(node, ast.Dict):
                partitions.update(_partition_names(node))
    return {"classes": classes, "lifts": dict(lifts), "partitions": sorted(partitions), "mixed": mixed}


def try_import(src_root: Path) -> str:
    """Whether MaxText's NNX pipeline imports here (needed to build and compare state trees)."""
    code = "import maxtext.layers.pipeline, maxtext.layers.pipeline_deprecated"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=src_root, timeout=300
    )
    if proc.returncode == 0:
        return "importable"
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return f"not importable: {last}"


def compare(mirror: Path | None, rev: str, src: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="l2n-maxtext-") as tmp:
        files = extract(Path(tmp) / "in", mirror, rev, src)
        written, findings = run_migrate(files, Path(tmp) / "out")
        sides = {
            "linen": analyse([files["linen"], files["utils"]]),
            "migrated": analyse([written[files["linen"].name], written[files["utils"].name]]),
            "authors": analyse([files["nnx"], files["utils"]]),
        }
        imports = try_import(Path(tmp) / "in" / "src")
    return {"rev": rev, "sides": sides, "findings": findings_by_rule(findings), "state_tree": imports}


def findings_by_rule(findings: list[Any]) -> dict[str, dict[str, Any]]:
    """``migrate``'s findings by rule: severity, count, and ``file:line`` of each."""
    by_rule: dict[str, dict[str, Any]] = {}
    for f in findings:
        entry = by_rule.setdefault(f.rule, {"severity": f.severity.value, "count": 0, "lines": []})
        entry["count"] += 1
        entry["lines"].append(f"{Path(f.path).name}:{f.line}")
    return by_rule


# ---- output --------------------------------------------------------------------------------------
COLUMNS = ("linen", "migrated", "authors")


def _row(label: str, cells: list[Any]) -> str:
    return f"| {label} | " + " | ".join(str(c) for c in cells) + " |"


def report(numbers: dict[str, Any]) -> None:
    sides = numbers["sides"]
    print(f"MaxText pipeline at {numbers['rev']}: Linen input, `migrate` output, the authors' NNX\n")
    print(_row("lift", ["Linen", "migrate", "authors"]))
    print("|---|---|---|---|")
    names = [
        n
        for n in (*LIFTS, *(f"{k}=" for k in METADATA_KWARGS))
        if any(n in s["lifts"] for s in sides.values())
    ]
    for name in names:
        print(_row(f"`{name}`", [sides[c]["lifts"].get(name, 0) for c in COLUMNS]))
    print("\n" + _row("class", ["Linen", "migrate", "authors"]))
    print("|---|---|---|---|")
    for cls in sorted({c for s in sides.values() for c in s["classes"]}):
        cells = [
            ", ".join(sides[c]["classes"][cls]) or "(no base)" if cls in sides[c]["classes"] else "-"
            for c in COLUMNS
        ]
        print(_row(cls, cells))
    print("\n" + _row("other", ["Linen", "migrate", "authors"]))
    print("|---|---|---|---|")
    print(_row("partition names", [", ".join(sides[c]["partitions"]) or "-" for c in COLUMNS]))
    print(_row("Linen lift around an NNX lift", ["; ".join(sides[c]["mixed"]) or "-" for c in COLUMNS]))
    print_findings(numbers["findings"])
    print(f"\nstate trees: MaxText is {numbers['state_tree']}; compared statically above.")


def print_findings(by_rule: dict[str, dict[str, Any]]) -> None:
    print("\n| rule | severity | count | where |\n|---|---|---|---|")
    for rule, entry in sorted(by_rule.items()):
        print(f"| {rule} | {entry['severity']} | {entry['count']} | {', '.join(entry['lines'][:6])} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mirror", type=Path, default=MIRROR, help="a MaxText git directory")
    parser.add_argument("--rev", default="HEAD", help="the revision to read from --mirror")
    parser.add_argument("--src", type=Path, help="a MaxText checkout to read instead of --mirror")
    parser.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    args = parser.parse_args(argv)
    if args.src is None and not args.mirror.exists():
        print(f"error: no MaxText git directory at {args.mirror} (pass --mirror or --src)", file=sys.stderr)
        return 2
    numbers = compare(None if args.src else args.mirror, args.rev, args.src)
    report(numbers)
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
