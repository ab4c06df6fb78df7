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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import DeviceKind, Precision
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
