"""AMD GPUs under torch's ROCm build, without the hardware (issue 32, N13): the cold-cache rotation
sized on the Infinity Cache, tf32 unavailable under NVIDIA's name, and `parbench ready` on a machine
without NVML. torch on ROCm keeps the `torch.cuda` API and sets `torch.version.hip`; the fakes
below stand in for what it reports of an MI300X, an MI250X and an unknown architecture."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware import devices
from suites.hardware.devices import DeviceInfo
from suites.runner.plan import plan, unavailable_reason
from suites.runner.availability import precision_reason
from suites.selfchecks import readiness
from suites.workloads.kernels import ROTATION_BYTES, ROTATION_ENV, rotation_count

MiB = 2**20
MI300X = ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 4 * MiB)
MI250X = ("AMD Instinct MI250X", "gfx90a:sramecc+:xnack-", 8 * MiB)
RADEON = ("AMD Radeon RX 7900 XTX", "gfx1100", 6 * MiB)


pytestmark = pytest.mark.usefixtures("fresh_discovery")


@pytest.fixture
def torch_module(monkeypatch) -> Any:
    """torch, imported only by the tests that need it, with no GPU hidden by the environment."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return pytest.importorskip("torch")


def pretend_rocm(monkeypatch, torch: Any, gpus: list[tuple[str, str, int]], hip: str = "6.4.43482") -> None:
    """torch, a ROCm build, sees `gpus` (name, gcnArchName, L2 bytes each) through `torch.cuda`."""
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: gpus[i][0])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 4))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(
        name=gpus[i][0], gcnArchName=gpus[i][1], L2_cache_size=gpus[i][2], total_memory=192 * 2**30))


def torch_gpus() -> DeviceInfo:
    from suites.frameworks.torch import DESCRIPTOR

    return DESCRIPTOR.gpus()


# --- (a) the rotation is sized on the Infinity Cache -------------------------------------------
def test_an_mi300x_records_its_infinity_cache_as_the_last_level(monkeypatch, torch_module):
    pretend_rocm(monkeypatch, torch_module, [MI300X, MI300X])
    gpus = torch_gpus()
    assert gpus.count == 2 and gpus.details["hip"] == "6.4.43482"
    assert gpus.details["gcn_arch"] == ["gfx942:sramecc+:xnack-"] * 2
    assert gpus.details["l2_cache_bytes"] == [4 * MiB] * 2
    assert gpus.details["last_level_cache_bytes"] == [256 * MiB] * 2
    assert gpus.details["last_level_cache"] == ["infinity_cache"] * 2
    assert "last_level_cache_reason" not in gpus.details


def test_the_rotation_on_an_mi300x_spans_its_infinity_cache_not_its_l2(monkeypatch, torch_module):
    """The kernels ask `last_level_cache_bytes` (tests/test_gpu_readiness_provenance.py shows it):
    on an MI300X it is the 256 MiB Infinity Cache, so a 64 MiB input set is rotated through 8
    copies (2 x 256 MiB), where the 4 MB L2 gave the 64 MiB floor: one copy, timed hot."""
    monkeypatch.delenv(ROTATION_ENV, raising=False)
    pretend_rocm(monkeypatch, torch_module, [MI300X])
    cache = devices.last_level_cache_bytes(Framework.TORCH, DeviceKind.GPU)
    assert cache == 256 * MiB
    assert rotation_count(64 * MiB, cache) == 8
    assert rotation_count(64 * MiB, MI300X[2]) == ROTATION_BYTES // (64 * MiB) == 1


def test_an_mi250x_has_no_infinity_cache_and_keeps_its_l2(monkeypatch, torch_module):
    pretend_rocm(monkeypatch, torch_module, [MI250X])
    details = torch_gpus().details
    assert details["last_level_cache_bytes"] == [8 * MiB] and details["last_level_cache"] == ["l2"]
    assert "last_level_cache_reason" not in details  # known: the L2 is its last level


def test_an_unknown_architecture_falls_back_to_its_l2_and_says_so(monkeypatch, torch_module):
    pretend_rocm(monkeypatch, torch_module, [RADEON])
    details = torch_gpus().details
    assert details["last_level_cache_bytes"] == [6 * MiB] and details["last_level_cache"] == ["l2"]
    assert "no Infinity Cache size known for gfx1100" in details["last_level_cache_reason"]
    assert devices.last_level_cache_bytes(Framework.TORCH, DeviceKind.GPU) == 6 * MiB


def test_an_nvidia_gpu_records_no_rocm_details(monkeypatch, torch_module):
    pretend_rocm(monkeypatch, torch_module, [("NVIDIA H100 80GB HBM3", "", 50 * 10**6)], hip=None)
    monkeypatch.setattr(torch_module.version, "cuda", "12.8")
    details = torch_gpus().details
    assert not {"hip", "gcn_arch", "last_level_cache_bytes"} & set(details)
    assert devices.last_level_cache_bytes(Framework.TORCH, DeviceKind.GPU) == 50 * 10**6


@pytest.mark.parametrize(("name", "arch"), [("gfx942:sramecc+:xnack-", "gfx942"), ("gfx950", "gfx950"),
                                            ("GFX90A:xnack+", "gfx90a")])
def test_the_architecture_is_the_gcn_arch_name_without_its_features(name, arch):
    assert devices.gcn_arch_base(name) == arch


# --- (b) tf32 on ROCm is not NVIDIA's TF32 ------------------------------------------------------
def rocm_gpu(count: int = 1) -> DeviceInfo:
    """What torch's discovery reports of `count` MI300Xs."""
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, count, (MI300X[0],) * count, details={
        "hip": "6.4.43482", "cuda": None, "compute_capability": ["9.4"] * count,
        "gcn_arch": [MI300X[1]] * count, "l2_cache_bytes": [MI300X[2]] * count})


def gpu_case(precision: str, n: int = 1) -> Case:
    return Case.make("matmul", "torch", "gpu", "single", precision, n, {"m": 64, "n": 64, "k": 64})


def test_tf32_on_rocm_is_unavailable_with_one_line_naming_the_way_out():
    reason = precision_reason(gpu_case("tf32"), rocm_gpu())
    assert reason and "\n" not in reason
    assert "NVIDIA" in reason and "ROCm" in reason and reason.endswith("run fp32 or bf16")
    assert MI300X[0] in reason and "gfx942" in reason


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_the_other_precisions_run_on_rocm(precision):
    assert precision_reason(gpu_case(precision), rocm_gpu()) is None


def test_tf32_on_an_nvidia_gpu_is_still_available(monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    h100 = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, ("NVIDIA H100 80GB HBM3",),
                      details={"cuda": "12.8", "compute_capability": ["9.0"]})
    assert precision_reason(gpu_case("tf32"), h100) is None


def test_a_tf32_case_on_rocm_is_stored_unavailable(monkeypatch):
    """The runner's own question (`suites.runner.plan.unavailable_reason`) gets the
    framework's answer."""
    monkeypatch.setattr("suites.runner.availability.discover", lambda framework, kind: rocm_gpu())
    reason = unavailable_reason(plan(gpu_case("tf32")))
    assert reason == precision_reason(gpu_case("tf32"), rocm_gpu())
    assert unavailable_reason(plan(gpu_case("bf16"))) is None


def test_readiness_does_not_expect_tf32_on_rocm():
    paths = {path.name: path for path in readiness.plan({(Framework.TORCH, DeviceKind.GPU): rocm_gpu()})}
    tf32 = paths["matmul torch gpu:1 single tf32"]
    assert not tf32.expected and tf32.why.endswith("run fp32 or bf16")
    assert paths["matmul torch gpu:1 single bf16"].expected


# --- (c) readiness without NVML -----------------------------------------------------------------
def kfd_topology(root: Path, nodes: dict[int, dict[str, int] | None]) -> Path:
    """A KFD topology in sysfs's layout: `nodes` by number, each its properties (None: a node this
    process may not read, as a container's device cgroup hides one)."""
    for number, properties in nodes.items():
        node = root / str(number)
        node.mkdir(parents=True)
        if properties is not None:
            (node / "properties").write_text("".join(f"{name} {value}\n" for name, value in properties.items()))
    return root


CPU_NODE = {"cpu_cores_count": 96, "simd_count": 0, "gfx_target_version": 0}
MI300X_NODE = {"cpu_cores_count": 0, "simd_count": 1216, "gfx_target_version": 90402}
MI250X_NODE = {"cpu_cores_count": 0, "simd_count": 440, "gfx_target_version": 90010}


def test_the_amdgpu_driver_lists_its_gpus_from_the_kfd_topology(tmp_path):
    root = kfd_topology(tmp_path / "nodes", {0: CPU_NODE, 1: MI300X_NODE, 2: None, 10: MI250X_NODE})
    assert devices.amd_gpus_listed(str(root)) == ["GPU 0: gfx942 (KFD node 1)", "GPU 1: gfx90a (KFD node 10)"]
    assert devices.amd_gpus_listed(str(tmp_path / "no-driver")) == []


def cpu_only_torch(monkeypatch, torch: Any) -> None:
    """torch built for neither CUDA nor ROCm: `torch.cuda.is_available()` False."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def machine_without_nvml(monkeypatch, tmp_path: Path, amd_gpus: list[str]) -> None:
    """No nvidia-smi on PATH, no TPU, the amdgpu driver listing `amd_gpus`; torch's GPU discovery
    is the real descriptor's, TF's a CPU build's (not imported here)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(readiness, "tpu_runtime_evidence", lambda: None)
    monkeypatch.setattr(readiness, "amd_gpus_listed", lambda: amd_gpus)

    def discover(framework: Framework, kind: DeviceKind) -> DeviceInfo:
        if framework is Framework.TORCH and kind is DeviceKind.GPU:
            return torch_gpus()
        return DeviceInfo(framework, kind, 0, reason=f"no {kind} for {framework} here")
    monkeypatch.setattr(readiness, "discover", discover)


def test_cpu_only_torch_without_nvml_or_a_gpu_is_no_gpu_visible(monkeypatch, tmp_path, capsys, torch_module):
    cpu_only_torch(monkeypatch, torch_module)
    machine_without_nvml(monkeypatch, tmp_path, amd_gpus=[])
    out = tmp_path / "readiness.json"
    assert readiness.main(["--out", str(out)], execute=pytest.fail) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "no GPU or TPU visible, nothing to check" in lines[0]
    assert "neither CUDA nor ROCm" in lines[0]
    assert not out.exists() and "ready:" not in lines[0]


def test_cpu_only_torch_on_an_amd_gpu_without_nvml_is_not_ready(monkeypatch, tmp_path, capsys, torch_module):
    """Before: no nvidia-smi, so no GPU counted as here, and `parbench ready` said "nothing to
    check" and exited 0 on an MI300X machine whose torch could not use it."""
    cpu_only_torch(monkeypatch, torch_module)
    root = kfd_topology(tmp_path / "kfd", {0: CPU_NODE, 1: MI300X_NODE})
    machine_without_nvml(monkeypatch, tmp_path, amd_gpus=devices.amd_gpus_listed(str(root)))
    out = tmp_path / "readiness.json"
    assert readiness.main(["--out", str(out)], execute=pytest.fail) == 1
    printed = capsys.readouterr().out
    assert ("the amdgpu driver lists 1 GPU(s) (GPU 0: gfx942 (KFD node 1)) but torch sees none: "
            "this torch build has no GPU support, neither CUDA nor ROCm") in printed
    assert "NOT READY" in printed and "no GPU or TPU visible" not in printed
    summary = json.loads(out.read_text())
    assert not summary["ready"] and "gpu discovery torch" in summary["not_ready"]


def test_a_rocm_torch_that_sees_no_gpu_says_where_to_look(monkeypatch, torch_module):
    monkeypatch.setattr(torch_module.version, "hip", "6.4.43482")
    monkeypatch.setattr(torch_module.version, "cuda", None)
    monkeypatch.setattr(torch_module.cuda, "is_available", lambda: False)
    reason = torch_gpus().reason
    assert reason.startswith("this ROCm build of torch (HIP 6.4.43482) sees no AMD GPU") and "/dev/kfd" in reason
