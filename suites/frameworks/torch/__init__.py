"""PyTorch in parbench: the descriptor here; the runnables, models and process group beside it.

Importing this package does not import torch; the descriptor's methods do, when asked.
"""
from __future__ import annotations

from typing import Any

from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware.devices import DeviceInfo, FrameworkDescriptor, cuda_visible_devices_reason, register_descriptor


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
            if hidden:
                reason = hidden
            elif torch.version.cuda is None:
                reason = f"this torch build has no CUDA support (torch {torch.__version__})"
            else:
                reason = "torch sees no CUDA device (no NVIDIA GPU or driver visible)"
            return DeviceInfo(self.framework, DeviceKind.GPU, 0, reason=reason)
        count = torch.cuda.device_count()
        names = tuple(torch.cuda.get_device_name(i) for i in range(count))
        capability = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(count)]
        # L2 sizes size the kernels' input rotation (suites.workloads.kernels.rotation_count).
        properties = [torch.cuda.get_device_properties(i) for i in range(count)]
        return DeviceInfo(self.framework, DeviceKind.GPU, count, names, details={
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "compute_capability": capability, "nccl": _nccl_version(torch),
            "l2_cache_bytes": [p.L2_cache_size for p in properties],
            "memory_bytes": [p.total_memory for p in properties]})

    def tpus(self) -> DeviceInfo:
        return DeviceInfo(self.framework, DeviceKind.TPU, 0, reason=(
            "parbench runs torch on TPU only through TF's TPUStrategy (torch_xla is not supported)"))


def _nccl_version(torch_module: Any) -> str | None:
    try:
        return ".".join(map(str, torch_module.cuda.nccl.version()))
    except Exception:  # NCCL absent from this build
        return None


DESCRIPTOR = register_descriptor(TorchDescriptor())
