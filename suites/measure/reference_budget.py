"""How much a training check's reference may cost, and how long the other ranks wait for it.

A training case's numerics check compares its step with a reference that rank 0 computes alone
(`suites.frameworks.torch.training`): the float64 single-device gradients of the check batch on
the CPU, or the fp32 single-device loss trajectory on rank 0's device. Its cost grows with the
model and the check batch (2 samples per device): BERT at sequence 512 on 8 ranks is ~6e12 FLOP,
minutes of float64 on one core, while every other rank waits. Here the cost is estimated from
the workload's FLOPs before anything is computed; a CPU reference over the budget is not
computed and the check is `not_checked` (never passed), saying what it would cost and how to
check the case instead. A reference on rank 0's GPU (the fp32 loss trajectory of an fp16/bf16
case: a whole fp32 model, its gradients, its optimizer state and its activations, beside the
case's own state) is bounded by memory instead: the case's gradients and optimizer state are freed
first, and a reference estimated over `GPU_MEMORY_SHARE` of what is then free on that GPU is not
computed either (`over_gpu_memory`). Framework-neutral: no framework is imported.
"""
from __future__ import annotations

from dataclasses import dataclass

from suites import knobs
from suites.records.check import LOSS_TRAJECTORY_STEPS, Check, not_checked

#: The most FLOP a check's reference may cost on the CPU per thread rank 0 computes it with (its
#: node's cores shared among the node's ranks: `reference_threads`), estimated as the workload's
#: `flops_per_step` at the check batch, times the steps of a loss trajectory. A float64 training
#: step ran at 37-38 GFLOP/s on one core of an AMD EPYC (ResNet-50 and BERT, 2 layers, batch 2;
#: `reference_gradients`, one thread), so 5e11 a thread is ~13 s there and ~50 s on a core a third
#: as fast (AVX2, no AVX-512): inside the 120 s every collective of the case allows and a case's
#: default deadline (~200 s), even where rank 0 has one thread. On a 16-core GPU host, one GPU's
#: reference may cost 8e12 (BERT-base 7.3e11 and GPT-2 small 1.8e12 stay checked; the 4-layer
#: Llama block, 3.6e13, does not); 8 ranks on those cores give rank 0 2 threads, 1e12 (BERT at
#: sequence 512 on 8 ranks, ~6e12, is not computed: the issue's abort by arithmetic).
REFERENCE_FLOP_BUDGET = 5e11
BUDGET_ENV = "PARBENCH_REFERENCE_FLOP_BUDGET"
#: Slowest rates a reference is expected to run at, FLOP/s: float64 on one CPU core (a third of
#: the measured 38 GFLOP/s, again halved), fp32 eager on a GPU (small batches, TF32 off). They
#: bound how long the other ranks wait, not what is checked.
SLOWEST_CPU_FLOP_S = 5e9
SLOWEST_GPU_FLOP_S = 1e12
#: The other ranks wait for the reference this many times its time at the slowest rate, plus the
#: 120 s any collective of the case allows (`suites.frameworks.torch.distributed`).
WAIT_MARGIN = 2.0
COLLECTIVE_TIMEOUT_S = 120.0
#: Bytes of one fp32 element of the reference's model: weights, gradients, optimizer states, activations.
FP32_BYTES = 4
#: The share of the memory free on rank 0's GPU (torch.cuda.mem_get_info, plus its allocator's
#: unused cache) a reference estimated at its fp32 state and activations may take: the rest for
#: what the estimate leaves out (cuBLAS/cuDNN workspaces, the allocator's fragmentation, the
#: autograd graph's temporaries).
GPU_MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class ReferenceCost:
    """What a check's reference costs: its FLOP (0 where the model's FLOPs are unknown, as a user
    model's may be), whether it runs on the CPU, and what it is, for the check's detail."""

    flop: float
    on_cpu: bool
    what: str
    #: Device memory it is estimated to hold (`reference_bytes`); 0 where not estimated.
    bytes: float = 0.0

    def wait_s(self) -> float:
        """How long the ranks that do not compute the reference may wait for it."""
        rate = SLOWEST_CPU_FLOP_S if self.on_cpu else SLOWEST_GPU_FLOP_S
        return COLLECTIVE_TIMEOUT_S + WAIT_MARGIN * self.flop / rate


def gradient_reference_cost(flops_per_step: float, batch: int) -> ReferenceCost:
    """The float64 gradients of one check batch (forward and backward) on the CPU."""
    return ReferenceCost(flops_per_step, True, f"float64 forward and backward of the check batch of {batch} "
                                               "on the CPU")


def trajectory_reference_cost(flops_per_step: float, batch: int, on_cpu: bool,
                              memory_bytes: float = 0.0) -> ReferenceCost:
    """The fp32 loss trajectory: `LOSS_TRAJECTORY_STEPS` steps of the check batch on rank 0's device,
    holding `memory_bytes` there (`reference_bytes`; 0: not estimated)."""
    where = "the CPU" if on_cpu else "rank 0's GPU"
    return ReferenceCost(LOSS_TRAJECTORY_STEPS * flops_per_step, on_cpu,
                         f"{LOSS_TRAJECTORY_STEPS} fp32 steps of the check batch of {batch} on {where}", memory_bytes)


def reference_bytes(parameters: int, optimizer_states: int, activation_bytes_per_sample: float | None,
                    batch: int) -> float:
    """What a single-device fp32 reference holds: weights, gradients and `optimizer_states` per
    parameter, and the activations the model keeps for the backward pass of `batch` samples
    (`activation_bytes_per_sample` in fp32; None: the model does not count them, and they are left out)."""
    return float(FP32_BYTES * parameters * (2 + optimizer_states) + (activation_bytes_per_sample or 0.0) * batch)


def flop_budget() -> float:
    """`REFERENCE_FLOP_BUDGET`, or $PARBENCH_REFERENCE_FLOP_BUDGET where set."""
    return knobs.read(BUDGET_ENV) or REFERENCE_FLOP_BUDGET


def over_budget(cost: ReferenceCost, budget: float, threads: int = 1, detail: str = "") -> Check | None:
    """The `not_checked` check where the reference would cost more than `budget` per thread of
    the `threads` rank 0 computes it with, on the CPU, else None (compute it). A reference on a
    GPU is not bounded: fp32 there is fast."""
    allowed = budget * max(1, threads)
    if not cost.on_cpu or cost.flop <= allowed:
        return None
    return _not_computed(cost.flop, allowed, f"{cost.what} would cost {cost.flop:.1e} FLOP, over the budget of "
                         f"{allowed:.1e} ({budget:.1e} a thread, {max(1, threads)} thread(s); rank 0 computes it "
                         f"alone while any other ranks wait)", f"raise ${BUDGET_ENV}", detail)


def _not_computed(value: float, allowed: float, why: str, instead: str, detail: str) -> Check:
    """The `not_checked` check of a reference left uncomputed: `why`, and how to check the case `instead`."""
    return not_checked(value, allowed, f"reference not computed: {why}; check the case at a smaller batch, sequence "
                       f"or model, or {instead}" + (f"; {detail}" if detail else ""))


def over_gpu_memory(cost: ReferenceCost, free_bytes: float | None, detail: str = "") -> Check | None:
    """The `not_checked` check where a reference on rank 0's GPU is estimated to hold more than
    `GPU_MEMORY_SHARE` of the `free_bytes` there (after the case's gradients and optimizer state
    were freed), else None (compute it). Not bounded: a CPU reference (`over_budget` bounds it), a
    reference whose memory is not estimated, or a GPU whose free memory is unknown."""
    if cost.on_cpu or not cost.bytes or free_bytes is None:
        return None
    allowed = GPU_MEMORY_SHARE * free_bytes
    if cost.bytes <= allowed:
        return None
    return _not_computed(cost.bytes, allowed, f"{cost.what} would hold ~{cost.bytes / 2**30:.1f} GiB (fp32 weights, "
                         f"gradients, optimizer state and activations), over {GPU_MEMORY_SHARE:.0%} of the "
                         f"{free_bytes / 2**30:.1f} GiB free there once the case's gradients and optimizer state "
                         "were freed", "on a GPU with more memory", detail)


def reference_threads(current: int, cores: int, usable: int, local_ranks: int) -> int:
    """Threads for rank 0 while it computes the reference: its node's `cores` shared among the
    node's `local_ranks` (the others only wait meanwhile, but keep their threads), never more than
    the `usable` cores it may run on (a pinned rank), never fewer than the `current` threads."""
    return max(1, current, min(cores // max(1, local_ranks), usable))
