"""A case: one point of a suite's grid. Immutable, hashable, with a stable readable id."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .vocabulary import DeviceKind, Framework, Precision, Strategy

ParamValue = int | float | str | bool


@dataclass(frozen=True, order=True)
class Case:
    workload: str
    framework: Framework
    device: DeviceKind
    strategy: Strategy = Strategy.SINGLE
    precision: Precision = Precision.FP32
    n_devices: int = 1
    #: Workload parameters as sorted (name, value) pairs, so the case stays hashable.
    params: tuple[tuple[str, ParamValue], ...] = field(default=())

    @classmethod
    def make(cls, workload: str, framework: Framework | str, device: DeviceKind | str,
             strategy: Strategy | str = Strategy.SINGLE, precision: Precision | str = Precision.FP32,
             n_devices: int = 1, params: Mapping[str, ParamValue] | None = None) -> "Case":
        return cls(workload=workload, framework=Framework(framework), device=DeviceKind(device),
                   strategy=Strategy(strategy), precision=Precision(precision),
                   n_devices=int(n_devices), params=tuple(sorted((params or {}).items())))

    @property
    def param_dict(self) -> dict[str, ParamValue]:
        return dict(self.params)

    @property
    def id(self) -> str:
        """e.g. ``matmul/torch/cpu:1/single/fp32/k=512,m=512,n=512``: stable across runs."""
        params = ",".join(f"{name}={value}" for name, value in self.params)
        return (f"{self.workload}/{self.framework}/{self.device}:{self.n_devices}/"
                f"{self.strategy}/{self.precision}/{params}")

    def __str__(self) -> str:
        return self.id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "workload": self.workload, "framework": str(self.framework),
                "device": str(self.device), "n_devices": self.n_devices,
                "strategy": str(self.strategy), "precision": str(self.precision),
                "params": self.param_dict}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        return cls.make(data["workload"], data["framework"], data["device"], data["strategy"],
                        data["precision"], data["n_devices"], data.get("params") or {})
