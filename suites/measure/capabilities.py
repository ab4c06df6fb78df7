"""What a strategy plugin may do beyond the hooks every plugin has: optional capabilities.

A hook that one strategy gives meaning to (and every other plugin would inherit as a do-nothing
default) is a capability instead: a `typing.Protocol` here that the strategy implements or not.
A capability of the mechanism (what a runnable calls while a case runs: a pipeline's own step,
DDP's step without its all-reduce, towers' split kernel, a cluster's serving and lockstep) is
implemented by the plugin's hooks object (`TorchHooks`, `TfHooks`); one read without running a
case (a pipeline's bubble, a TPU's isolated environment) by the plugin itself. A caller asks
`isinstance(job.strategy.hooks, Capability)` or `isinstance(job.strategy, Capability)` and
otherwise does the ordinary thing itself, so the base classes list only what every strategy
decides. `tests/test_capabilities.py` keeps it so: every capability has an implementer, and no
base class defines a method exactly one plugin overrides.

The protocols are runtime-checkable: `isinstance` looks for the members by name, so a class
implements a capability by defining them (it need not subclass the protocol). This module
imports no framework: the types it names are only read by type checkers. It sits in the
measuring layer, below the framework runnables that ask `isinstance` and the strategies that
implement it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    import tensorflow as tf
    import torch
    from torch import nn

    from suites.measure.job_contract import JobContract


# --- rules and launching (both frameworks) ---------------------------------------------------
@runtime_checkable
class SplitsKernels(Protocol):
    """A strategy that splits a kernel case's work over several devices (`towers`: the
    matmul's K); a kernel of any other strategy runs whole on the case's device."""

    def kernel_devices(self, job: "JobContract") -> list[Any]:
        """The devices the kernel's work is split over (TF device names, or torch devices)."""

    def kernel_cache_shares(self, job: "JobContract") -> int:
        """Over how many device caches the kernel's inputs are split: each of n devices holds
        1/n of them in its L2, so the cold-cache rotation is sized on that share (1 where the
        parts share one device)."""


@runtime_checkable
class NeedsIsolatedEnvironment(Protocol):
    """A strategy whose fresh process (`Launch.ISOLATED`) needs variables the parent process
    keeps out of itself (`tpu`: libtpu may load there)."""

    def isolated_env(self, job: "JobContract") -> dict[str, str]:
        """What the fresh process gets on top of the parent's environment."""


@runtime_checkable
class ServesCluster(Protocol):
    """A strategy some of whose processes only serve the others (a parameter-server cluster's
    workers and parameter servers, which its chief drives)."""

    def serve(self, job: "JobContract") -> bool:
        """In a serving process, serve until the case is over and return True (raise if the
        case's processes never met); in the process that runs the case, return False at once."""


# --- analytic figures -------------------------------------------------------------------------
@runtime_checkable
class PipelineBubble(Protocol):
    """A strategy whose devices idle for part of each step by construction (a pipeline)."""

    def bubble_fraction(self, job: "JobContract") -> float:
        """The share of a step each device idles, in theory; stored as the metric
        `pipeline_bubble` beside the measured step."""


# --- training mechanism: TensorFlow ----------------------------------------------------------
@runtime_checkable
class CoordinatesWorkers(Protocol):
    """A TF strategy whose processes meet (barrier, rank 0's value, every rank's value) through
    its `tf.distribute` strategy; a case of any other keeps one process's trivial lockstep."""

    def lockstep(self, job: "JobContract", strategy: "tf.distribute.Strategy | None") -> Any:
        """How the case's processes meet (a `suites.frameworks.tf.distribute.Lockstep`: the
        framework's own type, which this layer below it does not import)."""


# --- training mechanism: PyTorch -------------------------------------------------------------
class StrategyStep(Protocol):
    """A training step a strategy runs itself (`StepsItself.train_step`), on this process's
    part of a batch (`data_shard`): `x` its inputs, `y` its targets."""

    def step(self, x: "torch.Tensor", y: "torch.Tensor") -> "torch.Tensor":
        """zero_grad, forward, loss, backward and the optimizer update; returns the loss as
        this process knows it (`StepsItself.global_loss` makes it the global one)."""

    def backward(self, x: "torch.Tensor", y: "torch.Tensor") -> None:
        """Forward and backward only, leaving the gradients in the parameters (the check)."""


@runtime_checkable
class StepsItself(Protocol):
    """A torch strategy whose training step is not the runnable's (zero_grad, forward, loss,
    backward, optimizer update) but its own (a pipeline's: its schedule's)."""

    def train_step(self, wrapped: Any, optimizer: "torch.optim.Optimizer",
                   scaler: "torch.amp.GradScaler | None") -> StrategyStep:
        """The strategy's step: `wrapped` is what `wrap` returned, `optimizer` and `scaler`
        (fp16's loss scaling) the runnable's."""

    def check_wrap(self, wrapped: Any, model: "nn.Module", device: "torch.device", check_job: "JobContract") -> Any:
        """What the numerics check steps at its own, smaller batch (`suites.strategies.jobs.Job.check_job`): a wrapper
        of the same model built for that batch (a schedule is built for one batch shape)."""

    def global_loss(self, group: Any, loss: float) -> float:
        """The step's loss over the global batch, on every process, from this process's `loss`
        (elsewhere the runnable takes the mean of the ranks' equal shards); `group` is the rank's
        `suites.frameworks.torch.distributed.ProcessGroup`, or None."""


@runtime_checkable
class SeparatesExchange(Protocol):
    """A torch strategy whose step can run without its cross-rank exchange, so the timer can
    separate compute from communication (`ddp`: `no_sync`)."""

    def local_step(self, wrapped: "nn.Module", step: Callable[[], None]) -> Callable[[], None]:
        """`step` without the strategy's cross-rank exchange."""
