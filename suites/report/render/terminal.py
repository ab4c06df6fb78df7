"""Terminal tables of records (rich). Shared by `run`, `calibrate` and other commands."""
from __future__ import annotations

from typing import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from suites.cases.vocabulary import Status
from suites.records.record import Record


def terminal(stderr: bool = False) -> Console:
    """The console of every command (on stdout, or on stderr for warnings): one that does not
    squeeze tables into 80 columns when output goes to a file, a pipe or a CI log."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def size(value: float | None) -> str:
    """Bytes in binary units: '334 MiB', '1.21 GiB'."""
    if value is None:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def memory(metrics: dict[str, float | None]) -> str:
    """Peak of one device / rank process, and in brackets what the training took beyond the runtime."""
    if metrics.get("peak_memory_bytes") is None:
        return "-"
    state = metrics.get("training_state_bytes")
    return size(metrics["peak_memory_bytes"]) + ("" if state is None else
                                                 f" ({'+' if state >= 0 else '-'}{size(abs(state))})")


def samples_per_s(metrics: dict[str, float | None]) -> str:
    """Median-based / sustained (steps timed over seconds timed) samples per second."""
    if metrics.get("samples_per_s") is None:
        return "-"
    tokens = metrics.get("tokens_per_s")
    return (f"{number(metrics.get('samples_per_s'))} / {number(metrics.get('samples_per_s_sustained'))}"
            + ("" if tokens is None else f" ({number(tokens)} tok/s, MFU {number(metrics.get('mfu_pct'), 2)}%)"))


def record_table(records: Iterable[Record], title: str = "results") -> Table:
    table = Table(title=title, show_lines=False)
    for column, justify in (("case", "left"), ("status", "left"), ("median", "right"),
                            ("IQR", "right"), ("n", "right"), ("TFLOP/s", "right"),
                            ("samples/s med/sust", "right"), ("% peak tbl/meas", "right"),
                            ("peak mem (+state)", "right"), ("check", "left")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for record in records:
        m, x = record.measurement, record.metrics
        status = Text(str(record.status), style={Status.OK: "green", Status.UNAVAILABLE: "yellow",
                                                 Status.FAILED: "bold red"}[record.status])
        if record.emulated:
            status.append(" (emulated)", style="cyan")
        if m is not None and m.noisy:
            status.append(" noisy", style="magenta")
        if m is not None and m.cut_short:
            status.append(" cut short", style="magenta")
        if m is not None and m.straggler:
            status.append(" straggler", style="magenta")
        if record.contention is not None and record.contention.contended:
            status.append(f" contended ({record.contention.why})", style="magenta")
        if m is not None and m.exchange_share is not None:
            status.append(f" all-reduce {m.exchange_share:.0%}", style="cyan")
        peak = f"{number(x.get('pct_peak_table'), 2)} / {number(x.get('pct_peak_measured'), 2)}"
        check = str(record.check) if record.check else (record.reason or "-")
        table.add_row(Text(record.case.id), status, seconds(m.median if m else None),
                      seconds(m.iqr if m else None), str(m.n) if m else "-",
                      number(x.get("tflops")), samples_per_s(x),
                      peak if m else "-", memory(x), Text(check if record.status is Status.OK else record.reason))
    return table
