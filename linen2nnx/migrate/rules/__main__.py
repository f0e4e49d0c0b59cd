from pathlib import Path

from linen2nnx.migrate.rules import render_rules_markdown

target = Path(__file__).resolve().parents[3] / "docs" / "rules.md"
target.write_text(render_rules_markdown())
print(f"wrote {target}")
