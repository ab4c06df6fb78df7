"""Which runnable implements each built-in workload in each framework, named by import path.

The framework layer owns this table, so the framework-neutral workloads below it never name
the code above them; the runnable is imported only when a case of its framework runs. A user's
workload (registered outside the package) names its own in `Workload.implementations`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Mapping

from suites.cases.vocabulary import Framework

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable
    from suites.workloads.base import Workload

#: workload name -> framework -> "module:Class" of its Runnable.
BUILT_IN: Mapping[str, Mapping[Framework, str]] = {
    "matmul": {Framework.TORCH: "suites.frameworks.torch.kernels:TorchMatmul",
               Framework.TF: "suites.frameworks.tf.kernels:TfMatmul"},
    "conv2d": {Framework.TORCH: "suites.frameworks.torch.kernels:TorchConv2d",
               Framework.TF: "suites.frameworks.tf.kernels:TfConv2d"},
    "train_step": {Framework.TORCH: "suites.frameworks.torch.training:TorchTrainStep",
                   Framework.TF: "suites.frameworks.tf.training:TfTrainStep"},
    "allreduce": {Framework.TORCH: "suites.frameworks.torch.collectives:TorchAllreduce",
                  Framework.TF: "suites.frameworks.tf.collectives:TfAllreduce"},
}


def implementations(workload: type["Workload"]) -> Mapping[Framework, str]:
    """framework -> "module:Class" of the workload's runnables (a built-in's from `BUILT_IN`)."""
    return BUILT_IN.get(workload.name) or workload.implementations


def missing_runnable_reason(workload: type["Workload"], framework: Framework) -> str | None:
    """Why `workload` has no runnable in `framework` (and where to name one), or None."""
    runnables = implementations(workload)
    if framework in runnables:
        return None
    where = ("`suites.frameworks.implementations.BUILT_IN`" if workload.name in BUILT_IN
             else "its `implementations`")
    return (f"{workload.name} has no {framework} implementation (it runs in "
            f"{', '.join(sorted(map(str, runnables))) or 'no framework'}); name a runnable for {framework} in "
            f"{where} to run it there")


def runnable_class(workload: type["Workload"], framework: Framework) -> type["Runnable"]:
    """The runnable of `workload` in `framework`, imported now; a ValueError saying where to name
    one where there is none."""
    missing = missing_runnable_reason(workload, framework)
    if missing:
        raise ValueError(missing)
    module_name, _, class_name = implementations(workload)[framework].partition(":")
    return getattr(importlib.import_module(module_name), class_name)

