"""TensorFlow runtime set-up for a case, and the lockstep of its processes.

`configure_runtime` must run before TensorFlow initialises its devices: logical CPU devices
(the emulation of several devices on one CPU), thread pools, the GPUs TF sees and GPU memory
growth cannot be changed afterwards. That is why multi-device TF cases launch in a fresh process
(`Launch.ISOLATED` / `Launch.RANKS`) and call it first thing in `setup()`; every TF runnable
calls it. The strategies themselves are plugins (`suites.strategies.tf`).

Which GPUs TF sees, fixed when it initialises:
- A case launched in a process of its own (every strategy but `single`) sees exactly its
  devices: a CPU or TPU case no GPU, so nothing of a "cpu" step lands on a GPU; a GPU case the
  first GPUs it uses (towers / mirrored: `n_devices`; a multi-worker rank: the one GPU its
  CUDA_VISIBLE_DEVICES names), so TF creates no context on the others.
- `single` runs in the calling process (the parbench process, asv, pytest-benchmark), where one
  TF runtime serves TF cases of every device kind one after another. There TF sees GPU 0, the
  one `single` uses, whichever case comes first: hiding the GPUs for a first CPU case would
  leave a later GPU case none. A CPU case there places every op of its timed step on /CPU:0
  explicitly (and its check reads back on the host), and with soft placement off (below) TF
  cannot move one to the GPU.

Soft device placement is off for every case but those of a strategy that needs it
(its rules' `soft_placement_reason`: `parameter_server`): an op that has no kernel on the device it was
placed on fails loudly instead of running, unrecorded, on another (the CPU, for a GPU or TPU
case). On a machine with only CPUs it changes nothing.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites import knobs  # noqa: E402
from suites.cases.vocabulary import DeviceKind  # noqa: E402
from suites.measure.launch import Launch  # noqa: E402

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
#: Set by the launcher to split the cores between rank processes.
THREADS_ENV = "PARBENCH_THREADS"


def threads_from_env() -> int | None:
    """The launcher's share of the cores: $PARBENCH_THREADS, else a positive $OMP_NUM_THREADS."""
    threads = knobs.read(THREADS_ENV)
    if threads:
        return threads
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def configure_runtime(job: "Job") -> None:
    """Thread pools, visible GPUs, logical CPU devices, GPU memory growth and strict placement
    for `case`, before TF initialises.

    A process whose TF is already initialised (an in-process run after other TF cases) keeps its
    thread pools and devices; it can still run the case if it already has enough of them.
    """
    threads = threads_from_env()
    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # already initialised: the pools TF started with stay
    shown = _show_gpus(job)
    if shown and job.device is DeviceKind.GPU and job.strategy.emulated(job):
        _split_gpu(shown[0], job.n_devices)  # logical GPUs have fixed memory limits: no growth
        shown = []
    for gpu in shown:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)  # as TF_FORCE_GPU_ALLOW_GROWTH
        except RuntimeError:
            pass  # already initialised
    if job.device is DeviceKind.CPU and job.strategy.rules.replicas_in_process and job.n_devices > 1:
        _split_cpu(job.n_devices)
    tf.config.set_soft_device_placement(job.strategy.rules.soft_placement_reason is not None)


def placement_detail(job: "Job") -> str:
    """How TF placed the case's ops, as its record says it: read back from TF after
    `configure_runtime`, so a record (a rehearsal's too: GPU cases on logical CPU devices)
    shows the placement that ran, and the devices the case's replicas or stages were pinned to."""
    devices = ", ".join(local_tpus(job) or replica_devices(job))
    if not tf.config.get_soft_device_placement():
        return f"strict: an op without a kernel on its device fails, never moves (devices {devices})"
    reason = job.strategy.rules.soft_placement_reason
    return f"soft: TF may move an op off its device (devices {devices}){f'; {reason}' if reason else ''}"


def visible_gpu_count(job: "Job") -> int:
    """How many GPUs (the first ones) TF may see in the process that runs `case` (module docstring)."""
    plugin = job.strategy
    if plugin.rules.launch is Launch.IN_PROCESS:
        return 1
    if job.device is not DeviceKind.GPU:
        return 0
    return job.n_devices if plugin.rules.replicas_in_process else 1


def _show_gpus(job: "Job") -> list[tf.config.PhysicalDevice]:
    """Make TF see only the case's GPUs (`visible_gpu_count`); returns those it sees."""
    shown = tf.config.list_physical_devices("GPU")[:visible_gpu_count(job)]
    try:
        tf.config.set_visible_devices(shown, "GPU")
    except RuntimeError as error:  # TF already initialised in this process, with other GPUs
        visible = tf.config.get_visible_devices("GPU")
        needed = visible_gpu_count(job) if job.device is DeviceKind.GPU else 0
        if len(visible) < needed:
            raise RuntimeError(f"this case needs {needed} GPUs but TensorFlow is already initialised "
                               f"with {len(visible)}; run it in a fresh process "
                               f"(parbench launches it isolated)") from error
        return visible
    return shown


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


#: Of a GPU split into logical GPUs, the share of its memory they get between them (TF and CUDA
#: keep the rest); where its memory is unknown, each gets `FALLBACK_LOGICAL_GPU_MB`.
LOGICAL_GPUS_MEMORY_SHARE = 0.85
FALLBACK_LOGICAL_GPU_MB = 2048


def logical_gpu_memory_mb(count: int, total_mb: float | None) -> int:
    """The memory limit of each of `count` logical GPUs split from one of `total_mb` MiB."""
    if not total_mb:
        return FALLBACK_LOGICAL_GPU_MB
    return int(total_mb * LOGICAL_GPUS_MEMORY_SHARE / count)


def physical_gpu_ordinal(gpu: tf.config.PhysicalDevice) -> int:
    """The CUDA ordinal of one of TF's physical GPUs ("/physical_device:GPU:2" is 2): TF numbers
    its physical GPUs as CUDA does in this process (CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
    applied)."""
    return int(gpu.name.rsplit(":", 1)[1])


def gpu_memory_mb(gpu: tf.config.PhysicalDevice) -> float | None:
    """The memory in MiB of the GPU TF will split, `gpu`, from the CUDA driver (by its ordinal in
    this process), or None. Not the first row of nvidia-smi: nvidia-smi lists every GPU of the
    machine by PCI bus, whatever CUDA_VISIBLE_DEVICES leaves this process, so its GPU 0 may be
    another, larger one (issue 32, N19)."""
    from suites.hardware.devices import cuda_total_memory_bytes

    total = cuda_total_memory_bytes(physical_gpu_ordinal(gpu))
    return None if total is None else total / 2**20


def _split_gpu(gpu: tf.config.PhysicalDevice, count: int) -> None:
    """One GPU as `count` logical GPUs (/GPU:0 ... /GPU:count-1), each with an equal share of its
    memory (`gpu_memory_mb`): the case's replicas or stages then run on CUDA as on `count` GPUs,
    emulated."""
    limit = logical_gpu_memory_mb(count, gpu_memory_mb(gpu))
    try:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)] * count)
    except RuntimeError as error:  # TF already initialised in this process
        have = len(tf.config.list_logical_devices("GPU"))
        if have < count:
            raise RuntimeError(f"this case needs {count} logical GPUs but TensorFlow is already "
                               f"initialised with {have}; run it in a fresh process "
                               f"(parbench launches it isolated)") from error


def replica_devices(job: "Job") -> list[str]:
    """The devices of this process that hold a replica (a tower) of the case."""
    kind = "GPU" if job.device is DeviceKind.GPU else "CPU"
    count = job.n_devices if job.strategy.rules.replicas_in_process else 1
    return [f"/{kind}:{index}" for index in range(count)]


def local_gpus(job: "Job") -> list[str]:
    """The case's replica devices that are GPUs of this process: none in a process that sees no
    GPU (a parameter-server cluster's chief and parameter servers, whose CUDA_VISIBLE_DEVICES is
    empty: only the workers hold GPUs)."""
    if job.device is not DeviceKind.GPU or not tf.config.get_visible_devices("GPU"):
        return []
    return replica_devices(job)


def local_tpus(job: "Job") -> list[str]:
    """The TPU cores a TPU case's replicas run on ('/TPU:0', ...): TPUStrategy replicates over
    every core the TPU shows TF, `n_devices` of them (`suites.strategies.tf.tpu`); none for a
    case on another device."""
    return [f"/TPU:{index}" for index in range(job.n_devices)] if job.device is DeviceKind.TPU else []


def this_task_index() -> int:
    """This worker's index in TF_CONFIG (0 without one)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    return int(config.get("task", {}).get("index", 0))


def gpu_ordinals(job: "Job") -> tuple[int, ...]:
    """The ordinals of the GPUs this process's replicas run on (its energy is read over them):
    a multi-worker rank sees only its own GPU, as GPU 0; logical GPUs are all GPU 0."""
    if not local_gpus(job):
        return ()  # no GPU in this process (a parameter-server chief): none of its own to read
    if job.strategy.emulated(job):
        return (0,)  # logical GPUs split from GPU 0
    return tuple(range(len(replica_devices(job))))


def host_cpu(strategy: tf.distribute.Strategy | None) -> str:
    """This process's host CPU, named so that it matches one device. In a multi-worker cluster
    "/CPU:0" matches every worker's CPU: a function placed there fails under strict placement
    (and soft placement would pick worker 0's, over the network)."""
    if strategy is None:
        return "/CPU:0"
    worker = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0])
    return worker.replace(device_type="CPU", device_index=0).to_string()


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

    def machines(self) -> list[dict[str, Any]] | None:
        """Every process's provenance, in rank order; one process: None (the record's own)."""
        return None
