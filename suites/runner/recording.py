"""What a run stores: its context (suite, store, timing, provenance) and each case's record,
with its derived metrics and diagnosis. Shared by the runner and a worker process that stores
its own record."""
from __future__ import annotations

from dataclasses import dataclass

from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Status
from suites.records.bound_by import diagnose, signals_of
from suites.records.contention import Contention
from suites.records.metric_registry import ABOVE_PEAK, above_peak_note
from suites.records.memory_breakdown import MEMORY_EXPLAINED
from suites.records.metrics import derive, memory_explanation
from suites.hardware.peaks import PeakTable
from suites.records.provenance import (discovered_accelerators, environment, new_run_id, now_iso,
                                   threads_in_use)
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.measure.work_definitions import stored_work
from suites.runner.execute import Outcome
from suites.runner.plan import Unresolved
from suites.runner.spanning import ranks_share_gpus
from suites.strategies.jobs import Job


@dataclass
class RunContext:
    suite: str
    store: ResultsStore
    timing: TimingConfig
    label: str | None = None
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or new_run_id()
        self.environment = environment(self.label)
        self.peaks = PeakTable.load()


def keeps_cores_busy(job: Job) -> bool:
    """Whether the case's threads should keep its cores busy, so that running on few of them is
    starvation (`suites.records.contention.judge`): a CPU case that computes. Not a collective
    (its ranks wait for each other's bytes) nor a GPU case (its host thread waits on the device)."""
    return job.case.device is DeviceKind.CPU and job.workload.kind != "collective"


def on_nodes_of_their_own(job: Job, details: dict) -> bool:
    """Whether a CPU case's ranks ran one a node, on hosts of their own (`details.nodes` from
    `suites.runner.spanning`): a CPU cluster's nodes, each a device, not devices emulated on one
    CPU. Nodes that are one physical host (a test cluster) stay emulated."""
    nodes = details.get("nodes")
    return (job.case.device is DeviceKind.CPU and isinstance(nodes, list) and len(nodes) == job.case.n_devices
            and "nodes_share_a_host" not in details)


def emulated_as_placed(job: Job, details: dict) -> bool:
    """Whether the case's devices were emulated, as its ranks were placed: a GPU case's ranks that
    reported the UUIDs of their GPUs shared one where two report the same on one node
    (`ranks_share_gpus`), whatever the counts say; else the job's rule, a CPU case's ranks on
    nodes of their own excepted."""
    if job.case.device is DeviceKind.GPU:
        shared = ranks_share_gpus(details)
        if shared is not None:
            return shared
    return job.emulated and not on_nodes_of_their_own(job, details)


def store_outcome(job: Job | Unresolved, outcome: Outcome, context: RunContext,
                  contention: Contention | None = None) -> Record:
    """Attach provenance and derived metrics to what running the job's case produced (a case
    with no job here produced its reason only); store the record."""
    case = job.case
    metrics = {}
    bound_by = None
    details = outcome.details
    emulated = isinstance(job, Job) and emulated_as_placed(job, details)
    if outcome.measurement is not None and isinstance(job, Job):
        work = job.work()
        metrics = derive(case, outcome.measurement, context.store.root,
                         context.environment["machine"], context.peaks, work, emulated)
        energy = outcome.measurement.energy
        if energy is not None and energy.measured:
            details = {**details, "energy_per_device": energy.per_device(
                work["samples_per_step"], case.n_devices)}
        note = above_peak_note(metrics)
        if note:  # a peak is an upper bound: the record says which one its figure is above
            details = {**details, ABOVE_PEAK: note}
        explained = memory_explanation(outcome.measurement, work)
        if explained is not None:  # what the peak is made of, and why a category is off its estimate
            details = {**details, MEMORY_EXPLAINED: explained.note()}
        if outcome.status is Status.OK:
            bound_by = diagnose(signals_of(case, outcome.measurement, metrics, emulated))
    record = Record(case=case, status=outcome.status, run_id=context.run_id, timestamp=now_iso(),
                    suite=context.suite, environment={**context.environment, "threads": threads_in_use(),
                                                      "accelerators": discovered_accelerators()},
                    reason=outcome.reason, emulated=emulated,
                    measurement=outcome.measurement, metrics=metrics, check=outcome.check,
                    details=details, contention=contention, bound_by=bound_by,
                    work=stored_work(job.workload, details) if isinstance(job, Job) else None)
    context.store.append(record)
    return record
