"""A torch plugin's mechanism is its hooks object (`suites.strategies.torch.base.TorchHooks`): what
torch's runnables call while a case runs lives there, never on the plugin class, and the optional
mechanism capabilities (`StepsItself`, `SeparatesExchange`, `SplitsKernels`) are the hooks'."""
from __future__ import annotations

import pytest

from suites.cases.vocabulary import Framework, Strategy
from suites.measure.capabilities import SeparatesExchange, SplitsKernels, StepsItself
from suites.strategies.base import StrategyPlugin
from suites.strategies.registry import find_plugin, strategies_of
from suites.strategies.torch.base import RankHooks, RankProcesses, TorchHooks, TorchStrategy

PLUGINS = [find_plugin(Framework.TORCH, strategy) for strategy in strategies_of(Framework.TORCH)]
#: What torch's runnables call on a strategy while a case runs: the hooks' methods.
MECHANISM = ("join", "wrap", "devices_in_use", "data_shard", "handles_precision", "gradients",
             "train_step", "check_wrap", "global_loss", "local_step", "kernel_devices", "kernel_cache_shares")


def test_torch_has_plugins():
    assert len(PLUGINS) >= 9 and all(plugin is not None for plugin in PLUGINS)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda plugin: str(plugin.strategy))
def test_every_torch_plugins_hooks_are_torch_hooks_from_its_own_module(plugin):
    assert isinstance(plugin.hooks, TorchHooks)
    assert type(plugin.hooks).__module__ in (type(plugin).__module__, "suites.strategies.torch.base")
    if isinstance(plugin, RankProcesses):  # a rank process joins a process group
        assert isinstance(plugin.hooks, RankHooks)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda plugin: str(plugin.strategy))
def test_no_torch_plugin_class_defines_a_mechanism_method(plugin):
    mro = type(plugin).__mro__
    below = mro[:mro.index(StrategyPlugin)]
    defined = {f"{cls.__name__}.{name}" for cls in below for name in MECHANISM if name in vars(cls)}
    assert not defined, f"mechanism on the plugin, not its hooks: {sorted(defined)}"


def test_hooks_that_are_not_torch_hooks_fail_at_definition():
    class Loose:
        def wrap(self, model, device, job):
            return model

    with pytest.raises(TypeError, match="Bad.hooks must be a TorchHooks"):
        class Bad(TorchStrategy):
            strategy = Strategy.SINGLE
            hooks = Loose()  # type: ignore[assignment]

    with pytest.raises(TypeError, match="ClassNotInstance.hooks"):
        class ClassNotInstance(RankProcesses):
            strategy = Strategy.DDP
            hooks = RankHooks  # type: ignore[assignment]

    class Good(TorchStrategy):
        strategy = Strategy.SINGLE
        hooks = RankHooks()

    assert isinstance(Good().hooks, RankHooks)


def test_the_mechanism_capabilities_are_the_hooks():
    by_strategy = {plugin.strategy: plugin for plugin in PLUGINS}
    implementers = {capability: {plugin.strategy for plugin in PLUGINS if isinstance(plugin.hooks, capability)}
                    for capability in (StepsItself, SeparatesExchange, SplitsKernels)}
    # the built-in implementers (a new strategy may implement them too)
    assert Strategy.PIPELINE in implementers[StepsItself] and Strategy.DDP in implementers[SeparatesExchange]
    assert Strategy.TOWERS in implementers[SplitsKernels]
    assert not any(isinstance(plugin, (StepsItself, SeparatesExchange, SplitsKernels)) for plugin in PLUGINS)
    assert type(by_strategy[Strategy.SINGLE].hooks) is TorchHooks
