"""`parbench run --max-minutes`: a cap the run holds to, whatever else runs on the machine.

A case starts only while the run's elapsed time plus the case's estimate fits the cap. The
estimate is the suite's first guess (`suites.runner.eta`) scaled by whichever says longer:

- how much longer than estimated the run's finished cases took (`Eta.scale`), and
- the share of this run's cores other work took since the last case (`MachineLoad`): where
  others keep a share s of the C cores busy (s x C busy threads), the scheduler shares the
  cores among them and a case's C threads, so the case runs (C + s x C) / C = 1 + s times as
  long (`slowdown`: twice, beside two busy loops on two cores). A measured share cannot tell two
  busy loops from eight (either fills the cores while the run waits), so the run's own
  actual / estimated time, the other scale, takes over once cases have finished.

What the cap never leaves out: a case that costs nothing (unavailable here, or refused as too
slow: an estimate of 0) is always recorded with its reason. What it keeps together: a compiled
case and its eager twin next to it in the run (`units`) start together or not at all, so a capped
`compile` suite never measures one side of a speedup. A case measured `contended` is measured
again only while that fits (`retries_that_fit`).

The margin: a capped run ends within the cap plus `margin_s` (MARGIN_SHARE of the cap, at least
MIN_MARGIN_S), the error one case's scaled estimate may make, counted from when the command
starts its work (Python's start-up and imports before it are not in it). The run's summary stores its
elapsed time beside the cap, so a run past it says so.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from suites.cases.case import Case
from suites.cases.vocabulary import Compile
from suites.errors import UserError
from suites.measure.cpu_meter import CpuMeter

#: The margin a capped run holds to past its cap: this share of the cap, at least MIN_MARGIN_S.
MARGIN_SHARE = 0.10
MIN_MARGIN_S = 30.0
#: A window shorter than this (a run of unavailable cases) says too little about the load: the
#: last longer window's share is kept.
MIN_WINDOW_S = 1.0

#: Reads the share of the run's cores other work took since its last call (None: not known).
ContentionReader = Callable[[], "float | None"]


def cap_seconds(max_minutes: float | None) -> float | None:
    """Seconds of `--max-minutes` (None: no cap); a cap that is no positive finite number of
    minutes is the user's error."""
    if max_minutes is None:
        return None
    if not math.isfinite(max_minutes) or max_minutes <= 0:
        raise UserError(f"--max-minutes must be a positive number of minutes, got {max_minutes}; "
                        f"e.g. --max-minutes 10, or leave it out to run every case")
    return max_minutes * 60.0


class MachineLoad:
    """The share of this process's cores that other processes (and the hypervisor) took since
    the last call: `suites.measure.cpu_meter.CpuMeter` over this process's tree (the run and
    the cases it launched), one window per call."""

    def __init__(self) -> None:
        self.meter = CpuMeter(root=os.getpid())
        self.meter.start()

    def __call__(self) -> float | None:
        usage = self.meter.stop()
        if usage is None or usage.wall_s < MIN_WINDOW_S:
            return None  # too short to say: the window goes on
        self.meter.start()
        return usage.others_core_share


def slowdown(others_share: float) -> float:
    """How much longer a case that keeps its cores busy runs where others keep `others_share` of
    them busy: 1 + s (the cores shared fairly among everyone's busy threads)."""
    return 1.0 + min(max(others_share, 0.0), 1.0)


def _eager_key(case: Case) -> tuple[object, ...]:
    """What a compiled case shares with its eager twin: everything but the compiler and its options."""
    params = tuple((name, value) for name, value in case.params if name != "compile_mode")
    return case.workload, case.framework, case.device, case.strategy, case.precision, case.n_devices, params


def units(cases: Sequence[Case]) -> list[tuple[int, ...]]:
    """The run's cases (indices, in order) in the groups the cap admits whole: an eager case with
    the compiled twins that follow it, every other case alone."""
    grouped: list[tuple[int, ...]] = []
    for index, case in enumerate(cases):
        if grouped and case.compile is not Compile.NONE:
            first = cases[grouped[-1][0]]
            if first.compile is Compile.NONE and _eager_key(first) == _eager_key(case):
                grouped[-1] = (*grouped[-1], index)
                continue
        grouped.append((index,))
    return grouped


@dataclass
class RunCap:
    """The cap of one run. `clock` is monotonic seconds and `contention` a `ContentionReader`
    (tests pass controlled ones)."""

    limit_s: float
    clock: Callable[[], float] = time.monotonic
    contention: ContentionReader = lambda: None
    left_out: list[Case] = field(default_factory=list)
    started: float = field(init=False)
    #: Others' share of the cores in the last window long enough to say.
    others_share: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def margin_s(self) -> float:
        return max(MARGIN_SHARE * self.limit_s, MIN_MARGIN_S)

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def scale(self, run_scale: float) -> float:
        """What a first-guess estimate is multiplied by now: the run's own actual / estimated
        (`run_scale`) or the slowdown others' share of the cores makes, whichever is larger."""
        share = self.contention()
        if share is not None:
            self.others_share = share
        return max(run_scale, slowdown(self.others_share), 1.0)

    def admits(self, estimate_s: float, run_scale: float = 1.0) -> bool:
        """Whether a unit of cases (`units`), estimated together at `estimate_s` (first guesses),
        still fits. A unit that costs nothing always fits."""
        return estimate_s <= 0 or self.elapsed_s() + estimate_s * self.scale(run_scale) <= self.limit_s

    def leave_out(self, case: Case) -> None:
        """`case` is not run: listed at the end of the run and in its summary."""
        self.left_out.append(case)

    def retries_that_fit(self, estimate_s: float, run_scale: float, retries: int) -> int:
        """How many of a case's `retries` (measured again while contended) fit in what is left,
        each as long as the case's scaled `estimate_s`; 0 for a case that costs nothing."""
        one = estimate_s * max(run_scale, slowdown(self.others_share), 1.0)
        if one <= 0:
            return retries
        left = self.limit_s - self.elapsed_s() - one
        return max(0, min(retries, int(left // one)))

    def past_text(self) -> str:
        """'' within the cap; else how far past it the run ended, and whether within the margin."""
        over = self.elapsed_s() - self.limit_s
        if over <= 0:
            return ""
        within = "within" if over <= self.margin_s else "past"
        return f"ended {over:.0f} s past the cap ({within} its margin of {self.margin_s:.0f} s)"

    def left_out_text(self) -> str:
        """'left out by --max-minutes: N cases: id, id, ...' ('' when none was)."""
        if not self.left_out:
            return ""
        ids = [case.id for case in self.left_out]
        return f"left out by --max-minutes: {len(ids)} cases: {', '.join(ids)}"
