"""`parbench calibrate`: measure this machine's best large GEMM, the reference for '% of measured peak',
and on the CPU its memory bandwidth with a streaming kernel, the roofline's slope.

A stored peak is a maximum: a measurement other work competed with (`contended`, judged as `run`
judges a case, `suites.records.contention`) is measured again, at most `contention_retries` more
times, and one that stays contended is refused, never stored: a contended peak would make every
later '% of measured peak' on the machine too high (issue 47 item 3, issue 46 item 8)."""
from __future__ import annotations

import argparse
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from suites import knobs
from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.errors import UserError
from suites.hardware.devices import DeviceInfo, cpu_last_level_cache_bytes, discover
from suites.hardware.peaks import calibration_path, read_calibration, save_bandwidth, save_calibration
from suites.measure.stream import CACHE_MULTIPLE, REPEATS, PassDone, StreamResult, array_mib_for, \
    best_stream_bandwidth, thread_counts
from suites.measure.cpu_meter import CpuMeter
from suites.records.contention import Contention, CpuReading, CpuUsage, judge, read_cpu
from suites.records.output_files import check_writable as check_output, output_path
from suites.records.provenance import machine_label
from suites.records.store import DEFAULT_RESULTS_DIR, ResultsStore
from suites.report.render.terminal import terminal
from suites.runner.execute import Outcome
from suites.runner.plan import plan, unavailable_reason
from suites.runner.probe import execute_kernel
from suites.strategies.jobs import Job

SUMMARY = ("measure this machine's peak GEMM rate per device and precision (for '% of measured peak') and the "
           "CPU's memory bandwidth (for the roofline); a measurement other work competed with is refused")
SIZES = (2048, 4096)
#: The streaming kernel's three arrays may take at most this share of the memory available when
#: calibrate starts (MemAvailable): more would swap, or be killed, rather than measure.
STREAM_MEMORY_SHARE = 0.75
KNOBS = knobs.CASE_KNOBS
#: How hard each GEMM is timed, and how many more times a contended measurement is taken.
TIMING = TimingConfig(budget_s=3.0)
QUIET_HINT = "run `parbench calibrate` again when nothing else runs (`top` shows what does)"

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=output_path, default=DEFAULT_RESULTS_DIR)
    parser.add_argument("--label", help="machine label (default $PARBENCH_MACHINE or the hostname)")
    parser.add_argument("--device", choices=DeviceKind.names(), action="append",
                        help="device kind(s) to calibrate (default: cpu and gpu where present)")
    parser.add_argument("--precision", choices=Precision.names(), action="append",
                        help="precision(s) to calibrate (default fp32)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help=f"square GEMM sizes to try (default {' '.join(map(str, SIZES))})")
    parser.add_argument("--stream-mib", type=int,
                        help=f"size of each of the streaming kernel's three arrays, MiB (default {CACHE_MULTIPLE}x "
                             "the last-level cache, within the memory available)")


@dataclass(frozen=True)
class Contended:
    """Something measured that stayed contended: what, and the verdict of its least contended try."""
    what: str
    verdict: Contention

    def line(self) -> str:
        return f"{self.what}: not stored: other work competed with it ({self.verdict.why}); {QUIET_HINT}"


def run(args: argparse.Namespace) -> int:
    knobs.check_label(args.label)
    most = largest_gemm_size()
    if any(not 1 <= size <= most for size in args.sizes):
        raise UserError(f"--sizes must be matrix sizes from 1 to {most} (three fp32 n x n matrices in this machine's "
                        f"memory) such as 2048, got {' '.join(map(str, args.sizes))[:80]}")
    if args.stream_mib is not None and args.stream_mib < 1:
        raise UserError(f"--stream-mib must be at least 1 (MiB per array), got {args.stream_mib}")
    kinds = list(map(DeviceKind, args.device or ["cpu", "gpu"]))
    console = terminal()
    stream_mib = None
    if DeviceKind.CPU in kinds:
        stream_mib, note = stream_size(args.stream_mib, cpu_last_level_cache_bytes(), available_memory_bytes())
        if note:
            console.print(f"[yellow]warning[/]: {note}")
    check_writable(args.results)
    machine = machine_label(args.label)
    stored, refused = 0, []
    for kind in kinds:
        for precision in map(Precision, args.precision or ["fp32"]):
            best = best_gemm(kind, precision, args.sizes, console)
            if isinstance(best, Contended):
                refused.append(best)
                console.print(best.line(), style="yellow", markup=False)
            elif best is not None:
                tflops, case = best
                path = save_calibration(args.results, machine, discover(case.framework, kind), precision,
                                        tflops, case.id)
                console.print(f"[green]{kind} {precision} peak {tflops_text(tflops)}[/] ({case.id}) -> {path}")
                stored += 1
        if kind is DeviceKind.CPU and stream_mib is not None:
            stream = stream_bandwidth(stream_mib, console)
            if isinstance(stream, Contended):
                refused.append(stream)
                console.print(stream.line(), style="yellow", markup=False)
            else:
                path = save_bandwidth(args.results, machine, _cpu(), stream.gbs, stream.how)
                console.print(f"[green]cpu memory bandwidth {stream.gbs:.2f} GB/s[/] ({stream.how}) -> {path}")
                stored += 1
    if refused and not stored:
        raise UserError(f"nothing stored: every measurement was contended ({refused[0].verdict.why}); {QUIET_HINT}")
    if not stored:
        raise UserError("nothing could be calibrated: no requested device/precision is available here; "
                        "see `parbench devices`")
    if refused:
        console.print(f"{len(refused)} measurement(s) refused as contended: "
                      f"{', '.join(one.what for one in refused)}; {QUIET_HINT}", markup=False)
        return 1
    return 0


def check_writable(results: Path) -> None:
    """Fail before minutes of measuring, not after, where the calibration could not be stored
    (`results`/calibration.json), or added to (a file there that is no calibration table), or the
    records of later runs could not (`results`/parbench)."""
    ResultsStore(results).ensure_writable()
    check_output(calibration_path(results), "--results", replace_any=True)
    try:  # one it could not add to is said now, not after measuring
        read_calibration(calibration_path(results))
    except UserError as error:
        raise UserError(f"--results: {error}; calibrate adds to that file and will not overwrite what it cannot "
                        "read: fix it, or move it away") from None


def uncontended(measure: Callable[[], tuple[T, Contention]], retried: Callable[[Contention, int, int], None],
                retries: int = TIMING.contention_retries) -> tuple[T, Contention]:
    """`measure()` again while contended, at most `retries` more times (`retried` is told the
    verdict, the next try and how many there may be): the first uncontended result, else the
    least contended one (whose verdict says so)."""
    tries = []
    for attempt in range(1, retries + 2):
        tries.append(measure())
        if not tries[-1][1].contended:
            return tries[-1]
        if attempt <= retries:
            retried(tries[-1][1], attempt + 1, retries + 1)
    return min(tries, key=lambda tried: tried[1].others_core_share or 0.0)


def retry_line(console: Console, what: str) -> Callable[[Contention, int, int], None]:
    """What `uncontended` prints as it measures `what` again."""
    def say(contention: Contention, attempt: int, attempts: int) -> None:
        console.print(f"  {what}: contended ({contention.why}): measuring again, try {attempt} of {attempts}",
                      markup=False)
    return say


def verdict(before: CpuReading, usage: CpuUsage | None, busy_expected: bool) -> Contention:
    """The contention of a measurement, judged as `run` judges a case's."""
    return judge(before, read_cpu(), os.cpu_count() or 1, usage, busy_expected)


def largest_gemm_size() -> int:
    """The largest square GEMM whose three fp32 matrices fit in this machine's memory: past it a
    size is a typo, and the case would fail (or swap) after the work before it."""
    return math.isqrt(knobs.machine_memory_bytes() // 12)


def best_gemm(kind: DeviceKind, precision: Precision, sizes: list[int],
              console: Console) -> tuple[float, Case] | Contended | None:
    """The fastest uncontended GEMM of every framework and size on `kind` in `precision`; a
    `Contended` where one of them stayed contended (it may have been the fastest); None where
    none is available."""
    best: tuple[float, Case] | None = None
    for framework in Framework:
        for size in sizes:
            case = Case.make("matmul", framework, kind, precision=precision, params={"m": size, "n": size, "k": size})
            job = plan(case)
            reason = unavailable_reason(job)
            if reason:
                console.print(f"[yellow]skip[/] {case.id}: {reason}")
                break
            assert isinstance(job, Job)

            def measure(job: Job = job) -> tuple[Outcome, Contention]:
                before = read_cpu()
                outcome = execute_kernel(job, TIMING)
                usage = outcome.measurement.cpu if outcome.measurement is not None else None
                return outcome, verdict(before, usage, busy_expected=kind is DeviceKind.CPU)

            outcome, contention = uncontended(measure, retry_line(console, case.id))
            if outcome.status is not Status.OK or outcome.measurement is None:
                console.print(f"[red]{case.id}[/]: {outcome.reason}")
                continue
            tflops = 2.0 * size**3 / outcome.measurement.median / 1e12
            if contention.contended:
                return Contended(f"{kind} {precision} peak ({case.id}, {tflops_text(tflops)})", contention)
            console.print(f"{case.id}: {tflops_text(tflops)}")
            if best is None or tflops > best[0]:
                best = (tflops, case)
    return best


def stream_bandwidth(array_mib: int, console: Console) -> StreamResult | Contended:
    """The CPU's memory bandwidth (`suites.measure.stream`), with progress, judged for contention
    over its passes (this process's cores: what else ran on them)."""
    counts = thread_counts()
    console.print(f"cpu memory bandwidth: STREAM add over 3 x {array_mib} MiB, {REPEATS} passes with "
                  f"{' and '.join(map(str, counts))} thread(s)", markup=False)

    def measure() -> tuple[StreamResult, Contention]:
        meter, before = CpuMeter(root=os.getpid()), read_cpu()
        meter.start()
        with stream_progress(console, len(counts) * REPEATS) as on_pass:
            try:
                result = best_stream_bandwidth(array_mib, on_pass=on_pass)
            except MemoryError:  # what the memory check could not foresee (others took it since)
                raise UserError(f"--stream-mib {array_mib}: three arrays of {array_mib} MiB do not fit in "
                                f"memory now; pass a smaller --stream-mib") from None
        return result, verdict(before, meter.stop(), busy_expected=False)

    result, contention = uncontended(measure, retry_line(console, "STREAM"))
    if contention.contended:
        return Contended(f"cpu memory bandwidth ({result.gbs:.2f} GB/s)", contention)
    return result


@contextmanager
def stream_progress(console: Console, total: int) -> Iterator[PassDone]:
    """What the STREAM passes tell as they end: a progress bar on a terminal; off one (a log, CI),
    a line as each thread count ends."""
    if not console.is_terminal:
        def plain(threads: int, done: int, passes: int) -> None:
            if done == passes:
                console.print(f"  STREAM: {passes} passes with {threads} thread(s) done", markup=False)
        yield plain
        return
    with Progress(TextColumn("STREAM"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("stream", total=total)
        yield lambda threads, done, passes: bar.advance(task)


def stream_size(given: int | None, cache_bytes: int | None, available_bytes: int | None) -> tuple[int, str]:
    """Each streaming array's MiB and a warning ('' for none): `given` (checked against the
    memory available), else CACHE_MULTIPLE x the last-level cache within what memory allows."""
    sized = array_mib_for(cache_bytes)
    under_cache = (f"under {CACHE_MULTIPLE}x the {cache_bytes / 2**20:g} MiB last-level cache: the bandwidth "
                   f"measured is partly the cache's") if cache_bytes else ""
    if given is not None:
        check_stream_mib(given, available_bytes)
        return given, f"--stream-mib {given} is {under_cache}" if under_cache and given < sized else ""
    most = max_stream_mib(available_bytes) if available_bytes is not None else None
    if most is None or sized <= most:
        return sized, ""
    if most < 1:
        raise UserError(f"the streaming kernel's three arrays do not fit in the {available_bytes / 2**30:.1f} GiB "
                        f"of memory available now; free memory, or calibrate the GPU alone (--device gpu)")
    return most, f"the memory available allows 3 x {most} MiB, {under_cache}"


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
