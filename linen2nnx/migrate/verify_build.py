"""``migrate --trace --out-dir``: build what was written, so that exit 0 means the output builds and runs.

The pair spec ``migrate --trace`` writes (``linen2nnx_spec.py``) names the migrated root class and
the constructor arguments the example batch gives. Here the NNX model is built from that very
spec with ``nnx.eval_shape`` (no weights are allocated) and one eval forward is traced on the
example batch, abstractly again; any exception becomes a manual ``L2N-VERIFY-010`` finding at the
root class's definition in its input file, naming the exception.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from linen2nnx.migrate.engine import MigrationResult
from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.rules import VERIFY_010
from linen2nnx.migrate.trace import Trace

MAX_MESSAGE = 300


def build_error(spec_path: Path) -> str | None:
    """``"<Exception>: <message>"`` when the spec's NNX model fails to build or to run one eval
    forward on the example batch; None when it does both."""
    try:
        from flax import nnx

        from linen2nnx.spec import load_pair

        pair = load_pair(str(spec_path))
        args, kwargs = pair.linen.call_args(train=False)
        model = nnx.eval_shape(pair.make_nnx)
        nnx.eval_shape(lambda m: m(*args, **kwargs), model)
    except Exception as e:  # any failure is the finding: the output does not build or run
        first_line = (str(e).strip().splitlines() or [""])[0]
        message = f"{type(e).__name__}: {first_line}" if first_line else type(e).__name__
        return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    return None


def check_spec_builds(
    spec_path: Path,
    trace: Trace,
    result: MigrationResult,
    rule_enabled: Callable[[str], bool] = lambda _: True,
) -> Finding | None:
    """Build the model of ``spec_path``; a failure is added to the root class's file as a finding."""
    if not rule_enabled(VERIFY_010.id):
        return None
    error = build_error(spec_path)
    if error is None:
        return None
    key = result.name_map.find_class(trace.root_class, trace.root_module)
    entry = result.name_map.classes[key] if key is not None else None
    file_result = next((r for r in result.files if entry is not None and r.rel == entry.file), None)
    if file_result is None:
        file_result = result.files[0]
    line, col = class_position(file_result.source or "", trace.root_class)
    finding = Finding.of(
        VERIFY_010,
        file_result.rel,
        line,
        col,
        f"{trace.root_class} does not build and run from {spec_path.name}: {error}",
        f"run `linen2nnx check --spec {spec_path}:pair` with --traceback to see where",
    )
    file_result.findings.append(finding)
    return finding


def class_position(source: str, name: str) -> tuple[int, int]:
    """(line, column), 1-based, of the definition of class ``name`` (its first decorator's line
    excluded: the ``class`` keyword); (1, 1) when the source defines none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 1, 1
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node.lineno, node.col_offset + 1
    return 1, 1
