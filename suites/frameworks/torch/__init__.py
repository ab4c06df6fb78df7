"""PyTorch in parbench: the descriptor here; the runnables, models and process group beside it.

Importing this package does not import torch; the descriptor's methods do, when asked.
"""
from __future__ import annotations

from typing import Any

from suites.cases.vocabulary import DeviceKind, Framework, Precision
from suites.hardware.devices import (DeviceInfo, FrameworkDescriptor, amd_last_level_caches,
                                     cuda_visible_devices_reason, register_descriptor)


class TorchDescriptor(FrameworkDescriptor):
    framework = Framework.TORCH
    import_name = "torch"
    distributions = ("torch",)

    def cpu_threads(self) -> int:
        import torch

        return torch.get_num_threads()

    def threads_in_use(self, module: Any) -> int:
        return module.get_num_threads()

    def use_one_thread(self, module: Any) -> None:
        module.set_num_threads(1)

    def gpus(self) -> DeviceInfo:
        hidden = cuda_visible_devices_reason()
        import torch

        if not torch.cuda.is_available():
            return DeviceInfo(self.framework, DeviceKind.GPU, 0, reason=hidden or _no_gpu_reason(torch))
        count = torch.cuda.device_count()
        names = tuple(torch.cuda.get_device_name(i) for i in range(count))
        capability = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(count)]
        # L2 sizes size the kernels' input rotation (suites.workloads.kernels.rotation_count);
        # on ROCm the last-level cache does, the Infinity Cache where there is one (_rocm_details).
        properties = [torch.cuda.get_device_properties(i) for i in range(count)]
        details = {
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "compute_capability": capability, "nccl": _nccl_version(torch),
            "l2_cache_bytes": [p.L2_cache_size for p in properties],
            "memory_bytes": [p.total_memory for p in properties]}
        if torch.version.hip is not None:
            details.update(_rocm_details(torch.version.hip, properties))
        return DeviceInfo(self.framework, DeviceKind.GPU, count, names, details=details)

    def precision_reason(self, precision: Precision, device: DeviceInfo) -> str | None:
        """tf32 on an AMD GPU (a ROCm build: `hip` in the discovered details) is not NVIDIA's TF32."""
        if precision is Precision.TF32 and device.kind is DeviceKind.GPU and device.details.get("hip"):
            return _rocm_tf32_reason(device)
        return None

    def tpus(self) -> DeviceInfo:
        return DeviceInfo(self.framework, DeviceKind.TPU, 0, reason=(
            "parbench runs torch on TPU only through TF's TPUStrategy (torch_xla is not supported)"))


def _no_gpu_reason(torch_module: Any) -> str:
    """Why a torch that sees no GPU sees none: a build for neither CUDA nor ROCm, or no device."""
    if torch_module.version.hip is not None:
        return (f"this ROCm build of torch (HIP {torch_module.version.hip}) sees no AMD GPU (no amdgpu driver "
                "or /dev/kfd here, or HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hides them)")
    if torch_module.version.cuda is None:
        return f"this torch build has no GPU support, neither CUDA nor ROCm (torch {torch_module.__version__})"
    return "torch sees no CUDA device (no NVIDIA GPU or driver visible)"


def _rocm_details(hip: str, properties: list[Any]) -> dict[str, Any]:
    """What a ROCm build adds to the GPU details: HIP's version, each GPU's gcn architecture
    ("gfx942:sramecc+:xnack-") and its last-level cache (the Infinity Cache where it has one:
    `suites.hardware.devices.amd_last_level_caches`), on which the input rotation is sized."""
    arches = [str(getattr(p, "gcnArchName", "") or "") for p in properties]
    return {"hip": hip, "gcn_arch": arches,
            **amd_last_level_caches(arches, [p.L2_cache_size for p in properties])}


def _rocm_tf32_reason(device: DeviceInfo) -> str:
    """One line: tf32 on ROCm would be recorded under NVIDIA's name, and what to run instead.

    torch's tf32 switches (`set_float32_matmul_precision("high")`, `cudnn.allow_tf32`) mean
    NVIDIA's TF32 tensor-core mode. On ROCm they do not select it: an MI300's reduced-precision
    fp32 (xf32) is hipBLASLt's, switched on in its own way, and otherwise the case runs as fp32,
    so a tf32 record would name a mode the case did not run (issue 32, N13)."""
    arch = next((name for name in device.details.get("gcn_arch") or [] if name), "")
    on = f"{device.names[0] if device.names else 'an AMD GPU'}{f' ({arch})' if arch else ''}"
    return (f"tf32 is NVIDIA's tensor-core mode, and torch's tf32 switches on ROCm (HIP {device.details['hip']}, "
            f"{on}) do not select it, so the record would say tf32 for another mode: run fp32 or bf16")


def _nccl_version(torch_module: Any) -> str | None:
    try:
        return ".".join(map(str, torch_module.cuda.nccl.version()))
    except Exception:  # NCCL absent from this build
        return None


DESCRIPTOR = register_descriptor(TorchDescriptor())
