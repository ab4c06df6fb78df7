"""What a measured peak is made of: one training step's memory by category, beside the estimates.

The timer runs one more step after the timed blocks under the framework's memory tracker (torch:
`torch.distributed._tools.mem_tracker.MemTracker`, FSDP2's `FSDPMemTracker`), on every rank alike:
hooks in it cost time, so it is never one of the timed steps. The tracker attributes every tensor
storage the step holds to what it is — parameters, gradients, optimizer state, activations,
temporaries — and keeps their sizes at the moment the tensors together peaked. A `MemoryBreakdown`
is that moment for one GPU or rank process (DTensor and FSDP shards count as the rank holds them).

`explain` sets it beside the peak the probe measured over the timed steps
(`suites.records.peak_memory`) for the device or rank with the largest one: what the process held
that no tensor explains when the tracked step began (`runtime`: on the CPU the interpreter, torch
and the libraries, thread pools, communication buffers — which the resident-set peak includes; on
a GPU what was allocated beyond the tensors), the tensor categories, and host memory the benchmark
itself keeps (`harness`); what is left (`unexplained`, positive or negative) is what none of them
explains: the allocator's kept pages, growth during the step, or a timed step that peaked above
the tracked one. Each category with an estimate
(`suites.strategies.base.StrategyPlugin.state_bytes_per_device`'s ZeRO accounting, the workload's
activations) stands beside it, and `note` says why one differs by more than `TOLERANCE`.

Framework-free: reading records never needs a framework.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Literal, Mapping

from suites.records.peak_memory import MemoryPeak

#: The categories a peak is split into, in the order they are shown; their sum is compared with
#: the measured peak. All come from the tracked step (`runtime`, where it could not be read there,
#: from the probe's baseline at setup).
CATEGORIES = ("runtime", "parameters", "gradients", "optimizer", "activations", "temporaries", "inputs",
              "harness")
#: What each category holds (the report's column meanings and the `memory` command's legend).
MEANINGS = {
    "runtime": "what the process (CPU: resident set) or the GPU (allocated) held when the tracked step began "
               "beyond its tensors and the harness: interpreter, framework and libraries, thread pools, "
               "communication buffers",
    "parameters": "the model's parameters and buffers this device holds (FSDP: its shard, plus the gathered "
                  "copies live at the peak)",
    "gradients": "the parameters' gradients (DDP: its all-reduce buckets, of which they are views)",
    "optimizer": "the optimizer's persistent state (Adam: exp_avg, exp_avg_sq and a step per parameter)",
    "activations": "tensors the forward pass made that were still live at the peak",
    "temporaries": "the backward pass's and the optimizer update's transient tensors, and communication "
                   "buffers, live at the peak",
    "inputs": "the case's rotating input batches",
    "harness": "host memory the benchmark itself keeps (its copy of the initial weights for the numerics "
               "check): counted in a CPU rank's resident set, not on a GPU",
}
#: The categories that have an analytic estimate, and the `Work` input that holds it.
ESTIMATED = {"parameters": "parameter_bytes_per_device", "gradients": "gradient_bytes_per_device",
             "optimizer": "optimizer_bytes_per_device", "activations": "activation_bytes_per_device"}
#: A category further from its estimate than this (relative) gets a reason in the note.
TOLERANCE = 0.20
#: The categories should explain the peak to within this share of it.
EXPLAINED_WITHIN = 0.10
#: Key of a record's details that says what its peak is made of (`MemoryExplanation.note`).
MEMORY_EXPLAINED = "memory_explained"
#: Phases of the tracked step the peak can fall in.
Phase = Literal["forward", "backward", "optimizer step"]
PHASES: tuple[Phase, ...] = ("forward", "backward", "optimizer step")


@dataclass(frozen=True)
class MemoryBreakdown:
    """One GPU's or rank process's tensors at the peak of the tracked step, bytes by category."""

    #: As the `MemoryPeak` it explains: "gpu" (that GPU's tensors) or "cpu" (the process's).
    kind: Literal["gpu", "cpu"]
    device: int
    parameters: int
    gradients: int
    optimizer: int
    activations: int
    temporaries: int
    inputs: int = 0
    harness: int = 0
    #: Of `parameters`: gathered (unsharded) copies of sharded parameters live at the peak (FSDP).
    gathered: int = 0
    #: Of `temporaries`: the optimizer update's own transient tensors (beyond its persistent state).
    update_temporaries: int = 0
    #: Of `temporaries`: communication buffers the tracker tells apart (FSDP's all-gather and
    #: reduce-scatter buffers).
    communication: int = 0
    #: The activation bytes live as the forward pass ended (the most, over a pipeline's
    #: micro-batches), with the model input of the step (the first layer's input, which backward
    #: keeps too and the estimate counts): what the estimate of activations kept for backward
    #: describes, whether or not they were live at the peak.
    activations_kept: int = 0
    #: What the process held when the tracked step began that no tracked tensor nor the harness
    #: explains: CPU, its resident set less those; GPU, the bytes allocated less those. None:
    #: unknown (the probe's baseline at setup stands in).
    runtime: int | None = None
    #: Where in the step the tensors peaked.
    phase: Phase = "forward"
    #: The probe's own peak over the tracked step (the measure of `MemoryPeak.peak_bytes`).
    step_peak_bytes: int | None = None
    #: The rank process that tracked it.
    rank: int = 0
    #: The tracker: "torch MemTracker" or "torch FSDPMemTracker".
    method: str = ""

    @property
    def tensor_bytes(self) -> int:
        """The tracked tensors at the peak, all categories together."""
        return (self.parameters + self.gradients + self.optimizer + self.activations + self.temporaries
                + self.inputs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemoryBreakdown":
        known = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in known})


#: The figures of a breakdown gathered across ranks as floats, in this order (kind and phase
#: as their index in `("cpu", "gpu")` and `PHASES`).
GATHERED = ("kind", "device", "parameters", "gradients", "optimizer", "activations", "temporaries", "inputs",
            "harness", "gathered", "update_temporaries", "communication", "activations_kept", "runtime", "phase",
            "step_peak_bytes")
_KINDS = ("cpu", "gpu")


def as_row(breakdown: MemoryBreakdown) -> tuple[float | None, ...]:
    """The breakdown as non-negative floats (`GATHERED`), None where a figure is unknown."""
    values = {**breakdown.to_dict(), "kind": _KINDS.index(breakdown.kind), "phase": PHASES.index(breakdown.phase)}
    return tuple(None if values[name] is None else float(values[name]) for name in GATHERED)


def from_row(rank: int, row: Iterable[float | None], method: str) -> MemoryBreakdown:
    values = dict(zip(GATHERED, row))
    kind, phase = _KINDS[int(values.pop("kind") or 0)], PHASES[int(values.pop("phase") or 0)]
    unknown = {name: values.pop(name) for name in ("step_peak_bytes", "runtime")}
    unknown = {name: None if value is None else int(value) for name, value in unknown.items()}
    return MemoryBreakdown(kind=kind, phase=phase, rank=rank, method=method,  # type: ignore[arg-type]
                           **unknown, **{name: int(value or 0) for name, value in values.items()})


@dataclass(frozen=True)
class MemoryExplanation:
    """The peak of the device or rank process with the largest one, split into `CATEGORIES`."""

    breakdown: MemoryBreakdown
    peak: MemoryPeak
    #: Bytes per category (`CATEGORIES`), their sum compared with `peak.peak_bytes`.
    categories: dict[str, int]
    #: Each estimated category's estimate (`ESTIMATED`), None where the case has none.
    estimates: dict[str, float | None]

    @property
    def total(self) -> int:
        return sum(self.categories.values())

    @property
    def unexplained(self) -> int:
        """Peak - the categories: what no category explains (negative: they sum above it)."""
        return self.peak.peak_bytes - self.total

    @property
    def explained_fraction(self) -> float | None:
        """The categories' sum / the peak (None without a peak)."""
        return self.total / self.peak.peak_bytes if self.peak.peak_bytes else None

    def compared(self, category: str) -> int:
        """The measured figure an estimate describes: activations at their most (`activations_kept`),
        the rest at the peak."""
        return self.breakdown.activations_kept if category == "activations" else self.categories[category]

    def off(self, category: str) -> float | None:
        """Measured / estimate of an estimated category; None without an estimate."""
        estimate = self.estimates.get(category)
        if estimate is None:
            return None
        measured = self.compared(category)
        if not estimate:
            return 1.0 if not measured else float("inf")
        return measured / estimate

    def note(self) -> str:
        """What the peak is made of; then why each category further than `TOLERANCE` from its
        estimate is, what the categories without one hold, and why more than `EXPLAINED_WITHIN`
        of the peak is unexplained, where it is."""
        b, peak = self.breakdown, self.peak
        where = f"{peak.label}: " if peak.rank or peak.kind == "gpu" else ""
        parts = [f"{name} {_size(self.categories[name])}" for name in CATEGORIES if self.categories[name]]
        head = (f"{where}peak {_size(peak.peak_bytes)} = {' + '.join(parts)} + unexplained {_size(self.unexplained)} "
                f"({100 * (self.explained_fraction or 0):.0f}% explained; the tensors peaked in the {_phase(b.phase)}; "
                f"{b.method or 'tracker'}, one untimed step)")
        reasons = [reason for reason in (self._reason(name) for name in CATEGORIES) if reason]
        if abs(self.unexplained) > EXPLAINED_WITHIN * peak.peak_bytes:
            reasons.append(self._unexplained())
        return "; ".join([head, *reasons])

    def _reason(self, category: str) -> str:
        """Why `category` is what it is, where a reader needs telling: one off its estimate, and
        the ones no estimate describes."""
        b, measured = self.breakdown, self.compared(category)
        if not measured and self.estimates.get(category) is None:
            return ""
        if category == "runtime":
            return self._runtime()
        if category == "harness":
            return (f"harness {_size(measured)}: the benchmark's own float32 copy of the initial weights, kept for "
                    f"the numerics check's reference (host memory: in a CPU rank's resident set; a training "
                    f"script would not hold it)")
        if category == "temporaries":
            return self._temporaries()
        if category == "inputs":
            return ""
        ratio = self.off(category)
        if ratio is None or abs(ratio - 1) <= TOLERANCE:
            return ""
        text = f"{category} {_size(measured)} vs estimate {_size(self.estimates[category])} ({ratio:.2f}x)"
        if category == "activations":
            at_peak = self.categories["activations"]
            return (f"{text} as the forward pass ended ({_size(at_peak)} at the peak): the estimate counts each "
                    f"dense layer's input and the logits of a data-parallel share; the tracker counts every tensor "
                    f"the forward pass left live for backward")
        if category == "parameters" and b.gathered:
            why = {"backward": "by then FSDP had resharded the units already through backward",
                   "forward": "the units after it were not gathered yet",
                   "optimizer step": "every unit is resharded by the update"}[b.phase]
            return (f"{text}: {_size(b.gathered)} of it gathered (unsharded) copies live at the peak, in the "
                    f"{_phase(b.phase)}; "
                    + (f"{why}, where the estimate counts every unit's gathered copy held at once"
                       if measured < self.estimates[category]
                       else "the estimate counts one unit's gathered copy"))
        if category == "gradients" and measured < self.estimates[category] and b.phase == "backward":
            return (f"{text}: the peak came in the backward pass, before every unit's gradients were made"
                    + (" and reduce-scattered (unsharded gradients awaiting their reduce-scatter count as "
                       "temporaries)" if b.gathered or "FSDP" in b.method else ""))
        if category == "optimizer" and measured > self.estimates[category]:
            return (f"{text}: the optimizer keeps more state per parameter than the estimate's count (its step "
                    f"counters, amsgrad's max_exp_avg_sq, buffers of its own)")
        if category == "gradients" and not measured and b.phase == "forward":
            return (f"{text}: none live at the peak, in the forward pass (the step's zero_grad(set_to_none=True) "
                    f"freed the last step's; the estimate counts them held all step)")
        if not measured:
            return f"{text}: none live at the peak (in the {_phase(b.phase)})"
        return (f"{text}: this rank holds another share than its strategy's estimate "
                f"(state_bytes_per_device) counts")

    def _runtime(self) -> str:
        runtime, baseline = self.categories["runtime"], self.peak.baseline_bytes
        if self.peak.kind == "gpu":
            return (f"runtime {_size(runtime)}: allocated on the GPU when the step began beyond its tensors "
                    f"(the framework's workspaces and communication buffers)")
        text = (f"runtime {_size(runtime)}: the resident set when the step began that no tensor explains: "
                f"interpreter, torch and the libraries, thread pools, communication buffers")
        if baseline is not None and self.breakdown.runtime is not None and baseline != runtime:
            text += (f" ({_size(baseline)} before the case's setup, {_size(runtime - baseline)} since: modules "
                     f"imported and kernels initialised by setup and the first steps, pages the allocator kept)")
        return text

    def _temporaries(self) -> str:
        b, measured = self.breakdown, self.categories["temporaries"]
        parts = []
        if b.update_temporaries:
            parts.append(f"{_size(b.update_temporaries)} the optimizer update's transient tensors (Adam: "
                         f"exp_avg_sq.sqrt() and its scaling, two of the largest parameter's size single-tensor, "
                         f"of every parameter's with foreach)")
        if b.communication:
            parts.append(f"{_size(b.communication)} FSDP's all-gather and reduce-scatter buffers (a prefetched "
                         f"unit's included)")
        rest = measured - b.update_temporaries - b.communication
        if rest > 0:
            parts.append(f"{_size(rest)} " + ("the backward pass's: gradients of activations and of parameters not "
                                              "yet filed as gradients (FSDP: unsharded, awaiting their reduce-scatter)"
                                              if b.phase == "backward" else f"made in the {_phase(b.phase)}"))
        return f"temporaries {_size(measured)} (no estimate): " + "; ".join(parts) if parts else ""

    def _unexplained(self) -> str:
        unexplained, peak = self.unexplained, self.peak.peak_bytes
        share = f"{_size(unexplained)}, {100 * abs(unexplained) / peak:.0f}% of the peak,"
        if unexplained > 0:
            return (f"unexplained {share} is memory no tracked tensor holds: the allocator's freed but kept pages, "
                    f"runtime growth during the step (communication buffers), or a timed step's peak above the "
                    f"tracked one (tracked step's own peak: {_size(self.breakdown.step_peak_bytes)})")
        return (f"the categories sum {share} above the peak: the tracked step held more at once than the timed "
                f"steps did (its own peak: {_size(self.breakdown.step_peak_bytes)})")


def explain(breakdowns: Iterable[MemoryBreakdown], peaks: Iterable[MemoryPeak],
            estimates: Mapping[str, float | None]) -> MemoryExplanation | None:
    """The breakdown of the device or rank process with the largest measured peak (the one
    `peak_memory_bytes` is), beside that peak and the case's estimates (keyed like `ESTIMATED`'s
    categories); None where no breakdown matches a peak."""
    by_place = {(b.rank, b.kind, b.device): b for b in breakdowns}
    matched = [(peak, by_place[(peak.rank, peak.kind, peak.device)]) for peak in peaks
               if (peak.rank, peak.kind, peak.device) in by_place]
    if not matched:
        return None
    peak, breakdown = max(matched, key=lambda pair: (pair[0].peak_bytes, -pair[0].rank))
    runtime = breakdown.runtime if breakdown.runtime is not None else peak.baseline_bytes
    categories = {"runtime": runtime or 0,
                  **{name: getattr(breakdown, name) for name in CATEGORIES if name != "runtime"}}
    return MemoryExplanation(breakdown, peak, categories, {name: estimates.get(name) for name in ESTIMATED})


def _phase(phase: Phase) -> str:
    """'forward pass', 'backward pass', 'optimizer step'."""
    return phase if phase == "optimizer step" else f"{phase} pass"


def _size(value: float | None) -> str:
    """Bytes in binary units, e.g. '196 MiB', '-12.0 MiB'."""
    if value is None:
        return "-"
    sign, value = ("-" if value < 0 else ""), abs(value)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{sign}{value / scale:.3g} {unit}"
    return f"{sign}{value:.0f} B"
