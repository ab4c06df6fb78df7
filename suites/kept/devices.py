"""Device discovery: what each framework can run on here, and why a missing kind is missing.

Frameworks are imported only when asked about, and a framework that is not installed is a
reason, not an error. The TPU probe never connects anywhere unless a TPU runtime is visibly
present (connecting TF to an absent TPU address blocks forever), and even then it runs in a
subprocess with a timeout.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from suites.cases.vocabulary import DeviceKind, Framework

TPU_PROBE_TIMEOUT_S = 20.0
FRAMEWORK_MODULES = {Framework.TORCH: "torch", Framework.TF: "tensorflow"}


@dataclass(frozen=True)
class DeviceInfo:
    """What one framework sees of one device kind. `count == 0` comes with a `reason`."""

    framework: Framework
    kind: DeviceKind
    count: int
    names: tuple[str, ...] = ()
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.count > 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["framework"], data["kind"] = str(self.framework), str(self.kind)
        data["names"] = list(self.names)
        return data


def framework_installed(framework: Framework) -> bool:
    return importlib.util.find_spec(FRAMEWORK_MODULES[framework]) is not None


def not_installed_reason(framework: Framework) -> str:
    return f"{FRAMEWORK_MODULES[framework]} is not installed"


def cuda_visible_devices_reason() -> str | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and value.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES is set to {value!r}, which hides every GPU"
    return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_info() -> DeviceInfo:
    flags = _cpu_flags()
    return DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, (cpu_model(),), details={
        "logical_cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "isa": [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]})


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _threads(framework: Framework) -> int:
    """Intra-op threads the framework will use on the CPU (TF's 0 means 'all cores')."""
    if framework is Framework.TORCH:
        import torch

        return torch.get_num_threads()
    from suites.frameworks.tf import backend  # noqa: F401  (quiet TF logging before import)
    import tensorflow as tf

    return tf.config.threading.get_intra_op_parallelism_threads() or len(os.sched_getaffinity(0))


def _torch_gpus() -> DeviceInfo:
    hidden = cuda_visible_devices_reason()
    import torch

    if not torch.cuda.is_available():
        if hidden:
            reason = hidden
        elif torch.version.cuda is None:
            reason = f"this torch build has no CUDA support (torch {torch.__version__})"
        else:
            reason = "torch sees no CUDA device (no NVIDIA GPU or driver visible)"
        return DeviceInfo(Framework.TORCH, DeviceKind.GPU, 0, reason=reason)
    count = torch.cuda.device_count()
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    capability = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(count)]
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, count, names, details={
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "compute_capability": capability, "nccl": _nccl_version(torch)})


def _nccl_version(torch_module: Any) -> str | None:
    try:
        return ".".join(map(str, torch_module.cuda.nccl.version()))
    except Exception:  # NCCL absent from this build
        return None


def _tf_gpus() -> DeviceInfo:
    hidden = cuda_visible_devices_reason()
    from suites.frameworks.tf import backend  # noqa: F401  (quiet TF logging before import)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        if hidden:
            reason = hidden
        elif not tf.test.is_built_with_cuda():
            reason = f"this TensorFlow build has no CUDA support (tensorflow {tf.__version__}, e.g. tensorflow-cpu)"
        else:
            reason = "TensorFlow sees no GPU (no NVIDIA GPU, driver or matching CUDA libraries)"
        return DeviceInfo(Framework.TF, DeviceKind.GPU, 0, reason=reason)
    build = tf.sysconfig.get_build_info()
    names = tuple(tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus)
    return DeviceInfo(Framework.TF, DeviceKind.GPU, len(gpus), names, details={
        "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")})


def tpu_runtime_evidence() -> str | None:
    """What suggests a TPU is reachable, or None. Cheap: looks, never connects."""
    if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"):
        return "TPU_NAME/COLAB_TPU_ADDR is set"
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "a TPU device file (/dev/accel*, /dev/vfio) exists"
    return None


_TPU_PROBE = """
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
print(len(tf.config.list_logical_devices("TPU")))
"""


def _tf_tpus() -> DeviceInfo:
    evidence = tpu_runtime_evidence()
    if evidence is None:
        return DeviceInfo(Framework.TF, DeviceKind.TPU, 0,
                          reason="no TPU runtime: no TPU_NAME or COLAB_TPU_ADDR, no /dev/accel* device")
    try:
        probe = subprocess.run([sys.executable, "-c", _TPU_PROBE], capture_output=True, text=True,
                               timeout=TPU_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return DeviceInfo(Framework.TF, DeviceKind.TPU, 0,
                          reason=f"{evidence}, but connecting to the TPU did not finish in {TPU_PROBE_TIMEOUT_S:.0f} s")
    if probe.returncode != 0 or not probe.stdout.strip().isdigit():
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return DeviceInfo(Framework.TF, DeviceKind.TPU, 0, reason=f"{evidence}, but the TPU did not initialise: {tail}")
    count = int(probe.stdout.strip())
    return DeviceInfo(Framework.TF, DeviceKind.TPU, count, tuple(f"TPU:{i}" for i in range(count)))


@lru_cache(maxsize=None)
def discover(framework: Framework, kind: DeviceKind) -> DeviceInfo:
    """What `framework` sees of device `kind` (cached per process)."""
    if not framework_installed(framework):
        return DeviceInfo(framework, kind, 0, reason=not_installed_reason(framework))
    if kind is DeviceKind.CPU:
        info = cpu_info()
        return DeviceInfo(framework, kind, info.count, info.names,
                          details={**info.details, "threads": _threads(framework)})
    if kind is DeviceKind.GPU:
        return _torch_gpus() if framework is Framework.TORCH else _tf_gpus()
    if framework is Framework.TORCH:
        return DeviceInfo(framework, kind, 0, reason="parbench runs torch on TPU only through TF's TPUStrategy (torch_xla is not supported)")
    return _tf_tpus()


def discover_all() -> list[DeviceInfo]:
    return [discover(framework, kind) for framework in Framework for kind in DeviceKind]
