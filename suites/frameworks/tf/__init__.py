"""TensorFlow in parbench: the descriptor here; the runnables, models and trainers beside it.

Importing this package does not import TensorFlow; the descriptor's methods do, when asked.
The TPU probe never connects anywhere unless a TPU runtime is visibly present (connecting TF
to an absent TPU address blocks forever), and even then it runs in a subprocess with a timeout.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from suites.cases.vocabulary import DeviceKind, Framework
from suites.kept.devices import (DeviceInfo, FrameworkDescriptor, cuda_visible_devices_reason,
                                 tpu_runtime_evidence)
from suites.frameworks.tf.environment import TPU_PROCESS

TPU_PROBE_TIMEOUT_S = 20.0

_TPU_PROBE = """
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
print(len(tf.config.list_logical_devices("TPU")))
"""


def _tensorflow() -> Any:
    from suites.frameworks.tf import backend  # noqa: F401  (quiet TF logging before import)
    import tensorflow as tf

    return tf


class TfDescriptor(FrameworkDescriptor):
    framework = Framework.TF
    import_name = "tensorflow"
    distributions = ("tensorflow", "tensorflow-cpu", "keras")

    def cpu_threads(self) -> int:
        """TF's 0 means 'all usable cores'."""
        return self.threads_in_use(_tensorflow()) or len(os.sched_getaffinity(0))

    def threads_in_use(self, module: Any) -> int:
        """As TF reports it: 0 means its default, all usable cores."""
        return module.config.threading.get_intra_op_parallelism_threads()

    def gpus(self) -> DeviceInfo:
        hidden = cuda_visible_devices_reason()
        tf = _tensorflow()
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            if hidden:
                reason = hidden
            elif not tf.test.is_built_with_cuda():
                reason = f"this TensorFlow build has no CUDA support (tensorflow {tf.__version__}, e.g. tensorflow-cpu)"
            else:
                reason = "TensorFlow sees no GPU (no NVIDIA GPU, driver or matching CUDA libraries)"
            return DeviceInfo(self.framework, DeviceKind.GPU, 0, reason=reason)
        build = tf.sysconfig.get_build_info()
        described = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
        names = tuple(d.get("device_name", gpu.name) for d, gpu in zip(described, gpus))
        # (major, minor) as "8.0", the way the torch descriptor reports it
        capability = [".".join(map(str, d["compute_capability"])) if d.get("compute_capability") else None
                      for d in described]
        return DeviceInfo(self.framework, DeviceKind.GPU, len(gpus), names, details={
            "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
            "compute_capability": capability})

    def tpus(self) -> DeviceInfo:
        evidence = tpu_runtime_evidence()
        if evidence is None:
            return DeviceInfo(self.framework, DeviceKind.TPU, 0,
                              reason="no TPU runtime: no TPU_NAME or COLAB_TPU_ADDR, no /dev/accel* device")
        try:
            probe = subprocess.run([sys.executable, "-c", _TPU_PROBE], capture_output=True, text=True,
                                   timeout=TPU_PROBE_TIMEOUT_S, env={**os.environ, **TPU_PROCESS})
        except subprocess.TimeoutExpired:
            return DeviceInfo(self.framework, DeviceKind.TPU, 0, reason=(
                f"{evidence}, but connecting to the TPU did not finish in {TPU_PROBE_TIMEOUT_S:.0f} s"))
        if probe.returncode != 0 or not probe.stdout.strip().isdigit():
            tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            return DeviceInfo(self.framework, DeviceKind.TPU, 0,
                              reason=f"{evidence}, but the TPU did not initialise: {tail}")
        count = int(probe.stdout.strip())
        return DeviceInfo(self.framework, DeviceKind.TPU, count, tuple(f"TPU:{i}" for i in range(count)))


DESCRIPTOR = TfDescriptor()
