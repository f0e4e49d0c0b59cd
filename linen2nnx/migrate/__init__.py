"""migrate: libcst codemods that rewrite Linen source into idiomatic NNX.

Python API::

    from linen2nnx.migrate import migrate_paths, migrate_source, Mode
    result = migrate_paths(["src/"], Mode.OUT_DIR, out_dir="nnx_src")
    result.exit_code()  # 0 clean, 1 manual findings / would change, 2 errors
"""

from linen2nnx.migrate.engine import FileResult, MigrationResult, Mode, migrate_paths, migrate_source
from linen2nnx.migrate.findings import Finding, Severity

__all__ = ["FileResult", "Finding", "MigrationResult", "Mode", "Severity", "migrate_paths", "migrate_source"]
