"""`parbench calibrate`: measure this machine's best large GEMM, the reference for '% of measured peak',
and on the CPU its memory bandwidth with a streaming kernel, the roofline's slope."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


from suites import knobs
from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.errors import UserError
from suites.hardware.devices import DeviceInfo, cpu_last_level_cache_bytes, discover
from suites.hardware.peaks import save_bandwidth, save_calibration
from suites.records.provenance import machine_label
from suites.records.store import DEFAULT_RESULTS_DIR
from suites.report.display import terminal
from suites.runner.plan import plan, unavailable_reason
from suites.runner.probe import execute_kernel
from suites.strategies.jobs import Job
from suites.measure.stream import ARRAY_MIB, best_stream_bandwidth

SUMMARY = ("measure this machine's peak GEMM rate per device and precision (for '% of measured peak') and the "
           "CPU's memory bandwidth (for the roofline)")
SIZES = (2048, 4096)
#: The streaming kernel's three arrays may take at most this share of the memory available when
#: calibrate starts (MemAvailable): more would swap, or be killed, rather than measure.
STREAM_MEMORY_SHARE = 0.75
KNOBS = knobs.CASE_KNOBS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR)
    parser.add_argument("--label", help="machine label (default $PARBENCH_MACHINE or the hostname)")
    parser.add_argument("--device", choices=DeviceKind.names(), action="append",
                        help="device kind(s) to calibrate (default: cpu and gpu where present)")
    parser.add_argument("--precision", choices=Precision.names(), action="append",
                        help="precision(s) to calibrate (default fp32)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help=f"square GEMM sizes to try (default {' '.join(map(str, SIZES))})")
    parser.add_argument("--stream-mib", type=int, default=ARRAY_MIB,
                        help=f"size of each of the streaming kernel's three arrays, MiB (default {ARRAY_MIB}; "
                             "keep it far above the last-level cache)")


def run(args: argparse.Namespace) -> int:
    knobs.check_label(args.label)
    if any(size < 1 for size in args.sizes):
        raise UserError(f"--sizes must be positive matrix sizes such as 2048, got {' '.join(map(str, args.sizes))}")
    if args.stream_mib < 1:
        raise UserError(f"--stream-mib must be at least 1 (MiB per array), got {args.stream_mib}")
    if DeviceKind.CPU in map(DeviceKind, args.device or ["cpu"]):
        check_stream_mib(args.stream_mib)
    console = terminal()
    machine = machine_label(args.label)
    timing = TimingConfig(budget_s=3.0)
    stored = 0
    for kind in map(DeviceKind, args.device or ["cpu", "gpu"]):
        for precision in map(Precision, args.precision or ["fp32"]):
            best: tuple[float, Case] | None = None
            for framework in Framework:
                for size in args.sizes:
                    case = Case.make("matmul", framework, kind, precision=precision,
                                     params={"m": size, "n": size, "k": size})
                    job = plan(case)
                    reason = unavailable_reason(job)
                    if reason:
                        console.print(f"[yellow]skip[/] {case.id}: {reason}")
                        break
                    assert isinstance(job, Job)
                    outcome = execute_kernel(job, timing)
                    if outcome.status is not Status.OK or outcome.measurement is None:
                        console.print(f"[red]{case.id}[/]: {outcome.reason}")
                        continue
                    tflops = 2.0 * size**3 / outcome.measurement.median / 1e12
                    console.print(f"{case.id}: {tflops_text(tflops)}")
                    if best is None or tflops > best[0]:
                        best = (tflops, case)
            if best:
                tflops, case = best
                path = save_calibration(args.results, machine, discover(case.framework, kind), precision,
                                        tflops, case.id)
                console.print(f"[green]{kind} {precision} peak {tflops_text(tflops)}[/] ({case.id}) -> {path}")
                stored += 1
        if kind is DeviceKind.CPU:
            cache = cpu_last_level_cache_bytes()
            if cache and args.stream_mib * 2**20 < 4 * cache:
                console.print(f"[yellow]warning[/]: --stream-mib {args.stream_mib} is under 4x the "
                              f"{cache / 2**20:g} MiB last-level cache: the bandwidth measured is partly the cache's")
            try:
                stream = best_stream_bandwidth(args.stream_mib)
            except MemoryError:  # what the memory check above could not foresee (others took it since)
                raise UserError(f"--stream-mib {args.stream_mib}: three arrays of {args.stream_mib} MiB do not "
                                f"fit in memory now; pass a smaller --stream-mib") from None
            path = save_bandwidth(args.results, machine, _cpu(), stream.gbs, stream.how)
            console.print(f"[green]cpu memory bandwidth {stream.gbs:.2f} GB/s[/] ({stream.how}) -> {path}")
            stored += 1
    if not stored:
        raise UserError("nothing could be calibrated: no requested device/precision is available here; "
                        "see `parbench devices`")
    return 0


def available_memory_bytes() -> int | None:
    """Memory this process could take now without swapping: /proc/meminfo's MemAvailable (else
    the free pages os.sysconf reports), capped by a cgroup v2 limit; None where neither is known."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            available = min(available, int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(available, 0)


def max_stream_mib(available_bytes: int) -> int:
    """The largest --stream-mib whose three arrays stay within STREAM_MEMORY_SHARE of `available_bytes`."""
    return int(available_bytes * STREAM_MEMORY_SHARE) // 3 // 2**20


def check_stream_mib(stream_mib: int, available_bytes: int | None = None) -> None:
    """UserError when the streaming kernel's three arrays of `stream_mib` MiB would not fit in
    memory (default: what `available_memory_bytes` finds; unknown memory is not checked)."""
    available = available_memory_bytes() if available_bytes is None else available_bytes
    if available is None:
        return
    most = max_stream_mib(available)
    if stream_mib > most:
        raise UserError(f"--stream-mib {stream_mib} is too large: the streaming kernel's three arrays must fit in "
                        f"{STREAM_MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB of memory available now, "
                        f"so at most --stream-mib {most}")


def tflops_text(tflops: float) -> str:
    """Three significant digits, so a slow precision (bf16 emulated on an AVX2 CPU) reads as a figure, not 0.000."""
    return f"{tflops:.3g} TFLOP/s"


def _cpu() -> DeviceInfo:
    """The CPU as an installed framework names it (every framework's runs look it up by that name)."""
    found = [discover(framework, DeviceKind.CPU) for framework in Framework]
    return next((cpu for cpu in found if cpu.names), found[0])
