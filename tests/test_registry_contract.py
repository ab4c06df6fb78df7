"""The registry's contract: what every workload, strategy and workload kind must supply for
the front ends to run it. A new entry that forgets a piece fails here, not in a user's run."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Framework, Strategy
from suites.frameworks.implementations import implementations, runnable_class
from suites.frontends.asv_support import KIND_MODULES
from suites.hardware.devices import descriptor
from suites.measure.launch import Launch
from suites.runner.launchers import LAUNCHERS
from suites.measure.runnable import Runnable
from suites.strategies.registry import PLUGIN_PACKAGE, find_plugin, plugins_of
from suites.strategies.tf.base import TfStrategy
from suites.strategies.torch.base import TorchStrategy
from suites.workloads import WORKLOADS, UnknownWorkload, workload_class, workload_of
from suites.workloads.sources import module_file

ROOT = Path(__file__).resolve().parent.parent
IMPLEMENTATIONS = [(name, framework) for name, workload in sorted(WORKLOADS.items())
                   for framework in sorted(implementations(workload), key=str)]


def _calls(path: Path, function: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == function]


@pytest.mark.parametrize("name, framework", IMPLEMENTATIONS, ids=[f"{n}-{f}" for n, f in IMPLEMENTATIONS])
def test_every_implementation_path_names_a_runnable(name, framework):
    module_name, _, class_name = implementations(WORKLOADS[name])[framework].partition(":")
    source = module_file(module_name)
    assert source is not None, f"{name}/{framework}: no module {module_name}"
    classes = {node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ClassDef)}
    assert class_name in classes, f"{name}/{framework}: {module_name} defines no {class_name}"

    pytest.importorskip(descriptor(framework).import_name)
    runnable = runnable_class(WORKLOADS[name], framework)
    assert isinstance(runnable, type) and issubclass(runnable, Runnable)


FRAMEWORK_BASES = {Framework.TORCH: TorchStrategy, Framework.TF: TfStrategy}


@pytest.mark.parametrize("strategy", list(Strategy), ids=str)
def test_every_strategy_has_a_plugin_with_devices_workloads_and_a_launcher(strategy):
    plugins = plugins_of(strategy)
    assert plugins, f"no module {PLUGIN_PACKAGE}.<framework>.{strategy}"
    for plugin in plugins:
        assert isinstance(plugin, FRAMEWORK_BASES[plugin.framework])  # it has the framework's hooks
        assert plugin.rules.devices, f"{plugin.framework}/{strategy} runs on no device kind"
        assert any(plugin.applies_to(workload) for workload in WORKLOADS.values())
        assert isinstance(plugin.rules.launch, Launch) and plugin.rules.launch in LAUNCHERS


def test_every_plugin_module_is_a_strategy_of_its_framework():
    """A module or package (a strategy with its mechanism beside its plugin) dropped into
    suites/strategies/<framework>/ is a strategy name (or a shared `base`), so the registry can
    find it; nothing there is silently ignored."""
    for framework in Framework:
        folder = ROOT / "suites" / "strategies" / str(framework)
        packages = [init.parent for init in folder.glob("*/__init__.py")]
        for module in sorted([*folder.glob("*.py"), *packages]):
            if module.stem in ("__init__", "base"):
                continue
            assert module.stem in Strategy.names(), f"{module}: not a strategy name"
            assert find_plugin(framework, Strategy(module.stem)) is not None


def test_launch_modes_each_have_a_launcher():
    assert set(LAUNCHERS) == set(Launch)


def test_every_workload_kind_has_an_asv_benchmarks_module():
    assert {w.kind for w in WORKLOADS.values()} <= set(KIND_MODULES)


@pytest.mark.parametrize("kind, module", sorted(KIND_MODULES.items()))
def test_each_asv_benchmarks_module_generates_the_classes_of_its_kind(kind, module):
    path = ROOT / "benchmarks" / f"{module}.py"
    assert path.is_file()
    generated = [ast.literal_eval(call.args[0]) for call in _calls(path, "benchmark_classes")]
    assert generated == [kind]


def test_an_unknown_workload_is_named_with_the_registered_ones():
    with pytest.raises(UnknownWorkload) as raised:
        workload_of(Case.make("nope", "torch", "cpu"))
    assert isinstance(raised.value, KeyError)
    assert "'nope'" in str(raised.value) and all(name in str(raised.value) for name in WORKLOADS)
    with pytest.raises(UnknownWorkload):
        workload_class("nope")
    assert workload_class("matmul") is WORKLOADS["matmul"]
