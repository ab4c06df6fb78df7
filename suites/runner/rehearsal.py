"""Rehearse before renting: a GPU case run on this CPU, at small sizes, through the code path it
takes on the device, so that what would break on the first real run breaks here first.

What stays as on the device: the framework, workload, strategy (FSDP2 and DTensor wrapping, the
same rank processes over gloo, TF's logical devices, one per GPU, with strict placement as on the
GPUs: an op pinned where it cannot run fails instead of moving, and the record's
`device_placement` says so; `parameter_server` alone needs soft placement), precision (fp16 with
its loss scaling, bf16 autocast), compilation, the model's layout (channels_last) and its
architecture (fewer, smaller layers), and the optimizer implementation CUDA picks
(`suites.measure.process_env.REHEARSAL_ENV`: fused AdamW, foreach for the rest, where the CPU's
default is a per-parameter loop that hides CUDA-only failures). What
changes: the device (cpu), the sizes (what the workload declares,
`suites.workloads.base.Workload.rehearsal_params`, and a training case's model,
`suites.workloads.model_spec.ModelSpec.rehearsal_sizes`; the batch per device,
`REHEARSAL_BATCH`), tf32 (a tensor-core mode: rehearsed as
fp32, which takes the same path but for one flag). A rehearsal is never a result: its records go
to a temporary folder that is removed, and nothing is ranked.

Across nodes (inside a Slurm allocation, or with `--nnodes N`), what the process that places a GPU
case's ranks on the nodes decides of it (`cluster_decision`: available, backend, emulated, the
devices its figure is divided by, the srun step's flags) is shown as a real run would take it, from
the same functions (`placing_on`, `unavailable_reason`, `slurm.step_flags`), before any is run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import DeviceKind, Framework, Precision
from suites.measure.launch import Launch
from suites.records.metric_registry import Work, physical_devices
from suites.runner.plan import Unresolved, launch_mode, plan, unavailable_reason
from suites.runner.slurm import Allocation, step_flags
from suites.runner.spanning import Nodes, nodes_needed, ranks_per_node
from suites.strategies.base import placing_on
from suites.strategies.jobs import Job
from suites.workloads import WORKLOADS
from suites.workloads.training import MODELS, SIZE_PARAMS, TrainStep

#: The most samples per device a rehearsed training step takes (weak scaling; strong keeps its
#: global batch, which must split over the ranks as on the device).
REHEARSAL_BATCH = 2


@dataclass(frozen=True)
class Rehearsal:
    """One device case and what rehearses it: `case` on the CPU, or the `reason` it cannot be."""
    of: Case
    case: Case | None
    reason: str = ""


def rehearsal_of(case: Case) -> Rehearsal:
    """The CPU case that rehearses the GPU case `case` (`Rehearsal.reason` says why none does)."""
    if case.device is DeviceKind.TPU:
        return Rehearsal(case, None, "a TPU case is not rehearsed: TPUStrategy runs only against a TPU "
                                     "runtime (`parbench ready` on the TPU VM checks it)")
    if case.device is not DeviceKind.GPU:
        return Rehearsal(case, None, "not a GPU case: run it as it is")
    params = dict(case.param_dict)
    params.update(_small(case.workload, params, case.n_devices))
    precision = Precision.FP32 if case.precision is Precision.TF32 else case.precision
    return Rehearsal(case, Case.make(case.workload, case.framework, DeviceKind.CPU, case.strategy,
                                     precision, case.n_devices, params, case.compile))


def _small(workload: str, params: Mapping[str, ParamValue], devices: int = 1) -> dict[str, ParamValue]:
    """The parameters a rehearsal of a case of `workload` with `params` on `devices` sets: the
    workload's declared `rehearsal_params`, and for a training step its model's `rehearsal_sizes`
    (those of its size parameters) and a small batch."""
    declared = WORKLOADS.get(workload)
    if declared is None:
        return {}
    sized = dict(declared.rehearsal_params)
    if not issubclass(declared, TrainStep):
        return sized
    model = str(params.get("model"))
    if model in MODELS:
        spec = MODELS[model]()
        own = spec.size_fields()
        sized.update({key: value for key, value in spec.rehearsal_sizes.items() if key in own and key in SIZE_PARAMS})
    if params.get("scaling", "weak") == "weak" and "batch" in params:
        sized["batch"] = _rehearsal_batch(int(params["batch"]), int(params.get("microbatches", 1)), devices)
    return sized


def _rehearsal_batch(batch: int, microbatches: int, devices: int) -> int:
    """The smallest per-device batch from REHEARSAL_BATCH up to the case's own whose global batch
    (x `devices`, weak scaling) the case's micro-batches still divide, as its own does on the
    device: a pipeline case of 8 micro-batches is not made unavailable by the rehearsal's size."""
    for candidate in range(min(batch, REHEARSAL_BATCH), batch + 1):
        if (candidate * devices) % max(microbatches, 1) == 0:
            return candidate
    return batch


# --- what a GPU cluster's run would decide of each case ---------------------------------------------
@dataclass(frozen=True)
class NodesLikeThisOne:
    """`count` nodes each with this machine's GPUs, as `parbench run --nnodes` would place ranks on
    them: for deciding cases only (it starts nothing, and has no `run_step`)."""

    count: int
    gpus_per_node: int
    launcher = "nodes"

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(f"node{rank}" for rank in range(self.count))

    def ranks_per_node(self, job: Job) -> int:
        return ranks_per_node(job, self.gpus_per_node)

    def name(self) -> str:
        return f"{self.count} nodes of {self.gpus_per_node} GPU(s) (--nnodes)"

    def more_hint(self, needed: int) -> str:
        return f"start it on {needed} nodes: --nnodes {needed}"


def nodes_like_this_one(count: int) -> NodesLikeThisOne:
    """`count` nodes each with the GPUs torch sees here (discovery)."""
    from suites.hardware import devices

    return NodesLikeThisOne(count, devices.discover(Framework.TORCH, DeviceKind.GPU).count)


@dataclass(frozen=True)
class ClusterDecision:
    """What the process placing a case's ranks on the run's nodes decides of it, as `Runner.run`
    does: `reason` ("" where available), and where available the process-group backend ("-" where
    the strategy joins none), whether it is `emulated`, the devices its figure's peak is counted
    over (`physical_devices`), the nodes it takes and how it is launched there."""

    case: Case
    reason: str = ""
    backend: str = "-"
    emulated: bool = False
    divided_by: int = 0
    nodes: int = 1
    launch: str = ""


def cluster_decision(case: Case, where: Nodes | NodesLikeThisOne) -> ClusterDecision:
    """`case` decided as placed on `where` (`placing_on`, `unavailable_reason`), and the srun flags of
    its step where its ranks span the nodes of a Slurm allocation (`slurm.step_flags`). `where`
    places ranks only: nothing here runs a step."""
    planned = plan(case)
    with placing_on(where):
        reason = unavailable_reason(planned, where)
        if reason or isinstance(planned, Unresolved):
            return ClusterDecision(case, reason or "unresolved")
        emulated = planned.emulated
        backend = getattr(planned.strategy, "backend", None)
        chosen = backend(planned) if callable(backend) else str(planned.workload.p.get("backend", "-"))
    divided_by = physical_devices(Work(median_s=1.0, n_devices=planned.n_devices, emulated=emulated))
    processes = planned.strategy.processes(planned)
    needed = nodes_needed(planned, where, processes) if launch_mode(planned) is Launch.RANKS else 1
    if needed == 1:
        return ClusterDecision(case, "", chosen, emulated, divided_by, 1, "on the first node, as on one machine")
    launch = (f"srun {' '.join(step_flags(planned, where, processes))}" if isinstance(where, Allocation)
              else f"{needed} nodes x {where.ranks_per_node(planned)} ranks through the --nnodes group (no srun)")
    return ClusterDecision(case, "", chosen, emulated, divided_by, needed, launch)
