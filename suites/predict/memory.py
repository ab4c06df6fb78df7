"""Bytes one device holds at the peak of a step, whether that fits the board, and the largest batch that does.

state: the strategy plugin's `state_bytes_per_device` (ZeRO's accounting, `Job.state_estimate`).
activations: what one sample keeps for the backward pass, from (in this order)
- the model's own count (`ModelSpec.saved_activations_per_sample`, via the job);
- a GPU record of the same workload: (its peak - its state estimate) / its per-device batch (measured);
- for a transformer language model, Korthikanti et al. 2022 ("Reducing Activation Recomputation in
  Large Transformer Models", section 4.1): 34 x width bytes per token per layer in 16-bit (twice in
  fp32), the attention scores' 5 x heads x seq term dropped because flash attention keeps no scores,
  plus the logits in the compute dtype and in fp32 for the loss;
then rescaled by the plugin (`activation_bytes_per_device`: a pipeline stage, a tensor-parallel shard).
"""
from __future__ import annotations

from dataclasses import dataclass

from suites.predict.base import Base
from suites.predict.catalogue import DeviceType
from suites.predict.inputs import Input
from suites.predict.workload import ProjectedWorkload
from suites.workloads.collectives import DTYPE_BYTES

#: Korthikanti et al. 2022, eq. (1) without the attention-score term: bytes per token per layer per
#: unit of width, at 16-bit activations.
TRANSFORMER_BYTES_PER_TOKEN_WIDTH = 34
#: Bytes per logit kept: the compute dtype's copy and the fp32 one the loss reads.
FP32_BYTES = 4


@dataclass(frozen=True)
class MemoryEstimate:
    per_device_bytes: float | None
    fits: bool | None
    max_batch_per_device: int | None
    state_bytes: float | None
    activation_bytes_per_sample: float | None
    inputs: tuple[Input, ...]
    note: str = ""


def activation_per_sample(workload: ProjectedWorkload, base: Base | None) -> tuple[float | None, Input | None]:
    """Bytes of activations one sample keeps on one device (data-parallel split), and where that came from."""
    own = workload.spec.saved_activations_per_sample()
    dtype = DTYPE_BYTES[workload.precision]
    if own is not None:
        return float(own * dtype), Input("activation_bytes_per_sample", own * dtype, "assumed",
                                         f"the {workload.model} spec's saved_activations_per_sample x {dtype} bytes")
    if (base is not None and base.is_gpu and base.peak_memory_bytes and base.per_device_batch
            and base.state_estimate_bytes is not None and base.devices == 1):
        value = (base.peak_memory_bytes - base.state_estimate_bytes) / base.per_device_batch
        return value, Input("activation_bytes_per_sample", value, "measured",
                            f"(peak - state estimate) / batch of {base.source}")
    spec = workload.spec
    if all(hasattr(spec, name) for name in ("d_model", "seq", "layers", "vocab")):
        scale = dtype / 2
        per_token = TRANSFORMER_BYTES_PER_TOKEN_WIDTH * spec.d_model * spec.layers * scale
        logits = spec.vocab * (dtype + FP32_BYTES)
        value = float(spec.seq * (per_token + logits))
        return value, Input("activation_bytes_per_sample", value, "published",
                            "Korthikanti et al. 2022, sec. 4.1: 34 x width bytes per token per layer (16-bit, "
                            "flash attention: no score term), plus logits in the compute dtype and fp32")
    return None, None


def memory_per_device(workload: ProjectedWorkload, device: DeviceType, devices: int, per_device_batch: int,
                      base: Base | None) -> MemoryEstimate:
    job = workload.job(devices, per_device_batch)
    # The plugin's own accounting (what `Job.state_estimate` asks), from the workload's cached count.
    state = workload.plugin.state_bytes_per_device(job, workload.parameters, workload.optimizer_states)
    capacity = Input("memory_bytes", device.memory_bytes, "catalogued", device.memory_source)
    per_sample, source = activation_per_sample(workload, base)
    if not workload.parameters or per_sample is None:
        return MemoryEstimate(None, None, None, state["total"], per_sample, (capacity,),
                              note="no activation estimate for this model: a GPU record of it gives one")
    plugin = workload.plugin
    activations = plugin.activation_bytes_per_device(job, int(per_sample * per_device_batch))
    one = plugin.activation_bytes_per_device(workload.job(devices, 1), int(per_sample))
    if activations is None or one is None:
        return MemoryEstimate(None, None, None, state["total"], per_sample, (capacity, source),
                              note=f"{workload.strategy} does not say what activations a device keeps")
    total = float(state["total"] + activations)
    room = device.memory_bytes - state["total"]
    largest = max(0, int(room // one)) if one > 0 else None
    state_input = Input("state_bytes_per_device", state["total"], "assumed",
                        f"{workload.framework} {workload.strategy} plugin's state_bytes_per_device "
                        f"({workload.optimizer}, {devices} devices)")
    return MemoryEstimate(total, total <= device.memory_bytes, largest, float(state["total"]), per_sample,
                          (capacity, state_input, source))
