"""The strategy interface stays narrow: a hook that only one strategy gives meaning to is an
optional capability (`suites.measure.capabilities`), not a base-class default every other
plugin inherits, on the plugin classes and on their mechanism objects (`hooks`) alike. The
plugins are the registry's, for every framework."""
from __future__ import annotations

import inspect
from typing import Protocol

import pytest

from suites.strategies.registry import find_plugin, strategies_of
from suites.cases.vocabulary import Framework
from suites.measure import capabilities
from suites.strategies.base import StrategyPlugin
from suites.strategies.tf.base import TfHooks, TfStrategy
from suites.strategies.torch.base import TorchHooks, TorchStrategy

PLUGINS = [find_plugin(framework, strategy) for framework in Framework for strategy in strategies_of(framework)]
#: The interface bases: what every plugin (of a framework) has, and its mechanism object's
#: (intermediate bases such as `RankProcesses` or `RankHooks` are one kind of strategy's).
BASES = (StrategyPlugin, TfStrategy, TorchStrategy, TfHooks, TorchHooks)
CAPABILITIES = [value for _, value in inspect.getmembers(capabilities, inspect.isclass)
                if issubclass(value, Protocol) and value is not Protocol
                and getattr(value, "_is_runtime_protocol", False)]


def part(plugin: object, base: type) -> object | None:
    """The plugin where it derives from `base`, else its mechanism object where that does."""
    if isinstance(plugin, base):
        return plugin
    hooks = getattr(plugin, "hooks", None)
    return hooks if isinstance(hooks, base) else None


def has_capability(plugin: object, protocol: type) -> bool:
    return isinstance(plugin, protocol) or isinstance(getattr(plugin, "hooks", None), protocol)


def overriders(base: type, name: str, plugins: list = PLUGINS) -> list[str]:
    """The plugins whose own class (or a class between it and `base`) defines `name` again."""
    found = []
    for plugin in plugins:
        owner = part(plugin, base)
        if owner is None:
            continue
        below = type(owner).__mro__[:type(owner).__mro__.index(base)]
        if any(name in vars(cls) for cls in below):
            found.append(f"{plugin.framework}/{plugin.strategy}")
    return found


def methods_of(base: type) -> list[str]:
    return sorted(name for name, value in vars(base).items()
                  if inspect.isfunction(value) and not name.startswith("_"))


def protocol_members(protocol: type) -> set[str]:
    return {name for name in {*vars(protocol), *getattr(protocol, "__annotations__", {})}
            if not name.startswith("_")}


def test_the_registry_has_plugins_of_both_frameworks():
    assert {plugin.framework for plugin in PLUGINS} == set(Framework)
    assert len(PLUGINS) == sum(len(strategies_of(framework)) for framework in Framework)


@pytest.mark.parametrize("base", BASES, ids=lambda base: base.__name__)
def test_no_base_method_is_overridden_by_exactly_one_plugin(base):
    """Such a hook is one strategy's branch behind a do-nothing default: make it a capability."""
    single = {name: found for name in methods_of(base) if len(found := overriders(base, name)) == 1}
    assert not single, f"{base.__name__} methods only one plugin overrides (make them capabilities): {single}"


def test_the_checker_sees_a_single_user_hook():
    """A base method one plugin overrides is found, as `kernel_devices` on `TfStrategy` was."""
    class Widened(TfStrategy):
        def lone_hook(self) -> None:
            """One strategy's branch."""

    class Lone(Widened):
        strategy = "lone"

        def lone_hook(self) -> None:
            """Its meaning."""

    class Other(Widened):
        strategy = "other"

    assert methods_of(Widened) == ["lone_hook"]
    assert overriders(Widened, "lone_hook", [Lone(), Other(), *PLUGINS]) == ["tf/lone"]


@pytest.mark.parametrize("protocol", CAPABILITIES, ids=lambda protocol: protocol.__name__)
def test_every_capability_has_an_implementer_and_docstrings(protocol):
    implementers = [f"{plugin.framework}/{plugin.strategy}" for plugin in PLUGINS if has_capability(plugin, protocol)]
    assert implementers, f"no plugin implements {protocol.__name__}"
    assert protocol.__doc__
    for name in protocol_members(protocol):
        member = vars(protocol).get(name)
        if inspect.isfunction(member):
            assert member.__doc__, f"{protocol.__name__}.{name} has no docstring"


@pytest.mark.parametrize("protocol", CAPABILITIES, ids=lambda protocol: protocol.__name__)
def test_no_base_class_has_a_capability_member(protocol):
    """A capability is optional: a default on a base would make every plugin implement it."""
    for base in BASES:
        assert not protocol_members(protocol) & set(dir(base)), (base.__name__, protocol.__name__)


def test_the_capabilities_are_runtime_checkable_and_cover_the_single_user_hooks():
    assert {protocol.__name__ for protocol in CAPABILITIES} >= {
        "SplitsKernels", "PipelineBubble", "ServesCluster", "StepsItself"}
    by_name = {f"{plugin.framework}/{plugin.strategy}": plugin for plugin in PLUGINS}
    # the mechanism's capabilities are its hooks object's; an analytic figure is the plugin's
    assert isinstance(by_name["tf/towers"].hooks, capabilities.SplitsKernels)
    assert isinstance(by_name["torch/towers"].hooks, capabilities.SplitsKernels)
    assert not has_capability(by_name["tf/mirrored"], capabilities.SplitsKernels)
    assert isinstance(by_name["tf/parameter_server"].hooks, capabilities.ServesCluster)
    assert by_name["tf/parameter_server"].rules.soft_placement_reason
    assert by_name["tf/multiworker"].rules.soft_placement_reason is None
    assert isinstance(by_name["torch/pipeline"].hooks, capabilities.StepsItself)
    assert not has_capability(by_name["torch/ddp"], capabilities.StepsItself)
    assert isinstance(by_name["torch/ddp"].hooks, capabilities.SeparatesExchange)
    assert isinstance(by_name["torch/pipeline"], capabilities.PipelineBubble)


@pytest.mark.parametrize("base", BASES, ids=lambda base: base.__name__)
def test_every_base_method_has_a_one_line_summary(base):
    """The hook table in the docs is generated from these."""
    missing = [name for name in methods_of(base) if not (getattr(base, name).__doc__ or "").strip()]
    assert not missing, f"{base.__name__}: {missing}"
