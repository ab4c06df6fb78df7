"""TensorFlow runtime set-up and `tf.distribute` strategies for a case.

`configure_runtime` must run before TensorFlow initialises its devices: logical CPU devices
(the emulation of several devices on one CPU), thread pools and GPU memory growth cannot be
changed afterwards. That is why multi-device TF cases launch in a fresh process
(`Launch.ISOLATED` / `Launch.RANKS`) and call it first thing in `setup()`.
"""
from __future__ import annotations

import glob
import os

from suites.frameworks.tf import backend  # noqa: F401  (sets TF's log level before TF loads)
import tensorflow as tf  # noqa: E402

from suites.run.availability import Unsupported  # noqa: E402
from suites.cases.case import Case  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Strategy  # noqa: E402

#: Strategies that put several devices in one process (logical CPUs when emulated).
IN_PROCESS_REPLICAS = frozenset({Strategy.TOWERS, Strategy.MIRRORED})
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
    if case.device is DeviceKind.CPU and case.strategy in IN_PROCESS_REPLICAS and case.n_devices > 1:
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
    count = case.n_devices if case.strategy in IN_PROCESS_REPLICAS else 1
    return [f"/{kind}:{index}" for index in range(count)]


def mirrored_cross_device_ops(case: Case, backend_name: str = "auto") -> tf.distribute.CrossDeviceOps:
    """How MirroredStrategy all-reduces: NCCL between GPUs; otherwise reduce on one device and
    broadcast (`NcclAllReduce` has no CPU kernel; `HierarchicalCopyAllReduce` assumes GPUs
    linked like a DGX-1)."""
    if backend_name == "nccl" or (backend_name == "auto" and case.device is DeviceKind.GPU):
        return tf.distribute.NcclAllReduce()
    if backend_name == "auto":
        return tf.distribute.ReductionToOneDevice()
    raise Unsupported(f"MirroredStrategy has no {backend_name!r} all-reduce")


def collective_implementation(case: Case, backend_name: str = "auto") -> tf.distribute.experimental.CommunicationImplementation:
    """MultiWorkerMirroredStrategy's collective: NCCL for GPUs, ring (gRPC) for CPUs, or as asked."""
    implementations = tf.distribute.experimental.CommunicationImplementation
    if backend_name == "auto":
        return implementations.NCCL if case.device is DeviceKind.GPU else implementations.RING
    if backend_name in ("nccl", "ring"):
        return implementations[backend_name.upper()]
    raise Unsupported(f"MultiWorkerMirroredStrategy has no {backend_name!r} collective")


def describe_all_reduce(case: Case, backend_name: str = "auto") -> str:
    """The all-reduce a mirrored or multiworker case uses, for check details and reports."""
    if case.strategy is Strategy.MIRRORED:
        return type(mirrored_cross_device_ops(case, backend_name)).__name__
    return f"CollectiveReduceV2 ({collective_implementation(case, backend_name).name.lower()})"


def make_strategy(case: Case, backend_name: str = "auto") -> tf.distribute.Strategy:
    """The `tf.distribute` strategy of a mirrored, multiworker or tpu case."""
    if case.strategy is Strategy.MIRRORED:
        return tf.distribute.MirroredStrategy(devices=replica_devices(case),
                                              cross_device_ops=mirrored_cross_device_ops(case, backend_name))
    if case.strategy is Strategy.MULTIWORKER:
        # Reads TF_CONFIG (built by tf_rules); blocks until every worker has joined the
        # cluster, so the launcher's deadline is the rendezvous timeout.
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=collective_implementation(case, backend_name))
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if case.strategy is Strategy.TPU:
        return _tpu_strategy()
    raise ValueError(f"strategy {case.strategy} is not a tf.distribute strategy")


def _tpu_address() -> str | None:
    """TPU_NAME if set; "local" on a TPU VM (TPU device files); None lets the resolver look
    (Colab's COLAB_TPU_ADDR, a Cloud TPU's metadata)."""
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "local"
    return None


def _tpu_strategy() -> tf.distribute.TPUStrategy:
    """Only reached when `suites.kept.devices` found a TPU runtime (tf_rules makes the case unavailable
    otherwise): connecting to an absent TPU blocks forever."""
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=_tpu_address())
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


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


def lockstep_for(case: Case, strategy: tf.distribute.Strategy) -> Lockstep:
    """Worker processes of a multiworker case meet; everything else runs in one process."""
    return WorkerLockstep(strategy) if case.strategy is Strategy.MULTIWORKER else Lockstep()
