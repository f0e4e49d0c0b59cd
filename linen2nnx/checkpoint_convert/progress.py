"""A progress bar (arrays and bytes) for long conversions, on a terminal only.

A multi-GB conversion takes minutes; without a bar it looks hung. In a pipe or a CI log a bar is
noise (and rich would print it as a stream of lines), so there the callback is ``None``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console


@contextlib.contextmanager
def progress_bar(console: Console) -> Iterator[Callable[[int, int, int, int], None] | None]:
    """Yield ``progress(leaves done, bytes done, leaves, bytes)`` for :func:`.api.convert`, or None."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("converting"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[arrays]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("convert", total=None, arrays="")

        def update(leaves: int, nbytes: int, total_leaves: int, total_bytes: int) -> None:
            bar.update(task, completed=nbytes, total=total_bytes, arrays=f"{leaves}/{total_leaves} arrays")

        yield update
