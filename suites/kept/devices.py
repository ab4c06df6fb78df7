"""Device discovery: what each framework can run on here, and why a missing kind is missing.

Frameworks are imported only when asked about, and a framework that is not installed is a
reason, not an error. The TPU probe never connects anywhere unless a TPU runtime is visibly
present (connecting TF to an absent TPU address blocks forever), and even then it runs in a
subprocess with a timeout.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import platform
import sys
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from suites.cases.vocabulary import DeviceKind, Framework

FRAMEWORK_PACKAGE = "suites.frameworks"


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


class FrameworkDescriptor(ABC):
    """What parbench needs to know about a framework outside its implementations: its import
    name, the distributions whose versions provenance records, its devices, its threads.

    Each framework subpackage (`suites.frameworks.<framework>`) defines one as `DESCRIPTOR`;
    importing it imports no framework. Code outside the subpackage asks the descriptor
    rather than branching on the framework's name.
    """

    framework: ClassVar[Framework]
    #: The module a user installs and parbench imports ("torch", "tensorflow").
    import_name: ClassVar[str]
    #: Distributions whose installed versions every record stores.
    distributions: ClassVar[tuple[str, ...]]

    def installed(self) -> bool:
        return importlib.util.find_spec(self.import_name) is not None

    def not_installed_reason(self) -> str:
        return f"{self.import_name} is not installed"

    def loaded(self) -> Any | None:
        """The framework's module if this process has imported it, else None (not imported
        for the asking)."""
        return sys.modules.get(self.import_name)

    @abstractmethod
    def cpu_threads(self) -> int:
        """Intra-op threads the framework will use on the CPU (imports it)."""

    @abstractmethod
    def threads_in_use(self, module: Any) -> int:
        """Intra-op threads of the loaded framework `module`."""

    def use_one_thread(self, module: Any) -> None:
        """Switch the loaded framework `module` to single-threaded kernels, where it can be
        switched after loading (otherwise the environment set before loading decides)."""

    @abstractmethod
    def gpus(self) -> DeviceInfo:
        """What the framework sees of GPUs, or why it sees none."""

    @abstractmethod
    def tpus(self) -> DeviceInfo:
        """What the framework sees of TPUs, or why it sees none. Must never hang."""


@lru_cache(maxsize=None)
def descriptor(framework: Framework) -> FrameworkDescriptor:
    """The `DESCRIPTOR` of `suites.frameworks.<framework>`."""
    return importlib.import_module(f"{FRAMEWORK_PACKAGE}.{framework}").DESCRIPTOR


def framework_installed(framework: Framework) -> bool:
    return descriptor(framework).installed()


def not_installed_reason(framework: Framework) -> str:
    return descriptor(framework).not_installed_reason()


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


def cpu_info(framework: Framework) -> DeviceInfo:
    flags = _cpu_flags()
    return DeviceInfo(framework, DeviceKind.CPU, 1, (cpu_model(),), details={
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


def tpu_runtime_evidence() -> str | None:
    """What suggests a TPU is reachable, or None. Cheap: looks, never connects."""
    if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"):
        return "TPU_NAME/COLAB_TPU_ADDR is set"
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "a TPU device file (/dev/accel*, /dev/vfio) exists"
    return None


@lru_cache(maxsize=None)
def discover(framework: Framework, kind: DeviceKind) -> DeviceInfo:
    """What `framework` sees of device `kind` (cached per process)."""
    described = descriptor(framework)
    if not described.installed():
        return DeviceInfo(framework, kind, 0, reason=described.not_installed_reason())
    if kind is DeviceKind.CPU:
        info = cpu_info(framework)
        return DeviceInfo(framework, kind, info.count, info.names,
                          details={**info.details, "threads": described.cpu_threads()})
    if kind is DeviceKind.GPU:
        return described.gpus()
    return described.tpus()


def discover_all() -> list[DeviceInfo]:
    return [discover(framework, kind) for framework in Framework for kind in DeviceKind]
