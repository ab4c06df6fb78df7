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
from suites.hardware.devices import (NO_ACCELERATOR_TYPE, NO_TPU_RUNTIME, DeviceInfo, FrameworkDescriptor,
                                     cuda_l2_cache_bytes, cuda_visible_devices_reason, register_descriptor,
                                     tpu_accelerator, tpu_device_files, tpu_runtime_evidence)
from suites.frameworks.tf.environment import tpu_process_env

#: The probe imports TensorFlow, loads libtpu, connects and initialises the TPU system: on a
#: TPU VM that takes from ~20 s to over a minute (v4 and v5p initialise slowest). The limit
#: only bounds a probe that hangs (a TPU_NAME that points nowhere).
TPU_PROBE_TIMEOUT_S = 180.0


def tpu_address() -> str | None:
    """The `tpu` argument of TPUClusterResolver, shared by the TPU probe and the `tpu`
    strategy so both connect to the same TPU the same way: TPU_NAME if set (a Cloud TPU
    node's name or a grpc:// address); "local" on a TPU VM (its device files exist), which
    makes the resolver use the TPU attached to this host (with no argument it would ask the
    Cloud TPU API, and raise without TPU_NAME); else None, the resolver's own lookup."""
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if tpu_device_files():
        return "local"
    return None


#: Run as `python -c _TPU_PROBE ADDRESS` (ADDRESS empty for None). It imports only TensorFlow,
#: so the probe process loads libtpu on its own terms, and prints the TPU cores it sees.
_TPU_PROBE = """
import sys
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=sys.argv[1] or None)
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
        device_details = [tf.config.experimental.get_device_details(g) for g in gpus]
        names = tuple(details.get("device_name", g.name) for details, g in zip(device_details, gpus))
        capability = [".".join(map(str, details["compute_capability"])) for details in device_details
                      if details.get("compute_capability")]
        # TF does not report L2 sizes; the driver does (they size the kernels' input rotation).
        return DeviceInfo(self.framework, DeviceKind.GPU, len(gpus), names, details={
            "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
            "compute_capability": capability if len(capability) == len(gpus) else [],
            "l2_cache_bytes": cuda_l2_cache_bytes()})

    def tpus(self) -> DeviceInfo:
        evidence = tpu_runtime_evidence()
        if evidence is None:
            return DeviceInfo(self.framework, DeviceKind.TPU, 0, reason=NO_TPU_RUNTIME)
        try:
            probe = subprocess.run([sys.executable, "-c", _TPU_PROBE, tpu_address() or ""],
                                   capture_output=True, text=True, timeout=TPU_PROBE_TIMEOUT_S,
                                   env={**os.environ, **tpu_process_env()})
        except subprocess.TimeoutExpired:
            return DeviceInfo(self.framework, DeviceKind.TPU, 0, reason=(
                f"{evidence}, but connecting to the TPU did not finish in {TPU_PROBE_TIMEOUT_S:.0f} s"))
        printed = (probe.stdout.strip().splitlines() or [""])[-1].strip()  # the count is the last line
        if probe.returncode != 0 or not printed.isdigit():
            tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            return DeviceInfo(self.framework, DeviceKind.TPU, 0,
                              reason=f"{evidence}, but the TPU did not initialise: {tail}")
        count = int(printed)
        accelerator, source = tpu_accelerator()
        names = tuple(f"TPU {accelerator}" if accelerator else f"TPU:{i}" for i in range(count))
        return DeviceInfo(self.framework, DeviceKind.TPU, count, names, details=(
            {"accelerator_type": accelerator, "accelerator_type_source": source} if accelerator
            else {"accelerator_type_reason": NO_ACCELERATOR_TYPE}))


DESCRIPTOR = register_descriptor(TfDescriptor())
