"""HTML-ready tables: each cell has display text and a sort key (the inline script sorts by it).

Text stays raw here; the Jinja2 template escapes every cell (autoescape), so a machine label
or a reason from a results file can never become markup.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import pandas as pd

from suites.report.load.numbers import compact
from suites.report.render.terminal import number, seconds, size


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str
    css: str = ""
    #: An in-cell bar's length, 0-100 (% of the column's best), drawn by CSS; None: no bar.
    bar: float | None = None


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    numeric: list[bool] = field(default_factory=list)
    #: Columns of long unbroken identifiers (case ids, paths) that may wrap anywhere.
    identifier: list[bool] = field(default_factory=list)
    caption: str = ""
    #: Columns past `MAX_COLUMNS`, as tables of the first column plus the rest, shown on demand.
    more: list["Table"] = field(default_factory=list)


Format = Callable[[Any], str]


class Column(NamedTuple):
    """A table's column declared as data: its header, the tidy column it shows, how a value reads."""
    header: str
    key: str
    format: Format


def whole(table: Table) -> Table:
    """`table` with its on-demand columns (`Table.more`) put back beside its default ones: one
    table of every column, for exports and for reading a cell by its header."""
    headers, rows = list(table.headers), [list(row) for row in table.rows]
    numeric, identifier = list(table.numeric), list(table.identifier)
    for more in table.more:
        headers += more.headers[1:]
        numeric += more.numeric[1:]
        identifier += more.identifier[1:]
        for row, extra in zip(rows, more.rows):
            row.extend(extra[1:])
    return Table(headers, rows, numeric, identifier, table.caption)


def missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def fmt_seconds(value: Any) -> str:
    return "–" if missing(value) else seconds(float(value))


def fmt_number(value: Any) -> str:
    """'272k', '2285', '0.6218': no scientific notation for a rate (T3)."""
    return "–" if missing(value) else compact(float(value))


def fmt_ratio(value: Any) -> str:
    return "–" if missing(value) else f"{float(value):.2f}×"


def fmt_share(value: Any) -> str:
    """A share of the best row ('0.52×'), drawn with an in-cell bar of that length (`Cell.bar`)."""
    return fmt_ratio(value)


def fmt_bytes(value: Any) -> str:
    """Bytes in binary units, '334 MiB'."""
    return "–" if missing(value) else size(float(value))


def fmt_gib(value: Any) -> str:
    return "–" if missing(value) else f"{float(value):.4g} GiB"


def fmt_pct(value: Any) -> str:
    return "–" if missing(value) else f"{float(value):.1f}%"


def fmt_fraction(value: Any) -> str:
    """0.93 -> '93.0%' (scaling efficiency)."""
    return "–" if missing(value) else f"{100 * float(value):.1f}%"


def fmt_joules(value: Any) -> str:
    return "–" if missing(value) else f"{number(float(value), 4)} J"


def fmt_watts(value: Any) -> str:
    return "–" if missing(value) else f"{number(float(value), 4)} W"


def fmt_text(value: Any) -> str:
    return "" if missing(value) else str(value)


def fmt_id(value: Any) -> str:
    """Like fmt_text, for case ids and paths: the column may wrap inside the text."""
    return fmt_text(value)


def fmt_flag(value: Any) -> str:
    return "yes" if value is True or value == True else ""  # noqa: E712 (pandas booleans)


def fmt_check(value: Any) -> str:
    return "–" if missing(value) else ("pass" if bool(value) else "FAIL")


def fmt_fits(value: Any) -> str:
    return "–" if missing(value) else ("yes" if bool(value) else "NO")


NUMERIC = {fmt_seconds, fmt_number, fmt_ratio, fmt_share, fmt_pct, fmt_fraction, fmt_bytes, fmt_gib}


def _bar(value: Any) -> float | None:
    return None if missing(value) else round(100.0 * min(max(float(value), 0.0), 1.0), 1)


def _sort_key(value: Any) -> str:
    if missing(value):
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


def with_values(frame: pd.DataFrame, spec: list[Column]) -> list[Column]:
    """The columns of `spec` that some row of `frame` has a value in (T1: no empty column)."""
    return [column for column in spec if column.key in frame
            and frame[column.key].map(lambda value: not missing(value) and value != "").any()]


#: Rows of one table on the page: a fleet's tables would otherwise hold every machine's every
#: row (tens of MB at 100 machines). The first MAX_ROWS in the table's order are shown, and its
#: caption says how many more there are and where they all are (`parbench report --csv`).
MAX_ROWS = 200
#: Columns of a table shown by default (report-guide T1: no default table scrolls sideways at
#: 1400 px); a longer spec's further columns go to `Table.more`, beside its first (label) column.
MAX_COLUMNS = 12


def tabulate(frame: pd.DataFrame, spec: list[Column], caption: str = "",
          css: Callable[[pd.Series], str] | None = None, max_rows: int = MAX_ROWS) -> Table:
    """spec: the table's columns. `css` gives a class per row (e.g. 'emulated'). Only the
    first `max_rows` rows are formatted and kept; the caption says how many were left out."""
    if len(spec) > MAX_COLUMNS:
        head, rest = spec[:MAX_COLUMNS], spec[MAX_COLUMNS:]
        table = tabulate(frame, head, caption, css, max_rows)
        step = MAX_COLUMNS - 1
        table.more.extend(tabulate(frame, [spec[0], *rest[start:start + step]], "", css, max_rows)
                          for start in range(0, len(rest), step))
        return table
    if len(frame) > max_rows:
        more = (f"first {max_rows} of {len(frame)} rows shown; all of them are in the CSV export "
                f"(parbench report --csv)")
        caption = f"{caption} ({more})" if caption else more
        frame = frame.iloc[:max_rows]
    texts = pd.DataFrame({header: frame[column].map(fmt) for header, column, fmt in spec}, index=frame.index)
    keys = pd.DataFrame({header: frame[column].map(_sort_key) for header, column, _ in spec}, index=frame.index)
    classes = frame.apply(css, axis=1) if css is not None and not frame.empty else pd.Series("", index=frame.index)
    bars = pd.DataFrame({header: (frame[column].map(_bar) if fmt is fmt_share else None)
                         for header, column, fmt in spec}, index=frame.index)
    rows = [[Cell(text, key, row_class, bar) for text, key, bar in zip(text_row, key_row, bar_row)]
            for text_row, key_row, bar_row, row_class in zip(texts.itertuples(index=False),
                                                             keys.itertuples(index=False),
                                                             bars.itertuples(index=False), classes)]
    return Table(headers=[header for header, _, _ in spec], rows=rows,
                 numeric=[fmt in NUMERIC for _, _, fmt in spec],
                 identifier=[fmt is fmt_id for _, _, fmt in spec], caption=caption)
