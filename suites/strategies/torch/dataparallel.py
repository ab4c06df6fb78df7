"""torch `dataparallel`: `nn.DataParallel`, one process, one thread per GPU, the module
replicated every step and the batch scattered over the GPUs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Strategy
from suites.strategies.torch.base import TorchStrategy

if TYPE_CHECKING:
    import torch
    from torch import nn

    from suites.kept.devices import DeviceInfo

#: `devices` keeps the CPU: nn.DataParallel accepts a CPU module and runs it unchanged, which
#: is worth a reason rather than no case at all.
DATAPARALLEL_ON_CPU = ("nn.DataParallel on CPU runs the module unchanged on one device; "
                       "nothing parallel to measure")


class DataParallel(TorchStrategy):
    strategy = Strategy.DATAPARALLEL

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        if case.device is DeviceKind.CPU:
            return DATAPARALLEL_ON_CPU
        if case.device is not DeviceKind.GPU:
            return f"nn.DataParallel replicates a module over CUDA devices; {case.device} is not one"
        if case.n_devices < 2:
            return ("nn.DataParallel over one GPU calls the module unchanged; nothing parallel "
                    "to measure (strategy 'single' times that)")
        if device.count < case.n_devices:
            return (f"nn.DataParallel over {case.n_devices} GPUs needs {case.n_devices} visible "
                    f"GPUs; {device.count} visible")
        return None

    def emulated(self, case: Case) -> bool:
        """Never: it runs on real GPUs only (on a CPU it is unavailable, not emulated)."""
        return False

    def wrap(self, model: "nn.Module", device: "torch.device", case: Case) -> "nn.Module":
        from torch import nn

        return nn.DataParallel(model, device_ids=list(range(case.n_devices)))


PLUGIN = DataParallel()
