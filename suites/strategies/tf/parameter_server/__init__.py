"""TF `parameter_server`: `tf.distribute.ParameterServerStrategy` with a `ClusterCoordinator`.

A cluster of 1 chief (the coordinator: it runs the case, schedules the steps and times them),
`n_devices` workers (one device each) and `ps` parameter servers (the strategy parameter,
default 1), joined by TF_CONFIG: on 127.0.0.1 with ports picked at run time under parbench's
launcher, or across machines with a TF_CONFIG per machine. Workers and parameter servers only
serve (`serve`), until the chief is done. Training is asynchronous
(`suites.strategies.tf.parameter_server.trainer`): each worker applies the gradient of its own batch to
the weights it read, no averaging, no waiting.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision, Strategy
from suites.frameworks.tf.cluster import read_tf_config
from suites.strategies.tf.base import ClusterStrategy, mirrored_variables_reason, replicas_reason
from suites.workloads import workload_of
from suites.workloads.base import Param

if TYPE_CHECKING:
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.kept.devices import DeviceInfo

PS = Param("ps", default=1, help="parameter-server processes holding the variables (round-robin)")


class ParameterServer(ClusterStrategy):
    strategy = Strategy.PARAMETER_SERVER
    devices = frozenset({DeviceKind.CPU, DeviceKind.GPU})
    params = (PS,)
    #: Soft placement (`suites.strategies.capabilities.SoftPlacement`): TF places what is left unplaced.
    soft_placement_reason = ("the functions the coordinator dispatches to workers fail under strict placement "
                             "(TF 2.21: 'the device specification on the output node must match exactly one "
                             "device', chief, worker and ps all having a /device:CPU:0)")

    @staticmethod
    def parameter_servers(case: Case) -> int:
        return int(workload_of(case).p["ps"])

    def cluster_jobs(self, case: Case) -> dict[str, int]:
        return {"chief": 1, "worker": case.n_devices, "ps": self.parameter_servers(case)}

    def emulated(self, case: Case) -> bool:
        """On a CPU every worker and parameter server is a process on the same cores."""
        return case.device is DeviceKind.CPU

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        what = "ParameterServerStrategy"
        if case.precision in (Precision.FP16, Precision.BF16) and case.n_devices > 1:
            return (f"{what} trains asynchronously: with {case.n_devices} workers there is no "
                    f"{case.precision} loss trajectory to compare with fp32 single-device training "
                    "(the mixed-precision check); use one worker, or fp32")
        return replicas_reason(case, device, what) or mirrored_variables_reason(case, what)

    def distribute(self, case: Case, backend_name: str = "auto") -> "tf.distribute.Strategy":
        """In the chief: wait (with the rendezvous timeout) until every worker and parameter
        server answers, then connect to the cluster."""
        import tensorflow as tf

        from suites.frameworks.tf.cluster import cluster_tasks, wait_for

        tasks, me = cluster_tasks()
        if me.job != "chief":
            raise RuntimeError(f"{me.name} serves the cluster; only the chief runs the case")
        wait_for([task for task in tasks if task != me])
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())

    def trainer(self, setup: "TrainingSetup", case: Case, params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        from suites.strategies.tf.parameter_server.trainer import ParameterServerTrainer

        assert strategy is not None
        return ParameterServerTrainer(setup, strategy, workers=case.n_devices)

    def describe(self, case: Case, params: Mapping[str, Any]) -> str:
        return (f"{self.strategy} ({case.n_devices} worker(s), {self.parameter_servers(case)} "
                "parameter server(s), asynchronous)")

    def serve(self, case: Case) -> bool:
        """A worker or parameter server: serve until the chief is done."""
        config = read_tf_config()
        if config is None or config["task"]["type"] == "chief":
            return False
        from suites.strategies.tf.parameter_server.serving import serve
        from suites.frameworks.tf.distribute import configure_runtime

        configure_runtime(case)
        serve()
        return True


PLUGIN = ParameterServer()
