"""Every command's table in four formats: ``--format table|plain|json|csv`` and ``--wide``.

A command describes its output once, as a :class:`Listing` (columns and rows of text cells,
optionally typed records for JSON), and :func:`emit` prints it:

- ``table`` (default): a rich table. In a terminal it fits the terminal's width: the compact
  columns by default (``--wide`` adds the others), names never cut, free-text columns (reasons,
  errors) wrapped between words. A column whose value is the same on every row is said once in
  the title instead; a ``--wide`` column with no value on any row is left out. Piped or
  redirected, the table has every column on every row and is as wide as it needs, so no line
  wraps and a ``grep`` for a name or a shape finds it.
- ``plain``: a header line then one line per row, cells separated by tabs: every column, no
  colour, no box, nothing wrapped.
- ``json``: a list of objects (the records when the command gives them, else the cells).
- ``csv``: a header line then one line per row, every column.

Cells are always plain text: text from plugins and files is never read as rich markup.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "plain", "json", "csv")


@dataclass(frozen=True)
class Column:
    """One column of a listing.

    ``key`` names it in JSON and CSV, ``title`` heads it in tables. ``compact`` columns are shown
    by default; the others only with ``--wide`` (every format but ``table`` shows all). ``text``
    marks free text (reasons, errors) that may wrap between words in a terminal; other cells are
    never split. ``hoist``: when every row has the same value, a table says it once in its title.
    ``drop``: when a table is too wide for the terminal, ``--wide`` columns are left out first
    (right to left), then compact columns with ``drop`` > 0, lowest first; the title says which."""

    key: str
    title: str
    compact: bool = True
    justify: Literal["left", "right"] = "left"
    text: bool = False
    hoist: bool = False
    drop: int = 0


@dataclass
class Listing:
    """What a command prints: a title, its columns, one dict of text cells per row.

    ``records`` (same length as ``rows``) replaces the cells in JSON when given, with typed
    values; ``styles`` maps a column key to a function from a cell to a rich style (or ``None``);
    ``sections`` marks the rows after which a table draws a rule; ``notes`` are lines printed
    under a table (and nowhere else: the other formats are data)."""

    title: str
    columns: Sequence[Column]
    rows: list[dict[str, str]]
    records: list[dict[str, Any]] | None = None
    caption: str = ""
    styles: dict[str, Callable[[str], str | None]] = field(default_factory=dict)
    sections: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def duration(seconds: float) -> str:
    """A time per call as the commands print it: three significant digits, in ms from 1 ms up,
    else in us."""
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def add_format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--wide`` and ``--plain`` (short for ``--format plain``)."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default; fits the terminal, as wide as needed when piped), plain "
                             "(tab-separated lines, every column), json or csv")
    parser.add_argument("--wide", action="store_true", help="show every column of the table")
    parser.add_argument("--plain", dest="format", action="store_const", const="plain",
                        help="same as --format plain")


def _table_columns(listing: Listing, wide: bool, hoist: bool) -> tuple[list[Column], list[str]]:
    """The columns a table shows, and the ``title: value`` notes of the hoisted ones."""
    shown, hoisted = [], []
    for column in listing.columns:
        if not (wide or column.compact):
            continue
        values = {row.get(column.key, "") for row in listing.rows}
        if not column.compact and values <= {"", "-"}:  # nothing to say on any row
            continue
        if hoist and column.hoist and len(values) == 1 and listing.rows:
            value = next(iter(values))
            if value:
                hoisted.append(value)
            continue
        shown.append(column)
    return shown, hoisted


_GAP = 2  # columns between two columns: the right padding and the box's (blank) vertical rule


def _least_width(listing: Listing, column: Column) -> int:
    longest = max((len(row.get(column.key, "")) for row in listing.rows), default=0)
    if column.text:
        return min(24, max(longest, len(column.title)))
    return max(longest, len(column.title), 1)


def _fit(listing: Listing, columns: list[Column], width: int) -> tuple[list[Column], list[str]]:
    """``columns`` without those that must go for the table to fit ``width`` (see :class:`Column`)."""
    kept, dropped = list(columns), []
    order = [c for c in reversed(columns) if not c.compact]
    order += sorted((c for c in columns if c.compact and c.drop > 0), key=lambda c: c.drop)
    for column in order:
        needed = sum(_least_width(listing, c) for c in kept) + _GAP * (len(kept) - 1)
        if needed <= width:
            break
        kept.remove(column)
        dropped.append(column.title)
    return kept, dropped


def build_table(listing: Listing, wide: bool = False, hoist: bool = True, caption: bool = True,
                width: int | None = None) -> Table:
    """The rich table of a listing (see the module's docstring); ``hoist``: say a column whose
    value is the same on every row once, in the title; ``caption``: print the caption under it;
    ``width``: leave columns out (see :class:`Column`) until the table fits that many columns."""
    columns, hoisted = _table_columns(listing, wide, hoist)
    dropped: list[str] = []
    if width is not None:
        columns, dropped = _fit(listing, columns, width)
    title = listing.title + (f" ({', '.join(hoisted)})" if hoisted else "")
    if dropped:
        title += f" ({', '.join(dropped)} left out to fit {width} columns)"
    # Text, not strings: a title or caption is never read as markup.
    shown_caption = Text(listing.caption, style="table.caption") if caption and listing.caption else None
    table = Table(title=Text(title, style="table.title"), caption=shown_caption,
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, _GAP - 1, 0, 0),
                  caption_justify="left", title_justify="left")
    for column in columns:
        if column.text:
            table.add_column(column.title, justify=column.justify, overflow="fold",
                             min_width=_least_width(listing, column))
        else:
            table.add_column(column.title, justify=column.justify, no_wrap=True,
                             min_width=_least_width(listing, column))
    for index, row in enumerate(listing.rows):
        cells = []
        for column in columns:
            value = row.get(column.key, "")
            style = listing.styles.get(column.key)
            cells.append(Text(value, style=(style(value) if style else None) or ""))
        table.add_row(*cells, end_section=index in listing.sections)
    return table


def print_wide(console: Console, renderable: Any) -> None:
    """Print ``renderable`` to ``console`` at the terminal's width, or, piped, as wide as it needs
    (so that no line wraps and no cell is cut)."""
    if console.is_terminal:
        console.print(renderable)
        return
    needed = Measurement.get(console, console.options.update_width(100_000), renderable).maximum
    wide = Console(file=io.StringIO(), width=max(console.width, needed), highlight=False,
                   color_system=None, force_terminal=False)
    wide.print(renderable)
    text = "\n".join(line.rstrip() for line in wide.file.getvalue().splitlines())
    print(text, file=console.file, flush=True)


def _plain_cell(value: str) -> str:
    return " ".join(str(value).split())  # one line, no tabs: one row is one line


def plain_text(listing: Listing) -> str:
    """Header and rows, tab-separated, every column."""
    lines = ["\t".join(c.title for c in listing.columns)]
    lines += ["\t".join(_plain_cell(row.get(c.key, "")) for c in listing.columns) for row in listing.rows]
    return "\n".join(lines)


def csv_text(listing: Listing) -> str:
    """Header (column keys) and rows, every column."""
    handle = io.StringIO()
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow([c.key for c in listing.columns])
    for row in listing.rows:
        writer.writerow([row.get(c.key, "") for c in listing.columns])
    return handle.getvalue().rstrip("\n")


def json_text(listing: Listing) -> str:
    """The records (or the cells by column key) as a JSON list."""
    records = listing.records
    if records is None:
        records = [{c.key: row.get(c.key, "") for c in listing.columns} for row in listing.rows]
    return json.dumps(records, indent=2, default=str)


def emit(listing: Listing, fmt: str = "table", wide: bool = False, console: Console | None = None) -> None:
    """Print ``listing`` in ``fmt`` to ``console`` (default: gemmzoo's standard output console)."""
    if fmt != "table":
        text = {"plain": plain_text, "csv": csv_text, "json": json_text}[fmt](listing)
        # print(), not rich: rich would expand tabs, wrap lines and read brackets as markup
        file = console.file if console is not None else sys.stdout
        print(text, file=file, flush=True)
        return
    if console is None:
        from gemmzoo.cli.console import console as default

        console = default
    terminal = console.is_terminal
    table = build_table(listing, wide or not terminal, hoist=terminal, caption=terminal,
                        width=console.width if terminal else None)
    print_wide(console, table)
    # Piped, the caption is one line of its own (a table's caption wraps at the table's width).
    for note in listing.notes if terminal or not listing.caption else [listing.caption, *listing.notes]:
        console.print(note, markup=False, soft_wrap=not console.is_terminal, highlight=False)
