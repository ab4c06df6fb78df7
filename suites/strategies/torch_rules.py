"""Rules of the torch strategies: availability, emulation, launch. No framework imports here."""
from __future__ import annotations

from dataclasses import dataclass

from suites.cases.case import Case
from suites.kept.devices import DeviceInfo
from suites.cases.vocabulary import DeviceKind, Strategy
from suites.workloads import workload_of
from suites.workloads.training import TrainStep
from suites.strategies import Launch, StrategyRules

PROCESS_GROUP_BACKENDS = ("gloo", "nccl")
DATAPARALLEL_ON_CPU = ("nn.DataParallel on CPU runs the module unchanged on one device; "
                       "nothing parallel to measure")


def process_group_backend(case: Case) -> str:
    """The torch.distributed backend a case uses: its `backend` parameter where it has one
    (allreduce), otherwise — and for `auto` — gloo on CPU and nccl on GPU."""
    requested = str(workload_of(case).p.get("backend", "auto"))
    if requested != "auto":
        return requested
    return "nccl" if case.device is DeviceKind.GPU else "gloo"


@dataclass(frozen=True)
class DataParallelRules(StrategyRules):
    """nn.DataParallel: one process, one thread per GPU, module replicated every step."""

    strategy: Strategy = Strategy.DATAPARALLEL

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        if case.device is DeviceKind.CPU:
            return DATAPARALLEL_ON_CPU
        if case.device is not DeviceKind.GPU:
            return f"nn.DataParallel replicates a module over CUDA devices; {case.device} is not one"
        if case.n_devices < 2:
            return ("nn.DataParallel over one GPU calls the module unchanged; nothing parallel "
                    "to measure (strategy 'single' times that)")
        if device.count < case.n_devices:
            return (f"nn.DataParallel over {case.n_devices} GPUs needs {case.n_devices} visible "
                    f"GPUs; {device.count} visible")
        return None

    def emulated(self, case: Case) -> bool:
        """Never: it runs on real GPUs only (on a CPU it is unavailable, not emulated)."""
        return False


@dataclass(frozen=True)
class DdpRules(StrategyRules):
    """DistributedDataParallel: one rank process per device, gloo on CPU, nccl on GPU.

    On a CPU the ranks share the machine's cores (`emulated`); with gloo, ranks on a GPU
    machine may share GPUs; NCCL needs a GPU of its own for every rank.
    """

    strategy: Strategy = Strategy.DDP
    launch: Launch = Launch.RANKS

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        backend = process_group_backend(case)
        if backend not in PROCESS_GROUP_BACKENDS:
            return (f"backend {backend!r} is not a torch.distributed backend; torch uses "
                    f"{' or '.join(PROCESS_GROUP_BACKENDS)}")
        if backend == "nccl" and case.device is not DeviceKind.GPU:
            return f"nccl reduces CUDA tensors only; this case runs on {case.device} (use gloo)"
        if backend == "nccl" and device.count < case.n_devices:
            return (f"NCCL needs one GPU per rank: {case.n_devices} ranks need {case.n_devices} "
                    f"visible GPUs, {device.count} visible (gloo can share a GPU)")
        workload = workload_of(case)
        if isinstance(workload, TrainStep) and workload.global_batch % case.n_devices:
            return (f"the global batch of {workload.global_batch} does not split evenly over "
                    f"{case.n_devices} ranks (DDP's mean of per-rank means needs equal shards)")
        return None


RULES: dict[Strategy, StrategyRules] = {
    Strategy.DATAPARALLEL: DataParallelRules(),
    Strategy.DDP: DdpRules(),
}
