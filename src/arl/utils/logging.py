"""Console output: a rich console and the end-of-run table."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

# wide enough for run paths when output goes to a file or a CI log
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def results_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, v)
    return table
