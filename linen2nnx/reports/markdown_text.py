"""Escaping for GitHub-flavoured Markdown, shared by the migration and parity reports.

Paths such as ``__init__`` or ``out[0]['logits']`` and messages with ``|`` or ``<b>`` must reach a
pull-request comment as written, not as emphasis, broken tables or raw HTML.
"""

from __future__ import annotations

import re


def md_text(text: str) -> str:
    """Plain text with Markdown and HTML metacharacters escaped."""
    out = text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "*_[]`":
        out = out.replace(ch, "\\" + ch)
    return out


def md_cell(text: str) -> str:
    """Text safe inside a GitHub table cell: one line, no pipes, no raw HTML, no stray emphasis
    (``__init__`` stays ``__init__``); balanced ```code``` spans are kept as code."""
    text = text.replace("\r", " ").replace("\n", " ")
    parts = text.split("`")
    if len(parts) % 2 == 0:  # unbalanced backticks: all of it is plain text
        parts = [text]
    out = [md_text(p) if i % 2 == 0 else f"`{p}`" for i, p in enumerate(parts)]
    return "".join(out).replace("|", "\\|")


def md_code(text: str) -> str:
    """``text`` as an inline code span that survives backticks and pipes inside a table cell."""
    text = text.replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)  # a run of backticks inside ends only a span of exactly its length
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
