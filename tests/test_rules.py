"""A strategy plugin's rules are one validated value: a contradiction raises where the plugin is
defined, naming the field, and every registered plugin's rules are what the runner reads."""
from __future__ import annotations

from dataclasses import fields

import pytest

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.measure.launch import Launch
from suites.strategies.requirement_table import registered
from suites.strategies.rules import Rules, RulesError
from suites.strategies.tf.base import TfRules, TfStrategy
from suites.strategies.torch.base import RankProcesses, TorchStrategy

TORCH_COMPILERS = frozenset({Compile.NONE, Compile.INDUCTOR})


@pytest.mark.parametrize("changes, named", [
    ({"devices": frozenset()}, "devices is empty"),
    ({"kinds": frozenset({"kernels"})}, "kinds holds ['kernels']"),
    ({"compile_modes": frozenset({Compile.INDUCTOR})}, "compile_modes leaves out 'none'"),
    ({"compile_modes": frozenset({Compile.NONE, Compile.XLA})}, "compile_modes ['xla'] are not among"),
    ({"compile_limits": {Compile.NONE: "why"}}, "compile_limits explains ['none']"),
    ({"statistics_split": "replica"}, "statistics_split 'replica' is none of whole, replicas"),
    ({"synchronized_statistics": True}, "synchronized_statistics needs statistics_split 'replicas'"),
    ({"launch": "ranks"}, "launch 'ranks' is none of"),
    ({"startup_allowance_s": 0.0}, "startup_allowance_s 0.0 is not a positive number"),
    ({"devices": frozenset({DeviceKind.TPU}), "shares_gpus": True}, "shares_gpus is set, but GPU"),
])
def test_a_contradiction_raises_naming_the_field(changes, named):
    with pytest.raises(RulesError, match="Rules: .*" + named.replace("[", r"\[").replace("(", r"\(")):
        TorchStrategy.rules.but(**changes)


def test_every_contradiction_is_said_at_once():
    with pytest.raises(RulesError) as raised:
        Rules(devices=frozenset(), statistics_split="half")
    assert "devices is empty" in str(raised.value) and "statistics_split 'half'" in str(raised.value)


def test_tf_rules_tie_their_process_fields_to_the_launch():
    with pytest.raises(RulesError, match="replicas_in_process needs launch 'isolated'"):
        TfStrategy.rules.but(replicas_in_process=True)
    with pytest.raises(RulesError, match="coordinated needs launch 'ranks'"):
        TfStrategy.rules.but(coordinated=True, launch=Launch.ISOLATED)
    assert TfStrategy.rules.but(coordinated=True, launch=Launch.RANKS).coordinated


def test_a_tf_plugin_with_rules_tf_cannot_read_is_refused_at_its_definition():
    with pytest.raises(TypeError, match="rules must be TfRules"):
        class Plain(TfStrategy):  # noqa: F841
            strategy = Strategy.SINGLE
            rules = Rules(compilers=frozenset({Compile.NONE, Compile.XLA}))


def test_a_plugin_changes_its_bases_rules_only_where_it_says():
    class Replicas(RankProcesses):
        strategy = Strategy.DDP
        rules = RankProcesses.rules.but(statistics_split="replicas")

    assert Replicas.rules.statistics_split == "replicas"
    assert Replicas.rules.launch is Launch.RANKS and Replicas.rules.shares_gpus  # RankProcesses'
    assert Replicas.rules.compilers == TORCH_COMPILERS  # TorchStrategy's
    assert RankProcesses.rules.statistics_split is None  # the base is untouched


def test_the_compile_limits_of_rules_cannot_be_changed_after_they_are_validated():
    limits = {Compile.INDUCTOR: "not yet"}
    rules = TorchStrategy.rules.but(compile_limits=limits)
    limits[Compile.NONE] = "sneaked in"
    assert dict(rules.compile_limits) == {Compile.INDUCTOR: "not yet"}
    with pytest.raises(TypeError):
        rules.compile_limits[Compile.NONE] = "x"  # type: ignore[index]


def test_every_field_is_documented_for_the_docs_table():
    for rules_type in (Rules, TfRules):
        undocumented = [each.name for each in fields(rules_type) if not each.metadata.get("doc")]
        assert not undocumented, f"{rules_type.__name__} fields without a doc: {undocumented}"


def test_every_registered_plugin_has_valid_rules_of_its_frameworks_type():
    for plugin in registered():
        assert plugin.rules.problems() == [], f"{plugin.framework}/{plugin.strategy}"
        expected = TfRules if isinstance(plugin, TfStrategy) else Rules
        assert isinstance(plugin.rules, expected), f"{plugin.framework}/{plugin.strategy}"
        assert plugin.rules.compilers >= {Compile.NONE}
