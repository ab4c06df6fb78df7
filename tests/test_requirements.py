"""A plugin's availability is its list of named requirements (`suites.strategies.requirements`),
evaluated in order by the one `StrategyPlugin.unavailable_reason`: no plugin overrides it, every
requirement has a name unique in its plugin and a summary for the docs, a subclass keeps its
base's requirements in their order, and the docs' table is the plugins' data."""
from __future__ import annotations

import pytest

from suites.cases.vocabulary import Framework, Strategy
from suites.strategies import requirement_table
from suites.strategies.base import StrategyPlugin
from suites.strategies.registry import find_plugin, strategies_of
from suites.strategies.requirements import NAME, Requirement, first_reason, repeated_names, requirement

PLUGINS = [find_plugin(framework, strategy) for framework in Framework for strategy in strategies_of(framework)]
IDS = [f"{plugin.framework}/{plugin.strategy}" for plugin in PLUGINS]


@pytest.mark.parametrize("plugin", PLUGINS, ids=IDS)
def test_no_plugin_overrides_unavailable_reason(plugin):
    below = type(plugin).__mro__[:type(plugin).__mro__.index(StrategyPlugin)]
    overriding = [cls.__name__ for cls in below if "unavailable_reason" in vars(cls)]
    assert not overriding, f"{overriding} override unavailable_reason: declare `requirements` instead"


@pytest.mark.parametrize("plugin", PLUGINS, ids=IDS)
def test_every_requirement_is_named_once_and_summarised(plugin):
    assert plugin.requirements, "a plugin with no requirement runs every case it has anywhere"
    assert all(isinstance(each, Requirement) for each in plugin.requirements)
    assert repeated_names(plugin.requirements) == []
    for each in plugin.requirements:
        assert NAME.fullmatch(each.name), each.name
        assert each.summary.strip() and "\n" not in each.summary, each.name
        assert callable(each.check), each.name


@pytest.mark.parametrize("plugin", PLUGINS, ids=IDS)
def test_a_plugin_keeps_its_bases_requirements_in_their_order(plugin):
    """A subclass spells out `(*Base.requirements, ...)`: dropping or reordering one is a mistake."""
    own = list(plugin.requirements)
    for base in type(plugin).__mro__[1:]:
        inherited = list(vars(base).get("requirements", ()))
        positions = [next((i for i, each in enumerate(own) if each is wanted), -1) for wanted in inherited]
        assert -1 not in positions and positions == sorted(positions), (
            f"{type(plugin).__name__} does not keep {base.__name__}'s requirements in order")


# --- the building blocks ---------------------------------------------------------------------------
def passes(job, device):
    return None


def test_the_first_reason_wins_and_later_checks_do_not_run():
    ran = []

    def fails(job, device):
        ran.append("fails")
        return "first"

    def never(job, device):
        ran.append("never")
        return "second"

    rules = (Requirement("passes", "passes", passes), Requirement("fails", "fails", fails),
             Requirement("never", "never", never))
    assert first_reason(rules, object(), object()) == "first"
    assert ran == ["fails"]
    assert first_reason((), object(), object()) is None
    assert first_reason(rules[:1], object(), object()) is None


def test_the_decorator_names_a_requirement_after_its_function():
    @requirement("what it requires")
    def equal_shards(job, device):
        return None

    assert equal_shards == Requirement("equal-shards", "what it requires", equal_shards.check)
    assert requirement("x", name="1f1b-microbatches")(passes).name == "1f1b-microbatches"


@pytest.mark.parametrize("name, summary", [("Equal Shards", "fine"), ("", "fine"), ("ok", " "),
                                           ("ok", "two\nlines")])
def test_a_malformed_requirement_is_refused_where_it_is_declared(name, summary):
    with pytest.raises(ValueError):
        Requirement(name, summary, passes)


def test_a_plugin_class_cannot_name_two_requirements_alike():
    twice = Requirement("same", "one", passes)
    with pytest.raises(TypeError, match="names same more than once"):
        type("Twice", (StrategyPlugin,), {"requirements": (twice, Requirement("same", "two", passes))})


def test_unavailable_reason_evaluates_the_requirements_in_order():
    class Plugin(StrategyPlugin):
        requirements = (Requirement("passes", "passes", passes),
                        Requirement("needs-a-gpu", "a GPU", lambda job, device: f"{device} is no GPU"))

    assert Plugin().unavailable_reason(object(), "cpu") == "cpu is no GPU"
    assert StrategyPlugin().unavailable_reason(object(), "cpu") is None


# --- the docs' table -----------------------------------------------------------------------------
def test_the_table_lists_every_plugin_and_where_an_inherited_requirement_comes_from():
    lines = requirement_table.render()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(("| strategy", "| ---"))]
    assert len(rows) == len(PLUGINS)
    pipeline = find_plugin(Framework.TF, Strategy.PIPELINE)
    assert requirement_table.listing(pipeline).split("<br>") == [
        "`two-devices` (from `ModelParallel`): two devices or more",
        "`gpu-per-device` (from `ModelParallel`): a visible GPU per device, or logical GPUs split from fewer",
        "`layers-split` (from `ModelParallel`): the model's layers split into a group per device",
        "`microbatches-divide-batch`: `microbatches` divides the global batch"]
