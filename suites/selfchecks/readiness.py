"""Is this GPU or TPU machine ready? One small case of every GPU/TPU path, in under ten minutes.

    parbench ready [--out results/gpu_readiness.json] [--results DIR] [--minutes 10]
    python -m suites.selfchecks.readiness ...   (the same)

Run it first on a machine with GPUs or a TPU. For each framework that sees GPUs it runs, with a
small budget: the matmul and conv2d kernels in every precision; a training step with `single`
in every precision; every multi-device strategy's training step on all visible GPUs; and the
all-reduce of every strategy that has one, on all visible GPUs. On a TPU: TPUStrategy's
training step on all cores, in fp32 and bf16. Then, where records have memory fields, that
the GPU/TPU records filled them.

Each path is summarised in the JSON at `--out` — status, reason, headline figure, energy per step
(or why it was not read) and numerics check — and the command exits 1 if any path that should
run here did not run and pass its
check. A path parbench rightly skips on this hardware (tf32 or bf16 below compute capability
8.0, a multi-device strategy with one GPU) is listed as not expected. The records themselves go
to a temporary directory, or to `--results DIR` to keep them.

On a machine with no GPU or TPU it prints one line saying so and exits 0. Where nvidia-smi lists
GPUs, or the amdgpu driver does (its KFD topology: an AMD machine has no NVML), or a TPU runtime is
evidently present, that no framework can use (a CPU-only build, a broken driver or CUDA install, a
failed TPU probe), it says NOT READY and why, and exits 1: GPU readiness it never ran is no pass.

With fewer GPUs than a multi-device strategy's case spans (one GPU: two ranks), the strategies
that can share GPUs (torch's rank strategies over gloo, TF's logical GPUs) run on the one there,
marked emulated: every multi-device code path runs on CUDA before anyone rents eight GPUs.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.errors import UserError
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.frameworks.implementations import missing_runnable_reason
from suites.hardware.devices import DeviceInfo, amd_gpus_listed, descriptor, discover, tpu_runtime_evidence
from suites.records.metric_registry import METRICS
from suites.records.provenance import nvidia_smi_listed
from suites.records.record import Record
from suites.ranges import Range
from suites.records.output_files import OutputFile, output_path
from suites.records.store import ResultsStore
from suites.runner.availability import precision_reason
from suites.runner.execute import Outcome
from suites.runner.deadline import case_timeout
from suites.runner.runner import Launcher, RunContext, Runner
from suites.strategies.jobs import Job
from suites.strategies.jobs import job_for
from suites.strategies.registry import find_plugin, strategies_of
from suites.workloads import workload_class

SUITE = "gpu_readiness"
DEFAULT_OUT = Path("results") / "gpu_readiness.json"
#: How a summary the check wrote starts (`run`: JSON, "ready" first): a file holding it is the
#: check's own to write again.
SUMMARY_SIGNATURE = b'{\n  "ready": '
#: The whole check takes at most this long (`--minutes`): a launched case is killed when it is
#: spent...
TOTAL_S = 10 * 60.0
#: ... and no case starts after this share of it; what is left is "not run".
DEADLINE_SHARE = 0.9
DEADLINE_S = DEADLINE_SHARE * TOTAL_S
#: What `--minutes` takes: up to a day.
MINUTES = Range(float, 0, True, 24 * 60.0, "minutes")
#: Small budgets: the point is that each path runs and computes the right thing, not a
#: publishable figure. Launched cases keep the launcher's own timeout (start-up included).
TIMING = TimingConfig(warmup_s=0.1, min_warmup_steps=2, min_samples=5, min_time_s=0.1,
                      target_rel_iqr=0.05, budget_s=0.5)
KERNEL_PARAMS: dict[str, dict[str, Any]] = {
    "matmul": {"m": 2048, "n": 2048, "k": 2048},
    "conv2d": {"batch": 16, "h": 56, "w": 56, "cin": 64, "cout": 64, "kernel": 3},
}
TRAINING_PARAMS = {"model": "mlp", "batch": 32}
ALLREDUCE_PARAMS = {"bytes": 16 * 2**20}
#: The figure each workload kind is summarised by.
HEADLINE = {"kernel": "tflops", "training": "samples_per_s", "collective": "busbw_gbs"}
#: The memory field every ok training record carries (peak allocated per GPU; a TPU's host RSS).
MEMORY_METRICS = tuple(name for name in ("peak_memory_bytes",) if name in METRICS)
ACCELERATORS = (DeviceKind.GPU, DeviceKind.TPU)


@dataclass(frozen=True)
class ReadinessPath:
    """One GPU/TPU code path and the case that exercises it. `expected`: whether it should run
    and pass on this machine; `why` says why not where it should not."""

    name: str
    case: Case
    expected: bool = True
    why: str = ""


def _precisions(kind: DeviceKind, workload_kind: str, single: bool) -> list[Precision]:
    """Kernels and `single` in every precision the device has; a multi-device training step in
    fp32, bf16 and fp16 (fp16 is the one with loss scaling across devices: DDP's GradScaler,
    FSDP's sharded scaler, TF's LossScaleOptimizer under a strategy; a strategy that has none,
    tensor and fsdp_tensor, says so and the path is not expected); a collective in fp32 and
    bf16 (the dtypes every backend reduces)."""
    own = [p for p in Precision if not (kind is DeviceKind.TPU and p in (Precision.FP16, Precision.TF32))]
    if workload_kind == "kernel" or single:
        return own
    multi = (Precision.FP32, Precision.BF16, Precision.FP16) if workload_kind == "training" else (
        Precision.FP32, Precision.BF16)
    return [p for p in multi if p in own]


def _device_paths(framework: Framework, device: DeviceInfo) -> list[ReadinessPath]:
    kind, count = device.kind, device.count
    paths = []
    for strategy in strategies_of(framework):
        plugin = find_plugin(framework, strategy)
        if plugin is None or kind not in plugin.rules.devices:
            continue
        single = plugin.rules.one_device
        if single and kind is DeviceKind.TPU:
            continue  # TPUs run through TPUStrategy; `single` has no TPU path of its own
        n = plugin.devices_at_hand(kind, count)
        too_few = ("" if n <= count or plugin.rules.shares_gpus else
                   f"{strategy} needs {n} or more {kind}s, one per device; {count} visible")
        for workload in ("matmul", "conv2d", "train_step", "allreduce"):
            workload_type = workload_class(workload)
            if not plugin.applies_to(workload_type) or missing_runnable_reason(workload_type, framework):
                continue
            params = plugin.sized_for(KERNEL_PARAMS.get(workload) or (
                TRAINING_PARAMS if workload_type.kind == "training" else ALLREDUCE_PARAMS), n)
            for precision in _precisions(kind, workload_type.kind, single):
                case = Case.make(workload, framework, kind, strategy, precision, n, params)
                # what the hardware rightly cannot do: the availability rules of the precision
                # (tf32/bf16 below compute capability 8.0) and the strategy (its backends, its dtypes)
                why = (too_few or precision_reason(case, device)
                       or plugin.unavailable_reason(job_for(case), device) or "")
                shared = " (shared GPU)" if kind is DeviceKind.GPU and plugin.rules.shares_gpus and n > count else ""
                name = f"{workload} {framework} {kind}:{n}{shared} {strategy} {precision}"
                paths.append(ReadinessPath(name, case, expected=not why, why=why))
    return paths


def plan(devices: Mapping[tuple[Framework, DeviceKind], DeviceInfo]) -> list[ReadinessPath]:
    """The paths to check for the GPUs and TPUs each framework sees."""
    paths: list[ReadinessPath] = []
    for (framework, _kind), device in devices.items():
        if device.available:
            paths += _device_paths(framework, device)
    return paths


def discovery_gaps(devices: Mapping[tuple[Framework, DeviceKind], DeviceInfo],
                   listed_gpus: list[str] | None = None, tpu_evidence: str | None = None,
                   amd_gpus: list[str] | None = None) -> list[dict[str, Any]]:
    """Hardware here that an installed framework cannot use: GPUs that another framework sees,
    nvidia-smi lists (`listed_gpus`) or the amdgpu driver lists (`amd_gpus`, where there is no
    NVML) where this one sees none (a CPU-only build, a broken driver or CUDA install), or TPU
    runtime evidence (`tpu_evidence`) where the TPU probe failed. Each is summarised as a path that
    should run and did not."""
    listed, amd = list(listed_gpus or []), list(amd_gpus or [])
    gpus_here = listed or amd or any(device.available for (_, kind), device in devices.items()
                                     if kind is DeviceKind.GPU)
    shown = _listing("nvidia-smi", listed) if listed else _listing("the amdgpu driver", amd) if amd else ""

    def gap(framework: Framework, kind: DeviceKind, reason: str) -> dict[str, Any]:
        return {"path": f"{kind} discovery {framework}", "case": "", "expected": True, "why": "",
                "status": "unavailable", "reason": reason, "figure": None, "check": None, "ready": False}

    gaps = [gap(framework, kind, f"{shown}{framework} sees none: {device.reason}" if shown else device.reason)
            for (framework, kind), device in devices.items()
            if kind is DeviceKind.GPU and gpus_here and not device.available and descriptor(framework).installed()]
    tpus_here = tpu_evidence or any(device.available for (_, kind), device in devices.items()
                                    if kind is DeviceKind.TPU)
    gaps += [gap(framework, kind, device.reason) for (framework, kind), device in devices.items()
             if kind is DeviceKind.TPU and tpus_here and not device.available and descriptor(framework).installed()
             and framework is Framework.TF]  # parbench reaches TPUs through TF's TPUStrategy only
    return gaps


def _listing(source: str, gpus: list[str]) -> str:
    """"nvidia-smi lists 2 GPU(s) (GPU 0: ..., ...) but ": how a gap's reason begins."""
    return f"{source} lists {len(gpus)} GPU(s) ({gpus[0]}{', ...' if len(gpus) > 1 else ''}) but "


def _figure(record: Record) -> dict[str, Any] | None:
    name = HEADLINE.get(workload_class(record.case.workload).kind)
    value = record.metrics.get(name) if name else None
    return None if value is None else {"metric": name, "value": value, "unit": METRICS[name].unit}


def _energy(record: Record | None) -> dict[str, Any] | None:
    """The energy the path's devices used per step and how it was read, or why it was not
    (a missing nvidia-ml-py, a GPU without the counter); None where the path did not time."""
    energy = record.measurement.energy if record and record.measurement else None
    if energy is None:
        return None
    if not energy.measured:
        return {"reason": energy.reason}
    return {"joules_per_step": energy.joules_per_step, "watts": energy.watts,
            "methods": sorted({device.method for device in energy.devices})}


def summarise(path: ReadinessPath, record: Record | None, why_not_run: str = "") -> dict[str, Any]:
    """What the JSON says of one path. Ready: it ran, and its numerics check passed."""
    if record is None:
        status, reason, figure, check = "not run", why_not_run, None, None
    else:
        status, reason = str(record.status), record.reason
        figure, check = _figure(record), (record.check.to_dict() if record.check else None)
    ready = record is not None and record.status is Status.OK and (record.check is None or record.check.passed)
    return {"path": path.name, "case": path.case.id, "expected": path.expected, "why": path.why,
            "status": status, "reason": reason, "figure": figure, "check": check, "ready": ready,
            "energy": _energy(record)}


def memory_summary(records: list[Record]) -> dict[str, Any]:
    """The memory fields of the GPU/TPU training records that ran: present and filled."""
    name = "memory fields"
    if not MEMORY_METRICS:
        return {"path": name, "case": "", "expected": False, "status": "skipped", "figure": None, "check": None,
                "why": "records have no memory fields yet (no memory metric in suites.records.metric_registry)",
                "reason": "", "ready": False}
    ran = [record for record in records
           if record.status is Status.OK and workload_class(record.case.workload).kind == "training"]
    missing = [f"{record.case.id}: {metric}" for record in ran for metric in MEMORY_METRICS
               if record.metrics.get(metric) is None and not record.details.get("memory_not_measured")]
    return {"path": name, "case": "", "expected": True, "why": "", "figure": None, "check": None,
            "status": "ok" if ran and not missing else "failed",
            "reason": ("no GPU/TPU training record ran" if not ran else
                       f"missing: {', '.join(missing[:5])}" if missing else ""),
            "ready": bool(ran) and not missing}


def check_paths(paths: list[ReadinessPath], context: RunContext,
                execute: Launcher | None = None,
                deadline_s: float = DEADLINE_S, total_s: float = TOTAL_S,
                clock: Callable[[], float] = time.monotonic,
                report: Callable[[dict[str, Any]], None] = lambda entry: None) -> list[dict[str, Any]]:
    """Run each path's case (none after `deadline_s`; a launched one is killed once `total_s`
    is spent) and summarise it; the memory fields last."""
    started, entries, records = clock(), [], []

    def within_total(job: Job, timing: TimingConfig) -> Outcome:
        left = max(1.0, total_s - (clock() - started))
        timing = replace(timing, case_timeout_s=min(case_timeout(timing, job), left))
        return execute(job, timing) if execute is not None else Runner(timing).launch(job)

    for path in paths:
        if clock() - started > deadline_s:
            entry = summarise(path, None, f"the {deadline_s / 60:.0f}-minute budget was spent before it started")
        else:
            record = Runner.storing(context, launcher=within_total).run(path.case)
            records.append(record)
            entry = summarise(path, record)
        report(entry)
        entries.append(entry)
    entry = memory_summary(records)
    report(entry)
    entries.append(entry)
    return entries


def not_ready(entries: list[dict[str, Any]]) -> list[str]:
    """The paths that should have run here and did not run or did not pass."""
    return [entry["path"] for entry in entries if entry["expected"] and not entry["ready"]]


def _line(entry: dict[str, Any]) -> str:
    figure = entry["figure"]
    shown = f"{figure['value']:.4g} {figure['unit']}" if figure else ""
    check = entry["check"]
    checked = "" if check is None else ("check ok" if check["passed"] else "CHECK FAILED")
    note = entry["reason"] or ("" if entry["expected"] else f"not expected here: {entry['why']}")
    mark = "ok" if entry["ready"] else ("FAIL" if entry["expected"] else "-")
    return "  ".join(part for part in (f"{mark:4}", entry["path"], shown, checked, note) if part)


def discover_accelerators() -> dict[tuple[Framework, DeviceKind], DeviceInfo]:
    return {(framework, kind): discover(framework, kind) for framework in Framework for kind in ACCELERATORS}


SUMMARY = ("is this GPU or TPU machine ready? one small case of every GPU/TPU path, in under ten "
           "minutes; exits 1 if a path that should run here did not run and pass its check")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=output_path, default=DEFAULT_OUT,
                        help=f"the JSON summary (default {DEFAULT_OUT})")
    parser.add_argument("--results", type=output_path, help="keep the records in this results directory "
                                                     "(default: a temporary one)")
    parser.add_argument("--label", help="machine label stored with the records")
    parser.add_argument("--minutes", type=MINUTES.argument, default=TOTAL_S / 60,
                        help=f"time for the whole check (default {TOTAL_S / 60:.0f}; eight GPUs have more "
                             "paths to run than one)")


def main(argv: list[str] | None = None,
         execute: Launcher | None = None) -> int:
    """`python -m suites.selfchecks.readiness`: the same check as `parbench ready`."""
    parser = argparse.ArgumentParser(prog="python -m suites.selfchecks.readiness",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv), execute)


def run(args: argparse.Namespace, execute: Launcher | None = None) -> int:
    """The check, from parsed arguments (`add_arguments`); the exit code."""
    if args.minutes <= 0:
        raise UserError(f"--minutes must be positive, not {args.minutes:g}")
    devices = discover_accelerators()
    gaps = discovery_gaps(devices, nvidia_smi_listed(), tpu_runtime_evidence(), amd_gpus_listed())
    if not gaps and not any(device.available for device in devices.values()):
        reasons = "; ".join(f"{framework} {kind}: {device.reason}" for (framework, kind), device in devices.items())
        print(f"gpu_readiness: no GPU or TPU visible, nothing to check ({reasons})")
        return 0

    output = OutputFile(args.out, "--out", SUMMARY_SIGNATURE, create_folder=True)
    output.check()  # before minutes of checks, not after
    paths = plan(devices)
    with tempfile.TemporaryDirectory(prefix="parbench-readiness-") as tmp:
        store = ResultsStore(args.results or tmp)
        context = RunContext(suite=SUITE, store=store, timing=TIMING, label=args.label)
        store.ensure_writable(context.environment["machine"])
        started = time.monotonic()
        show = lambda entry: print(_line(entry), flush=True)  # noqa: E731
        for entry in gaps:
            show(entry)
        # hardware no framework can use: nothing to run, and the reason is the answer
        total_s = args.minutes * 60
        entries = gaps + (check_paths(paths, context, execute, deadline_s=DEADLINE_SHARE * total_s,
                                      total_s=total_s, report=show) if paths else [])
        elapsed = time.monotonic() - started
    failing = not_ready(entries)
    summary = {
        "ready": not failing, "not_ready": failing, "machine": context.environment["machine"],
        "run_id": context.run_id, "elapsed_s": round(elapsed, 1),
        "devices": [device.to_dict() for device in devices.values() if device.available],
        "paths": entries,
    }
    output.write(json.dumps(summary, indent=2, allow_nan=True) + "\n")
    expected = sum(entry["expected"] for entry in entries)
    if failing:
        print(f"NOT READY: {len(failing)} of {expected} paths that should run here did not "
              f"({', '.join(failing)}); summary in {args.out}")
        return 1
    print(f"ready: all {expected} paths that should run here ran and passed their checks "
          f"in {elapsed:.0f} s; summary in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
