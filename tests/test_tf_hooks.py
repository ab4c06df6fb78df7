"""A TF plugin's mechanism is its hooks object (`suites.strategies.tf.base.TfHooks`), not methods of
the plugin: what TF's runnables call while a case runs lives in one small per-strategy class, and the
plugin declares data (rules, requirements, options) and the figures read without TensorFlow."""
from __future__ import annotations

import pytest

from suites.cases.vocabulary import Framework, Strategy
from suites.measure import capabilities
from suites.strategies.base import StrategyPlugin
from suites.strategies.registry import find_plugin
from suites.strategies.tf.base import DistributeHooks, TfHooks, TfStrategy

#: What TF's runnables call on a strategy while a case runs, capabilities included.
MECHANISM = frozenset({"distribute", "trainer", "describe", "all_reduce_name", "lockstep", "kernel_devices",
                       "kernel_cache_shares", "serve"})
TF_PLUGINS = {strategy: plugin for strategy in Strategy
              if (plugin := find_plugin(Framework.TF, strategy)) is not None}


def test_every_tf_plugin_has_hooks():
    assert TF_PLUGINS
    for strategy, plugin in TF_PLUGINS.items():
        assert isinstance(plugin.hooks, TfHooks), strategy


@pytest.mark.parametrize("strategy", sorted(TF_PLUGINS, key=str), ids=str)
def test_no_tf_plugin_class_defines_a_mechanism_method_itself(strategy):
    cls = type(TF_PLUGINS[strategy])
    below = cls.__mro__[:cls.__mro__.index(StrategyPlugin)]
    defined = {f"{klass.__name__}.{name}" for klass in below for name in MECHANISM & set(vars(klass))}
    assert not defined, f"mechanism on the plugin, not its hooks: {sorted(defined)}"


def test_a_tf_plugin_whose_hooks_are_no_tf_hooks_is_refused_at_its_definition():
    class NotHooks:
        def trainer(self, setup, job, params, strategy):
            raise AssertionError

    with pytest.raises(TypeError, match="Plain.hooks must be a TfHooks"):
        class Plain(TfStrategy):  # noqa: F841
            strategy = Strategy.SINGLE
            hooks = NotHooks()


def test_the_capabilities_are_asked_of_the_hooks():
    hooks = {strategy: plugin.hooks for strategy, plugin in TF_PLUGINS.items()}
    assert isinstance(hooks[Strategy.TOWERS], capabilities.SplitsKernels)
    assert isinstance(hooks[Strategy.MULTIWORKER], capabilities.CoordinatesWorkers)
    assert isinstance(hooks[Strategy.PARAMETER_SERVER], capabilities.ServesCluster)
    assert not isinstance(hooks[Strategy.MIRRORED], (capabilities.SplitsKernels, capabilities.CoordinatesWorkers,
                                                     capabilities.ServesCluster))
    assert isinstance(hooks[Strategy.MIRRORED], DistributeHooks)


def test_the_default_hooks_name_the_plugin_through_the_job():
    job = type("Job", (), {"strategy": TF_PLUGINS[Strategy.HOROVOD]})()
    assert TfHooks().describe(job, {}) == "horovod"
    with pytest.raises(NotImplementedError, match="horovod has no TF training layout"):
        TfHooks().trainer(None, job, {}, None)
