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
#: How a step hides a collective: "backward" (bucketed as gradients are ready: DDP, Horovod),
#: "prefetch" (issued ahead of the layer that needs it, in forward and backward: FSDP), "none".
OVERLAPS = frozenset({"backward", "prefetch", "none"})


@dataclass(frozen=True)
class Collective:
    """One collective of a step: `op` over `payload` in `dtype` ("state": fp32 training state;
    "compute": the case's precision), `per_step` times a step (per layer for layer activations,
    per micro-batch for stage activations)."""

    op: str
    payload: str
    dtype: str = "state"
    per_step: float = 1.0
    overlap: str = "none"

    def __post_init__(self) -> None:
        if self.op not in OPS or self.payload not in PAYLOADS or self.overlap not in OVERLAPS:
            raise ValueError(f"bad collective {self}: op in {sorted(OPS)}, payload in {sorted(PAYLOADS)}, "
                             f"overlap in {sorted(OVERLAPS)}")
        if self.dtype not in ("state", "compute"):
            raise ValueError(f"collective dtype {self.dtype!r}: 'state' or 'compute'")


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
