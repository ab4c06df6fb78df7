"""Device discovery: what each framework can run on here, and why a missing kind is missing.

Frameworks are imported only when asked about, and a framework that is not installed is a
reason, not an error. The TPU probe never connects anywhere unless a TPU runtime is visibly
present (connecting TF to an absent TPU address blocks forever), and even then it runs in a
subprocess with a timeout. The one network read here, the metadata server's accelerator type,
is made only on a TPU VM (its TPU device files exist), once, with a 1 s timeout.
"""
from __future__ import annotations

import ctypes
import glob
import http.client
import importlib.util
import os
import platform
import re
import sys
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from suites.cases.vocabulary import DeviceKind, Framework, Precision



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

    Each framework subpackage (`suites.frameworks.<framework>`) defines one as `DESCRIPTOR` and
    registers it here (`register_descriptor`); importing it imports no framework. Code outside
    the subpackage asks the descriptor rather than branching on the framework's name.
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

    def precision_reason(self, precision: Precision, device: DeviceInfo) -> str | None:
        """Why this framework cannot run `precision` as its name means on `device` (what its
        discovery found), or None. The rules common to every framework (tf32 off a GPU, below
        compute capability 8.0) are `suites.runner.availability.precision_reason`'s; this is for
        what only the framework knows (torch's tf32 switches on ROCm)."""
        return None

    @abstractmethod
    def tpus(self) -> DeviceInfo:
        """What the framework sees of TPUs, or why it sees none. Must never hang."""


#: Framework -> its descriptor. The frameworks register theirs (this layer sits below them and
#: names none); the package `suites` imports `suites.frameworks` first thing, so every process
#: that imports any `suites` module has them all.
_DESCRIPTORS: dict[Framework, FrameworkDescriptor] = {}


def register_descriptor(described: FrameworkDescriptor) -> FrameworkDescriptor:
    """Make `described` the descriptor of its framework; returns it."""
    _DESCRIPTORS[described.framework] = described
    return described


def descriptor(framework: Framework) -> FrameworkDescriptor:
    """The registered `DESCRIPTOR` of `framework` (`suites.frameworks.<framework>`)."""
    try:
        return _DESCRIPTORS[Framework(framework)]
    except KeyError:
        raise LookupError(f"no descriptor registered for the framework {framework}") from None


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
    uarch, why = cpu_microarchitecture()
    return DeviceInfo(framework, DeviceKind.CPU, 1, (cpu_model(),), details={
        "logical_cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "isa": [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags],
        "uarch": uarch, **({} if uarch else {"uarch_reason": why}),
        "llc_bytes": cpu_last_level_cache_bytes()})


def _first_processor(text: str) -> dict[str, str]:
    """/proc/cpuinfo's first processor block as {field: value}."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


#: Intel family-6 models with AVX-512 whose cores all have two 512-bit FMA units (server parts):
#: Ice Lake-SP/D, Sapphire and Emerald Rapids (AMX), Granite Rapids (AMX with fp16).
INTEL_TWO_FMA_MODELS = {0x6A: "icelake_server", 0x6C: "icelake_server", 0x8F: "sapphirerapids",
                        0xCF: "sapphirerapids", 0xAD: "graniterapids", 0xAE: "graniterapids"}
#: Intel family-6 client models with AVX-512 on one 512-bit FMA unit (ports 0 and 1 fused):
#: Cannon Lake, Ice Lake client, Tiger Lake, Rocket Lake.
INTEL_ONE_FMA_MODELS = {0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7}
#: Model 0x55 (Skylake-SP, Cascade Lake, Cooper Lake): the SKU decides, and its name says it.
#: Platinum, Gold 6xxx, Gold 5122 and Xeon W have two 512-bit FMA units per core; other Gold
#: 5xxx, Silver and Bronze one (Intel's product specifications, "# of AVX-512 FMA Units").
SKYLAKE_SP_TWO_FMA = re.compile(r"Platinum|Gold 6\d{3}|Gold 5122|Xeon\(R\) W-|Xeon W-")
SKYLAKE_SP_ONE_FMA = re.compile(r"Gold 5\d{3}|Silver|Bronze")


#: archspec's microarchitecture names (`archspec.cpu.host().name`, Spack's detection) that decide
#: a peaks-table `[[cpu]]` row on their own. archspec's Skylake covers the client cores to Comet
#: Lake, its Alder Lake and Arrow Lake the hybrid ones (P-cores: two 256-bit FMA units).
ARCHSPEC_ROWS = {
    "zen": "zen", "zen2": "zen2", "zen3": "zen3", "zen4": "zen4", "zen5": "zen5",
    "haswell": "intel_avx2", "broadwell": "intel_avx2", "skylake": "intel_avx2",
    "alderlake": "intel_avx2", "arrowlake": "intel_avx2", "arrowlake_s": "intel_avx2",
    "cannonlake": "intel_avx512_one_fma",
}
#: archspec names whose parts differ in FMA units or row, so the CPU's model (and Skylake-SP's
#: SKU) decides, by the /proc/cpuinfo rules: skylake_avx512 and cascadelake (one or two 512-bit
#: units by SKU; Cooper Lake is detected as cascadelake), icelake (the client parts, Tiger and
#: Rocket Lake among them, have one fused unit, Ice Lake-SP two), sapphirerapids (also Emerald
#: and Granite Rapids).
ARCHSPEC_BY_MODEL = frozenset({"skylake_avx512", "cascadelake", "icelake", "sapphirerapids"})
#: Each row's place in archspec's tree of targets: where the /proc/cpuinfo rules name a row whose
#: target descends from archspec's answer, archspec saw fewer features than the CPU has.
ROW_ARCHSPEC_TARGETS = {
    "zen": "zen", "zen2": "zen2", "zen3": "zen3", "zen4": "zen4", "zen5": "zen5",
    "intel_avx2": "haswell", "intel_avx512_one_fma": "cannonlake",
    "skylake_avx512_one_fma": "skylake_avx512", "skylake_avx512_two_fma": "skylake_avx512",
    "cooperlake": "cascadelake", "icelake_server": "icelake",
    "sapphirerapids": "sapphirerapids", "graniterapids": "sapphirerapids",
}


def archspec_host() -> tuple[str | None, str]:
    """archspec's name for this host's microarchitecture (zen4, sapphirerapids, ... or a generic
    level such as x86_64_v4), or (None, why)."""
    try:
        import archspec.cpu
    except ImportError:
        return None, "archspec is not installed"
    try:
        return archspec.cpu.host().name, ""
    except Exception as error:  # noqa: BLE001  (archspec reads the OS's own CPU reports)
        return None, f"archspec could not tell ({type(error).__name__}: {error})"


def _descends_from(row: str, archspec_name: str) -> bool:
    """Whether the row's archspec target is a strict descendant of `archspec_name`'s."""
    try:
        from archspec.cpu import TARGETS
    except ImportError:
        return False
    target, other = TARGETS.get(ROW_ARCHSPEC_TARGETS.get(row, "")), TARGETS.get(archspec_name)
    return target is not None and other is not None and other < target


def cpu_microarchitecture(cpuinfo: str | None = None, archspec_name: str | None = None) -> tuple[str | None, str]:
    """The CPU's microarchitecture, as far as it decides FLOP per cycle (the name of a peaks-table
    `[[cpu]]` entry); or (None, why) where it cannot be told: then no table peak is claimed, and
    `% of peak` uses the peak `parbench calibrate` measured.

    What decides it is how many FMA units of what width a core has: AVX-512 on two full-width
    units (Intel server cores, AMD Zen 5) doubles AVX-512 on 256-bit units (Zen 4, double-pumped)
    or on one fused unit (Intel client cores), and Skylake-SP/Cascade Lake parts have one or
    two by SKU.

    archspec (`archspec.cpu.host()`) names it first (`ARCHSPEC_ROWS`). /proc/cpuinfo's vendor,
    family, model and model name decide where archspec does not: it gives only a generic level
    (x86_64_v4: a hypervisor hid a feature its targets require, as on this project's Zen 5 VM), a
    name that spans parts with different FMA units (`ARCHSPEC_BY_MODEL`) or one with no row; and
    where they name a later microarchitecture than archspec's (it detects by features, which a
    hypervisor can hide; family and model name the silicon, and a peak must be an upper bound).

    With no argument it describes this host. Given either argument it describes another CPU
    (tests): `cpuinfo` the text of a /proc/cpuinfo, `archspec_name` archspec's answer; the one
    not given is unknown.
    """
    archspec_why = ""
    if cpuinfo is None and archspec_name is None:
        archspec_name, archspec_why = archspec_host()
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = None
    by_cpuinfo, why = (_microarchitecture_from_cpuinfo(cpuinfo) if cpuinfo is not None
                       else (None, "/proc/cpuinfo is unreadable"))
    if archspec_name and _is_specific(archspec_name):
        if by_cpuinfo and _descends_from(by_cpuinfo, archspec_name):
            return by_cpuinfo, ""  # archspec saw fewer features than the silicon has
        if archspec_name in ARCHSPEC_ROWS:
            return ARCHSPEC_ROWS[archspec_name], ""
        if archspec_name in ARCHSPEC_BY_MODEL:
            return (by_cpuinfo, "") if by_cpuinfo else (
                None, f"archspec names it {archspec_name}, whose parts differ in FMA units, and {why}")
        return None, (f"archspec names it {archspec_name}, a microarchitecture parbench does not know the FMA "
                      "units of")
    if by_cpuinfo:
        return by_cpuinfo, ""
    if archspec_name:
        return None, f"{why} (archspec names only the generic level {archspec_name})"
    return None, f"{why} ({archspec_why})" if archspec_why else why


def _is_specific(archspec_name: str) -> bool:
    """Whether archspec knows the name as a vendor's microarchitecture, not a generic level."""
    try:
        from archspec.cpu import TARGETS
    except ImportError:
        return archspec_name in ARCHSPEC_ROWS or archspec_name in ARCHSPEC_BY_MODEL
    target = TARGETS.get(archspec_name)
    return target is not None and target.vendor != "generic"


def _microarchitecture_from_cpuinfo(cpuinfo: str) -> tuple[str | None, str]:
    """The rules from /proc/cpuinfo's vendor, family, model, model name and flags. AMD: family
    0x17 Zen/Zen 2, 0x19 Zen 3 (no AVX-512) or Zen 4, 0x1a Zen 5."""
    info = _first_processor(cpuinfo)
    vendor, name, flags = info.get("vendor_id", ""), info.get("model name", ""), set(info.get("flags", "").split())
    try:
        family, model = int(info.get("cpu family", "")), int(info.get("model", ""))
    except ValueError:
        return None, f"/proc/cpuinfo gives no CPU family and model (vendor {vendor or 'unknown'})"
    where = f"{vendor} family {family:#x} model {model:#x} ({name or 'no model name'})"
    if vendor in ("AuthenticAMD", "HygonGenuine"):
        if family == 0x17 or (vendor == "HygonGenuine" and family == 0x18):
            return ("zen2" if family == 0x17 and model >= 0x30 else "zen"), ""
        if family == 0x19:
            return ("zen4" if "avx512f" in flags else "zen3"), ""
        if family == 0x1A:
            return "zen5", ""
        return None, f"{where}: not a microarchitecture parbench knows the FMA units of"
    if vendor == "GenuineIntel" and family == 6:
        if "avx512f" in flags:
            # The instruction sets the kernels use decide before the model number: a VM may report
            # a model its silicon is not (the development VMs' AMX Xeon reports 0xA7, Rocket Lake).
            # AMX tiles exist only on server cores with two 512-bit FMA units.
            if "amx_fp16" in flags:
                return "graniterapids", ""
            if "amx_bf16" in flags:
                return "sapphirerapids", ""
            if model in INTEL_TWO_FMA_MODELS:
                return INTEL_TWO_FMA_MODELS[model], ""
            if model in INTEL_ONE_FMA_MODELS:
                return "intel_avx512_one_fma", ""
            if model == 0x55:
                if "avx512_bf16" in flags:
                    return "cooperlake", ""
                if SKYLAKE_SP_TWO_FMA.search(name):
                    return "skylake_avx512_two_fma", ""
                if SKYLAKE_SP_ONE_FMA.search(name):
                    return "skylake_avx512_one_fma", ""
                return None, (f"{where}: Skylake-SP/Cascade Lake parts have one or two AVX-512 FMA units "
                              "per core by SKU, and the model name does not say which")
            return None, f"{where}: an AVX-512 part parbench does not know the FMA units of"
        if {"avx2", "fma"} <= flags:
            return "intel_avx2", ""
    return None, f"{where}: not a microarchitecture parbench knows the FMA units of"


CPU_CACHE_SYSFS = "/sys/devices/system/cpu/cpu0/cache"


def _cache_size_bytes(text: str) -> int | None:
    """sysfs writes cache sizes as "32768K" (sometimes "32M" or plain bytes)."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text.rstrip("KMGB")
    return int(digits) * scale if digits.isdigit() else None


@lru_cache(maxsize=None)
def cpu_last_level_cache_bytes(sysfs: str = CPU_CACHE_SYSFS) -> int | None:
    """Size of the highest-level data or unified cache that CPU 0 sees (the L3 of its
    socket or core complex on most servers), from sysfs; None where sysfs does not say."""
    caches = []  # (level, bytes) of each data or unified cache
    for index in glob.glob(os.path.join(sysfs, "index[0-9]*")):
        try:
            kind, level, size = (Path(index, name).read_text().strip() for name in ("type", "level", "size"))
        except OSError:
            continue
        size_bytes = _cache_size_bytes(size)
        if kind != "Instruction" and level.isdigit() and size_bytes:
            caches.append((int(level), size_bytes))
    return max(caches)[1] if caches else None


#: cuDeviceGetAttribute's CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (cuda.h): L2 size in bytes.
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
CUDA_DRIVER = "libcuda.so.1"


def _cuda_devices(library: str) -> tuple[Any, list[ctypes.c_int]] | None:
    """The CUDA driver API, initialised, and its handle of each GPU this process sees, in CUDA's
    order (the ordinals of every framework: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER applied);
    None where the driver is missing or a call fails. cuInit creates no context and allocates
    nothing on the GPU."""
    try:
        driver = ctypes.CDLL(library)
    except OSError:
        return None
    count = ctypes.c_int()
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    devices = []
    for ordinal in range(count.value):
        device = ctypes.c_int()
        if driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            return None
        devices.append(device)
    return driver, devices


def cuda_l2_cache_bytes(library: str = CUDA_DRIVER) -> list[int] | None:
    """The L2 size of each visible GPU (CUDA_VISIBLE_DEVICES order) from the CUDA driver API,
    without a framework: for frameworks that do not report it (TensorFlow). None where the
    driver is missing or any call fails."""
    found = _cuda_devices(library)
    if found is None:
        return None
    driver, devices = found
    sizes = []
    for device in devices:
        size = ctypes.c_int()
        if driver.cuDeviceGetAttribute(ctypes.byref(size), CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device) != 0:
            return None
        sizes.append(size.value)
    return sizes


def format_uuid(raw: bytes) -> str:
    """A CUDA UUID's 16 bytes as NVML and nvidia-smi write it, without their "GPU-"/"MIG-"
    prefix: 8-4-4-4-12 hex digits (torch's `get_device_properties(i).uuid` reads the same)."""
    text = raw.hex()
    return "-".join(text[start:stop] for start, stop in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)))


def cuda_device_uuids(library: str = CUDA_DRIVER) -> list[str] | None:
    """The UUID of each GPU this process sees, by CUDA ordinal (`format_uuid`; a MIG instance's
    own where the driver has cuDeviceGetUuid_v2): what ties a CUDA ordinal to NVML's device,
    which NVML numbers by PCI bus whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say.
    None where the driver is missing or any call fails."""
    found = _cuda_devices(library)
    if found is None:
        return None
    driver, devices = found
    get_uuid = getattr(driver, "cuDeviceGetUuid_v2", None) or getattr(driver, "cuDeviceGetUuid", None)
    if get_uuid is None:
        return None
    uuids = []
    for device in devices:
        raw = (ctypes.c_ubyte * 16)()
        if get_uuid(ctypes.byref(raw), device) != 0:
            return None
        uuids.append(format_uuid(bytes(raw)))
    return uuids


def cuda_total_memory_bytes(ordinal: int, library: str = CUDA_DRIVER) -> int | None:
    """The memory of the GPU with CUDA ordinal `ordinal` in this process (CUDA_VISIBLE_DEVICES
    applied), from the CUDA driver API; None where the driver is missing, the ordinal is not
    visible, or a call fails."""
    found = _cuda_devices(library)
    if found is None or not 0 <= ordinal < len(found[1]):
        return None
    driver, devices = found
    total = ctypes.c_size_t()
    if driver.cuDeviceTotalMem_v2(ctypes.byref(total), devices[ordinal]) != 0:
        return None
    return int(total.value)


#: The Infinity Cache of each AMD Instinct architecture, in bytes, by the base of torch's
#: `gcnArchName` ("gfx942" of "gfx942:sramecc+:xnack-"): AMD's MALL, a memory-side last-level
#: cache on the I/O dies, shared by every compute die and far larger than their L2s (4 MB per
#: XCD on an MI300X), so a rotation sized on the L2 would stay inside it. None: the architecture
#: has none, and its L2 is the last level. Sources: AMD's "AMD CDNA 3 Architecture" white paper
#: (MI300X and MI300A, 256 MB; the MI325X is the same CDNA 3 silicon with more HBM); "AMD CDNA 4
#: Architecture" white paper (MI350X and MI355X, 256 MB); the CDNA 2 and CDNA white papers
#: (MI200 and MI100: no Infinity Cache, an 8 MB L2 per die). An architecture not here (a Radeon,
#: whose Infinity Cache differs by SKU within one architecture) keeps its L2, and says so.
AMD_INFINITY_CACHE_BYTES: dict[str, int | None] = {
    "gfx942": 256 * 2**20,  # CDNA 3: MI300X, MI300A, MI325X
    "gfx950": 256 * 2**20,  # CDNA 4: MI350X, MI355X
    "gfx90a": None,  # CDNA 2: MI210, MI250, MI250X
    "gfx908": None,  # CDNA: MI100
}


def gcn_arch_base(gcn_arch_name: str) -> str:
    """"gfx942:sramecc+:xnack-" -> "gfx942": the architecture without its target features."""
    return gcn_arch_name.split(":", 1)[0].strip().lower()


def amd_last_level_caches(gcn_arch_names: list[str], l2_bytes: list[int]) -> dict[str, Any]:
    """The last-level cache of each AMD GPU (torch's `gcnArchName` and L2 size of each), as device
    details: `last_level_cache_bytes` (what the cold-cache rotation is sized on), `last_level_cache`
    (which cache that is), and `last_level_cache_reason` where an architecture is not in
    `AMD_INFINITY_CACHE_BYTES` and its L2 stands in."""
    sizes, kinds, unknown = [], [], []
    for name, l2 in zip(gcn_arch_names, l2_bytes):
        arch = gcn_arch_base(name)
        if arch not in AMD_INFINITY_CACHE_BYTES:
            unknown.append(arch or "an unnamed architecture")
        infinity = AMD_INFINITY_CACHE_BYTES.get(arch)
        sizes.append(infinity or l2)
        kinds.append("infinity_cache" if infinity else "l2")
    details: dict[str, Any] = {"last_level_cache_bytes": sizes, "last_level_cache": kinds}
    if unknown:
        details["last_level_cache_reason"] = (
            f"no Infinity Cache size known for {', '.join(sorted(set(unknown)))}: the input rotation is sized on "
            f"the L2, which a larger Infinity Cache would hold (add the architecture to "
            f"suites.hardware.devices.AMD_INFINITY_CACHE_BYTES)")
    return details


#: The amdgpu driver's compute (KFD) topology: a node per CPU socket and per GPU it serves.
KFD_TOPOLOGY_NODES = "/sys/class/kfd/kfd/topology/nodes"


def _kfd_properties(text: str) -> dict[str, int]:
    """A KFD node's `properties` file ("simd_count 1216" a line) as {name: value}."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if value.strip().isdigit():
            fields[name] = int(value)
    return fields


def _gfx_name(target_version: int) -> str:
    """KFD's `gfx_target_version` (major * 10000 + minor * 100 + stepping) as the gfx name that
    ROCm prints: 90402 -> "gfx942", 90010 -> "gfx90a" (minor and stepping are hex digits)."""
    major, minor, stepping = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def amd_gpus_listed(nodes: str = KFD_TOPOLOGY_NODES) -> list[str]:
    """The AMD GPUs the amdgpu driver serves ("GPU 0: gfx942 (KFD node 2)"), from its KFD
    topology in sysfs: the AMD counterpart of `nvidia-smi -L` on a machine without NVML, whether or
    not a framework can use them. A GPU node is one with SIMDs (a CPU node has none); a node this
    process may not open (a container's device cgroup) is left out. Empty without the driver."""
    found = []
    numbered = [path for path in glob.glob(os.path.join(nodes, "*")) if os.path.basename(path).isdigit()]
    for node in sorted(numbered, key=lambda path: int(os.path.basename(path))):
        try:
            properties = _kfd_properties(Path(node, "properties").read_text())
        except OSError:
            continue
        if properties.get("simd_count", 0) > 0:
            arch = _gfx_name(properties["gfx_target_version"]) if properties.get("gfx_target_version") else "AMD GPU"
            found.append(f"GPU {len(found)}: {arch} (KFD node {os.path.basename(node)})")
    return found


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: The PCI vendor ID of Google, whose TPU chips a TPU VM passes through with VFIO.
GOOGLE_PCI_VENDOR = "0x1ae0"
PCI_DEVICES_SYSFS = "/sys/bus/pci/devices"


def google_pci_devices() -> list[str]:
    """The PCI devices of Google's vendor ID (a TPU VM's chips), from sysfs."""
    found = []
    for vendor in glob.glob(os.path.join(PCI_DEVICES_SYSFS, "*", "vendor")):
        try:
            if Path(vendor).read_text().strip().lower() == GOOGLE_PCI_VENDOR:
                found.append(os.path.dirname(vendor))
        except OSError:
            continue
    return found


def tpu_device_files() -> list[str]:
    """The device files of a TPU attached to this host (a TPU VM): /dev/accel* (v2-v4),
    /dev/vfio/<n> (v5e and later). A VFIO group alone says nothing (any host passing a device
    through has one): it counts only beside a Google PCI device."""
    vfio = glob.glob("/dev/vfio/[0-9]*")
    return glob.glob("/dev/accel*") + (vfio if vfio and google_pci_devices() else [])


def tpu_runtime_evidence() -> str | None:
    """What suggests a TPU is reachable, or None. Cheap: looks, never connects.

    Only what TensorFlow's TPUClusterResolver acts on counts: TPU_NAME, or the device files
    of a TPU VM. (COLAB_TPU_ADDR does not: TensorFlow never reads it, it names the retired
    Colab TPU nodes.)"""
    if os.environ.get("TPU_NAME"):
        return "TPU_NAME is set"
    if tpu_device_files():
        return "a TPU device file (/dev/accel*, or /dev/vfio with a Google PCI device) exists"
    return None


#: Where a TPU host names its accelerator type ("v5litepod-8") in the environment: GKE sets
#: TPU_ACCELERATOR_TYPE, as libtpu's launchers do; the peaks table finds the chip's peak by it.
#: A Cloud TPU VM rarely exports either: there the metadata server says (`TPU_METADATA_URL`).
TPU_ACCELERATOR_VARIABLES = ("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE")
#: The accelerator type of a Cloud TPU VM, an attribute of its GCE instance that the metadata
#: server gives any process on it that sends `METADATA_HEADERS` (Compute Engine's "About VM
#: metadata"; the same read libtpu and `gcloud` make).
TPU_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type"
METADATA_HEADERS = {"Metadata-Flavor": "Google"}
#: Seconds the metadata read may take, connecting and reading: the server is on the VM's own
#: link and answers in milliseconds; a host without one must not wait on it.
TPU_METADATA_TIMEOUT_S = 1.0
#: The `accelerator_type_source` of a type read from the metadata server.
METADATA_SOURCE = "GCE metadata server (instance/attributes/accelerator-type)"
#: Why a TPU has no accelerator type (and so no peaks-table peak).
NO_ACCELERATOR_TYPE = ("neither TPU_ACCELERATOR_TYPE nor ACCELERATOR_TYPE is set, and this host is no TPU VM whose "
                       "metadata server names it")


def tpu_accelerator() -> tuple[str | None, str]:
    """The TPU's accelerator type and where it was read (a variable's name, or
    `METADATA_SOURCE`); (None, "") where nothing says.

    The environment first. Else, only where this host is a TPU VM (its TPU device files exist,
    `tpu_device_files`), the metadata server: never on any other host, where the name may not
    resolve or the address may not answer (a TPU_NAME alone names a TPU elsewhere, whose type
    this host's metadata does not hold)."""
    for name in TPU_ACCELERATOR_VARIABLES:
        if os.environ.get(name, "").strip():
            return os.environ[name].strip(), name
    if not tpu_device_files():
        return None, ""
    found = metadata_accelerator_type()
    return (found, METADATA_SOURCE) if found else (None, "")


def tpu_accelerator_type() -> str | None:
    """The TPU's accelerator type (`tpu_accelerator`), or None where nothing says."""
    return tpu_accelerator()[0]


@lru_cache(maxsize=1)
def metadata_accelerator_type() -> str | None:
    """The metadata server's accelerator type of this VM, read once per process; None on any
    failure (no server, no such attribute, a timeout, an empty answer). Callers must have
    evidence of a TPU VM first (`tpu_accelerator`). No proxy: the server is link-local, and a
    proxy from the environment would send the read (and its header) off the host."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(TPU_METADATA_URL, headers=METADATA_HEADERS)
    try:
        with opener.open(request, timeout=TPU_METADATA_TIMEOUT_S) as response:
            text = response.read(256).decode("ascii", errors="replace").strip()
    except (OSError, ValueError, http.client.HTTPException):  # URLError, HTTPError and timeouts are OSErrors
        return None
    return text or None


NO_TPU_RUNTIME = "no TPU runtime: TPU_NAME is not set and no TPU device file (/dev/accel*, /dev/vfio) exists"


#: What `discover` has found in this process, for provenance to read without discovering.
_FOUND: dict[tuple[Framework, DeviceKind], DeviceInfo] = {}


@lru_cache(maxsize=None)
def discover(framework: Framework, kind: DeviceKind) -> DeviceInfo:
    """What `framework` sees of device `kind` (cached per process)."""
    described = descriptor(framework)
    if not described.installed():
        info = DeviceInfo(framework, kind, 0, reason=described.not_installed_reason())
    elif kind is DeviceKind.CPU:
        cpu = cpu_info(framework)
        info = DeviceInfo(framework, kind, cpu.count, cpu.names,
                          details={**cpu.details, "threads": described.cpu_threads()})
    elif kind is DeviceKind.GPU:
        info = described.gpus()
    else:
        info = described.tpus()
    _FOUND[(framework, kind)] = info
    return info


def discovered(framework: Framework, kind: DeviceKind) -> DeviceInfo | None:
    """What `discover` found for `framework` and `kind` in this process, or None where it has
    not been asked: never imports a framework or probes a device."""
    return _FOUND.get((framework, kind))


def discover_all() -> list[DeviceInfo]:
    return [discover(framework, kind) for framework in Framework for kind in DeviceKind]


def last_level_cache_bytes(framework: Framework, kind: DeviceKind) -> int | None:
    """The last-level cache of the device a case of `framework` runs on: the CPU's LLC, or the
    largest last-level cache of the GPUs `framework` discovered: their `last_level_cache_bytes`
    where discovery recorded it (an AMD GPU's Infinity Cache, `amd_last_level_caches`), else
    their L2. None where it is not known (TPUs, a framework that did not report it): the caller
    falls back to a fixed span."""
    if kind is DeviceKind.CPU:
        return cpu_last_level_cache_bytes()
    if kind is DeviceKind.GPU:
        details = discover(framework, kind).details
        sizes = details.get("last_level_cache_bytes") or details.get("l2_cache_bytes") or []
        return max(sizes) if sizes else None
    return None
