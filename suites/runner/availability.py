"""Can a case run here? Each unavailable case keeps its reason; nothing is dropped silently."""
from __future__ import annotations

import os

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision
from suites.hardware.devices import DeviceInfo, descriptor, discover
from suites.strategies.jobs import Job


def machine_reason(job: Job) -> str | None:
    """Why this machine cannot run the resolved case, or None: its workload's own reasons, its
    device, its precision on that device, its strategy's rules. The runner's one question,
    `suites.runner.plan.unavailable_reason`, asks this once the case has a job here (its framework
    installed and its strategy found), and the run's nodes after it."""
    reason = job.unavailable_reason()
    if reason:
        return reason
    device = discover(job.framework, job.device)
    if not device.available:
        return f"no {job.device}: {device.reason}"
    return emulation_reason(job.case) or precision_reason(job.case, device) or strategy_reason(job, device)


#: The most emulated devices (gloo ranks, logical CPU devices, local worker processes) one CPU
#: core may carry: each rank is a process with a framework loaded (~300 MB), so a grid asking
#: for thousands would exhaust the machine's memory before its first step.
EMULATED_DEVICES_PER_CORE = 8


def emulation_reason(case: Case) -> str | None:
    """Why a CPU case asks for more emulated devices than this machine can hold, or None."""
    if case.device is not DeviceKind.CPU:
        return None
    most = EMULATED_DEVICES_PER_CORE * len(os.sched_getaffinity(0))
    if case.n_devices > most:
        return (f"{case.n_devices} emulated CPU devices are more than this machine can hold: at most "
                f"{EMULATED_DEVICES_PER_CORE} per core, {most} on its {most // EMULATED_DEVICES_PER_CORE} cores")
    return None


#: The compute capability from which NVIDIA GPUs have tf32 and bf16 tensor cores (Ampere).
TENSOR_CORE_CAPABILITY = (8, 0)
#: What a case in each precision would be on an older GPU.
OLDER_GPU = {Precision.TF32: "it would run as fp32 and the record say tf32",
             Precision.BF16: "it has no bf16 tensor cores, and the frameworks' bf16 kernels fail there"}


#: NVIDIA's switch that turns TF32 off in cuBLAS and cuDNN, whatever a framework asks for.
TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"


def precision_reason(case: Case, device: DeviceInfo) -> str | None:
    """Why the case's precision cannot run as its name means on `device`, or None: the rules of
    every framework here, then the framework's own (`FrameworkDescriptor.precision_reason`:
    torch's tf32 on ROCm)."""
    if case.precision is Precision.TF32 and case.device is not DeviceKind.GPU:
        return "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this case is not on a GPU"
    framework_reason = descriptor(case.framework).precision_reason(case.precision, device)
    if framework_reason:
        return framework_reason
    if case.precision is Precision.TF32 and os.environ.get(TF32_OVERRIDE, "").strip() == "0":
        return (f"{TF32_OVERRIDE}=0 turns TF32 off in cuBLAS and cuDNN: the case would run as fp32 and "
                f"the record say tf32 (unset {TF32_OVERRIDE} to measure tf32)")
    if case.precision in OLDER_GPU and case.device is DeviceKind.GPU:
        return _capability_reason(case, device)
    return None


def _capability_reason(case: Case, device: DeviceInfo) -> str | None:
    """tf32 and bf16 need compute capability 8.0 on every GPU the case uses (the first
    `n_devices`); a framework that reports no capability is not second-guessed."""
    reported = (device.details.get("compute_capability") or [])[:case.n_devices]
    for index, capability in enumerate(reported):
        if capability and _version(capability) < TENSOR_CORE_CAPABILITY:
            name = device.names[index] if index < len(device.names) else f"GPU {index}"
            return (f"{case.precision} needs compute capability >= 8.0 (Ampere or newer); {name} has "
                    f"{capability}: {OLDER_GPU[case.precision]}")
    return None


def _version(capability: str) -> tuple[int, ...]:
    """"8.6" -> (8, 6): compared as numbers, so "10.0" comes after "9.0"."""
    return tuple(int(part) for part in str(capability).split("."))


def strategy_reason(job: Job, device: DeviceInfo) -> str | None:
    """The rules of the case's strategy plugin (`suites.strategies.<framework>.<strategy>`):
    its compilers' first, then its requirements in their order
    (`suites.strategies.base.StrategyPlugin.requirements`)."""
    case, plugin = job.case, job.strategy
    if not plugin.applies_to(type(job.workload)):  # a case made outside a grid
        return f"{case.framework} strategy '{case.strategy}' does not apply to {case.workload}"
    return plugin.compile_reason(job) or plugin.unavailable_reason(job, device)
