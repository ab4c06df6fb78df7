"""TF `towers`: TF2 manual multi-tower data parallelism in one process.

The global batch is split over the towers (`tf.device` scopes); the towers' gradients are
averaged, either on a parameter device that holds the variables (`placement =
"param_server"`) or by every tower, each updating its own copy (`"replicated"`). On a CPU the
towers are logical devices, set before TF initialises, so a case runs in a fresh process.

A `matmul` case with `towers` is the classic multi-device matmul: K is cut into one slice per
tower, each tower computes its partial product A[:, slice] @ B[slice, :], and the partials are
added on the host CPU with `tf.add_n` (`suites.frameworks.tf.kernels.TfMatmul`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.vocabulary import Compile, Strategy
from suites.measure.launch import Launch
from suites.strategies.options import option
from suites.strategies.tf.base import TfHooks, TfStrategy, replica_requirements
from suites.strategies.exchange_model import ALL_REDUCE_AFTER_BACKWARD
from suites.workloads.kernels import Matmul

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.workloads.base import Workload


@dataclass(frozen=True)
class TowersOptions:
    placement: str = option("replicated", choices=("replicated", "param_server"), minimum=None,
                            help="variables replicated on every tower, or on a parameter device (the CPU) "
                                 "that averages and applies the update")


class TowersHooks(TfHooks):
    """Towers' mechanism: `suites.strategies.tf.towers.trainer.TowersTrainer`, and a matmul's K
    split over the towers (`SplitsKernels`)."""

    def kernel_cache_shares(self, job: "Job") -> int:
        """Each GPU holds its slice of K: 1/n of the inputs (all of them on one shared GPU)."""
        return 1 if job.strategy.emulated(job) else job.n_devices

    def kernel_devices(self, job: "Job") -> list[str]:
        from suites.frameworks.tf.distribute import replica_devices

        return replica_devices(job)

    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        from suites.frameworks.tf.distribute import replica_devices
        from suites.strategies.tf.towers.trainer import TowersTrainer

        return TowersTrainer(setup, replica_devices(job), job.options.placement)

    def describe(self, job: "Job", params: Mapping[str, Any]) -> str:
        return f"{job.strategy.strategy} ({job.options.placement})"


class Towers(TfStrategy):
    strategy = Strategy.TOWERS
    exchange = ALL_REDUCE_AFTER_BACKWARD
    options_type = TowersOptions
    # Shared GPUs: logical GPUs split from one where there are fewer.
    rules = TfStrategy.rules.but(
        kinds=frozenset({"training", "kernel"}), statistics_split="replicas", launch=Launch.ISOLATED,
        replicas_in_process=True, shares_gpus=True,
        no_sync_statistics=("manual towers run each tower's forward on its own, so no tower sees another's "
                            "statistics; synchronized batch norm needs tf.distribute's replica context "
                            "(strategy mirrored)"),
        compile_limits={Compile.XLA: "its step places each tower's ops on another device within one function, and "
                                     "an XLA computation runs on one device"})
    requirements = replica_requirements("towers")
    hooks = TowersHooks()

    def applies_to(self, workload: type["Workload"]) -> bool:
        """Training steps, and of the kernels the matmul (split over K)."""
        return workload.kind == "training" or issubclass(workload, Matmul)


PLUGIN = Towers()
