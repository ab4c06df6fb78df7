"""What `parbench run` prints when it ends: a table of the cases that ran (ok or failed), then what
did not run grouped by reason, one line per reason — a suite mostly unavailable here (its GPU
cases on a CPU machine) is one line, not a table of rows that say the same.

On a terminal the table is the full one (`suites.report.render.terminal.record_table`), as wide as
the terminal. Off one (a log, CI) it is laid out for LOG_WIDTH columns: case ids broken only
between their segments or parameters, a status of short words, the figures, and each failure's reason on a
line of its own below (the per-case lines above it said why a case was contended)."""
from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from rich.console import Console
from rich.table import Table

from suites.cases.vocabulary import Status
from suites.frontends.run_progress import flags
from suites.records.record import Record
from suites.report.render.terminal import number, record_table, seconds, terminal

#: Off a terminal (a log, CI), the width tables are laid out for: a log viewer's, not 200 columns.
LOG_WIDTH = 120
#: The widest a case id's line is in a log's table; a longer id breaks between its segments.
CASE_WIDTH = 56


def run_console() -> Console:
    """The console of `parbench run`: the terminal's width on one, LOG_WIDTH columns off one."""
    console = terminal()
    return console if console.is_terminal else Console(width=LOG_WIDTH)


def not_run_lines(records: Sequence[Record]) -> list[str]:
    """One line per reason the cases that did not run were unavailable: how many, why, and the
    case where it is one, most common first."""
    unavailable = [record for record in records if record.status is Status.UNAVAILABLE]
    reasons = Counter(record.reason or "no reason given" for record in unavailable)
    lines = []
    for reason, count in reasons.most_common():
        only = next(record.case.id for record in unavailable if (record.reason or "no reason given") == reason)
        lines.append(f"{count} unavailable: {reason}" + (f" ({only})" if count == 1 else ""))
    return lines


def case_lines(case_id: str, width: int = CASE_WIDTH) -> str:
    """`case_id` in lines of at most `width` characters, broken only after a '/' between its
    segments or a ',' between its parameters (a piece longer than `width` stays whole)."""
    lines = [""]
    for piece in re.split(r"(?<=[/,])", case_id):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append(piece)
        else:
            lines[-1] += piece
    return "\n".join(lines)


def log_table(records: Sequence[Record], title: str) -> Table:
    """The records that ran, for a log: at most LOG_WIDTH columns."""
    table = Table(title=title, show_lines=False, box=None, padding=(0, 1))
    table.add_column("case", no_wrap=True, max_width=CASE_WIDTH)
    table.add_column("status", max_width=24)
    for column in ("median", "IQR", "n", "TFLOP/s", "% peak t/m"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("check", no_wrap=True)
    for record in records:
        measured, metrics = record.measurement, record.metrics
        check = "-" if record.check is None else ("pass" if record.check.passed else "FAIL")
        peak = f"{number(metrics.get('pct_peak_table'), 2)}/{number(metrics.get('pct_peak_measured'), 2)}"
        table.add_row(case_lines(record.case.id), " ".join([str(record.status), *flags(record)]),
                      seconds(measured.median if measured else None), seconds(measured.iqr if measured else None),
                      str(measured.n) if measured else "-", number(metrics.get("tflops")),
                      peak if measured else "-", check)
    return table


def print_results(console: Console, records: Sequence[Record], title: str) -> None:
    """The table of the cases that ran, each failure's reason, then what did not run, by reason."""
    ran = [record for record in records if record.status is not Status.UNAVAILABLE]
    if ran and console.is_terminal:
        console.print(record_table(ran, title=title))
    elif ran:
        console.print(log_table(ran, title))
        for record in ran:
            if record.status is Status.FAILED:
                console.print(f"failed: {record.case.id}: {record.reason}", markup=False, highlight=False,
                              soft_wrap=True)
    for line in not_run_lines(records):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
