"""The contract between the timer and a framework implementation of a workload."""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

from suites.cases.vocabulary import DeviceKind
from suites.records.check import Check
from suites.measure.energy_meters import EnergyMeter, NoMeter, meter_for
from suites.measure.telemetry_sampler import NoSampler, TelemetrySampler, sampler_for

if TYPE_CHECKING:
    from suites.records.memory_breakdown import MemoryBreakdown
    from suites.measure.job_contract import JobContract
    from suites.measure.memory_probes import MemoryProbe


#: A barrier + broadcast per timed block costs ~1 ms between processes on loopback: blocks of
#: >= 0.25 s keep it under 0.5% of the measured step time.
COORDINATED_BLOCK_S = 0.25


class Runnable(ABC):
    """One case, ready to be timed in this process.

    `setup` allocates (random) inputs on the device; `step` enqueues one unit of work and may
    return before the device finishes; `synchronize` waits for this process's devices, so the
    timer reads its host clock only after work is done; `barrier` then waits for the other
    ranks of a multi-process case, so a timed block runs barrier to barrier and measures the
    global step; `check` verifies numerics once, outside timing.
    """

    #: Shortest timed block for this runnable. Ranks that meet at a barrier (and agree) once
    #: per block raise it, so that per-block coordination stays a negligible part of a block.
    min_block_s: float = 0.0
    #: The same step without its cross-rank exchange (DDP: under `no_sync`), where the strategy
    #: has one. The timer times it last, per rank, to separate compute from communication; it
    #: may leave the ranks' weights apart, so nothing is timed or checked after it.
    local_step: Callable[[], None] | None = None

    def __init__(self, job: "JobContract") -> None:
        #: The case resolved (a `suites.strategies.jobs.Job`: its workload, strategy plugin and
        #: options, compiler), read here through its contract (`JobContract`).
        self.job = job
        self.workload = job.workload
        self.case = job.case
        self.p = job.workload.p
        #: How the case ran, beyond its parameters, for its record's details (e.g. whether
        #: cuDNN autotuned); `setup` fills it.
        self.details: dict[str, Any] = {}

    @abstractmethod
    def setup(self) -> None: ...

    @abstractmethod
    def step(self) -> None: ...

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def check(self) -> Check: ...

    def compilations(self) -> int | None:
        """How many times the timed step has been compiled (traced) so far, by a counter of the
        compiler's (torch: dynamo's graphs; TF: the step functions' traces); None where the
        case is not compiled. The timer warms up until it stops growing."""
        return None

    def compile_anew(self) -> None:
        """Forget the compiled step, so the next step compiles again. The timer calls it
        before the first step: the check compiled the step already (it checks the compiled
        computation), and that compile must not make the first timed step look warm."""

    def barrier(self) -> None:
        """Wait until every rank of a multi-process case gets here; single-process: nothing."""

    def gather(self, value: float) -> tuple[float, ...]:
        """Every rank's `value`, in rank order, on every rank; single-process: `(value,)`."""
        return (value,)

    def agree(self, value: float) -> float:
        """The same value on every rank of a multi-process case (rank 0's, broadcast).

        The timer calls this for every decision that changes how many steps run (warm-up
        length, block size, when to stop), so ranks stay in lockstep and none waits forever in
        a collective its peers have left. A single-process runnable returns `value` unchanged.
        """
        return value

    def memory_probe(self) -> "MemoryProbe | None":
        """What measures this process's peak memory over the timed steps (`suites.measure.memory_probes`);
        None: the runnable measures none. The timer calls it once, after setup and the check,
        on every rank alike, and gathers every rank's peaks to rank 0."""
        return None

    def memory_tracker(self) -> "Callable[[], list[MemoryBreakdown]] | None":
        """What runs one more step under the framework's memory tracker and returns this process's
        tensors at their peak in it, by category, one breakdown per device
        (`suites.records.memory_breakdown`); None: the runnable tracks none (it may say why in
        `details["memory_breakdown"]`). The timer calls it after the timed blocks, on every rank
        alike (the tracked step steps: ranks must step together), so whether a runnable tracks
        must not depend on its rank."""
        return None

    def gpu_ordinals(self) -> tuple[int, ...]:
        """The CUDA ordinals of the GPUs this process drives (GPU cases; else none): its local
        rank's in a rank process, else the case's first `n_devices`. A runnable that knows its
        devices (torch training: `devices_in_use`) says so instead."""
        if self.case.device is not DeviceKind.GPU:
            return ()
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            return (int(os.environ.get("LOCAL_RANK", "0")),)
        return tuple(range(self.case.n_devices))

    def energy_meter(self) -> EnergyMeter:
        """What reads this process's devices' energy over the timed steps (`suites.measure.energy_meters`);
        the timer calls it once, on every rank alike, and gathers the readings to rank 0. A
        runnable without a case (a bare step to time) has none."""
        if getattr(self, "case", None) is None:
            return NoMeter("no case: no devices to read energy of")
        try:
            return meter_for(self.case.device, self.gpu_ordinals(), int(os.environ.get("LOCAL_RANK", "0")))
        except Exception as error:  # a broken driver costs the case its energy figures, not its run
            return NoMeter(f"no energy meter: {type(error).__name__}: {str(error)[:200]}")

    def telemetry_sampler(self) -> TelemetrySampler:
        """What samples this process's GPUs' clocks, power and clock-event reasons over the timed
        steps (`suites.measure.telemetry_sampler`); called like `energy_meter`."""
        if getattr(self, "case", None) is None:
            return NoSampler("no case: no devices to sample")
        try:
            return sampler_for(self.case.device, self.gpu_ordinals())
        except Exception as error:  # a broken driver costs the case its telemetry, not its run
            return NoSampler(f"no GPU telemetry: {type(error).__name__}: {str(error)[:200]}")

    def kernel_seconds_per_step(self, steps: int) -> float | None:
        """Seconds the device ran kernels per step over `steps` more steps (a profiler's device
        time), where the runnable can tell; None where not. The timer calls it after the timed
        blocks on every rank alike (it steps, so ranks must step together): the device's busy
        share of a step shows whether the step measures the device or the host launching it."""
        return None

    def teardown(self) -> None:
        """Release device memory; the default relies on garbage collection."""
