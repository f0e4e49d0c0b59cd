"""Regenerate codemod fixture outputs: ``python tests/migrate_fixtures.py`` (review the diff!).

``--write-headers`` also rewrites each input's ``# findings:`` line to the findings the case gives
now: for a new fixture, or after a deliberate change of the rules (review that diff too).
"""

import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fixture_paths import Case, all_cases

from linen2nnx.migrate import FileResult, migrate_source
from linen2nnx.migrate.trace import Trace


@cache
def case_trace(case: Case) -> Trace | None:
    """The trace its ``# trace:`` line asks for: the input's class built with its defaults, applied to
    zeros of the given shape (shapes only: ``jax.eval_shape``)."""
    if case.trace() is None:
        return None
    import jax.numpy as jnp

    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import LinenSide, import_file

    cls_name, shape = case.trace()
    module = import_file(case.input, f"_fixture_trace_{case.name}")
    side = LinenSide(
        model=getattr(module, cls_name)(),
        batch={
            "x": {k: jnp.zeros(v) for k, v in shape.items()} if isinstance(shape, dict) else jnp.zeros(shape)
        },
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    return trace_linen(side)


def migrate_case(case: Case, source: str | None = None) -> FileResult:
    """Migrate a case's input (or ``source``) with the options and trace its header names."""
    return _migrated(case, case.input.read_text() if source is None else source)


@cache
def _migrated(case: Case, text: str) -> FileResult:
    """One migration per case and text in a test process: the output, idempotency and rules-contract
    tests all read the same result (keyed by the text, so an edited input is migrated again)."""
    return migrate_source(
        text, case.input.name, trace=case_trace(case), unsafe_fixes="unsafe-fixes" in case.options()
    )


def write_header(case: Case) -> None:
    """Put the findings the case gives now on its input's first line."""
    lines = case.input.read_text().splitlines(True)
    if lines and lines[0].startswith("# findings:"):
        lines = lines[1:]
    rules = sorted({f.rule for f in migrate_case(case, "".join(lines)).findings})
    case.input.write_text(f"# findings: {', '.join(rules) or 'none'}\n" + "".join(lines))


if __name__ == "__main__":
    for case in all_cases().values():
        if "--write-headers" in sys.argv:
            write_header(case)
        case.output.write_text(migrate_case(case).output)
        print(f"wrote {case.output.relative_to(case.output.parents[1])}", file=sys.stderr)
