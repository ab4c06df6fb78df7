"""The shape of a record's `environment`: the provenance that `suites.records.provenance.environment`
builds once per run, plus what the run adds to each record. A record holds it as plain JSON; these
TypedDicts name its keys, their types and what they mean. Every key of a version-2 record's
environment is written (None where the machine has no such thing); a version-1 record may lack any.
"""
from __future__ import annotations

from typing import TypedDict


class Cpu(TypedDict, total=False):
    #: The CPU's model name (/proc/cpuinfo's "model name", else the platform's).
    model: str
    #: Logical CPUs of the machine (os.cpu_count); None where unknown.
    logical_cores: int | None
    #: Logical CPUs the run's process may run on (its affinity): what a CPU case can use.
    usable_cores: int
    #: Size of the last-level cache CPU 0 sees (the L3 of its socket or core complex), from
    #: sysfs; None where sysfs does not say.
    llc_bytes: int | None


class Gpu(TypedDict, total=False):
    """One GPU as nvidia-smi reports it (`suites.records.provenance.GPU_FIELDS`); a value the
    GPU does not report is None, and an nvidia-smi too old for the others gives only name,
    memory and driver."""

    index: int
    name: str
    #: Total memory, as "<n> MiB".
    memory: str
    driver: str
    #: "9.0" and the like.
    compute_capability: str
    sm_clock_max_mhz: int
    mem_clock_max_mhz: int
    power_limit_w: float
    #: "Enabled" / "Disabled"; None on a GPU without MIG. A MIG slice has a fraction of the GPU.
    mig_mode: str | None
    #: "GPU-8-4-4-4-12 hex digits": the board's identity across labels and runs (the report's machines).
    uuid: str


class GpuTopology(TypedDict, total=False):
    """How the GPUs are linked (`nvidia-smi topo -m`): NVLink ("NV<n>": n links) or a PCIe path
    (PIX, PXB, PHB, NODE, SYS), which bounds all-reduce bus bandwidth."""

    #: links["GPU<i>"]["GPU<j>"]: the link from GPU i to GPU j.
    links: dict[str, dict[str, str]]
    #: The whole matrix and its legend, as nvidia-smi printed it.
    text: str


class Accelerator(TypedDict, total=False):
    """What one framework found of one device kind in the run's process (`suites.hardware.devices.DeviceInfo`):
    its count, names, or why it found none, then its details: GPUs the CUDA runtime and cuDNN its
    build uses, NCCL, compute capability and L2 size per GPU; ROCm builds HIP, each GPU's
    architecture and last-level cache; TPUs their accelerator type. Details a framework does not
    report are absent."""

    count: int
    names: list[str]
    #: Why none was found ("" where some were).
    reason: str
    #: The CUDA version the framework's build uses.
    cuda: str | None
    #: The cuDNN version its build uses (torch: a number, 91900; TF: text).
    cudnn: int | str | None
    #: torch: the NCCL version it loads.
    nccl: str | None
    #: Each GPU's, "9.0" and the like.
    compute_capability: list[str]
    #: Each GPU's L2 size (TF: from the CUDA driver; None where it could not be read).
    l2_cache_bytes: list[int] | None
    #: torch: each GPU's total memory.
    memory_bytes: list[int]
    #: torch on ROCm: HIP's version, and each GPU's gcn architecture ("gfx942:sramecc+:xnack-").
    hip: str
    gcn_arch: list[str]
    #: torch on ROCm: each GPU's last-level cache, its kind ("infinity_cache" | "l2"), and why the
    #: L2 stands in where the architecture's Infinity Cache is not known
    #: (`suites.hardware.devices.amd_last_level_caches`).
    last_level_cache_bytes: list[int]
    last_level_cache: list[str]
    last_level_cache_reason: str
    #: TF on TPUs: the accelerator type ("v5litepod-8") and where it was read, or why it is unknown.
    accelerator_type: str
    accelerator_type_source: str
    accelerator_type_reason: str


class Git(TypedDict, total=False):
    """The checkout parbench ran from; both None where git or the checkout is missing."""

    commit: str | None
    #: Whether tracked files differed from the commit.
    dirty: bool | None


class Environment(TypedDict, total=False):
    """A record's provenance: where its measurement came from."""

    #: The label results are grouped under: --label, else $PARBENCH_MACHINE, else the hostname.
    machine: str
    hostname: str
    cpu: Cpu
    #: The machine's memory in GiB (pages x page size); None where unreadable.
    memory_gib: float | None
    #: nvidia-smi's GPUs (empty without nvidia-smi), read without importing a framework.
    gpus: list[Gpu]
    #: None without nvidia-smi.
    gpu_topology: GpuTopology | None
    #: $CUDA_VISIBLE_DEVICES as the run saw it; None where unset.
    cuda_visible_devices: str | None
    #: $NVIDIA_TF32_OVERRIDE (0 turns TF32 off in cuBLAS/cuDNN under every framework's setting);
    #: None where unset.
    nvidia_tf32_override: str | None
    #: {wheel: version} of the CUDA runtime, cuDNN, NCCL and cuBLAS wheels installed (what the
    #: frameworks load), read without importing a framework.
    cuda_libraries: dict[str, str]
    #: {"<framework>/<gpu|tpu>": what discovery found} for each framework and kind the run's
    #: process asked about (a run asks when it checks a GPU or TPU case's availability).
    accelerators: dict[str, Accelerator]
    #: The Python version (platform.python_version).
    python: str
    #: The OS (platform.platform).
    os: str
    #: {distribution: version} of parbench, each framework's distributions, and the libraries
    #: every record names (`suites.records.provenance.LIBRARIES`).
    libraries: dict[str, str]
    git: Git
    #: {framework: intra-op threads} of the frameworks loaded in the process, when its case was
    #: recorded. Not built by `suites.records.provenance.environment`: the run adds it to each
    #: record (ADDED_PER_RECORD).
    threads: dict[str, int]


#: Keys of `Environment` that `suites.records.provenance.environment` does not build: the run
#: adds them to each record as it stores it (so a provenance taken elsewhere, a pytest baseline's
#: or a TF cluster task's, may lack them). Every other key is built there.
ADDED_PER_RECORD = frozenset({"threads"})
