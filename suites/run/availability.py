"""Can a case run here? Each unavailable case keeps its reason; nothing is dropped silently."""
from __future__ import annotations

from suites.cases.case import Case
from suites.cases.strategy_plugins import NoSuchStrategy, plugin_for
from suites.cases.vocabulary import DeviceKind, Precision
from suites.kept.devices import DeviceInfo, discover, framework_installed, not_installed_reason


class Unsupported(Exception):
    """Raised by an implementation that finds at run time that this combination has no kernel
    here (e.g. TF's Conv2D in NCHW fp16 on CPU). The case is recorded unavailable, not failed."""


def unavailable_reason(case: Case) -> str | None:
    if not framework_installed(case.framework):
        return not_installed_reason(case.framework)
    from suites.workloads import workload_of

    reason = workload_of(case).unavailable_reason()
    if reason:
        return reason
    device = discover(case.framework, case.device)
    if not device.available:
        return f"no {case.device}: {device.reason}"
    return precision_reason(case, device) or strategy_reason(case, device)


def precision_reason(case: Case, device: DeviceInfo) -> str | None:
    if case.precision is Precision.TF32:
        if case.device is not DeviceKind.GPU:
            return "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this case is not on a GPU"
        capabilities = device.details.get("compute_capability") or []
        if capabilities and float(capabilities[0]) < 8.0:
            return f"tf32 needs compute capability >= 8.0; {device.names[0]} has {capabilities[0]}"
    return None


def strategy_reason(case: Case, device: DeviceInfo) -> str | None:
    """The rules of the case's strategy plugin (`suites.strategies.<framework>.<strategy>`)."""
    try:
        plugin = plugin_for(case)
    except NoSuchStrategy as error:
        return str(error)
    return plugin.unavailable_reason(case, device)
