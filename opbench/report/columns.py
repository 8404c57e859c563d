"""Terminal tables that stay readable at any width: each column says how it may give way.

A column is required (drop=0) or optional (drop>0: the higher, the sooner it goes). When the
columns' natural widths do not fit the console, optional columns are dropped, highest first,
until they do; names wrap inside their max_width. `full` (the --wide flag) keeps every column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

# Borders and padding of one column in rich's default box: "│ x " = 3 cells, plus the last "│".
COLUMN_OVERHEAD = 3


@dataclass
class Column:
    header: str | Text
    cells: list[Text] = field(default_factory=list)
    drop: int = 0
    justify: str = "left"
    max_width: int | None = None

    def natural_width(self) -> int:
        header = self.header.plain if isinstance(self.header, Text) else self.header
        widest = max([cell_len(header), *(cell_len(c.plain) for c in self.cells)])
        if self.max_width is not None:
            # a column that wraps needs its longest word, at least
            widest = min(widest, max(self.max_width, _longest_word(self.cells)))
        return widest + COLUMN_OVERHEAD


def _longest_word(cells: Sequence[Text]) -> int:
    return max((cell_len(w) for c in cells for w in c.plain.split()), default=1)


def fit(columns: Sequence[Column], width: int, full: bool = False) -> list[Column]:
    """The columns to show within `width` cells (all of them when full)."""
    kept = list(columns)
    if full:
        return kept
    total = 1 + sum(c.natural_width() for c in kept)
    for column in sorted((c for c in kept if c.drop), key=lambda c: -c.drop):
        if total <= width:
            break
        kept.remove(column)
        total -= column.natural_width()
    return kept


def dropped(columns: Sequence[Column], kept: Sequence[Column]) -> list[Column]:
    return [c for c in columns if not any(c is k for k in kept)]


def table_of(columns: Sequence[Column], **options) -> Table:
    """A rich Table of the columns; rows are the columns' cells side by side."""
    table = Table(**options)
    for c in columns:
        table.add_column(
            c.header,
            justify=c.justify,
            max_width=c.max_width,
            overflow="fold",  # type: ignore[arg-type]
        )
    for row in zip(*(c.cells for c in columns), strict=True):
        table.add_row(*row)
    return table


class FittedTable:
    """A table that picks its columns when printed, from the width the console offers."""

    def __init__(self, columns: Sequence[Column], full: bool = False, **options) -> None:
        self.columns, self.full, self.options = list(columns), full, options

    def natural_width(self) -> int:
        """Cells needed to show every column unwrapped (`--wide` prints at this width)."""
        return 1 + sum(c.natural_width() for c in self.columns)

    def __rich_console__(self, console, options):
        yield table_of(fit(self.columns, options.max_width, self.full), **self.options)
