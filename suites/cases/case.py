"""A case: one point of a suite's grid. Immutable, hashable, with a stable readable id.

The id is ``workload/framework/device:count/strategy/precision[+compile]/params``. A compiled
case carries its compiler as a suffix of the precision segment (``fp32+xla``,
``bf16+inductor``); a case that is not compiled has no suffix. Why there:
- the ids of every case that existed before the compile axis stay byte-identical (stored
  records, asv's history and users' `--filter` globs name them), and records without the field
  load as `compile = none`;
- compilation and precision both say how the same computation is lowered to the device's
  instructions, the strategy segment says how work is spread over devices, which compilation
  does not change;
- ``+`` occurs in no precision name, and the params segment (whose values are free text) is
  left alone, so `Case.from_id` splits it back unambiguously;
- a glob for the eager case (``*/fp32/*``) does not also pick up its compiled twins, while
  ``*+xla*`` or ``--filter compile=xla`` selects them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision, Strategy

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
    compile: Compile = Compile.NONE

    @classmethod
    def make(cls, workload: str, framework: Framework | str, device: DeviceKind | str,
             strategy: Strategy | str = Strategy.SINGLE, precision: Precision | str = Precision.FP32,
             n_devices: int = 1, params: Mapping[str, ParamValue] | None = None,
             compile: Compile | str = Compile.NONE) -> "Case":
        return cls(workload=workload, framework=Framework(framework), device=DeviceKind(device),
                   strategy=Strategy(strategy), precision=Precision(precision),
                   n_devices=int(n_devices), params=tuple(sorted((params or {}).items())),
                   compile=Compile(compile))

    @property
    def param_dict(self) -> dict[str, ParamValue]:
        return dict(self.params)

    @property
    def id(self) -> str:
        """e.g. ``matmul/torch/cpu:1/single/fp32/k=512,m=512,n=512``, compiled
        ``matmul/torch/cpu:1/single/fp32+inductor/k=512,m=512,n=512``: stable across runs."""
        params = ",".join(f"{name}={value}" for name, value in self.params)
        return (f"{self.workload}/{self.framework}/{self.device}:{self.n_devices}/"
                f"{self.strategy}/{self.precision_segment}/{params}")

    @property
    def precision_segment(self) -> str:
        """The precision, with the compiler as a `+` suffix where the case is compiled."""
        return str(self.precision) if self.compile is Compile.NONE else f"{self.precision}+{self.compile}"

    def __str__(self) -> str:
        return self.id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "workload": self.workload, "framework": str(self.framework),
                "device": str(self.device), "n_devices": self.n_devices,
                "strategy": str(self.strategy), "precision": str(self.precision),
                "params": self.param_dict, "compile": str(self.compile)}

    @classmethod
    def from_id(cls, case_id: str) -> "Case":
        """Inverse of `id` (parameter values come back as int, float or str)."""
        try:
            workload, framework, device_count, strategy, precision_segment, params = case_id.split("/", 5)
            device, _, count = device_count.partition(":")
            precision, plus, compiler = precision_segment.partition("+")
            if plus and Compile(compiler) is Compile.NONE:  # "fp32+none" would be a second id of one case
                raise ValueError("an uncompiled case's precision has no '+none' suffix")
            values = dict(item.split("=", 1) for item in params.split(",") if item)
            return cls.make(workload, framework, device, strategy, precision, int(count),
                            {name: _parse_value(value) for name, value in values.items()},
                            compiler or Compile.NONE)
        except ValueError as error:
            raise ValueError(f"not a case id: {case_id!r} ({error})") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        """Records from before the compile axis have no "compile": they ran uncompiled."""
        return cls.make(data["workload"], data["framework"], data["device"], data["strategy"],
                        data["precision"], data["n_devices"], data.get("params") or {},
                        data.get("compile") or Compile.NONE)


def _parse_value(text: str) -> ParamValue:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)
