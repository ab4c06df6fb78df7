"""Contention measured exactly over the timed blocks: the CPU time other processes took on the
case's cores (/proc/stat's busy time minus the case's own process tree), the case's own share
(starvation), re-measuring a contended case a bounded number of times, and two-mode samples.

Every verdict here comes from a fake /proc and a controlled clock, except one test that spins
busy loops on every core for real: it passes however busy the machine already is (more load is
more contention), so no test depends on a quiet machine or on wall-clock thresholds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.grids.grid import GridError, load_suite
from suites.runner.runner import RunContext, Runner
from suites.measure.cpu_meter import CpuMeter, CpuSnapshot, per_cpu_ticks, tree_ticks
from suites.records.contention import (CONTENDED_SHARE, METHOD, STARVED_SHARE, Contention, CpuReading, CpuUsage,
                                       bimodal, judge)
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.runner.execute import Outcome
from suites.measure.timing import measure
from tests.report_support import TINY
from tests.test_timing import FakeClock, PretendDevice, constant

ROOT, CHILD, GRANDCHILD, STRANGER = 100, 101, 102, 200
QUIET_LOAD = CpuReading(0.1, 1000, 0)


class FakeProc:
    """A /proc with a `stat` of per-CPU counters and a few processes: the case's root, its child
    and grandchild, and a stranger (another user's process). Ticks only move when told."""

    def __init__(self, root: Path, cpus: int = 2) -> None:
        self.root, self.now = root, 0.0
        self.cpu_busy = [0] * cpus  # user ticks of each CPU (the processes')
        self.cpu_steal = [0] * cpus  # steal ticks of each CPU (the hypervisor's)
        self.ticks = {ROOT: 0, CHILD: 0, GRANDCHILD: 0, STRANGER: 0}
        self.parents = {ROOT: 1, CHILD: ROOT, GRANDCHILD: CHILD, STRANGER: 1}
        self.reaped = 0  # cutime of the root: children that ended and were waited for
        root.mkdir(exist_ok=True)
        self.write()

    def write(self) -> None:
        lines = [f"cpu  {sum(self.cpu_busy)} 0 0 0 0 0 0 {sum(self.cpu_steal)} 0 0"]
        lines += [f"cpu{i} {busy} 0 0 {10_000 - busy} 0 0 0 {steal} 0 0"
                  for i, (busy, steal) in enumerate(zip(self.cpu_busy, self.cpu_steal))]
        (self.root / "stat").write_text("\n".join(lines + ["intr 0", "ctxt 0"]) + "\n")
        for pid, ticks in self.ticks.items():
            (self.root / str(pid)).mkdir(exist_ok=True)
            cutime = self.reaped if pid == ROOT else 0
            # The command name may hold spaces and parentheses: the parser splits after the last ')'.
            (self.root / str(pid) / "stat").write_text(
                f"{pid} (py (worker) {pid}) R {self.parents[pid]} 1 1 0 -1 0 0 0 0 0 {ticks} 0 {cutime} 0 20 0 1 0\n")

    def run(self, seconds: float, own: dict[int, int], others: int, steal: int = 0) -> None:
        """`seconds` pass; the case's processes run `own` ticks, other processes `others`, the
        hypervisor steals `steal`, all spread over the CPUs."""
        self.now += seconds
        for pid, ticks in own.items():
            self.ticks[pid] += ticks
        self.ticks[STRANGER] += others
        ran = sum(own.values()) + others
        for i in range(len(self.cpu_busy)):
            self.cpu_busy[i] += ran // len(self.cpu_busy)
            self.cpu_steal[i] += steal // len(self.cpu_busy)
        self.write()


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path / "proc")


def meter_of(proc: FakeProc) -> CpuMeter:
    return CpuMeter(root=ROOT, cpus=(0, 1), proc=proc.root, clock=lambda: proc.now, hz=100)


def window(proc: FakeProc, own: dict[int, int], others: int, steal: int = 0) -> CpuUsage:
    meter = meter_of(proc)
    before = meter.read()
    proc.run(1.0, own, others, steal)
    usage = meter.usage(before, meter.read())
    assert usage is not None
    return usage


def test_the_per_cpu_counters_sum_busy_columns_of_the_cases_cores_only():
    text = "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 1 2 3 100 50 4 5 6 0 0\ncpu1 10 0 0 0 0 0 0 0 0 0\ncpu2 7 0 0 0 0 0 0 0\n"
    assert per_cpu_ticks(text, [0]) == (1 + 2 + 3 + 4 + 5 + 6, 6)  # idle and iowait are not busy
    assert per_cpu_ticks(text, [0, 1]) == (31, 6)
    assert per_cpu_ticks(text, [3]) is None  # a core /proc/stat does not list: unknown, not zero


def test_the_tree_holds_the_root_its_descendants_and_reaped_children_not_strangers(proc):
    proc.run(1.0, {ROOT: 10, CHILD: 20, GRANDCHILD: 30}, others=70)
    proc.reaped = 5
    proc.write()
    assert tree_ticks(ROOT, proc.root) == (65, 3)
    assert tree_ticks(CHILD, proc.root) == (50, 2)
    assert tree_ticks(999, proc.root) is None


def test_a_quiet_window_is_not_contended(proc):
    # The case's three processes keep both cores busy; the background takes 4 ticks of 200.
    usage = window(proc, {ROOT: 60, CHILD: 70, GRANDCHILD: 60}, others=4)
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, usage, busy_expected=True)
    assert verdict.others_core_share == pytest.approx(0.02)
    assert verdict.own_core_share == pytest.approx(0.95)
    assert not verdict.contended and verdict.starved is False and verdict.why == ""
    assert verdict.method == METHOD and verdict.cores == 2


def test_busy_loops_on_both_cores_make_the_case_contended_and_starved(proc):
    # Two busy loops share the two cores with the case: each side gets half.
    usage = window(proc, {ROOT: 50, CHILD: 40}, others=110)
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, usage, busy_expected=True)
    assert verdict.others_core_share == pytest.approx(0.55) and verdict.others_core_share > CONTENDED_SHARE
    assert verdict.own_core_share == pytest.approx(0.45) and verdict.own_core_share < STARVED_SHARE
    assert verdict.contended and verdict.starved
    assert verdict.why == "others took 55% of its 2 cores; its 2 threads ran 45% of the time"


def test_starvation_is_judged_on_the_cases_threads_not_all_its_cores(proc):
    """A case told to compute on one thread of two cores, that ran that thread all along, had
    half its cores and was not starved; two threads that ran a third of the time were."""
    one = replace(window(proc, {ROOT: 100}, others=0), threads=1)
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, one, busy_expected=True)
    assert verdict.own_core_share == pytest.approx(0.5) and verdict.own_thread_share == pytest.approx(1.0)
    assert verdict.starved is False and verdict.threads == 1
    many = replace(window(proc, {ROOT: 60}, others=0), threads=8)  # more threads than cores: the cores count
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, many, busy_expected=True)
    assert verdict.threads == 2 and verdict.own_thread_share == pytest.approx(0.3) and verdict.starved


def test_the_load_average_does_not_decide_a_measured_verdict(proc):
    """The load average counts the case's own threads and lags a minute: with a measurement it
    is kept for reference, never the verdict."""
    usage = window(proc, {ROOT: 200}, others=0)
    verdict = judge(CpuReading(6.0, 0, 0), CpuReading(6.0, 100, 0), 2, usage)
    assert not verdict.contended and verdict.load_before == 6.0


def test_stolen_time_counts_as_others(proc):
    usage = window(proc, {ROOT: 120}, others=0, steal=80)
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, usage)
    assert verdict.others_core_share == pytest.approx(0.4) and verdict.steal_fraction == pytest.approx(0.4)
    assert verdict.contended and "40% stolen by the hypervisor" in verdict.why


def test_starvation_is_judged_only_where_the_threads_should_keep_the_cores_busy(proc):
    usage = window(proc, {ROOT: 20}, others=0)  # a GPU case's host thread waits on the device
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, usage, busy_expected=False)
    assert verdict.starved is None and not verdict.contended
    assert judge(QUIET_LOAD, QUIET_LOAD, 2, usage, busy_expected=True).starved is True


def test_an_unreadable_proc_falls_back_to_the_load_average_and_says_so(tmp_path):
    meter = CpuMeter(root=ROOT, cpus=(0, 1), proc=tmp_path / "missing", clock=lambda: 1.0, hz=100)
    snapshot = meter.read()
    assert snapshot == CpuSnapshot(1.0, None, None, None, 0)
    assert meter.usage(snapshot, snapshot) is None
    verdict = judge(CpuReading(4.0), CpuReading(4.0), 2, None)
    assert verdict.contended and verdict.method.startswith("load_average") and verdict.others_core_share is None


class ScriptedMeter(CpuMeter):
    """A meter whose readings are given in order: the timer's, asserted on."""

    def __init__(self, snapshots: list[CpuSnapshot]) -> None:
        super().__init__(root=ROOT, cpus=(0, 1), hz=100)
        self.snapshots = iter(snapshots)

    def read(self) -> CpuSnapshot:
        return next(self.snapshots)


def test_the_timer_measures_the_cpu_over_the_timed_blocks_not_the_warm_up():
    clock = FakeClock()
    readings = [CpuSnapshot(0.0, 0, 0, 0, 3),  # before warming up: not the window
                CpuSnapshot(10.0, 1000, 0, 900, 3),  # the first timed block starts
                CpuSnapshot(11.0, 1200, 10, 1050, 3)]  # the last one ended
    m = measure(PretendDevice(clock, constant(0.01)), replace(TINY, budget_s=0.2), clock,
                cpu_meter=ScriptedMeter(readings))
    assert (m.cpu.wall_s, m.cpu.own_s, m.cpu.busy_s, m.cpu.steal_s) == pytest.approx((1.0, 1.5, 2.0, 0.1))
    assert m.cpu.cores == 2 and m.cpu.resolution == pytest.approx((2 + 2 * 3) / 100 / 2)
    assert m.cpu.others_core_share == pytest.approx(0.25) and m.cpu.own_core_share == pytest.approx(0.75)
    assert Measurement.from_dict(m.to_dict()).cpu == m.cpu


def _outcome(others: float | None, status: Status = Status.OK) -> Outcome:
    """An outcome measured with `others` of its 2 cores taken by other processes."""
    cpu = None if others is None else CpuUsage(1.0, 2.0 * (1 - others), 2.0, 0.0, 2)
    return Outcome(status, measurement=Measurement((1e-3,) * 9, cpu=cpu))


def run_with(tmp_path: Path, outcomes: list[Outcome], retries: int = 2) -> tuple[Record, int]:
    """run_case over outcomes given in order; the stored record and how many were executed."""
    calls = iter(outcomes)
    executed = []

    def execute(case, timing):
        executed.append(case)
        return next(calls)

    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=replace(TINY, contention_retries=retries),
                         label="box")
    context.store.ensure_writable()
    Runner.storing(context, launcher=execute).run(Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8}))
    (stored,) = ResultsStore(tmp_path).load()
    return stored, len(executed)


def test_a_contended_case_is_measured_again_and_keeps_the_uncontended_measurement(tmp_path):
    stored, executed = run_with(tmp_path, [_outcome(0.6), _outcome(0.02), _outcome(0.9)])
    assert executed == 2
    assert not stored.contention.contended and stored.contention.others_core_share == pytest.approx(0.02)
    assert stored.contention.attempts == 2 and stored.contention.attempt_shares == pytest.approx((0.6, 0.02))
    assert stored.measurement.cpu.others_core_share == pytest.approx(0.02)


def test_retries_are_bounded_and_the_flag_stays_honest(tmp_path):
    stored, executed = run_with(tmp_path, [_outcome(0.7), _outcome(0.5), _outcome(0.6), _outcome(0.0)])
    assert executed == 3  # the first measurement and 2 retries
    assert stored.contention.contended and stored.contention.others_core_share == pytest.approx(0.5)
    assert stored.contention.attempts == 3 and stored.contention.attempt_shares == pytest.approx((0.7, 0.5, 0.6))


def test_no_retries_when_told_none_or_when_nothing_was_measured(tmp_path):
    stored, executed = run_with(tmp_path / "a", [_outcome(0.7), _outcome(0.0)], retries=0)
    assert executed == 1 and stored.contention.contended and stored.contention.attempts == 1
    stored, executed = run_with(tmp_path / "b", [_outcome(0.7, Status.FAILED), _outcome(0.0)])
    assert executed == 1 and stored.status is Status.FAILED
    # The load-average fallback (no CPU measurement) lags a minute behind: retrying cannot help.
    stored, executed = run_with(tmp_path / "c", [_outcome(None), _outcome(0.0)])
    assert executed == 1 and stored.contention.method.startswith("load_average")


def test_contention_round_trips_and_older_records_still_load():
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 2, CpuUsage(1.0, 1.0, 2.0, 0.0, 2, 0.04), busy_expected=True)
    assert Contention.from_dict(verdict.to_dict()) == verdict
    old = Contention.from_dict({"load_before": 1.0, "load_after": 5.0, "steal_fraction": 0.0, "cores": 2,
                                "contended": True, "why": "load average 5.0 on 2 cores"})
    assert old.contended and old.others_core_share is None and old.method.startswith("load_average")


@pytest.mark.parametrize("text, error", [
    ("contention_retries = 0", None),
    ("contention_retries = 10", None),
    ("contention_retries = 11", "expected a whole number of retries from 0 to 10"),
    ("contention_retries = -1", "expected a whole number of retries from 0 to 10"),
    ("contention_retries = 1.5", "expected a whole number of retries from 0 to 10"),
])
def test_a_grid_may_set_the_retries_within_bounds(tmp_path, text, error):
    grid = tmp_path / "g.toml"
    grid.write_text(f'[timing]\n{text}\n[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n'
                    'params = { m = 8, n = 8, k = 8 }\n')
    if error is None:
        assert load_suite(str(grid)).timing.contention_retries == int(text.split("=")[1])
    else:
        with pytest.raises(GridError, match=error):
            load_suite(str(grid))


# --- two modes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("samples, two", [
    ([1.0] * 10, False),
    ([1.0] * 5 + [2.0] * 5, True),
    ([1.5e-3] * 6 + [0.18] * 4, True),  # the same step at 1.5 ms and at 180 ms
    ([1.0] * 9 + [5.0], False),  # one slow block (a collection, a page fault): not a mode
    ([1.0] * 8 + [5.0] * 2, True),  # 20% of the blocks: a mode
    ([1.0 + 2.0 * i / 19 for i in range(20)], False),  # a wide spread without a gap
    ([1.0, 1.4, 1.0, 1.4, 1.0, 1.4], False),  # two clusters closer than 1.5x
    ([1.0, 2.0, 1.0, 2.0], False),  # too few samples to judge
])
def test_two_modes_are_two_clusters_each_of_a_fifth_of_the_samples_apart_by_half(samples, two):
    assert bimodal(samples) is two
    assert Measurement(tuple(samples)).bimodal is two
    assert Measurement(tuple(samples)).to_dict()["bimodal"] is two


# --- real busy loops -----------------------------------------------------------------------------

#: A busy loop outside the test's process tree: the child forks a spinner, prints its pid and
#: exits, so the spinner is nobody's descendant here (a child would count as the case's own).
SPINNER = "import os\npid = os.fork()\nif pid:\n    print(pid, flush=True)\n    os._exit(0)\nwhile True:\n    pass\n"


class Spin(PretendDevice):
    """A step that computes on this process's CPU (single-threaded Python)."""

    def __init__(self) -> None:
        super().__init__(FakeClock(), constant(0.0))

    def step(self) -> None:
        sum(i * i for i in range(20_000))

    def synchronize(self) -> None: ...


def test_busy_loops_on_every_core_make_a_real_case_contended(monkeypatch):
    """Spinning processes on every core of this process: the case measured beside them is
    flagged. The assertion holds on a machine busy already (more load, more contention)."""
    monkeypatch.delenv("PARBENCH_CASE_ROOT", raising=False)
    spinners = []
    try:
        for _ in os.sched_getaffinity(0):
            starter = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
            spinners.append(int(starter.stdout.readline()))
            starter.stdout.close()
            starter.wait()
        m = measure(Spin(), replace(TINY, warmup_s=0.05, min_time_s=0.5, budget_s=1.0, block_min_s=0.01))
    finally:
        for pid in spinners:
            os.kill(pid, signal.SIGKILL)
    assert m.cpu is not None and m.cpu.span == "timed blocks"
    verdict = judge(QUIET_LOAD, QUIET_LOAD, 1, m.cpu, busy_expected=True)
    assert verdict.contended, verdict
    assert verdict.others_core_share > CONTENDED_SHARE


def test_a_multi_rank_cases_threads_are_every_ranks_together():
    """Rank 0's tree holds every rank (the launcher is its root): so do its threads."""
    from suites.hardware.devices import descriptor
    from suites.measure.cpu_meter import with_threads

    class TwoRanks(PretendDevice):
        case = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})

        def gather(self, value: float) -> tuple[float, ...]:
            return (value, value)

    usage = CpuUsage(1.0, 1.0, 1.0, 0.0, 64)
    threads = descriptor(TwoRanks.case.framework).cpu_threads()
    assert with_threads(TwoRanks(FakeClock(), constant(0.0)), usage).threads == 2 * threads
    assert with_threads(TwoRanks(FakeClock(), constant(0.0)), None) is None  # every rank gathers, measured or not
