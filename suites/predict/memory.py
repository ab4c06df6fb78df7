"""Bytes one device holds at the peak of a step, whether that fits the board, and the largest batch that does.

state: the strategy plugin's `state_bytes_per_device` (ZeRO's accounting, `Job.state_estimate`).
activations: what one sample holds at the step's peak, from (in this order)
- a GPU record of the same workload: (its peak - its state estimate) / its per-device batch (measured);
- the spec's analytic count from its own layer shapes (`activation_bytes_per_sample(compute_bytes,
  autocast)`: the tensors torch's backward keeps, the loss's transients, the sample's input), labelled
  "estimated (analytic)"; checked against the recorded peaks of the H100/H200 sample records in
  docs/predict.md, not fitted to them. Under torch autocast a 16-bit step also holds the compute-dtype
  copies of the weights it casts (`autocast_weight_bytes`), a term per device, not per sample;
- the spec's own element count (`ModelSpec.saved_activations_per_sample`) in the compute dtype;
- for another transformer language model, Korthikanti et al. 2022 ("Reducing Activation Recomputation in
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
from suites.strategies.base import STATE_BYTES
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


def autocast(workload: ProjectedWorkload) -> bool:
    """Whether the step runs a 16-bit precision under torch autocast (fp32 norms, loss and residual
    stream) rather than casting the parameters itself (FSDP's MixedPrecisionPolicy) or running fp32."""
    if DTYPE_BYTES[workload.precision] >= FP32_BYTES:
        return False
    handles = getattr(getattr(workload.plugin, "hooks", None), "handles_precision", None)
    return not (handles is not None and handles(workload.job(1, 1)))


def analytic_activation_bytes(workload: ProjectedWorkload) -> float | None:
    """The spec's analytic count of one sample's bytes at the step's peak, or None where it has none."""
    count = getattr(workload.spec, "activation_bytes_per_sample", None)
    return None if count is None else count(DTYPE_BYTES[workload.precision], autocast(workload))


def activation_per_sample(workload: ProjectedWorkload, base: Base | None) -> tuple[float | None, Input | None]:
    """Bytes of activations one sample keeps on one device (data-parallel split), and where that came from."""
    dtype = DTYPE_BYTES[workload.precision]
    if (base is not None and base.is_gpu and base.peak_memory_bytes and base.per_device_batch
            and base.state_estimate_bytes is not None and base.devices == 1):
        value = (base.peak_memory_bytes - base.state_estimate_bytes) / base.per_device_batch
        return value, Input("activation_bytes_per_sample", value, "measured",
                            f"(peak - state estimate) / batch of {base.source}")
    analytic = analytic_activation_bytes(workload)
    if analytic is not None:
        mode = "autocast" if autocast(workload) else f"{workload.precision} throughout"
        return analytic, Input("activation_bytes_per_sample", analytic, "estimated",
                               f"estimated (analytic): the {workload.model} spec's activation_bytes_per_sample "
                               f"from its layer shapes ({dtype}-byte compute dtype, {mode}); checked against "
                               "recorded peaks in docs/predict.md")
    own = workload.spec.saved_activations_per_sample()
    if own is not None:
        return float(own * dtype), Input("activation_bytes_per_sample", own * dtype, "assumed",
                                         f"the {workload.model} spec's saved_activations_per_sample x {dtype} bytes")
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


def autocast_weight_bytes(workload: ProjectedWorkload, parameters_held: float) -> float:
    """The compute-dtype copies of the weights torch autocast casts and keeps through the forward (and
    the backward reads): `parameters_held` x the compute dtype under autocast, else none."""
    return parameters_held * DTYPE_BYTES[workload.precision] if autocast(workload) else 0.0


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
    # A record's per-sample figure already holds its weight copies (spread over its batch).
    copies = 0.0 if source.kind == "measured" else autocast_weight_bytes(
        workload, state["parameters"] / STATE_BYTES)
    fixed = state["total"] + copies
    total = float(fixed + activations)
    largest = max(0, int((device.memory_bytes - fixed) // one)) if one > 0 else None
    state_input = Input("state_bytes_per_device", state["total"], "assumed",
                        f"{workload.framework} {workload.strategy} plugin's state_bytes_per_device "
                        f"({workload.optimizer}, {devices} devices)")
    extra = (Input("autocast_weight_bytes", copies, "estimated",
                   "estimated (analytic): the weights this device holds in the compute dtype, torch "
                   "autocast's cached casts"),) if copies else ()
    note = (f"activations estimated (analytic) from the {workload.model} spec's layer shapes: "
            f"{per_sample / 1e6:,.1f} MB a sample (no GPU record of it was given)"
            if source.kind == "estimated" else "")
    return MemoryEstimate(total, total <= device.memory_bytes, largest, float(state["total"]), per_sample,
                          (capacity, state_input, source, *extra), note=note)
