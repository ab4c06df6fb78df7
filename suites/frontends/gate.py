"""A performance regression gate that does not flap on noisy, shared CI runners.

Three things keep it steady where plain timings swing:

- Relative times. Absolute step times on a shared runner drift by tens of percent from one job
  to the next (busy neighbours, CPU frequency, another host), so the gate compares a case's
  step time divided by the time of a fixed reference kernel measured interleaved with it
  (alternating blocks, same process, same seconds): what slows the machine slows both. The
  reference is a NumPy matmul that uses neither torch nor TensorFlow, so a framework
  regression is not normalised away.
- One thread. On a busy 2-core runner a multi-threaded kernel's time swings 3x or more from one
  block to the next (a barrier waits for a descheduled thread), while a single-threaded one
  stays within a few percent; a gated session therefore runs its frameworks on one thread
  (`run_single_threaded`). The gate judges the work a case does, not its parallel scaling.
- Confirmation. A case regresses when its relative time grew by more than the threshold in two
  measurements in a row: a first breach is re-measured, and the smaller ratio counts, because
  interference only ever adds time.

A baseline stores the relative times per case id. It comes from an earlier run on the same kind
of runner, or from earlier in the same job (e.g. the base commit measured just before the head).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from suites import knobs
from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework
from suites.errors import UserError
from suites.hardware.devices import descriptor

THRESHOLD_ENV = "PARBENCH_GATE_THRESHOLD"
DEFAULT_THRESHOLD = 0.20
BASELINE_FORMAT = "parbench-gate-baseline"
BASELINE_VERSION = 1

Step = Callable[[], None]


def threshold_from(value: float | str | None) -> float:
    """The threshold given (CLI), else $PARBENCH_GATE_THRESHOLD, else 20%; a fraction > 0."""
    if value is None:
        return knobs.read(THRESHOLD_ENV) or DEFAULT_THRESHOLD
    try:
        return knobs.fraction(str(value))
    except ValueError:
        raise UserError(f"gate threshold must be a fraction such as 0.2 (20%), got {value!r}") from None


#: Environment that makes frameworks loaded afterwards use one thread for their kernels.
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                     "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def run_single_threaded() -> None:
    """Make this process's framework kernels single-threaded.

    Must run before TensorFlow creates its thread pools (its first op): the environment is read
    then. torch, if already loaded, is switched directly.
    """
    os.environ.update(SINGLE_THREAD_ENV)
    for framework in Framework:
        module = descriptor(framework).loaded()
        if module is not None:
            descriptor(framework).use_one_thread(module)


class ReferenceKernel:
    """The yardstick: a fixed-size float32 matmul on random data, by NumPy's own loops.

    `einsum` without path optimisation never calls BLAS, so it is single-threaded whatever
    BLAS threading NumPy was loaded with.
    """

    def __init__(self, size: int = 192, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.a = rng.standard_normal((size, size), dtype=np.float32)
        self.b = rng.standard_normal((size, size), dtype=np.float32)
        self.out = np.empty((size, size), dtype=np.float32)
        self.name = f"numpy einsum float32 matmul {size}x{size}x{size}"

    def __call__(self) -> None:
        np.einsum("ij,jk->ik", self.a, self.b, out=self.out, optimize=False)


@dataclass(frozen=True)
class GateTiming:
    """How hard the gate measures one case."""

    #: Alternations of one case block and one reference block; the ratio is their median.
    pairs: int = 15
    #: Each block runs enough calls to last at least this long.
    block_min_s: float = 0.01


@dataclass(frozen=True)
class RelativeTime:
    """A case's step time over the reference kernel's time, measured interleaved."""

    ratio: float
    case_s: float
    reference_s: float
    pairs: int
    clock: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_problem(ratio: Any) -> str | None:
    """Why `ratio` cannot be a baseline's time relative to the reference (None: it can).

    Only a finite number > 0 can be compared: a NaN makes every comparison false (the gate
    would pass whatever was measured), 0 divides by zero, a negative one makes any time look
    faster, and a string or bool is no measurement at all."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        return f"{ratio!r} is not a number"
    if not math.isfinite(ratio) or ratio <= 0:
        return f"{ratio!r} is not a finite number > 0"
    return None


#: "cpu": the process's CPU time: what a single-threaded step consumed, not the time it waited
#: for a core, so a busy neighbour does not show (CPU cases). "wall": the host's clock, for
#: cases whose work runs on an accelerator while the host waits.
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def clock_for(case: Case) -> str:
    return "cpu" if case.device is DeviceKind.CPU else "wall"


def _per_call(fn: Step, calls: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def _calls_per_block(fn: Step, block_min_s: float, clock: Callable[[], float]) -> int:
    fn()  # first call outside the estimate: lazy initialisation, caches
    estimate = min(_per_call(fn, 1, clock) for _ in range(3))
    return max(1, int(np.ceil(block_min_s / max(estimate, 1e-9))))


def measure_relative(step: Step, reference: Step, timing: GateTiming = GateTiming(),
                     clock: str = "wall") -> RelativeTime:
    """Alternate blocks of `step` (which must synchronise the device itself) and `reference`.

    The order flips every pair (ABBA), so a steady drift during the measurement biases neither.
    """
    read = CLOCKS[clock]
    step_calls = _calls_per_block(step, timing.block_min_s, read)
    reference_calls = _calls_per_block(reference, timing.block_min_s, read)
    case_times, reference_times = [], []
    for index in range(timing.pairs):
        if index % 2 == 0:
            case_times.append(_per_call(step, step_calls, read))
            reference_times.append(_per_call(reference, reference_calls, read))
        else:
            reference_times.append(_per_call(reference, reference_calls, read))
            case_times.append(_per_call(step, step_calls, read))
    ratios = np.array(case_times) / np.array(reference_times)
    return RelativeTime(float(np.median(ratios)), float(np.median(case_times)),
                        float(np.median(reference_times)), timing.pairs, clock)


@dataclass(frozen=True)
class Verdict:
    case_id: str
    current: RelativeTime
    baseline_ratio: float | None
    threshold: float
    #: How many measurements the verdict rests on (2 when a first breach was re-measured).
    attempts: int = 1

    @property
    def change(self) -> float | None:
        """Relative growth of the ratio against the baseline (+0.3 = 30% slower)."""
        if self.baseline_ratio is None:
            return None
        return self.current.ratio / self.baseline_ratio - 1

    @property
    def regressed(self) -> bool:
        # `not <=`: a change that is NaN (a broken measurement) fails rather than passes.
        return self.change is not None and not self.change <= self.threshold

    def __str__(self) -> str:
        if self.change is None:
            return f"{self.case_id}: not in the baseline (ratio {self.current.ratio:.3g} recorded, not judged)"
        verdict = "REGRESSED" if self.regressed else "ok"
        return (f"{self.case_id}: {verdict}: {self.change:+.1%} vs baseline "
                f"(threshold +{self.threshold:.0%}; time/reference {self.current.ratio:.3g} "
                f"vs {self.baseline_ratio:.3g}; step {self.current.case_s * 1e3:.3g} ms, "
                f"reference {self.current.reference_s * 1e3:.3g} ms, {self.current.clock} clock; "
                f"{self.attempts} measurement(s))")


def judge(case_id: str, measure: Callable[[], RelativeTime], baseline_ratio: float | None,
          threshold: float) -> Verdict:
    """Measure once; a breach of the threshold is re-measured and the smaller ratio counts.

    A baseline ratio that cannot be compared (`ratio_problem`) is a UserError, never a pass."""
    problem = None if baseline_ratio is None else ratio_problem(baseline_ratio)
    if problem:
        raise UserError(f"{case_id}: the baseline's time relative to the reference is {problem}: "
                        f"it cannot be compared; record the baseline again")
    first = Verdict(case_id, measure(), baseline_ratio, threshold)
    if not first.regressed:
        return first
    second = measure()
    best = second if second.ratio < first.current.ratio else first.current
    return Verdict(case_id, best, baseline_ratio, threshold, attempts=2)


@dataclass
class Baseline:
    """Relative times per case id, and the reference kernel they are relative to."""

    reference: str
    cases: dict[str, RelativeTime] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    def ratio(self, case_id: str) -> float | None:
        entry = self.cases.get(case_id)
        return entry.ratio if entry else None

    def to_json(self) -> str:
        """The baseline as `load` reads it (the gate writes it through `OutputFile`: whole or not at all)."""
        data = {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "reference": self.reference,
                "environment": self.environment,
                "cases": {case_id: entry.to_dict() for case_id, entry in sorted(self.cases.items())}}
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def load(cls, path: Path, reference: str) -> "Baseline":
        """Load a baseline, refusing one that is relative to a different reference kernel."""
        try:
            data = json.loads(path.read_text())
        except OSError as error:
            raise UserError(f"cannot read gate baseline {path}: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise UserError(f"gate baseline {path} is not valid JSON ({error})") from None
        if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
            raise UserError(f"{path} is not a parbench gate baseline (no \"format\": \"{BASELINE_FORMAT}\")")
        if data.get("version") != BASELINE_VERSION:
            raise UserError(f"gate baseline {path} has format version {data.get('version')!r}; "
                            f"this parbench reads version {BASELINE_VERSION}: record it again")
        if data.get("reference") != reference:
            raise UserError(f"gate baseline {path} is relative to {data.get('reference')!r}, not to "
                            f"{reference!r}: record it again")
        cases = data.get("cases", {})
        if not isinstance(cases, dict):
            raise UserError(f"gate baseline {path}: \"cases\" is {type(cases).__name__}, not a table of case ids: "
                            f"record it again")
        if not cases:  # a gate that judges nothing must not pass
            raise UserError(f"gate baseline {path} holds no case, so nothing could be judged against it; record it "
                            f"again with --parbench-gate-save over the cases the gate should judge")
        return cls(reference, {case_id: _baseline_entry(path, case_id, entry) for case_id, entry in cases.items()},
                   data.get("environment") or {})


def _baseline_entry(path: Path, case_id: str, entry: Any) -> RelativeTime:
    """One case of a baseline file; an entry that cannot be compared is a UserError naming it."""
    try:
        relative = RelativeTime(**entry)
    except TypeError:
        raise UserError(f"gate baseline {path}: case {case_id!r}: {entry!r} is not a relative time "
                        f"(expected the fields ratio, case_s, reference_s, pairs, clock): record it again") from None
    problem = ratio_problem(relative.ratio)
    if problem:
        raise UserError(f"gate baseline {path}: case {case_id!r}: ratio {problem}, so it cannot be compared: "
                        f"record it again")
    return relative
