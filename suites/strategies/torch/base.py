"""What a PyTorch strategy supplies to the torch runnables, and the rank-process base.

The hooks import torch when called, never at import: rules are read without it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision
from suites.frameworks.torch.modes import CUDA_GRAPHS_MODE
from suites.measure.launch import Launch
from suites.strategies.base import StrategyPlugin, devices_on_this_node, on_shared_gpus, visible_gpus
from suites.strategies.options import option
from suites.strategies.requirements import Requirement, requirement
from suites.strategies.rules import Rules
from suites.workloads.collectives import DTYPE_BYTES

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import numpy as np
    import torch
    from torch import nn

    from suites.frameworks.torch.distributed import ProcessGroup
    from suites.hardware.devices import DeviceInfo

PROCESS_GROUP_BACKENDS = ("gloo", "nccl")

#: `torch.compile`'s mode, a parameter of inductor cases: "default", "max-autotune" (which
#: benchmarks kernel choices while compiling: far longer compiles, on GPUs often faster steps),
#: or "reduce-overhead" (replays the step as CUDA graphs: one launch for all its kernels, the
#: way out of a launch-bound step; GPUs only).
@dataclass(frozen=True)
class TorchCompileOptions:
    compile_mode: str = option("default", choices=("default", "max-autotune", "reduce-overhead"), minimum=None,
                               help="torch.compile mode of an inductor case")


class TorchHooks:
    """What torch's runnables call on a strategy while a case runs: its mechanism. The defaults are one
    process training the model as it is; a plugin's hooks class overrides what its strategy does otherwise.
    A hook that needs the plugin (its rules, its options' helpers) reaches it through `job.strategy`."""

    def join(self, job: "Job") -> "ProcessGroup | None":
        """This process's process group, joined (one per rank process); None in one process."""
        return None

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        """The module a training step calls: the model itself, or the strategy's wrapper."""
        return model

    def devices_in_use(self, job: "Job", device: "torch.device") -> list["torch.device"]:
        """Every device this process's step runs work on: what the runnable's `synchronize`
        waits for before the timer reads its clock. One process, one device by default."""
        return [device]

    def data_shard(self, job: "Job", rank: int) -> slice:
        """The samples of the global batch (start:stop) this process feeds its model each step
        and in the check: in one process all of them (a wrapper such as DataParallel may split
        them further). Processes feeding the same samples draw the same random batches."""
        return slice(0, job.workload.global_batch)

    def handles_precision(self, job: "Job") -> bool:
        """Whether `wrap` applies the case's mixed precision itself (FSDP's
        `MixedPrecisionPolicy`): the runnable then runs the forward without `torch.autocast`.
        Loss scaling (fp16's GradScaler) stays the runnable's."""
        return False

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        """What the numerics check compares with the float64 single-device gradient: the
        model's full gradients in canonical layout (a sharding strategy gathers them first)."""
        return model.canonical_gradients()


class TorchStrategy(StrategyPlugin):
    framework = Framework.TORCH
    rules = Rules(compilers=frozenset({Compile.NONE, Compile.INDUCTOR}))
    compiler_options = {Compile.INDUCTOR: TorchCompileOptions}
    #: Its mechanism: what torch's runnables call while a case runs (`TorchHooks`).
    hooks: ClassVar[TorchHooks] = TorchHooks()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.hooks, TorchHooks):
            raise TypeError(f"{cls.__name__}.hooks must be a TorchHooks instance (torch's runnables call its "
                            "methods): derive the strategy's hooks class from `TorchHooks` or `RankHooks`")

    # --- rules ----------------------------------------------------------------------------------
    def compile_reason(self, job: "Job") -> str | None:
        """As every strategy's, and CUDA graphs (torch.compile's "reduce-overhead") on GPUs only."""
        reason = super().compile_reason(job)
        if reason or job.compiler.compile is not Compile.INDUCTOR:
            return reason
        if job.compiler.options.compile_mode == CUDA_GRAPHS_MODE and job.device is not DeviceKind.GPU:
            return (f"torch.compile mode '{CUDA_GRAPHS_MODE}' replays the step as CUDA graphs, which exist "
                    f"on NVIDIA GPUs only; this case is on {job.device}")
        return None


# --- the rank processes' requirements: gloo ranks may share GPUs, NCCL needs one per rank ------
def on_cuda_gpus(summary: str, on_cpu: str, uses_cuda: str) -> Requirement:
    """The requirement of a strategy that runs on CUDA devices only ("on-gpus"): `on_cpu` is its
    reason on a CPU (what runs there instead), `uses_cuda` what it does with CUDA devices, said for
    any other device."""
    def on_gpus(job: "Job", device: "DeviceInfo") -> str | None:
        if job.device is DeviceKind.CPU:
            return on_cpu
        if job.device is not DeviceKind.GPU:
            return f"{uses_cuda}; {job.device} is not one"
        return None
    return Requirement("on-gpus", summary, on_gpus)


def a_gpu_per_device(what: str) -> Requirement:
    """A visible GPU for every device of the case ("enough-gpus"); `what` names the strategy."""
    def enough_gpus(job: "Job", device: "DeviceInfo") -> str | None:
        wanted = job.case.n_devices
        if device.count < wanted:
            return f"{what} over {wanted} GPUs needs {wanted} visible GPUs; {device.count} visible"
        return None
    return Requirement("enough-gpus", "a visible GPU for every device of the case", enough_gpus)


def rank_backend(job: "Job", device: "DeviceInfo") -> str:
    """The backend the case's ranks would join with, given the GPUs `device` counts."""
    plugin = cast("RankProcesses", job.strategy)
    return plugin.backend(job, device.count if job.case.device is DeviceKind.GPU else None)


@requirement("the backend is a torch.distributed one: gloo or nccl")
def process_group_backend(job: "Job", device: "DeviceInfo") -> str | None:
    backend = rank_backend(job, device)
    if backend not in PROCESS_GROUP_BACKENDS:
        return (f"backend {backend!r} is not a torch.distributed backend; torch uses "
                f"{' or '.join(PROCESS_GROUP_BACKENDS)}")
    return None


@requirement("nccl only on GPUs: it reduces CUDA tensors")
def nccl_on_gpus(job: "Job", device: "DeviceInfo") -> str | None:
    if rank_backend(job, device) == "nccl" and job.device is not DeviceKind.GPU:
        return f"nccl reduces CUDA tensors only; this case runs on {job.device} (use gloo)"
    return None


@requirement("nccl has a visible GPU for every rank on this machine (gloo ranks may share one)")
def nccl_one_gpu_per_rank(job: "Job", device: "DeviceInfo") -> str | None:
    here = devices_on_this_node(job)
    if rank_backend(job, device) == "nccl" and device.count < here:
        return (f"NCCL needs one GPU per rank: {here} ranks on this machine need {here} "
                f"visible GPUs, {device.count} visible (gloo can share a GPU)")
    return None


@requirement("ranks sharing a GPU (where the strategy `shares_gpus`) fit their training state in its memory")
def shared_gpu_memory(job: "Job", device: "DeviceInfo") -> str | None:
    return shared_gpu_memory_reason(job, device) if job.strategy.rules.shares_gpus else None


class RankHooks(TorchHooks):
    """The mechanism of one process per device in a `torch.distributed` process group: each
    rank joins the group (`RankProcesses.backend`'s) and feeds its equal shard of the batch."""

    def join(self, job: "Job") -> "ProcessGroup":
        """This rank's process group, joined over the plugin's backend (`RankProcesses.backend`)."""
        from suites.frameworks.torch.distributed import ProcessGroup

        return ProcessGroup(job.case, cast("RankProcesses", job.strategy).backend(job))

    def data_shard(self, job: "Job", rank: int) -> slice:
        """Rank `rank`'s equal shard of the global batch."""
        size = job.workload.per_device_batch
        return slice(rank * size, (rank + 1) * size)


class RankProcesses(TorchStrategy):
    """One process per device joined in a `torch.distributed` process group: gloo on CPU,
    nccl on GPU, or the case's `backend` parameter (allreduce cases)."""

    #: Shared GPUs: with fewer GPUs than ranks, the ranks share them round-robin over gloo (NCCL
    #: refuses two ranks on one GPU): every multi-GPU code path runs on CUDA tensors, `emulated`.
    rules = TorchStrategy.rules.but(launch=Launch.RANKS, shares_gpus=True)
    #: The process group's: its backend exists, NCCL has a GPU per rank, shared GPUs hold the state.
    requirements = (process_group_backend, nccl_on_gpus, nccl_one_gpu_per_rank, shared_gpu_memory)
    hooks = RankHooks()

    def backend(self, job: "Job", gpus: int | None = None) -> str:
        """The case's `backend`, or for "auto" nccl on GPUs (gloo where the ranks can share and
        do share fewer GPUs than they are: `gpus` visible, discovered where not given) and gloo on
        CPUs."""
        requested = str(job.workload.p.get("backend", "auto"))
        if requested != "auto":
            return requested
        if job.device is not DeviceKind.GPU:
            return "gloo"
        shared = self.rules.shares_gpus and on_shared_gpus(job, visible_gpus(job.framework) if gpus is None else gpus)
        return "gloo" if shared else "nccl"


def shared_gpu_memory_reason(job: "Job", device: "DeviceInfo") -> str | None:
    """Why ranks sharing fewer GPUs than they are (the shared-GPU emulation) cannot hold the
    case's training state and activations, or None: each rank keeps its own state (ZeRO's
    estimate) and its batch's activations (`activation_bytes_estimate`; a lower bound where the
    model's are not estimated). A real-size case over 8 ranks on one GPU only ran out of memory
    (issue 32, N14); the Llama block's ddp over 2 ranks on one 80 GB GPU, admitted on its 28.7 GiB
    of state a rank, held 134 GiB (issue 48)."""
    memory = device.details.get("memory_bytes") or []
    if job.device is not DeviceKind.GPU or not memory or not on_shared_gpus(job, device.count):
        return None
    state = (job.state_estimate() or {}).get("total")
    if not state:
        return None
    activations = activation_bytes_estimate(job)
    ranks_per_gpu = -(-devices_on_this_node(job) // device.count)
    needed, held = (state + (activations or 0)) * ranks_per_gpu, min(memory)
    if needed <= SHARED_GPU_MEMORY_SHARE * held:
        return None
    counted = ("activations of its batch" if activations is not None
               else "activations aside: not estimated for this model")
    return (f"{ranks_per_gpu} ranks sharing each GPU would hold {needed / 2**30:.1f} GiB on it (each rank's "
            f"parameters, gradients, optimizer; {counted}), more than {SHARED_GPU_MEMORY_SHARE:.0%} of its "
            f"{held / 2**30:.0f} GiB: the shared-GPU emulation is for sizes that fit; run it on "
            f"{job.n_devices} GPUs or with smaller sizes")


def activation_bytes_estimate(job: "Job") -> int | None:
    """Bytes of activations one device keeps for the backward pass of its batch: the model's own
    count (`Job.state_estimate`), else its analytic count from its layer shapes
    (`activation_bytes_per_sample`, in the compute dtype, under autocast unless the strategy casts
    the parameters itself), rescaled by the strategy (`activation_bytes_per_device`); None where
    neither says."""
    counted = (job.state_estimate() or {}).get("activations")
    if counted is not None:
        return counted
    count = getattr(getattr(job.workload, "model", None), "activation_bytes_per_sample", None)
    if count is None:
        return None
    dtype = DTYPE_BYTES[job.precision]
    autocast = dtype < DTYPE_BYTES[Precision.FP32] and not job.strategy.hooks.handles_precision(job)
    per_device_batch = int(getattr(job.workload, "per_device_batch", 1))
    return job.strategy.activation_bytes_per_device(job, int(count(dtype, autocast) * per_device_batch))


#: The share of a GPU's memory the training state and activations of the ranks sharing it may take:
#: the rest for the allocator's cache, the CUDA context of each rank and what the estimates leave out.
SHARED_GPU_MEMORY_SHARE = 0.8
