"""What the timer reads while a case's steps run, behind one interface: `Instrument`.

Four instruments read a case: its peak memory (`suites.measure.memory_probes`), its devices'
energy (`suites.measure.energy_meters`), its GPUs' clocks and power
(`suites.measure.telemetry_sampler`) and the CPU time it and everyone else took
(`suites.measure.cpu_meter`). Each says why it reads nothing here (`reason`), starts, and stops
with this process's readings; `record` then turns every rank's readings into the measurement's
fields (a collective: every rank calls it, for every instrument, in the same order).

The timer (`suites.measure.timing`) runs them as one `Instruments`: it starts those that cover
the warm-up after its first step (`covers_warm_up`: a case cut short is stored with its warm
steps' figures), starts them all anew before the timed blocks and stops them after; one whose counter
needs a longer window than the timed blocks lasted (`min_window_s`: an energy counter updated
every 100 ms) goes on reading over untimed blocks of the same step (`wanted_s`, then `stop`).
An instrument that fails costs the case its figures, never its timing — except an `essential`
one (the memory probe), whose error fails the case as any step's would.
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

#: What a window of timed blocks is called in a record; a case cut short reads its warm steps.
TIMED_BLOCKS = "timed blocks"
CUT_SHORT = "warm-up (cut short: no timed blocks)"


@dataclass(frozen=True)
class Window:
    """What one instrument's readings span: `steps` steps run `block_size` at a time, over the
    timed blocks, or over a cut-short case's warm steps."""

    steps: int
    block_size: int = 1
    cut_short: bool = False

    @property
    def span(self) -> str:
        return CUT_SHORT if self.cut_short else TIMED_BLOCKS


class Instrument(ABC):
    """Reads something of this process while the steps run, between `start` and `stop`."""

    #: Why it reads nothing here; "" where it reads something.
    reason: str = ""
    #: What it is, for the line saying it failed ("the energy meter failed: ...").
    what: str = "an instrument"
    #: Started for the warm-up too (after its first step, whose compilation is no step's), so a case
    #: cut short has its figure over the warm steps.
    covers_warm_up: bool = False
    #: Its error fails the case (True), or costs the case only this instrument's figures.
    essential: bool = False

    @property
    def min_window_s(self) -> float:
        """The shortest window it reads truly (0: any); the timer keeps it reading over untimed
        blocks of the same step until then."""
        return 0.0

    @abstractmethod
    def start(self) -> None:
        """Start reading, forgetting earlier readings (starting a started one starts it anew)."""

    @abstractmethod
    def stop(self) -> Any:
        """This process's readings since `start`."""

    @abstractmethod
    def record(self, runnable: "Runnable", readings: Any, window: Window, failure: str = "") -> dict[str, Any]:
        """The measurement's fields from every rank's `readings` (None: never started, as in a case
        cut short before the timed blocks; `failure`: why its start or stop failed) over `window`
        — a collective: every rank calls it."""


@dataclass
class _Run:
    """One instrument's state in a measurement."""

    instrument: Instrument
    started: bool = False
    running: bool = False
    readings: Any = None
    failure: str = ""
    steps: int = 0


class Instruments:
    """The instruments of one measurement, started, stopped and recorded together."""

    def __init__(self, instruments: Sequence[Instrument | None]) -> None:
        self.runs = [_Run(instrument) for instrument in instruments if instrument is not None]

    def _guarded(self, run: _Run, call: Callable[[], Any]) -> Any:
        """`call()`; where it raises, the failure is the instrument's (an essential one's is the case's)."""
        if run.failure:
            return None
        try:
            return call()
        except Exception as error:  # NVML, sysfs and /proc raise their own kinds
            if run.instrument.essential:
                raise
            run.failure = f"{run.instrument.what} failed: {type(error).__name__}: {str(error)[:200]}"
            return None

    def start(self, warm_up: bool = False) -> None:
        """Start every instrument anew (`warm_up`: only those that cover the warm-up)."""
        for run in self.runs:
            if warm_up and not run.instrument.covers_warm_up:
                continue
            run.started = run.running = True
            self._guarded(run, run.instrument.start)

    def wanted_s(self) -> float:
        """The longest window a running instrument that reads something wants (0: none)."""
        return max((run.instrument.min_window_s for run in self.runs
                    if run.running and not run.failure and not run.instrument.reason), default=0.0)

    def stop(self, steps: int, elapsed_s: float | None = None) -> None:
        """Stop the running instruments, whose readings span `steps` steps; with `elapsed_s`
        (the window so far), only those whose `min_window_s` it reaches."""
        for run in self.runs:
            if not run.running or (elapsed_s is not None and run.instrument.min_window_s > elapsed_s
                                   and not run.failure and not run.instrument.reason):
                continue
            run.running = False
            run.steps = steps
            run.readings = self._guarded(run, run.instrument.stop)

    def record(self, runnable: "Runnable", block_size: int, cut_short: bool = False) -> dict[str, Any]:
        """Every instrument's measurement fields, in order (each a collective)."""
        fields: dict[str, Any] = {}
        for run in self.runs:
            window = Window(run.steps, block_size, cut_short)
            fields.update(run.instrument.record(runnable, run.readings if run.started else None, window,
                                                run.failure))
        return fields

    @contextlib.contextmanager
    def stopped_on_error(self) -> Iterator[None]:
        """A step that raises leaves no instrument running (a sampling thread) behind it."""
        try:
            yield
        except BaseException:
            for run in self.runs:
                if run.running:
                    run.running = False
                    with contextlib.suppress(Exception):  # the step's error is the one to report
                        run.instrument.stop()
            raise
