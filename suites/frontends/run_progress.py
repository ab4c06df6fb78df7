"""What `parbench run` shows while it runs: a live bar on a terminal; off one (a pipe, a log, CI,
`nohup`), one plain line per case as it ends — its place in the run, its id, status and figure,
the time elapsed and the time left — so a log says what the run did while it did it."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.records.record import Record
from suites.report.render.terminal import number, seconds
from suites.runner.eta import duration_text

#: What a case the cap did not start shows instead of a status.
LEFT_OUT = "left out (--max-minutes)"


class RunProgress(Protocol):
    def ended(self, index: int, case: Case, record: Record | None, elapsed_s: float, left_s: float) -> None:
        """Case `index` of the run ended: `record` (None: the cap left it out)."""


def flags(record: Record) -> list[str]:
    """The words that qualify a record's figure: emulated, noisy, cut short, straggler, contended."""
    measured = record.measurement
    return [word for word, on in (("emulated", record.emulated),
                                  ("noisy", measured is not None and measured.noisy),
                                  ("cut short", measured is not None and measured.cut_short),
                                  ("straggler", measured is not None and measured.straggler),
                                  ("contended", record.contention is not None and record.contention.contended))
            if on]


def figure(record: Record) -> str:
    """The case's headline: TFLOP/s, else samples/s, else its median step, with its `flags` (and
    why it was contended); why, where it did not run."""
    if record.status is not Status.OK:
        return record.reason or ""
    metrics, measured = record.metrics, record.measurement
    words = flags(record)
    if record.contention is not None and record.contention.contended and record.contention.why:
        words[-1] = f"contended ({record.contention.why})"
    if metrics.get("tflops") is not None:
        value = f"{number(metrics['tflops'])} TFLOP/s"
    elif metrics.get("samples_per_s") is not None:
        value = f"{number(metrics['samples_per_s'])} samples/s"
    else:
        value = f"median {seconds(measured.median if measured else None)}"
    return value + "".join(f", {word}" for word in words)


def plain_line(index: int, total: int, case_id: str, status: str, what: str, elapsed_s: float,
               left_s: float) -> str:
    """e.g. '[3/16 0:42, ~1 min 20 s left] ok matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8: 0.2 TFLOP/s'."""
    width = len(str(total))
    return (f"[{index:>{width}}/{total} {duration_text(elapsed_s)}, ~{duration_text(left_s)} left] "
            f"{status} {case_id}" + (f": {what}" if what else ""))


class PlainLines:
    """One line per case, for a console that is no terminal."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total = console, total

    def ended(self, index: int, case: Case, record: Record | None, elapsed_s: float, left_s: float) -> None:
        status, what = (LEFT_OUT, "") if record is None else (str(record.status), figure(record))
        self.console.print(plain_line(index + 1, self.total, case.id, status, what, elapsed_s, left_s),
                           markup=False, highlight=False, soft_wrap=True)


class LiveBar:
    """rich's live bar, on a terminal: cases done, elapsed, time left, the case running."""

    def __init__(self, progress: Progress, cases: Sequence[Case], left_s: float) -> None:
        self.progress, self.cases = progress, cases
        self.task = progress.add_task(cases[0].id.split("/")[0] if cases else "", total=len(cases),
                                      current=cases[0].id if cases else "", left=duration_text(left_s))

    def ended(self, index: int, case: Case, record: Record | None, elapsed_s: float, left_s: float) -> None:
        following = self.cases[index + 1].id if index + 1 < len(self.cases) else ""
        self.progress.update(self.task, advance=1, current=following, left=duration_text(left_s))


@contextmanager
def run_progress(console: Console, suite: str, cases: Sequence[Case], left_s: float) -> Iterator[RunProgress]:
    """The run's progress display over `cases`: a live bar on a terminal, plain lines off one."""
    if not console.is_terminal:
        yield PlainLines(console, len(cases))
        return
    with Progress(TextColumn(f"[bold]{suite}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("~{task.fields[left]} left"), TextColumn("{task.fields[current]}"),
                  console=console, transient=True) as progress:
        yield LiveBar(progress, cases, left_s)
