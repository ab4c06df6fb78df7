"""Which strategy plugin implements a strategy for a framework, found by its module path.

A strategy of a framework is the module `suites.strategies.<framework>.<strategy>` and its
`PLUGIN`; a framework without that module does not have the strategy. Only the module asked
about is imported, and plugin modules import no framework at import time, so asking which
cases exist (a grid, `parbench list`) stays free of torch and TensorFlow.
"""
from __future__ import annotations

import importlib
import importlib.util
from functools import lru_cache
from typing import TYPE_CHECKING

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Strategy

if TYPE_CHECKING:
    from suites.strategies.base import StrategyPlugin
    from suites.workloads.base import Param, Workload

PLUGIN_PACKAGE = "suites.strategies"


def plugin_module(framework: Framework, strategy: Strategy) -> str:
    return f"{PLUGIN_PACKAGE}.{framework}.{strategy}"


@lru_cache(maxsize=None)
def find_plugin(framework: Framework, strategy: Strategy) -> "StrategyPlugin | None":
    """The plugin of `strategy` for `framework`, or None where the framework has no such strategy."""
    name = plugin_module(framework, strategy)
    if importlib.util.find_spec(name) is None:
        return None
    plugin = importlib.import_module(name).PLUGIN
    if plugin.strategy is not strategy or plugin.framework is not framework:
        raise TypeError(f"{name}.PLUGIN is {plugin.framework}/{plugin.strategy}, "
                        f"not {framework}/{strategy}")
    return plugin


class NoSuchStrategy(KeyError):
    """A case whose framework has no plugin for its strategy (e.g. tf with ddp)."""

    def __str__(self) -> str:
        return str(self.args[0])


def plugin_for(case: Case) -> "StrategyPlugin":
    plugin = find_plugin(case.framework, case.strategy)
    if plugin is None:
        raise NoSuchStrategy(f"'{case.strategy}' is not a strategy of {case.framework}; "
                             f"{case.framework} has {', '.join(map(str, strategies_of(case.framework)))}")
    return plugin


def plugins_of(strategy: Strategy) -> list["StrategyPlugin"]:
    return [plugin for framework in Framework
            if (plugin := find_plugin(framework, strategy)) is not None]


def frameworks_of(strategy: Strategy) -> frozenset[Framework]:
    return frozenset(plugin.framework for plugin in plugins_of(strategy))


def strategies_of(framework: Framework) -> list[Strategy]:
    return [strategy for strategy in Strategy if find_plugin(framework, strategy) is not None]


def devices_of(strategy: Strategy) -> frozenset[DeviceKind]:
    """The device kinds any framework's plugin of `strategy` can use."""
    return frozenset().union(*(plugin.rules.devices for plugin in plugins_of(strategy)))


def is_combination(framework: Framework, device: DeviceKind, strategy: Strategy,
                   workload: type["Workload"] | None = None, compile: Compile = Compile.NONE) -> bool:
    """Whether a case of this framework, device kind, strategy and compiler (and, where given,
    workload: torch `towers` splits a matmul, TF `towers` also trains) exists at all (torch has no
    xla, TF no inductor); whether it runs on this machine is `suites.runner.availability`'s question
    (a strategy that does not run under a compiler of its framework is such a case: unavailable,
    with the reason)."""
    plugin = find_plugin(framework, strategy)
    return (plugin is not None and device in plugin.rules.devices and compile in plugin.rules.compilers
            and (workload is None or plugin.applies_to(workload)))


def compilers_of(framework: Framework) -> frozenset[Compile]:
    """The compilers a framework has (its plugins' `compilers`)."""
    return frozenset().union(*(plugin.rules.compilers for strategy in Strategy
                               if (plugin := find_plugin(framework, strategy)) is not None))


def compile_params(framework: Framework, strategy: Strategy, compile: Compile) -> dict[str, "Param"]:
    """The parameters the case's compiler takes (torch.compile's `compile_mode`); none uncompiled."""
    plugin = find_plugin(framework, strategy)
    return {param.name: param for param in plugin.compile_params.get(compile, ())} if plugin else {}


def strategy_params(framework: Framework, strategy: Strategy) -> dict[str, "Param"]:
    """The parameters the strategy's plugin for `framework` declares (none without a plugin)."""
    plugin = find_plugin(framework, strategy)
    return {param.name: param for param in plugin.params} if plugin else {}


def strategies_for(workload: type["Workload"]) -> list[Strategy]:
    """The strategies some framework's plugin applies to `workload`."""
    return [strategy for strategy in Strategy
            if any(plugin.applies_to(workload) for plugin in plugins_of(strategy))]
