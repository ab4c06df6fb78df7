"""The record: one line of the results store. Schema documented in docs of `Record`.

Schema version 1, one JSON object per line:
  schema        1
  run_id        id shared by every record of one `parbench run`
  timestamp     ISO 8601 UTC, when the case finished
  suite         suite name (or grid file stem)
  case          {id, workload, framework, device, n_devices, strategy, precision, params, compile}
                (compile: none | xla | inductor; absent in older records, which ran uncompiled)
  status        "ok" | "unavailable" | "failed"
  reason        why not ok ("" when ok)
  emulated      true when several devices were emulated (logical CPUs, gloo ranks on one host)
  measurement   {samples_s[], block_size, warmup_steps, first_step_s, compile_s, median_s, iqr_s,
                 n, noisy, target_rel_iqr, stop_reason, rank_medians_s[] (each rank's median
                 busy time per step, before it waits for its peers), rank_compute_s[] (DDP:
                 each rank's median step under no_sync, without the gradient all-reduce),
                 straggler, memory[] (training cases: peak memory over the timed steps per GPU or
                 per rank process, {kind, device, peak_bytes, reserved_bytes, baseline_bytes,
                 rank}: suites.records.peak_memory; absent in older records), memory_breakdown[] (torch
                 training cases: each rank's / GPU's tensors at their peak in one more, untimed step under
                 torch's MemTracker, {kind, device, rank, parameters, gradients, optimizer,
                 activations, temporaries, inputs, harness, gathered, update_temporaries,
                 activations_kept, runtime, phase, step_peak_bytes, method}: suites.records.memory_breakdown;
                 absent in older records), energy (over the timed
                 blocks: {devices[] {kind, device, joules, seconds, method, rank}, steps,
                 joules_per_step, watts, reason — why there are no devices where there are
                 none}: suites.records.energy_readings; absent in older records), recompiles (a compiled
                 case's compilations after its first step's, in warm-up; null otherwise), telemetry
                 (GPU cases, over the timed blocks: {gpus[] {device, rank, samples, sm_clock_mhz,
                 mem_clock_mhz, power_w, temperature_c, utilization_pct (each {min, median, max}),
                 power_limit_w, max_sm_clock_mhz, reasons[] (NVML clock-event reasons seen)},
                 kernel_s_per_step (profiler), reason}: suites.records.gpu_telemetry), burst_gain (first
                 timed block's speed over the median's - 1, where beyond the spread), cpu (over the
                 timed blocks: {wall_s, own_s (the case's process tree), busy_s (every process on the
                 case's cores, steal included), steal_s, cores, threads (every rank's intra-op
                 threads together), resolution, span}: the contention's
                 input; absent in older records), bimodal (the samples form two clusters:
                 suites.records.contention.bimodal)} or null
  metrics       {name: value} for each derived metric that applies to the case; the names, units
                and formulas are suites.records.metric_registry.METRICS (null: applies, but unknown)
  check         {passed, metric, value, tolerance, detail, check_s, memory_bytes (the most the
                check held beyond what was held when it began; both null in older records)} or null;
                metric not_checked: the check did not run (never passed), value what it would have
                needed, tolerance the limit that is over, detail why (suites.records.check)
  contention    {others_core_share (share of the case's cores other processes and steal took over
                its timed blocks), own_core_share (share its own process tree ran), threads and
                own_thread_share (its CPU time over wall x its threads, at most its cores), starved
                (a CPU case whose threads ran under half the time; null: not judged), contended (others took
                more than `threshold`, 0.25), why, method, resolution, wall_s, span, cores,
                attempts and attempt_shares (measurements taken, re-measured while contended, and
                each one's others_core_share), steal_fraction, load_before, load_after (1-minute
                load averages: the fallback rule's, where the CPU time was not measured)}: whether
                other work competed for the case's cores (suites.records.contention); null where
                the case did not run here or in older records
  bound_by      ok records: what limits the figure, {verdict (compute | memory | power | launch |
                communication | unknown), reason, evidence {figure: value}}: suites.records.bound_by;
                absent in older records
  details       free-form extras of the workload/strategy (e.g. per-rank times, output tail);
                memory_explained (what the peak is made of, and why a category is off its estimate),
                memory_breakdown (why a training case has none: compiled, or its tracker failed);
                energy_per_device [{device, method, joules_per_step, watts, samples_per_joule,
                samples_per_kwh}] where energy was read
  environment   provenance: machine label, hostname, cpu {model, logical_cores, usable_cores,
                llc_bytes}, memory_gib, gpus [{index, name, memory, driver, compute_capability,
                sm_clock_max_mhz, mem_clock_max_mhz, power_limit_w, mig_mode}] (nvidia-smi),
                gpu_topology {links {GPUi: {GPUj: link}}, text} (nvidia-smi topo -m) or null,
                cuda_visible_devices, nvidia_tf32_override, cuda_libraries {wheel: version},
                accelerators {"<framework>/<gpu|tpu>": {count, names, reason, cuda, cudnn, nccl,
                compute_capability, l2_cache_bytes, ...}} (what discovery found in the run's
                process), python, os, libraries, git {commit, dirty}, threads
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.records.bound_by import BoundBy
from suites.records.check import Check
from suites.records.contention import Contention
from suites.records.measurement import Measurement

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Record:
    case: Case
    status: Status
    run_id: str
    timestamp: str
    suite: str
    environment: dict[str, Any]
    reason: str = ""
    emulated: bool = False
    measurement: Measurement | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    check: Check | None = None
    details: dict[str, Any] = field(default_factory=dict)
    contention: Contention | None = None
    #: What limits the figure (ok records; None in older records and where not ok).
    bound_by: BoundBy | None = None

    @property
    def machine(self) -> str:
        return str(self.environment.get("machine", "?"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION, "run_id": self.run_id, "timestamp": self.timestamp,
            "suite": self.suite, "case": self.case.to_dict(), "status": str(self.status),
            "reason": self.reason, "emulated": self.emulated,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "metrics": self.metrics, "check": self.check.to_dict() if self.check else None,
            "details": self.details, "environment": self.environment,
            "contention": self.contention.to_dict() if self.contention else None,
            "bound_by": self.bound_by.to_dict() if self.bound_by else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Record":
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        return cls(
            case=Case.from_dict(data["case"]), status=Status(data["status"]), run_id=data["run_id"],
            timestamp=data["timestamp"], suite=data.get("suite", ""),
            environment=data.get("environment") or {}, reason=data.get("reason", ""),
            emulated=bool(data.get("emulated", False)),
            measurement=Measurement.from_dict(data["measurement"]) if data.get("measurement") else None,
            metrics=data.get("metrics") or {},
            check=Check.from_dict(data["check"]) if data.get("check") else None,
            details=data.get("details") or {},
            contention=Contention.from_dict(data["contention"]) if data.get("contention") else None,
            bound_by=BoundBy.from_dict(data["bound_by"]) if data.get("bound_by") else None,
        )
