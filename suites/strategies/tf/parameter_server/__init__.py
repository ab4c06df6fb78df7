"""TF `parameter_server`: `tf.distribute.ParameterServerStrategy` with a `ClusterCoordinator`.

A cluster of 1 chief (the coordinator: it runs the case, schedules the steps and times them),
`n_devices` workers (one device each) and `ps` parameter servers (the strategy parameter,
default 1), joined by TF_CONFIG: on 127.0.0.1 with ports picked at run time under parbench's
launcher, or across machines with a TF_CONFIG per machine. Workers and parameter servers only
serve (`ParameterServerHooks.serve`), until the chief is done. Training is asynchronous
(`suites.strategies.tf.parameter_server.trainer`): each worker applies the gradient of its own batch to
the weights it read, no averaging, no waiting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.vocabulary import DeviceKind, Precision, Strategy
from suites.frameworks.tf.cluster import read_tf_config
from suites.strategies.options import option
from suites.strategies.requirements import requirement
from suites.strategies.tf.base import ClusterStrategy, TfHooks, replica_requirements
from suites.strategies.exchange_model import Collective, ExchangeModel

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.hardware.devices import DeviceInfo

@dataclass(frozen=True)
class ParameterServerOptions:
    ps: int = option(1, help="parameter-server processes holding the variables (round-robin)")


@requirement("fp32 or one worker: asynchronous workers leave no mixed-precision loss trajectory to check")
def full_precision_or_one_worker(job: "Job", device: "DeviceInfo") -> str | None:
    if job.precision in (Precision.FP16, Precision.BF16) and job.n_devices > 1:
        return (f"ParameterServerStrategy trains asynchronously: with {job.n_devices} workers there is no "
                f"{job.precision} loss trajectory to compare with fp32 single-device training "
                "(the mixed-precision check); use one worker, or fp32")
    return None


class ParameterServerHooks(TfHooks):
    """The cluster's mechanism: the chief's ParameterServerStrategy and asynchronous trainer,
    the other tasks' serving (`ServesCluster`). Not `DistributeHooks`: its steps are scheduled
    by a coordinator, not a custom loop over the strategy's replicas."""

    def distribute(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.Strategy":
        """In the chief: wait (with the rendezvous timeout) until every worker and parameter
        server answers, then connect to the cluster."""
        import tensorflow as tf

        from suites.frameworks.tf.cluster import cluster_tasks, wait_for

        tasks, me = cluster_tasks()
        if me.job != "chief":
            raise RuntimeError(f"{me.name} serves the cluster; only the chief runs the case")
        wait_for([task for task in tasks if task != me])
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())

    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        from suites.strategies.tf.parameter_server.trainer import ParameterServerTrainer

        assert strategy is not None
        return ParameterServerTrainer(setup, strategy, workers=job.n_devices)

    def describe(self, job: "Job", params: Mapping[str, Any]) -> str:
        return (f"{job.strategy.strategy} ({job.n_devices} worker(s), {ParameterServer.parameter_servers(job)} "
                "parameter server(s), asynchronous)")

    def serve(self, job: "Job") -> bool:
        """A worker or parameter server: serve until the chief is done."""
        config = read_tf_config()
        if config is None or config["task"]["type"] == "chief":
            return False
        from suites.strategies.tf.parameter_server.serving import serve
        from suites.frameworks.tf.distribute import configure_runtime

        configure_runtime(job)
        serve()
        return True


class ParameterServer(ClusterStrategy):
    strategy = Strategy.PARAMETER_SERVER
    # Each worker pushes its fp32 gradients to the parameter servers and pulls the parameters back,
    # through the servers' host links.
    exchange = ExchangeModel((Collective("push_pull", "gradients"),),
                             source="tf.distribute ParameterServerStrategy: variables on the servers, read and "
                                    "updated by every worker each step")
    options_type = ParameterServerOptions
    requirements = (full_precision_or_one_worker, *replica_requirements("ParameterServerStrategy"))
    rules = ClusterStrategy.rules.but(
        soft_placement_reason=("the functions the coordinator dispatches to workers fail under strict placement "
                               "(TF 2.21: 'the device specification on the output node must match exactly one "
                               "device', chief, worker and ps all having a /device:CPU:0)"))
    hooks = ParameterServerHooks()

    @staticmethod
    def parameter_servers(job: "Job") -> int:
        return job.options.ps

    def cluster_jobs(self, job: "Job") -> dict[str, int]:
        return {"chief": 1, "worker": job.n_devices, "ps": self.parameter_servers(job)}

    def emulated(self, job: "Job") -> bool:
        """On a CPU every worker and parameter server is a process on the same cores."""
        return job.device is DeviceKind.CPU


PLUGIN = ParameterServer()
