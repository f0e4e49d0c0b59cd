"""Renderers only: every report here is a pure function of a result (or its JSON dict); nothing in
this package compares, trains or converts anything.

- migration reports: :mod:`.migration` (text, JSON, SARIF 2.1.0, Markdown);
- parity reports, all read from the ``linen2nnx-parity/N`` dict (:mod:`.parity_data`):
  :mod:`.console` (rich), :mod:`.json_report`, :mod:`.parity_markdown`, :mod:`.junit`,
  :mod:`.html_report` with :mod:`.plots` (matplotlib, the ``html`` extra);
- conversion reports: :mod:`.console`, :mod:`.json_report`.
"""
