"""The derived metrics, each defined once: name, unit, formula, meaning and how it is computed.

Every place that names a derived metric reads it from `METRICS`: the run (`suites.records.metrics.derive`,
which stores them in a record's ``metrics``), the report's loaders and tidy columns, the report's
recomputation for asv and pytest-benchmark rows (`suites.report.load.derived`), and the report's
Method section. A metric is a function of a `Work`: the analytic work of one step, its times,
and the peaks it is compared with. This module imports nothing but the standard library, so
reading results never needs a framework.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable

from suites.records.memory_breakdown import CATEGORIES, EXPLAINED_WITHIN, MEANINGS

if TYPE_CHECKING:
    from suites.records.memory_breakdown import MemoryExplanation


@dataclass(frozen=True)
class Work:
    """What one step of a case did and how long it took; None where the case has no such figure
    (a workload that counts no FLOP, a run without a timed span, a device without a known peak)."""
    median_s: float
    n_devices: int | None = None
    emulated: bool = False  # the n_devices are logical devices or ranks sharing one physical device
    flops_per_step: float | None = None  # analytic, all devices together
    samples_per_step: float | None = None  # all devices together
    tokens_per_step: float | None = None  # sequence models: samples x sequence length, all devices
    bytes_per_step: float | None = None  # bytes each rank all-reduces
    sustained_step_s: float | None = None  # seconds timed / steps timed
    exchange_share: float | None = None  # measured by the run (DDP no_sync probe)
    peak_memory_bytes: float | None = None  # measured by the run: largest peak of one device / rank process
    peak_reserved_bytes: float | None = None  # measured by the run: torch GPUs' caching allocator
    training_state_bytes: float | None = None  # measured by the run: largest peak - baseline
    peak_memory_total_bytes: float | None = None  # measured by the run: sum over devices / rank processes
    memory_explained: "MemoryExplanation | None" = None  # measured by the run: that peak by category
    peak_table_tflops: float | None = None  # one device, this precision, peaks.toml
    peak_measured_tflops: float | None = None  # one device, this precision, `parbench calibrate`
    state_bytes_per_device: float | None = None  # analytic: parameters + gradients + optimizer states
    parameter_bytes_per_device: float | None = None  # analytic: the parameters of that state
    gradient_bytes_per_device: float | None = None  # analytic: the gradients of that state
    optimizer_bytes_per_device: float | None = None  # analytic: the optimizer states of that state
    activation_bytes_per_device: float | None = None  # analytic, where the model counts them
    pipeline_bubble: float | None = None  # analytic, from the case (its strategy's bubble_fraction)
    min_bytes_per_step: float | None = None  # analytic, kernels: inputs read + output written once
    roof_peak_tflops: float | None = None  # one device, this precision: the table's peak, else the calibrated
    roof_bandwidth_gbs: float | None = None  # one device: `parbench calibrate`'s stream, else the table's
    energy_joules_per_step: float | None = None  # measured by the run: all devices (NVML, RAPL)
    energy_watts: float | None = None  # measured by the run: all devices' average power together
    compile_s: float | None = None  # measured by the run: first step - median step
    recompiles: float | None = None  # measured by the run: a compiled case's compilations after its first step's
    eager_median_s: float | None = None  # the report's: median step of the compiled case's eager twin


WORK_INPUTS = frozenset(f.name for f in fields(Work))


@dataclass(frozen=True)
class Metric:
    """One derived metric.

    `needs` names the `Work` inputs without which the case has no such metric at all (it is left
    out of the record); `compute` may still return None where the metric applies but cannot be
    known (a % of peak without a peak, stored as null). `from_median_step` marks the metrics that
    depend on nothing but the median step and the analytic work (counts and estimates of the
    workload), which the report can therefore compute for a row of any source. `tidy` is False
    for a metric kept in records but not a column of the report's table.
    """
    name: str
    unit: str
    formula: str
    description: str
    compute: Callable[[Work], float | None]
    needs: tuple[str, ...] = ()
    from_median_step: bool = False
    tidy: bool = True

    def __post_init__(self) -> None:
        unknown = set(self.needs) - WORK_INPUTS
        if unknown:
            raise ValueError(f"metric {self.name} needs unknown inputs {sorted(unknown)}")

    def applies(self, work: Work) -> bool:
        return all(getattr(work, name) is not None for name in self.needs)

    def value(self, work: Work) -> float | None:
        """The metric of `work`, or None where it does not apply or cannot be known."""
        return self.compute(work) if self.applies(work) else None


def tflops(work: Work) -> float:
    return work.flops_per_step / work.median_s / 1e12


def physical_devices(work: Work) -> int:
    """How many devices' peaks the case can reach: its n_devices, or 1 where they are emulated
    (logical devices or ranks sharing one CPU share that one CPU's peak and bandwidth)."""
    return 1 if work.emulated else work.n_devices


def pct_of(peak_tflops: float | None, work: Work) -> float | None:
    """% of the peak of all the case's physical devices together; None without a peak."""
    return 100 * tflops(work) / (peak_tflops * physical_devices(work)) if peak_tflops else None


def break_even_steps(work: Work) -> float | None:
    """Steps after which compiling has paid for itself; None (never) where it saves nothing."""
    saved = work.eager_median_s - work.median_s
    return work.compile_s / saved if saved > 0 else None


def algbw_gbs(work: Work) -> float:
    return work.bytes_per_step / work.median_s / 1e9


def busbw_gbs(work: Work) -> float:
    n = work.n_devices
    return algbw_gbs(work) * 2 * (n - 1) / n


def arithmetic_intensity(work: Work) -> float:
    return work.flops_per_step / work.min_bytes_per_step


def roof_of_one_device(intensity: float, peak_tflops: float, bandwidth_gbs: float) -> float:
    """TFLOP/s one device allows at an arithmetic intensity (FLOP/byte): min(peak, AI x bandwidth)."""
    return min(peak_tflops, intensity * bandwidth_gbs / 1000.0)


def roofline_bound(work: Work) -> float:
    """TFLOP/s the case's physical devices allow at its arithmetic intensity."""
    one = roof_of_one_device(arithmetic_intensity(work), work.roof_peak_tflops, work.roof_bandwidth_gbs)
    return one * physical_devices(work)


JOULES_PER_KWH = 3.6e6
ROOFLINE = ("flops_per_step", "min_bytes_per_step", "roof_peak_tflops", "roof_bandwidth_gbs", "n_devices")

_REGISTRY = (
    Metric("tflops", "TFLOP/s",
           "analytic FLOP per step / median step time / 1e12 (matmul 2MNK; conv 2*N*Hout*Wout*Cout*Kh*Kw*Cin; "
           "transformers per token 2N + 4 layers seq d_model, N the dense layers' weights; training step 3x forward)",
           "TFLOP/s from analytic FLOP counts", tflops, needs=("flops_per_step",), from_median_step=True),
    Metric("pct_peak_table", "%",
           "100 * tflops / (physical devices * peak of one device in this precision, peaks.toml); physical devices: "
           "n_devices, 1 where emulated (logical devices or ranks share one CPU)",
           "% of the peaks table's figure for these devices and precision",
           lambda work: pct_of(work.peak_table_tflops, work), needs=("flops_per_step", "n_devices")),
    Metric("pct_peak_measured", "%",
           "100 * tflops / (physical devices * this machine's calibrated peak, `parbench calibrate`)",
           "% of this machine's calibrated peak (`parbench calibrate`)",
           lambda work: pct_of(work.peak_measured_tflops, work), needs=("flops_per_step", "n_devices")),
    Metric("samples_per_s", "samples/s", "samples per step (all devices) / median step time",
           "samples per second, all devices together, from the median step time",
           lambda work: work.samples_per_step / work.median_s, needs=("samples_per_step",), from_median_step=True),
    Metric("samples_per_s_sustained", "samples/s",
           "samples per step (all devices) x steps timed / seconds timed (what a long run sustains)",
           "samples per second, all devices together, over the whole timed span (the table keeps "
           "sustained_step_s and sustained_throughput instead)",
           lambda work: work.samples_per_step / work.sustained_step_s,
           needs=("samples_per_step", "sustained_step_s"), tidy=False),
    Metric("tokens_per_s", "tokens/s", "tokens of the global batch per step (global batch x sequence length, "
           "all devices) / median step time",
           "sequence models: tokens per second, all devices together, from the median step time",
           lambda work: work.tokens_per_step / work.median_s, needs=("tokens_per_step",), from_median_step=True),
    Metric("mfu_pct", "%",
           "sequence models: 100 * model FLOP/s / (physical devices * peak of one device in this "
           "precision: peaks.toml, "
           "else `parbench calibrate`'s); model FLOPs per token = 6 N + 12 layers seq d_model (N: the matmul "
           "weights, the LM head's vocabulary projection included, a tied embedding counted once; attention's "
           "QK^T and AV, no saving for a causal mask; PaLM's and nanoGPT's accounting), so MFU = tokens/s x that "
           "/ peak",
           "sequence models: model FLOPs utilisation, % of the devices' peak (the table's, else the calibrated one)",
           lambda work: pct_of(work.peak_table_tflops or work.peak_measured_tflops, work),
           needs=("tokens_per_step", "flops_per_step", "n_devices")),
    Metric("exchange_share", "fraction 0-1",
           "1 - slowest rank's step without the gradient all-reduce (DDP no_sync) / median step time",
           "DDP: part of the global step the slowest rank's no_sync step does not explain (gradient all-reduce "
           "and waiting), 0-1",
           lambda work: work.exchange_share, needs=("exchange_share",)),
    Metric("peak_memory_bytes", "bytes",
           "max over the case's GPUs / TPU cores / rank processes of the peak during the timed steps: GPU bytes "
           "allocated (torch max_memory_allocated, TF get_memory_info peak; after resetting the peak before timing), "
           "TPU core bytes allocated (TF get_memory_info('TPU:i') peak, likewise reset; none where TF cannot read it), "
           "CPU resident set of the process (the kernel's VmHWM, reset before timing through /proc/self/clear_refs; "
           "where that is refused, RSS sampled every 5 ms)",
           "peak memory of one device over the timed steps, bytes: GPU or TPU allocated, CPU process resident set "
           "(the largest over devices / ranks)",
           lambda work: work.peak_memory_bytes, needs=("peak_memory_bytes",)),
    Metric("peak_reserved_bytes", "bytes",
           "max over the case's GPUs of torch max_memory_reserved during the timed steps (TensorFlow reports no "
           "reserved figure)",
           "torch on GPUs: peak bytes the caching allocator reserved on one GPU (the largest over devices)",
           lambda work: work.peak_reserved_bytes, needs=("peak_reserved_bytes",)),
    Metric("training_state_bytes", "bytes",
           "max over GPUs / rank processes of (peak during the timed steps - what it held when setup began, "
           "before the model was built): CPU resident set, GPU allocated",
           "memory the training took on one device beyond the runtime's, bytes (the largest over devices / ranks)",
           lambda work: work.training_state_bytes, needs=("training_state_bytes",)),
    Metric("peak_memory_total_bytes", "bytes",
           "sum over the case's GPUs / rank processes of their peaks (an upper bound: the peaks need not coincide)",
           "peak memory of all the case's devices / rank processes together, bytes: what one host's RAM holds "
           "for ranks that share it",
           lambda work: work.peak_memory_total_bytes, needs=("peak_memory_total_bytes",)),
    Metric("algbw_gbs", "GB/s", "bytes reduced / median time / 1e9", "all-reduce algorithm bandwidth, GB/s",
           algbw_gbs, needs=("bytes_per_step",), from_median_step=True),
    Metric("busbw_gbs", "GB/s", "algbw * 2(n-1)/n  (nccl-tests' bus bandwidth for all-reduce)",
           "all-reduce bus bandwidth, GB/s", busbw_gbs, needs=("bytes_per_step", "n_devices"),
           from_median_step=True),
    Metric("state_bytes_per_device_estimate", "bytes",
           "ZeRO's accounting, per device for the case's strategy: (parameters + gradients + optimizer "
           "states) x 4 B, every one fp32 (mixed precision keeps fp32 weights); optimizer states per "
           "parameter: sgd 0, adam 2; replicated under data parallelism, divided where a strategy shards "
           "(its plugin's state_bytes_per_device). Activations are not included",
           "analytic training state one device holds (parameters, gradients, optimizer states), bytes",
           lambda work: work.state_bytes_per_device, needs=("state_bytes_per_device",), from_median_step=True),
    Metric("activation_bytes_per_device_estimate", "bytes",
           "mlp only: per-device batch x (features + depth x hidden + 10) x bytes of the compute dtype "
           "(4 fp32/tf32, 2 fp16/bf16): each dense layer's input and the logits, kept for backward. "
           "Other models' activations are not estimated (left out)",
           "analytic activations one device keeps for the backward pass, bytes (mlp only)",
           lambda work: work.activation_bytes_per_device, needs=("activation_bytes_per_device",),
           from_median_step=True),
    *(Metric(f"memory_{name}_bytes", "bytes",
             f"the tracked step's {name} on the device / rank process of the largest peak (torch: "
             "torch.distributed._tools MemTracker, FSDPMemTracker for FSDP2; one untimed step after the timed "
             "blocks), at the moment its tensors peaked" + (
                 "; runtime: resident set (GPU: allocated) when that step began less its tensors and harness, "
                 "else the probe's baseline" if name == "runtime" else ""),
             f"peak memory by category, bytes: {MEANINGS[name]}",
             lambda work, name=name: work.memory_explained.categories[name], needs=("memory_explained",))
      for name in CATEGORIES),
    Metric("memory_unexplained_bytes", "bytes",
           "peak_memory_bytes - the sum of the memory_<category>_bytes (negative: they sum above it)",
           "peak memory no category explains, bytes: allocator caches and fragmentation, runtime growth "
           "during the step (communication buffers), or a peak that fell at another moment",
           lambda work: work.memory_explained.unexplained, needs=("memory_explained",)),
    Metric("memory_explained_fraction", "fraction",
           f"sum of the memory_<category>_bytes / peak_memory_bytes (the goal: within 1 +- {EXPLAINED_WITHIN})",
           "share of the measured peak the categories explain (1: all of it)",
           lambda work: work.memory_explained.explained_fraction, needs=("memory_explained",)),
    Metric("memory_activations_kept_bytes", "bytes",
           "the activation bytes live as the model's forward ended in the tracked step (a pipeline: the most over "
           "its micro-batches) + the step's input batch (the first layer's input): what "
           "activation_bytes_per_device_estimate counts, whether or not live at the peak",
           "activations kept for backward, bytes, measured (the step's input batch included)",
           lambda work: work.memory_explained.breakdown.activations_kept, needs=("memory_explained",)),
    Metric("memory_step_peak_bytes", "bytes",
           "the memory probe's peak over the tracked step itself (as peak_memory_bytes measures the timed steps)",
           "peak memory of the step the categories were taken in, bytes",
           lambda work: work.memory_explained.breakdown.step_peak_bytes, needs=("memory_explained",)),
    *(Metric(f"memory_{name}_estimate_bytes", "bytes",
             f"the {name} of state_bytes_per_device_estimate: ZeRO's accounting per device, fp32 (its plugin's "
             "state_bytes_per_device)",
             f"analytic {name} one device holds, bytes (beside memory_{name}_bytes)",
             lambda work, field=field: getattr(work, field), needs=(field,), from_median_step=True)
      for name, field in (("parameters", "parameter_bytes_per_device"), ("gradients", "gradient_bytes_per_device"),
                          ("optimizer", "optimizer_bytes_per_device"))),
    Metric("pipeline_bubble", "fraction 0-1",
           "(p - 1) / (v*m + p - 1): p devices (stages), m micro-batches, v stages per device (gpipe, 1f1b: 1; "
           "interleaved 1F1B: 2); equal stage times, free communication",
           "pipeline: the theoretical share of the step each stage idles (the bubble), 0-1, beside the "
           "measured step", lambda work: work.pipeline_bubble, needs=("pipeline_bubble",),
           from_median_step=True),
    Metric("energy_j_per_step", "J",
           "joules the case's devices used over the timed blocks / steps timed, summed over devices (GPU: NVML "
           "total-energy counter, else board power sampled every 20 ms x time; CPU: RAPL package counters)",
           "energy of one step, all devices together, joules", lambda work: work.energy_joules_per_step,
           needs=("energy_joules_per_step",)),
    Metric("energy_watts", "W", "sum over devices of joules / seconds between the readings",
           "average power of the case's devices together over the timed blocks, watts",
           lambda work: work.energy_watts, needs=("energy_watts",)),
    Metric("samples_per_joule", "samples/J", "samples per step / energy_j_per_step",
           "samples per joule, all devices together (perf per watt: samples/s per W)",
           lambda work: work.samples_per_step / work.energy_joules_per_step,
           needs=("samples_per_step", "energy_joules_per_step")),
    Metric("samples_per_kwh", "samples/kWh", "samples_per_joule x 3.6e6",
           "samples per kilowatt-hour, all devices together",
           lambda work: work.samples_per_step / work.energy_joules_per_step * JOULES_PER_KWH,
           needs=("samples_per_step", "energy_joules_per_step")),
    Metric("gflop_per_joule", "GFLOP/J", "analytic FLOP per step / energy_j_per_step / 1e9",
           "GFLOP per joule (= GFLOP/s per W), all devices together",
           lambda work: work.flops_per_step / work.energy_joules_per_step / 1e9,
           needs=("flops_per_step", "energy_joules_per_step")),
    Metric("arithmetic_intensity", "FLOP/byte",
           "analytic FLOP per step / fewest bytes a step moves (each input read once, the output written once, "
           "in the case's dtype: 4 B fp32/tf32, 2 B fp16/bf16)",
           "kernels: arithmetic intensity, FLOP per byte of memory traffic at the least",
           arithmetic_intensity, needs=("flops_per_step", "min_bytes_per_step"), from_median_step=True),
    Metric("roof_peak_tflops", "TFLOP/s",
           "one device's peak in this precision: peaks.toml's, else `parbench calibrate`'s GEMM",
           "the roofline's flat roof: one device's peak in the case's precision",
           lambda work: work.roof_peak_tflops, needs=("min_bytes_per_step", "roof_peak_tflops")),
    Metric("roof_bandwidth_gbs", "GB/s",
           "one device's memory bandwidth: `parbench calibrate`'s streaming kernel, else peaks.toml's bandwidth_gbs",
           "the roofline's slope: one device's memory bandwidth",
           lambda work: work.roof_bandwidth_gbs, needs=("min_bytes_per_step", "roof_bandwidth_gbs")),
    Metric("roofline_bound_tflops", "TFLOP/s",
           "physical devices x min(roof_peak_tflops, arithmetic_intensity x roof_bandwidth_gbs / 1000) (physical "
           "devices: n_devices, 1 where emulated)",
           "kernels: the TFLOP/s the roofline allows at the case's arithmetic intensity",
           roofline_bound, needs=ROOFLINE),
    Metric("roofline_fraction", "fraction",
           "tflops / roofline_bound_tflops",
           "kernels: achieved share of the roofline bound (1 = on the roof)",
           lambda work: tflops(work) / roofline_bound(work), needs=ROOFLINE),
    Metric("recompiles", "count",
           "compilations counted after the first step's while warming up (torch: dynamo's unique graphs; TF: traces "
           "of the step's functions); warm-up ends after 3 steps in a row compile nothing, a case past 8 fails, and "
           "so does one that compiles during its timed steps",
           "a compiled case: compilations after its first step's, in warm-up", lambda work: work.recompiles,
           needs=("recompiles",)),
    Metric("compile_speedup", "x",
           "median step of the eager twin (compile none, same case otherwise, same machine) / median step compiled",
           "a compiled case's speedup over its eager twin", lambda work: work.eager_median_s / work.median_s,
           needs=("eager_median_s",), tidy=False),
    Metric("compile_break_even_steps", "steps",
           "compile_s / (eager twin's median step - compiled median step), compile_s = first step - median step; "
           "'never' where the compiled step is not faster",
           "steps after which compiling has paid for its compile time", break_even_steps,
           needs=("compile_s", "eager_median_s"), tidy=False),
)

#: Every derived metric by name, in the order a record stores them.
METRICS: dict[str, Metric] = {metric.name: metric for metric in _REGISTRY}
#: Names of the metrics that are columns of the report's tidy table.
TIDY_METRICS: tuple[str, ...] = tuple(metric.name for metric in _REGISTRY if metric.tidy)
#: The metrics that explain a peak (`suites.records.memory_breakdown`): the categories measured, what
#: they leave unexplained, and the estimates they stand beside.
MEMORY_BREAKDOWN_METRICS: tuple[str, ...] = tuple(name for name in METRICS if name.startswith("memory_"))

#: A record's flags beside its metrics (true/false, not numbers): stored in ``metrics`` by the run,
#: never a column of the tidy table.
#: above_peak: the case's TFLOP/s per physical device exceeds a peak it is compared with (the peaks
#: table's, or `parbench calibrate`'s). A peak is an upper bound, so the peak is wrong: its % of peak
#: stays the true figure (over 100), this flag says so, the record's details say which peak, and the
#: roofline's roof for that record is the measured figure instead. False where a peak was compared
#: and not exceeded; absent where the case has no FLOP count or no peak.
FLAGS: dict[str, str] = {
    "above_peak": "TFLOP/s per physical device above a peak it is compared with (table or calibrated): "
                  "the peak is wrong; % of peak over 100 only with this flag",
}
ABOVE_PEAK = "above_peak"
#: The flags of a record's energy readings (`measurement.energy.flags`, and each device's
#: `flags`: `suites.records.energy_readings`): a reading so flagged is kept, but energy_watts,
#: samples_per_joule, gflop_per_joule and their like from it are no figure to set beside another
#: machine's (a ratio of work per joule must refuse it).
ENERGY_FLAGS: dict[str, str] = {
    "short_window": "read over fewer than 20 updates of its counter (NVML's energy counter: ~100 ms each, "
                    "so under 2 s; RAPL's: ~1 ms): one update is then over 5% of the window",
    "over_limit": "average power above the board's enforced power limit (NVML, recorded with the reading; "
                  "older records: the environment's nvidia-smi power limit): the meter is wrong",
}
#: The %-of-peak metrics, and the peak each compares with (for the record's details).
PCT_OF_PEAK = {"pct_peak_table": "peak table", "pct_peak_measured": "calibrated peak (`parbench calibrate`)",
               "mfu_pct": "peak MFU compares with (the table's, else the calibrated)"}


def above_peak_note(metrics: dict[str, object]) -> str:
    """What the record's details say where its figure is above a peak: '' where it is not."""
    over = [f"{PCT_OF_PEAK[name]} below the measured figure ({name} {value:.0f}%)"
            for name in PCT_OF_PEAK
            for value in [metrics.get(name)] if isinstance(value, (int, float)) and value > 100]
    return f"{'; '.join(over)}: the peak is wrong" if over else ""
