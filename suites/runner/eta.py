"""How long the rest of a run will take: each case's expected cost from its timing config,
scaled by how the finished cases compared with their own estimates."""
from __future__ import annotations

from dataclasses import dataclass, field

from suites.cases.timing_config import TimingConfig
from suites.measure.timing import MIN_BUDGET_SAMPLES, case_limit_s

#: Set-up, numerics check, teardown and storing of an in-process case, and a fresh process's
#: imports and rendezvous for a launched one: first guesses, corrected by the run's own progress.
#: The `quick` suite's in-process cases took 4-8 s each on its 2.5 s budget and 0.25 s warm-up
#: (2-core VM, load average 0.1-0.9).
IN_PROCESS_OVERHEAD_S = 2.0
LAUNCH_OVERHEAD_S = 8.0
#: A compiled case compiles twice, for its check and (cold) for its first step: torch.compile
#: of a small model's training step took 30-50 s each on a busy 2-core VM, a kernel's under
#: 2 s, XLA's 3-12 s; a first guess too.
COMPILE_OVERHEAD_S = 30.0


def steps_estimate_s(timing: TimingConfig, step_s: float | None) -> float:
    """Warm-up and the timing budget (a case stops earlier when it converges); where one step
    is predicted to take `step_s`, also the check's step and the first, and at least the
    fewest warm and timed steps the timer takes, up to the time it allows after the first."""
    if step_s is None:
        return timing.warmup_s + timing.budget_s
    after_first = (max(timing.warmup_s, timing.min_warmup_steps * step_s)
                   + max(timing.budget_s, MIN_BUDGET_SAMPLES * step_s))
    return 2 * step_s + min(after_first, case_limit_s(timing))


@dataclass
class Eta:
    """Estimated time remaining, in run order. `finished` after each case, with its wall time."""

    estimates: list[float]
    done: int = 0
    spent_s: float = 0.0
    estimated_done_s: float = field(default=0.0, repr=False)

    def finished(self, seconds: float) -> None:
        self.estimated_done_s += self.estimates[self.done]
        self.spent_s += seconds
        self.done += 1

    def left_out(self) -> None:
        """The next case is not run (`--max-minutes`): it costs nothing and teaches nothing."""
        self.done += 1

    def scale(self) -> float:
        """Actual / estimated time of the cases done."""
        return self.spent_s / self.estimated_done_s if self.estimated_done_s > 0 else 1.0

    def remaining_s(self) -> float:
        """The unfinished cases' estimates, scaled by actual / estimated time of those done."""
        return self.scale() * sum(self.estimates[self.done:])


def duration_text(seconds: float) -> str:
    """e.g. '45 s', '3 min 20 s', '1 h 05 min'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def busy_machine_note(load: float, cores: int) -> str:
    """'' where the 1-minute load average leaves a core per runnable process; else a note that
    the estimate will be short: it counts a case's own costs, while other work takes turns on
    its cores (the `quick` suite, estimated at 48 s, took 250 s at load 6-12 on 2 cores)."""
    if load <= cores:
        return ""
    return f"; load average {load:.1f} on {cores} cores: other work competes for them, expect longer"
