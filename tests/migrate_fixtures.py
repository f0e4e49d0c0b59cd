"""Regenerate codemod fixture outputs: ``python tests/migrate_fixtures.py`` (review the diff!)."""

import sys
from pathlib import Path

from linen2nnx.migrate import migrate_source

FIXTURES = Path(__file__).parent / "fixtures" / "migrate"

if __name__ == "__main__":
    for src in sorted(FIXTURES.glob("*_in.py")):
        out = migrate_source(src.read_text(), src.name).output
        src.with_name(src.name.replace("_in.py", "_out.py")).write_text(out)
        print(f"wrote {src.name.replace('_in.py', '_out.py')}", file=sys.stderr)
