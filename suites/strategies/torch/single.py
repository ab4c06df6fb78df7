"""torch `single`: one device, the model unwrapped."""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.base import one_device_reason
from suites.strategies.torch.base import TorchStrategy

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    from suites.hardware.devices import DeviceInfo


class Single(TorchStrategy):
    one_device = True
    strategy = Strategy.SINGLE
    statistics_split = "whole"
    devices = frozenset(DeviceKind)
    kinds = frozenset({"kernel", "training"})
    compile_modes = frozenset({Compile.NONE, Compile.INDUCTOR})

    def unavailable_reason(self, job: "Job", device: "DeviceInfo") -> str | None:
        return one_device_reason(job)


PLUGIN = Single()
