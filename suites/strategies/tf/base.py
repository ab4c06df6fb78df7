"""What a TensorFlow strategy supplies to the TF runnables, and the rules several share.

The hooks import TensorFlow when called, never at import: rules are read without it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision
from suites.errors import UserError
from suites.frameworks.tf.cluster import CLUSTER_JOBS, read_tf_config, tasks_beside, tasks_of, tf_config_rank
from suites.measure.launch import Launch
from suites.strategies.base import StrategyPlugin, devices_on_this_node, split_reason, too_few_gpus_reason
from suites.strategies.requirements import Requirement, requirement
from suites.strategies.rules import Rules, rule
from suites.measure.capabilities import CoordinatesWorkers

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.hardware.devices import DeviceInfo

#: The `backend` values of an allreduce case that mean something to TF.
TF_BACKENDS = ("auto", "nccl", "ring")


@dataclass(frozen=True)
class TfRules(Rules):
    """A TF strategy's rules: every strategy's, and how its processes hold devices and meet."""

    replicas_in_process: bool = rule(
        False, "Several devices of one process hold replicas (logical CPU devices when emulated), which TF must be "
               "told about before it initialises: such cases run in a fresh process.")
    coordinated: bool = rule(
        False, "Processes meet once per timed block (barrier to barrier), so blocks are made longer.")
    read_back_to_sync: bool = rule(False, "Reading a step's result is how to wait for it (TPU).")
    soft_placement_reason: str | None = rule(
        None, "Why the strategy needs soft device placement (TF places what its ops leave unplaced). Every other "
              "runs with it off, so an op without a kernel on its device fails instead of running, unrecorded, on "
              "another (`suites.frameworks.tf.distribute.configure_runtime`).")

    def problems(self) -> list[str]:
        found = super().problems()
        if self.replicas_in_process and self.launch is not Launch.ISOLATED:
            found.append("replicas_in_process needs launch 'isolated': TF learns of a process's devices before it "
                         "initialises, so only in a fresh process")
        if self.coordinated and self.launch is not Launch.RANKS:
            found.append("coordinated needs launch 'ranks': only rank processes meet at barriers")
        return found


class TfHooks:
    """What TF's runnables call on a strategy while a case runs: its mechanism (the
    `tf.distribute` strategy, the training layout, the check's naming of both). A plugin holds
    one as `TfStrategy.hooks`; a plugin whose mechanism differs declares a subclass in its own
    module. Capabilities of the mechanism (`suites.measure.capabilities.CoordinatesWorkers`,
    `suites.measure.capabilities.SplitsKernels`, `suites.measure.capabilities.ServesCluster`)
    are implemented by the hooks object and asked of it. A hook that needs the plugin (its
    rules, its options' helpers) reaches it through `job.strategy`."""

    def distribute(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.Strategy | None":
        """The case's `tf.distribute` strategy; None where the strategy needs none."""
        return None

    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        """The training layout of this strategy (a `suites.frameworks.tf.trainers.Trainer`)."""
        raise NotImplementedError(f"{job.strategy.strategy} has no TF training layout")

    def describe(self, job: "Job", params: Mapping[str, Any]) -> str:
        """The layout, as the numerics check's detail names it."""
        return str(job.strategy.strategy)

    def all_reduce_name(self, job: "Job", backend_name: str = "auto") -> str:
        """The all-reduce an allreduce case of this strategy runs, for its check's detail."""
        raise NotImplementedError(f"{job.strategy.strategy} has no TF all-reduce")


class DistributeHooks(TfHooks):
    """The mechanism of a `DistributeStrategy`: its `tf.distribute` strategy trained with a
    custom loop (`suites.frameworks.tf.trainers.StrategyTrainer`)."""

    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        """The strategy's custom loop, its processes meeting as the hooks' `lockstep` says where
        they coordinate workers (`suites.measure.capabilities.CoordinatesWorkers`)."""
        from suites.frameworks.tf.distribute import Lockstep
        from suites.frameworks.tf.trainers import StrategyTrainer

        assert strategy is not None
        lockstep = self.lockstep(job, strategy) if isinstance(self, CoordinatesWorkers) else Lockstep()
        return StrategyTrainer(setup, strategy, lockstep=lockstep,
                               read_back_to_sync=job.strategy.rules.read_back_to_sync)


class TfStrategy(StrategyPlugin):
    framework = Framework.TF
    rules: ClassVar[TfRules] = TfRules(compilers=frozenset({Compile.NONE, Compile.XLA}))
    #: Its mechanism: what TF's runnables call while a case runs (`TfHooks`).
    hooks: ClassVar[TfHooks] = TfHooks()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.rules, TfRules):
            raise TypeError(f"{cls.__name__}.rules must be TfRules (TF's runnables read its fields): "
                            "build them from the base's, `Base.rules.but(...)`")
        if not isinstance(cls.hooks, TfHooks):
            raise TypeError(f"{cls.__name__}.hooks must be a TfHooks (TF's runnables call its methods): "
                            "an instance of a subclass of the base's hooks class")


class DistributeStrategy(TfStrategy):
    """A `tf.distribute` strategy trained with a custom loop (`StrategyTrainer`). Under `xla`
    each replica's forward and backward are one XLA computation; the gradients' all-reduce and
    the update stay outside it (an XLA computation cannot reach the variables' copies on other
    devices)."""

    #: Synchronized statistics: Keras' synchronized batch norm, an all-reduce of each layer's
    #: sums in the replica context.
    rules = TfStrategy.rules.but(statistics_split="replicas", synchronized_statistics=True)
    hooks = DistributeHooks()


def param(job: "Job", name: str, default: str) -> str:
    return str(job.workload.p.get(name, default))


def backend_reason(job: "Job", what: str, allowed: tuple[str, ...]) -> str | None:
    """An allreduce case's `backend` against what this TF strategy can do."""
    backend = param(job, "backend", "auto")
    if backend not in TF_BACKENDS:
        return f"backend {backend!r} is a torch.distributed backend; TF's collectives are {', '.join(TF_BACKENDS)}"
    if backend not in allowed:
        return f"{what} has no {backend!r} all-reduce (it has {', '.join(allowed)})"
    if backend == "nccl" and job.device is not DeviceKind.GPU:
        return f"NCCL all-reduce has no {job.device} kernel; it reduces GPU tensors only"
    return None


def nccl_bf16_reason(job: "Job", what: str) -> str | None:
    """A bf16 all-reduce of GPU tensors that TF would hand to NCCL, which fails at run time:
    TF's NCCL all-reduce takes half, float, double, int32 and int64 only (`NcclAllReduce`'s
    dtypes; TF's NcclManager maps no bfloat16 to NCCL). Training steps are not affected: they
    all-reduce the gradients of float32 variables, which are float32 in every precision."""
    if (job.precision is Precision.BF16 and job.device is DeviceKind.GPU
            and job.workload.kind == "collective"
            and param(job, "backend", "auto") in ("auto", "nccl")):
        return f"{what} all-reduces GPU tensors with NCCL, which has no bfloat16 kernel in TF"
    return None


# --- requirements several strategies share; `what` names the strategy in the reasons -----------
@requirement("the global batch splits into equal shards over the replicas")
def equal_replica_shards(job: "Job", device: "DeviceInfo") -> str | None:
    return split_reason(job, "replicas")


def replica_requirements(what: str) -> tuple[Requirement, ...]:
    """The rules of a strategy whose replicas each train on a shard of the batch: on CPUs or
    GPUs, a GPU per replica (or logical GPUs split from fewer, where the plugin `shares_gpus`),
    equal shards."""
    def cpus_or_gpus(job: "Job", device: "DeviceInfo") -> str | None:
        if job.case.device is DeviceKind.TPU:
            return f"{what} runs on CPUs or GPUs; TPUs use strategy 'tpu' (TPUStrategy)"
        return None

    def gpu_per_replica(job: "Job", device: "DeviceInfo") -> str | None:
        return too_few_gpus_reason(job, device, what, job.strategy.rules.shares_gpus)

    return (Requirement("cpus-or-gpus", "on CPUs or GPUs (a TPU's case is strategy tpu's)", cpus_or_gpus),
            Requirement("gpu-per-replica", "a visible GPU per replica, unless the strategy `shares_gpus` "
                        "(logical GPUs split from fewer)", gpu_per_replica),
            equal_replica_shards)


def backend_requirement(what: str, allowed: tuple[str, ...]) -> Requirement:
    """An allreduce case's `backend` is one of `allowed` (`backend_reason`)."""
    def supported_backend(job: "Job", device: "DeviceInfo") -> str | None:
        return backend_reason(job, what, allowed)

    backends = f"{', '.join(allowed[:-1])} or {allowed[-1]}"
    return Requirement("supported-backend", f"an allreduce case's backend is {backends}, nccl on GPUs only",
                       supported_backend)


def nccl_bf16_requirement(what: str) -> Requirement:
    """No bf16 all-reduce of GPU tensors through NCCL (`nccl_bf16_reason`)."""
    def no_nccl_bf16(job: "Job", device: "DeviceInfo") -> str | None:
        return nccl_bf16_reason(job, what)

    return Requirement("no-nccl-bf16", "no bf16 all-reduce of GPU tensors through NCCL (TF's has no "
                       "bfloat16 kernel)", no_nccl_bf16)


class ClusterStrategy(DistributeStrategy):
    """A strategy over processes joined by TF_CONFIG: parbench's launcher starts them on
    127.0.0.1 with ports picked at run time (`rank_env`); across machines a user starts
    `parbench worker --case ID` on each with their own TF_CONFIG (`this_rank`)."""

    rules = DistributeStrategy.rules.but(launch=Launch.RANKS, coordinated=True)

    def cluster_jobs(self, job: "Job") -> dict[str, int]:
        """How many tasks of each job the case's cluster has."""
        raise NotImplementedError

    def processes(self, job: "Job") -> int:
        return sum(self.cluster_jobs(job).values())

    def ports_needed(self, job: "Job") -> int:
        return self.processes(job)  # one gRPC server per task

    def task_of(self, job: "Job", rank: int) -> tuple[str, int]:
        """(job, index) of the task with `rank`."""
        case = job.case
        for job, count in self.cluster_jobs(job).items():
            if rank < count:
                return job, rank
            rank -= count
        raise ValueError(f"rank out of range for {case.id}")

    def rank_env(self, job: "Job", rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
        """TF_CONFIG naming every task and this one; on GPUs, one GPU per worker, none elsewhere."""
        case, gpus_here = job.case, devices_on_this_node(job)
        addresses = iter(f"127.0.0.1:{port}" for port in ports)
        cluster = {job: [next(addresses) for _ in range(count)]
                   for job, count in self.cluster_jobs(job).items() if count}
        job, index = self.task_of(job, rank)
        env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})}
        if case.device is DeviceKind.GPU:
            # a worker's GPU among this node's: over several nodes, the launcher makes its slot
            # its own node's GPU (`suites.runner.spanning.rank_env_on_nodes`)
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            gpus = visible.split(",") if visible else [str(i) for i in range(case.n_devices)]
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % gpus_here].strip() if job == "worker" else ""
        return env

    def this_rank(self, job: "Job") -> int:
        """From TF_CONFIG, checked against the case: its cluster must have the tasks the case
        asks for (a mismatch is a `UserError` naming both)."""
        config = read_tf_config()
        if config is None:
            return super().this_rank(job)
        expected = {job: count for job, count in self.cluster_jobs(job).items() if count}
        found = {job: len(config["cluster"].get(job, ())) for job in CLUSTER_JOBS
                 if config["cluster"].get(job)}
        if found != expected:
            raise UserError(f"TF_CONFIG's cluster has {found or 'no tasks'}, but case {job.case.id} needs "
                            f"{expected} ({self.strategy}: one worker per device)")
        shared = shared_gpus_problem(job, config)
        if shared:
            raise UserError(shared)
        return tf_config_rank(config)


def shared_gpus_problem(job: "Job", config: Mapping[str, Any]) -> str | None:
    """Why a task started by hand from `config` (TF_CONFIG) must not run a GPU case here: other
    tasks of its cluster are on the same machine and CUDA_VISIBLE_DEVICES is unset, so each
    would see every GPU, and TF would put every worker's replica on GPU 0. parbench's launcher
    sets it for every task (`ClusterStrategy.rank_env`: a worker its own GPU, the others none);
    by hand only the user can. Set to anything, even empty, it is the user's choice: None."""
    if job.case.device is not DeviceKind.GPU or "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    tasks, me = tasks_of(config)
    beside = tasks_beside(tasks, me)
    if len(beside) < 2:
        return None
    others = ([] if all(task.job == "worker" for task in tasks)
              else ["the chief and parameter servers none (CUDA_VISIBLE_DEVICES=)"])
    way_out = "; ".join(["each worker its own GPU (worker 0 CUDA_VISIBLE_DEVICES=0, worker 1 =1, ...)", *others])
    return (f"TF_CONFIG puts {', '.join(task.name for task in beside)} on one machine and CUDA_VISIBLE_DEVICES "
            f"is not set, so every one of them would see every GPU and train on GPU 0: start each task with its "
            f"own CUDA_VISIBLE_DEVICES ({way_out}), or let parbench launch the cluster (`parbench run`), "
            "which does")
