"""What every strategy plugin declares, framework-neutral."""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, ClassVar, Iterator, Mapping, Protocol, final

from suites.cases.vocabulary import Compile, DeviceKind, Framework, Strategy
from suites.measure.launch import Launch
from suites.strategies.options import NoOptions, params_of
from suites.strategies.requirements import Requirement, first_reason, repeated_names, requirement
from suites.strategies.rules import Rules

if TYPE_CHECKING:
    from suites.strategies.exchange_model import ExchangeModel
    from suites.strategies.jobs import Job
    from suites.hardware.devices import DeviceInfo
    from suites.workloads.base import Param, Workload


#: Bytes of one element of training state (parameters, gradients, optimizer states): fp32.
STATE_BYTES = 4


class StrategyPlugin:
    """One strategy of one framework. Subclasses set the class attributes, list their
    `requirements` and override the hooks that differ; the framework's base class
    (`TorchStrategy`, `TfStrategy`) adds the hooks its runnables call.

    Only what every strategy decides is here; what one strategy alone does is an optional
    capability it implements or not (`suites.measure.capabilities`)."""

    # --- rules: which cases exist, and which are available here ---------------------------------
    #: The strategy this plugin implements.
    strategy: ClassVar[Strategy]
    #: The framework it implements it in.
    framework: ClassVar[Framework]
    #: Its rules as data: devices, workload kinds, compilers, batch statistics, launch
    #: (`suites.strategies.rules.Rules`, validated when built).
    rules: ClassVar[Rules] = Rules()
    #: The strategy's own options (e.g. FSDP's `reshard`): a frozen dataclass whose fields are
    #: set in a grid's `params` like a workload's and are part of the case id when given; a case
    #: of another strategy drops them. A job carries the built instance (`Job.options`).
    options_type: ClassVar[type] = NoOptions
    #: The grid parameters `options_type` declares (derived, `options.params_of`).
    params: ClassVar[tuple["Param", ...]] = ()
    #: The options a compiler takes (torch.compile's `compile_mode`), given only to its cases.
    compiler_options: ClassVar[Mapping[Compile, type]] = {}
    #: The grid parameters of `compiler_options` (derived).
    compile_params: ClassVar[Mapping[Compile, tuple["Param", ...]]] = {}
    #: What a training step exchanges between devices (`suites.strategies.exchange_model`), which
    #: `parbench predict` prices on a target's links; None: no exchange model, and a projection says so.
    exchange: ClassVar["ExchangeModel | None"] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        repeated = repeated_names(cls.requirements)
        if repeated:
            raise TypeError(f"{cls.__name__}.requirements names {', '.join(repeated)} more than once")
        cls.params = params_of(cls.options_type)
        cls.compile_params = {compile: params_of(options) for compile, options in cls.compiler_options.items()}

    def compile_reason(self, job: "Job") -> str | None:
        """Why the case's step cannot run under its compiler with this strategy, or None."""
        compiler = job.compiler.compile
        if compiler is Compile.NONE:
            return None
        if job.workload.kind == "collective":
            return f"{job.case.workload} is one collective call: {compiler} has nothing to compile"
        if compiler in self.rules.compile_modes:
            return None
        why = self.rules.compile_limits.get(compiler) or (
            f"the plugin declares no {compiler} support (its compile_modes: "
            f"{', '.join(sorted(map(str, self.rules.compile_modes)))})")
        return f"{self.framework} strategy '{self.strategy}' does not run under {compiler}: {why}"

    def applies_to(self, workload: type["Workload"]) -> bool:
        """Whether a case of `workload` exists under this strategy (by default: its kind is one of `rules.kinds`)."""
        return workload.kind in self.rules.kinds

    #: What a case needs to run on a device here, in the order they are checked: the first it
    #: does not meet gives its reason (`unavailable_reason`). A subclass lists its base's
    #: explicitly, `(*Base.requirements, more, ...)`, so the order shows where it is declared.
    requirements: ClassVar[tuple[Requirement, ...]] = ()

    @final
    def unavailable_reason(self, job: "Job", device: "DeviceInfo") -> str | None:
        """Why the case cannot run on `device` here, or None: the reason of the first of
        `requirements` it does not meet. Not a hook: a plugin declares requirements instead."""
        return first_reason(self.requirements, job, device)

    def emulated(self, job: "Job") -> bool:
        """Several devices on a CPU are logical devices / ranks sharing one CPU; several on fewer
        GPUs (`rules.shares_gpus`) share them likewise."""
        if job.device is DeviceKind.CPU:
            return job.n_devices > 1
        return self.rules.shares_gpus and on_shared_gpus(job, visible_gpus(job.framework))

    # --- memory accounting: the training state's analytic estimate (`state_estimate`) --------
    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """Bytes of training state one device holds, by ZeRO's accounting.

        `parameters` is the model's parameter count, `optimizer_states` the optimizer's states
        per parameter (SGD 0, Adam 2). Every figure is fp32 (`STATE_BYTES` each): mixed
        precision keeps fp32 weights (and their fp32 gradients) and casts on use. Returns
        {"parameters", "gradients", "optimizer", "total"} (total = the sum of the three) for
        the most loaded device of the case. The default is replication, every device holding
        everything: right for data parallelism (single, ddp, dataparallel, towers, mirrored,
        multiworker, tpu). A strategy that shards or splits the model overrides it: ZeRO-1
        divides "optimizer" by the devices it shards over, ZeRO-2 also "gradients", ZeRO-3 /
        FSDP also "parameters" (a fully sharded step briefly gathers one unit's parameters
        more); tensor parallelism divides the split layers' share; a pipeline stage holds its
        own layers' share.
        """
        weights = parameters * STATE_BYTES
        state = {"parameters": weights, "gradients": weights, "optimizer": optimizer_states * weights}
        return {**state, "total": sum(state.values())}

    def activation_bytes_per_device(self, job: "Job", activation_bytes: int) -> int | None:
        """Bytes of activations one device keeps for the backward pass, from
        `activation_bytes`: what the whole model keeps for one device's batch of a data-parallel
        split (the workload's `per_device_batch`), in the compute dtype. The default is data
        parallelism (each device runs the whole model on its share: unchanged); a strategy that
        splits layers or micro-batches rescales it, or returns None where it cannot say."""
        return activation_bytes

    # --- sizing a case to the devices at hand (readiness, sweeps) -----------------------------
    def devices_at_hand(self, kind: DeviceKind, count: int) -> int:
        """The devices a case that checks this strategy's path on `count` visible devices of
        `kind` spans: one for a one-device strategy, else every device and at least two."""
        return 1 if self.rules.one_device else max(count, 2)

    def sized_for(self, params: Mapping[str, object], n: int) -> dict[str, object]:
        """Workload parameters `params` made splittable over `n` devices (a layer per stage, a
        mesh); unchanged where the strategy needs nothing of them."""
        return dict(params)

    # --- launching (`rules.launch` says how) ------------------------------------------------------
    def processes(self, job: "Job") -> int:
        """How many rank processes a RANKS launch starts."""
        return job.n_devices

    def ports_needed(self, job: "Job") -> int:
        """How many free ports a RANKS launch picks for the case (its rendezvous)."""
        return 1

    def rank_env(self, job: "Job", rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
        """Environment of one rank: torchrun's variables by default."""
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[0]), "RANK": str(rank),
                "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size)}

    def this_rank(self, job: "Job") -> int:
        """This process's rank among the case's processes, from the environment its launcher
        (parbench's, torchrun, or a user's on each machine) gave it: torchrun's RANK by default,
        0 for a lone process. Rank 0 reports the case and stores its record."""
        return int(os.environ.get("RANK", "0"))

    # --- training mechanism ----------------------------------------------------------------------
    def batch_parts(self, job: "Job") -> int:
        """Into how many equal parts a step cuts the global batch (its devices by default; a
        pipeline also into micro-batches): the numerics check's batch is a multiple of it."""
        return job.n_devices


def on_shared_gpus(job: "Job", gpus: int) -> bool:
    """Whether a GPU case puts more devices on this machine than the `gpus` it sees (at least
    one): its ranks or logical devices then share them."""
    return job.device is DeviceKind.GPU and 0 < gpus < devices_on_this_node(job)


class RunNodes(Protocol):
    """The nodes a run places a case's ranks on, as the process that places them sees them
    (`suites.runner.spanning.Nodes`: a Slurm allocation, a `--nnodes` group)."""

    nodes: tuple[str, ...]

    def ranks_per_node(self, job: "Job") -> int: ...


#: The run's nodes while the process that places ranks on them decides a case (None: this
#: machine alone). Set by `placing_on`; a rank knows its node from its launcher's environment.
_RUN_NODES: ContextVar[RunNodes | None] = ContextVar("run_nodes", default=None)


@contextmanager
def placing_on(nodes: RunNodes | None) -> Iterator[None]:
    """Decide cases (availability, backend, `emulated`) as placed on `nodes`: the parent of a
    2 x 8-GPU run has no WORLD_SIZE, and would otherwise compare 16 ranks with its 8 GPUs."""
    token = _RUN_NODES.set(nodes)
    try:
        yield
    finally:
        _RUN_NODES.reset(token)


def devices_on_this_node(job: "Job") -> int:
    """The case's devices on this machine: all of them, except where its ranks span nodes, and
    a node holds only its share: 2 nodes x 8 GPUs put 8 on each, not 16. A rank knows it from its
    launcher (torchrun, parbench's placing: WORLD_SIZE is the case's devices, LOCAL_WORLD_SIZE
    this node's share); the process placing the ranks from the run's nodes (`placing_on`)."""
    world, local = os.environ.get("WORLD_SIZE", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    if world.isdigit() and local.isdigit() and int(world) == job.n_devices and 0 < int(local) < int(world):
        return int(local)
    nodes = _RUN_NODES.get()
    if nodes is not None and job.strategy.rules.launch is Launch.RANKS:
        per_node = nodes.ranks_per_node(job)
        if 0 < per_node < job.strategy.processes(job):
            return min(per_node, job.n_devices)
    return job.n_devices


def visible_gpus(framework: Framework) -> int:
    """The GPUs `framework` sees here (discovery, cached: imports the framework once)."""
    from suites.hardware import devices

    return devices.discover(framework, DeviceKind.GPU).count


def too_few_gpus_reason(job: "Job", device: "DeviceInfo", what: str, can_share: bool) -> str | None:
    """Why a GPU case of `what` cannot run on the GPUs `device` counts: too few of them, and the
    strategy cannot share them (`Rules.shares_gpus`); None where it can run."""
    here = devices_on_this_node(job)
    if job.device is not DeviceKind.GPU or device.count >= here:
        return None
    if can_share and device.count > 0:
        return None
    return f"{what} over {here} GPUs on this machine needs {here} visible GPUs; {device.count} visible"


@requirement("the case spans one device")
def single_device(job: "Job", device: "DeviceInfo") -> str | None:
    """Strategy `single`'s rule, in both frameworks."""
    if job.n_devices != 1:
        return f"strategy 'single' uses one device; this case asks for {job.n_devices}"
    return None


def split_reason(job: "Job", parts: str) -> str | None:
    """Why the workload's batch cannot be split evenly over the case's devices, or None."""
    return job.workload.split_problem(job.n_devices, parts)


#: Why the `horovod` strategy is unavailable in both frameworks: what `pip install horovod`
#: (0.28.1, Gloo, no MPI, Python 3.11, MAKEFLAGS=-j1) did against the pinned frameworks.
HOROVOD_UNSUPPORTED = (
    "Horovod is not supported: its last release, 0.28.1 (2023), does not build against "
    "tensorflow-cpu 2.21.0 or torch 2.13.0. With HOROVOD_WITH_TENSORFLOW=1 the build stops at "
    "horovod/tensorflow/xla_mpi_ops.cc: tensorflow/include/xla/printer.h:29: fatal error: "
    "highwayhash/arch_specific.h: No such file or directory; with HOROVOD_WITHOUT_TENSORFLOW=1 "
    "HOROVOD_WITH_PYTORCH=1, horovod/torch/mpi_ops_v2.cc is compiled as C++14: "
    "torch/include/torch/csrc/api/include/torch/all.h:5: error: #error C++17 or later "
    "compatible compiler is required to use PyTorch")


@requirement("Horovod builds against the pinned frameworks, which it does not: every case is unavailable")
def horovod_builds(job: "Job", device: "DeviceInfo") -> str | None:
    """Strategy `horovod`'s rule, in both frameworks (`HOROVOD_UNSUPPORTED`)."""
    return HOROVOD_UNSUPPORTED


def deep_enough(params: Mapping[str, object], n: int, depth: int) -> dict[str, object]:
    """`params` with an mlp deep enough for a layer group per device (its `depth` hidden layers
    plus the output layer over `n` stages); other models as they are."""
    sized = dict(params)
    if params.get("model") == "mlp":
        sized["depth"] = max(depth, n - 1)
    return sized
