"""The device's kernel time per step, from torch's profiler: how busy the GPU was within a step.

NCCL's collective kernels are left out: they spin while a rank waits for its peers, so counting
them made a waiting GPU look busy.

A step whose kernels keep the GPU busy for a small share of its wall time measures the host
launching them, not the GPU (`suites.records.bound_by`'s `launch`). The busy time is the union of
the device activities' intervals (kernels, copies, sets; not annotations), so kernels overlapping on several
streams count once. The profiled steps come after the timed ones; only their device time is
used, which the profiler's host-side overhead does not inflate.
"""
from __future__ import annotations

from typing import Callable

import torch

from suites.cases.vocabulary import DeviceKind
from suites.measure.telemetry_sampler import busy_length

#: Steps profiled at most: enough to average over, few enough to keep the trace small.
PROFILED_STEPS = 20


def kernel_seconds_per_step(step: Callable[[], None], synchronize: Callable[[], None], steps: int) -> float | None:
    """Device busy seconds per step over `steps` (at most `PROFILED_STEPS`) profiled steps;
    None where the profiler saw no device activity at all (a profiler that recorded nothing
    says nothing of how busy the GPU was: issue 32, N10)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    steps = max(1, min(steps, PROFILED_STEPS))
    step()  # the profiler's own start-up lands on an untimed step
    synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(steps):
            step()
        synchronize()
    # A user annotation (record_function) spans the kernels it wraps on the GPU's timeline too.
    # NCCL's kernels spin on the GPU while they wait for the other ranks: waiting, not work.
    intervals = [(event.time_range.start, event.time_range.end) for event in profiler.events()
                 if event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)
                 and not is_collective_kernel(event.name)]
    if not intervals:
        return None
    return busy_length(intervals) / 1e6 / steps


def is_collective_kernel(name: str) -> bool:
    """Whether a kernel is one of NCCL's collectives (ncclDevKernel_AllReduce_..., ncclKernel_...)."""
    return name.lower().startswith("nccl")


class ProfiledKernels:
    """Mixin of a torch runnable: its GPU cases' kernel time per step (`Runnable.kernel_seconds_per_step`)."""

    def kernel_seconds_per_step(self, steps: int) -> float | None:
        if self.case.device is not DeviceKind.GPU or not torch.cuda.is_available():  # type: ignore[attr-defined]
            return None
        return kernel_seconds_per_step(self.step, self.synchronize, steps)  # type: ignore[attr-defined]
