"""What a strategy exchanges between devices in one training step, as data.

Each strategy plugin declares its own `exchange` (a class attribute of `StrategyPlugin`): the
collectives a step runs, what each carries and whether the step hides it behind compute. The
projection (`suites.predict`) prices each collective with an alpha-beta model of the target's links;
no strategy is a branch there. A plugin whose `exchange` is None has no exchange model, and a
projection of it says so.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Collectives the projection knows how to price (NCCL's names, plus a parameter server's push and pull).
OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv", "push_pull"})
#: What a collective carries: every gradient, every parameter, one layer's activations (per layer,
#: tensor parallelism) or one stage boundary's activations (per micro-batch, pipelines).
PAYLOADS = frozenset({"gradients", "parameters", "layer_activations", "stage_activations"})
#: Which compute may hide a collective: "backward" (issued as the backward pass makes gradients ready,
#: or ahead of a layer's backward), "forward" (issued ahead of a layer's forward), "none".
OVERLAPS = frozenset({"backward", "forward", "none"})
#: How the strategy issues a collective: "async" (a work handle waited for later: DDP's reducer,
#: Horovod; any backend runs it beside the compute thread) or "stream" (a blocking call that returns
#: at once only where the backend runs collectives on device streams, NCCL: FSDP2's all-gathers,
#: `unshard_async_op=False` by default, and its reduce-scatters; on a host backend, gloo, the
#: compute thread waits for each, so nothing hides them).
ISSUES = frozenset({"async", "stream"})
#: The wrapping unit whose per-unit call no compute hides: "first" (the first unit's forward
#: all-gather precedes all compute; its reduce-scatter ends the backward pass), "last" (the backward
#: pass starts by gathering the last unit again).
EXPOSED_UNITS = frozenset({"", "first", "last"})


@dataclass(frozen=True)
class Collective:
    """One collective of a step: `op` over `payload` in `dtype` ("state": fp32 training state;
    "compute": the case's precision), `per_step` times a step (per layer for layer activations,
    per micro-batch for stage activations). `per_unit`: one call per wrapping unit (FSDP), each
    over that unit's share of the payload, each paying the collective's latency; `exposed_unit`:
    the unit whose call no compute hides (see EXPOSED_UNITS); `issue`: see ISSUES."""

    op: str
    payload: str
    dtype: str = "state"
    per_step: float = 1.0
    overlap: str = "none"
    per_unit: bool = False
    exposed_unit: str = ""
    issue: str = "async"

    def __post_init__(self) -> None:
        if (self.op not in OPS or self.payload not in PAYLOADS or self.overlap not in OVERLAPS
                or self.issue not in ISSUES or self.exposed_unit not in EXPOSED_UNITS):
            raise ValueError(f"bad collective {self}: op in {sorted(OPS)}, payload in {sorted(PAYLOADS)}, "
                             f"overlap in {sorted(OVERLAPS)}, issue in {sorted(ISSUES)}, exposed_unit in "
                             f"{sorted(EXPOSED_UNITS)}")
        if self.dtype not in ("state", "compute"):
            raise ValueError(f"collective dtype {self.dtype!r}: 'state' or 'compute'")
        if self.exposed_unit and not self.per_unit:
            raise ValueError(f"collective {self.op}: exposed_unit needs per_unit calls")


@dataclass(frozen=True)
class ExchangeModel:
    """A strategy's exchange per step: its collectives; `unhidden_bytes`, the part of an
    overlapped collective no compute is left to hide (DDP's last gradient bucket, Horovod's last
    fusion buffer); `bubble`, a pipeline's idle share; `serial`, one device busy at a time (model
    parallelism without micro-batches); `source`, where the description comes from."""

    collectives: tuple[Collective, ...] = ()
    unhidden_bytes: int = 0
    bubble: bool = False
    serial: bool = False
    source: str = ""


#: A strategy on one device: nothing to exchange.
NOTHING = ExchangeModel(source="one device: no exchange")

#: Data parallelism that all-reduces the fp32 gradients after the backward pass, not overlapped
#: (tf.distribute's Mirrored / MultiWorkerMirrored aggregate in `apply_gradients`).
ALL_REDUCE_AFTER_BACKWARD = ExchangeModel(
    (Collective("all_reduce", "gradients"),),
    source="tf.distribute: gradients all-reduced in apply_gradients, after the backward pass")
