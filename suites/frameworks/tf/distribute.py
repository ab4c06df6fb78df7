"""TensorFlow runtime set-up for a case, and the lockstep of its processes.

`configure_runtime` must run before TensorFlow initialises its devices: logical CPU devices
(the emulation of several devices on one CPU), thread pools and GPU memory growth cannot be
changed afterwards. That is why multi-device TF cases launch in a fresh process
(`Launch.ISOLATED` / `Launch.RANKS`) and call it first thing in `setup()`. The strategies
themselves are plugins (`suites.strategies.tf`).
"""
from __future__ import annotations

import os

from suites.frameworks.tf import backend  # noqa: F401  (sets TF's log level before TF loads)
import tensorflow as tf  # noqa: E402

from suites.cases.case import Case  # noqa: E402
from suites.cases.strategy_plugins import plugin_for  # noqa: E402
from suites.cases.vocabulary import DeviceKind  # noqa: E402
#: Environment variables the launcher sets to split the cores between rank processes.
THREAD_VARIABLES = ("PARBENCH_THREADS", "OMP_NUM_THREADS")


def threads_from_env() -> int | None:
    for name in THREAD_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def configure_runtime(case: Case) -> None:
    """Thread pools, logical CPU devices and GPU memory growth for `case`, before TF initialises.

    A process whose TF is already initialised (an in-process run after other TF cases) keeps its
    thread pools; it can still run the case if it already has enough logical devices.
    """
    threads = threads_from_env()
    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # already initialised: the pools TF started with stay
    if case.device is DeviceKind.GPU:
        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:
                pass  # already initialised
    if case.device is DeviceKind.CPU and plugin_for(case).replicas_in_process and case.n_devices > 1:
        _split_cpu(case.n_devices)


def _split_cpu(count: int) -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as error:  # TF already initialised in this process
        have = len(tf.config.list_logical_devices("CPU"))
        if have < count:
            raise RuntimeError(f"this case needs {count} logical CPU devices but TensorFlow is already "
                               f"initialised with {have}; run it in a fresh process "
                               f"(parbench launches it isolated)") from error


def replica_devices(case: Case) -> list[str]:
    """The devices of this process that hold a replica (a tower) of the case."""
    kind = "GPU" if case.device is DeviceKind.GPU else "CPU"
    count = case.n_devices if plugin_for(case).replicas_in_process else 1
    return [f"/{kind}:{index}" for index in range(count)]


def synchronize_devices(devices: tuple[str, ...] | list[str]) -> None:
    """Wait for the queued work of these (local) devices. `backend.synchronize` visits every
    logical device, which in a multi-worker cluster includes other workers' devices that an
    eager worker cannot reach."""
    for device in devices:
        with tf.device(device):
            tf.raw_ops.SyncDevice()


class Lockstep:
    """Keeps the processes of a case in step: a barrier, rank 0's value on all, and every
    process's value on all. This one is for a single process, which has no one to wait for."""

    def gather(self, value: float) -> tuple[float, ...]:
        return (value,)

    def agree(self, value: float) -> float:
        return self.gather(value)[0]

    def barrier(self) -> None:
        self.agree(0.0)


class WorkerLockstep(Lockstep):
    """The lockstep of a multi-worker case.

    Each call is one all-reduce (sum) of a float64 vector with a slot per global replica, in
    which every replica fills only its own slot: no worker leaves before every worker has arrived.
    """

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        replicas = strategy.num_replicas_in_sync
        #: Replicas are numbered worker by worker, each worker holding this many.
        self._per_worker = max(1, len(strategy.extended.worker_devices))

        def contribution(value: tf.Tensor) -> tf.Tensor:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.one_hot(replica, replicas, dtype=tf.float64) * value

        @tf.function
        def every_replica_value(value: tf.Tensor) -> tf.Tensor:
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(contribution, args=(value,)),
                                   axis=None)

        self._every_replica_value = every_replica_value

    def gather(self, value: float) -> tuple[float, ...]:
        """Every worker's `value`, in task order."""
        values = self._every_replica_value(tf.constant(value, tf.float64)).numpy()
        return tuple(float(v) for v in values[::self._per_worker])
