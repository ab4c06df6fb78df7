"""One torch training step's memory by category, from torch's own tracker (`suites.records.memory_breakdown`).

`torch.distributed._tools.mem_tracker.MemTracker` is a TorchDispatchMode with module and optimizer
hooks: it sees every tensor storage an op makes and files it by when it was made — parameters and
buffers of the modules it sees, gradients (their hooks), optimizer state (made in `step`),
activations (made in forward), temporaries (made in backward) — and keeps the sizes at the moment
their total peaked ("peak" snapshot). Tensors made before it starts are told to it
(`track_external`): the model, its gradients still held from the last step (DDP's buckets, of
which they are views), the optimizer, the input batches. An FSDP2 model gets `FSDPMemTracker`
instead, which also tells sharded from gathered parameters and gradients, and all-gather and
reduce-scatter buffers (told every unit's gathered storages up front:
`_file_gathered_parameters`). DTensor's ops reach the tracker as the local ops on this rank's
shard: every figure is what this rank holds.

Two adjustments to the tracker's categories:
- Whatever the optimizer's `step` makes is "optimizer state" to the tracker, the update's
  transient tensors (single-tensor Adam's `exp_avg_sq.sqrt() / bias_correction`) included; only
  the state the optimizer keeps (`optimizer.state`, measured after the step) stays `optimizer`,
  the rest at the peak is `temporaries` (`update_temporaries`).
- The tracker refuses a root module that runs twice in a step (it takes that for a second
  iteration); a pipeline stage runs once per micro-batch, so such a module's statistics are
  dropped before it runs again (`_RepeatedRoots`); the storages stay tracked.

And one repair: the trackers' `ModTracker` (torch 2.13) registers a multi-grad hook on each
module's inputs and outputs and drops its handle; each hook's closure holds the autograd nodes it
is registered on, which hold it: a cycle through C++ that the garbage collector cannot see. The
step's graph, and through its AccumulateGrad nodes the model's parameters, outlived the case (an
in-process case after it found 264 MiB of the 51 M-parameter MLP still resident). The handles are
kept and removed after the step (`_removed_grad_hooks`).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

import torch

from suites.records.memory_breakdown import MemoryBreakdown, Phase
from suites.measure.memory_probes import rss_bytes

#: The tracker's categories (the `value` of its `_MemRefType` / `_FSDPRefType` members), as ours.
CATEGORY_OF = {
    "Parameter": "parameters", "Buffer": "parameters", "Sharded Param": "parameters", "Unsharded Param": "parameters",
    "Gradient": "gradients", "Sharded Grad": "gradients", "Unsharded Grad": "gradients",
    "Optstate": "optimizer", "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "temporaries", "All Gather": "temporaries", "Reduce Scatter": "temporaries",
    "Other": "inputs", "Inputs": "inputs",
}
GATHERED = ("Unsharded Param",)
COMMUNICATION = ("All Gather", "Reduce Scatter")
#: Categories only the backward pass makes: a peak that holds any came in backward.
MADE_IN_BACKWARD = ("Temp", "Unsharded Grad", "Reduce Scatter")
ACTIVATION = "Activation"
#: The module states (`_ModState`, `_FSDPModState` values) whose snapshots are taken as a
#: module's forward ends. A root module's (the model, a pipeline stage) hold what the forward
#: pass keeps for backward; earlier ones also hold the forward's transients (the layer output the
#: next layer is computing from) and FSDP's freshly gathered parameters before the tracker files
#: them as such.
AFTER_FORWARD = ("Post-Forward", "After Post-Forward")
#: The snapshot's total of every category (the tracker's `_TOTAL_KEY`).
TOTAL = "Total"
FSDP_TRACKER = "torch FSDPMemTracker"
#: The CUDA caching allocator's smallest block, to which the tracker rounds CUDA storages.
CUDA_BLOCK = 512


def tracked_step(step: Callable[[], None], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 inputs: Iterable[torch.Tensor], devices: Iterable[torch.device], rank: int = 0,
                 harness_bytes: int = 0, step_input_bytes: int = 0) -> list[MemoryBreakdown]:
    """Run `step` once under torch's memory tracker; this process's tensors at their peak, one
    breakdown per device of `devices` (a CPU process: one, device 0). `inputs`: every input batch
    the case rotates through; `step_input_bytes`: the model input one step feeds (the first layer's
    input, which backward keeps: counted with the activations kept, as estimates count it, though
    the tracker files it under inputs); `harness_bytes`: host memory the benchmark keeps beside
    the case (counted on a CPU device only)."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    tracker, method = _tracker(model, optimizer, list(inputs))
    devices = [_indexed(device) for device in devices]
    before_update: dict[torch.device, int] = {}

    def optimizer_starts(*_: Any) -> None:  # the tensors' peak so far, before the update
        for device, snapshot in tracker.get_tracker_snapshot("peak").items():
            before_update.setdefault(device, snapshot.get(TOTAL, 0))

    repeated = _RepeatedRoots(tracker)
    handle = register_optimizer_step_pre_hook(optimizer_starts)
    try:
        with _removed_grad_hooks(), repeated, tracker:
            if method == FSDP_TRACKER:
                _file_gathered_parameters(tracker, model)
            tensors = tracker.get_tracker_snapshot("current")
            held = {device: _held_bytes(device) for device in devices}
            step()
    finally:
        handle.remove()
    peak = tracker.get_tracker_snapshot("peak")
    state = _state_bytes(optimizer)
    kept = repeated.activations_kept()
    breakdowns = []
    for device in devices:
        snapshot = {getattr(key, "value", key): value for key, value in peak.get(device, {}).items()}
        figures = dict.fromkeys(("parameters", "gradients", "optimizer", "activations", "temporaries", "inputs"), 0)
        for name, value in snapshot.items():
            if name in CATEGORY_OF:
                figures[CATEGORY_OF[name]] += value
        held_state = min(figures["optimizer"], state.get(device, 0))
        update = figures["optimizer"] - held_state
        phase: Phase = ("optimizer step" if snapshot.get(TOTAL, 0) > before_update.get(device, snapshot.get(TOTAL, 0))
                        else "backward" if any(snapshot.get(name, 0) for name in MADE_IN_BACKWARD) else "forward")
        cpu = device.type == "cpu"
        harness = harness_bytes if cpu else 0
        runtime = held[device]
        if runtime is not None:
            runtime = max(0, runtime - tensors.get(device, {}).get(TOTAL, 0) - harness)
        breakdowns.append(MemoryBreakdown(
            kind="cpu" if cpu else "gpu", device=0 if cpu else int(device.index or 0),
            parameters=figures["parameters"], gradients=figures["gradients"], optimizer=held_state,
            activations=figures["activations"], temporaries=figures["temporaries"] + update,
            inputs=figures["inputs"], harness=harness, runtime=runtime,
            gathered=sum(snapshot.get(name, 0) for name in GATHERED), update_temporaries=update,
            communication=sum(snapshot.get(name, 0) for name in COMMUNICATION),
            activations_kept=max(kept.get(device, 0), figures["activations"]) + step_input_bytes, phase=phase,
            rank=rank,
            method=method))
    return breakdowns


@contextlib.contextmanager
def _removed_grad_hooks() -> Iterator[None]:
    """Keep the handles of the multi-grad hooks `ModTracker` registers meanwhile, and remove them
    at the end: the hooks would otherwise keep the step's autograd graph alive (module docstring)."""
    from torch.distributed._tools import mod_tracker

    register = mod_tracker.register_multi_grad_hook
    handles: list[Any] = []

    def kept(*args: Any, **kwargs: Any) -> Any:
        handle = register(*args, **kwargs)
        handles.append(handle)
        return handle

    mod_tracker.register_multi_grad_hook = kept  # type: ignore[assignment]
    try:
        yield
    finally:
        mod_tracker.register_multi_grad_hook = register  # type: ignore[assignment]
        for handle in handles:
            handle.remove()


def _held_bytes(device: torch.device) -> int | None:
    """What the process holds now on `device`: on the CPU its resident set, on a GPU the bytes
    its caching allocator has handed out (`torch.cuda.memory_allocated`)."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return rss_bytes() if device.type == "cpu" else None


def _tracker(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             inputs: list[torch.Tensor]) -> tuple[Any, str]:
    """FSDP2's tracker for an FSDP2 model, else torch's general one, told what exists already."""
    from torch.distributed._tools.mem_tracker import MemTracker

    fsdp = _fsdp_module_type()
    if fsdp is not None and isinstance(model, fsdp):
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs(tuple(inputs))
        return tracker, FSDP_TRACKER
    tracker = MemTracker()
    # The model first: its parameters, and the last step's gradients, still held (zero_grad
    # comes in the step). DDP's gradients are views of its buckets, which stay allocated.
    tracker.track_external(model, optimizer, *inputs)
    return tracker, "torch MemTracker"


def _file_gathered_parameters(tracker: Any, model: torch.nn.Module) -> None:
    """File every FSDP unit's gathered-parameter storage as such before the step, as the tracker
    does for one unit as its forward begins (`FSDPMemTracker._fsdp_state_pre_forward`). FSDP
    prefetches the next unit's all-gather during the current unit's forward: its copy into the
    next unit's (resized) storages came before that unit's filing, and counted as activations (a
    whole 4096x4096 layer's 64 MiB at the reshard = false MLP's peak). Between steps the storages
    are resized to nothing; the tracker follows their resizing from here."""
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType

    fsdp = _fsdp_module_type()
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if fsdp and isinstance(module, fsdp) else None
        for fsdp_param in group.fsdp_params if group else ():
            gathered = getattr(fsdp_param, "_unsharded_param", None)  # made by its first all-gather
            if gathered is not None:
                tracker._update_and_maybe_create_winfos(gathered, _FSDPRefType.UNSHARDED_PARAM)


def _fsdp_module_type() -> type | None:
    if not torch.distributed.is_available():
        return None
    from torch.distributed.fsdp import FSDPModule

    return FSDPModule


def _indexed(device: torch.device) -> torch.device:
    """A CUDA device with its index, as the tracker keys its snapshots (tensor.device)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _state_bytes(optimizer: torch.optim.Optimizer) -> dict[torch.device, int]:
    """Bytes of the optimizer's kept state per device, as the tracker counts them: each storage
    once, a DTensor's local shard (`get_untyped_storages`), CUDA's rounded to its allocator's
    512-byte blocks."""
    from torch.distributed._tools.common_utils import get_untyped_storages

    seen: dict[int, tuple[torch.device, int]] = {}
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                for storage in get_untyped_storages(value):
                    size = storage.nbytes()
                    if value.device.type == "cuda":
                        size = -(-size // CUDA_BLOCK) * CUDA_BLOCK
                    seen[id(storage)] = (value.device, size)
    totals: dict[torch.device, int] = {}
    for device, size in seen.values():
        totals[device] = totals.get(device, 0) + size
    return totals


class _RepeatedRoots:
    """Lets a root module run more than once in the tracked step (a pipeline stage, once per
    micro-batch), which the tracker refuses as a second iteration: a global forward pre-hook,
    registered before the tracker's own (global hooks run in the order registered), drops the
    module's statistics before it runs again in forward. Keeps, per device, the most activation
    bytes live as a root module's forward ended (`activations_kept`), dropped statistics included."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.depth = 0
        self._kept: dict[torch.device, int] = {}
        self._kept_any: dict[torch.device, int] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> "_RepeatedRoots":
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._before),
                         register_module_forward_hook(self._after, always_call=True)]
        return self

    def __exit__(self, *args: Any) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, module: torch.nn.Module, inputs: Any) -> None:
        stats = self.tracker.memory_tracking
        in_backward = torch._C._current_graph_task_id() != -1  # activation recomputation: not a new pass
        if self.depth == 0 and not in_backward and module in stats:
            self._fold(stats[module])
            del stats[module]
        self.depth += 1

    def _after(self, module: torch.nn.Module, inputs: Any, outputs: Any) -> None:
        self.depth = max(0, self.depth - 1)

    def _fold(self, stats: Any) -> None:
        # A submodule's forward may end mid-way through its parent's, beside the parent's
        # transients: roots are read apart from the rest.
        kept = self._kept_any if "." in stats.mod_fqn else self._kept
        for state, snapshots in stats.snapshots.items():
            if getattr(state, "value", state) not in AFTER_FORWARD:
                continue
            for snapshot in snapshots:
                for device, figures in snapshot.items():
                    activations = sum(value for key, value in figures.items()
                                      if getattr(key, "value", key) == ACTIVATION)
                    kept[device] = max(kept.get(device, 0), activations)

    def activations_kept(self) -> dict[torch.device, int]:
        """Per device, the most activations live as a root module's forward ended; where no root
        was tracked (FSDP's tracker follows only the units that hold parameters, here the blocks
        under a root holding none), as any module's did."""
        for stats in list(self.tracker.memory_tracking.values()):
            self._fold(stats)
        return dict(self._kept) if self._kept else dict(self._kept_any)
