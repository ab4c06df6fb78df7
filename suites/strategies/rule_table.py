"""The strategies' rules as a Markdown table, from the plugins' `rules` values.

One row per registered plugin (strategies in vocabulary order, each strategy's frameworks
together): where its cases exist (devices, workload kinds), how they launch, which compilers its
step runs under, how it computes batch statistics, and every other field whose value differs from
the default of its rules' type. Above it, what each field means: the fields' own documentation
(`suites.strategies.rules.rule`). Nothing is parsed: what the table says is what the runner reads.
`suites.strategies.hook_table` writes it into docs/strategy-hooks.md.
"""
from __future__ import annotations

from dataclasses import fields
from enum import Enum
from typing import Any, Iterable, Mapping

from suites.strategies.base import StrategyPlugin
from suites.strategies.requirement_table import cell, registered
from suites.strategies.rules import Rules, rule_docs

HEADING = "## Rules"
INTRO = ("Each plugin's `rules` (`suites/strategies/rules.py`; TF's add the fields of `TfRules`), validated when "
         "the plugin is defined. A plugin writes them as its base's, changed where it differs: "
         "`rules = RankProcesses.rules.but(statistics_split=\"replicas\")`. The fields:")
#: The fields with a column of their own, in this order; the rest share the last column.
COLUMNS = ("devices", "kinds", "launch", "compile_modes", "statistics_split")
HEADINGS = ("devices", "workload kinds", "launch", "runs under", "batch statistics")


def shown(value: Any) -> str:
    """A rule's value as a table shows it: sets sorted and joined, enums by value, a mapping
    by its keys, True as "yes", None as "—"."""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (set, frozenset)):
        return ", ".join(sorted(shown(each) for each in value))
    if isinstance(value, Mapping):
        return "; ".join(f"{shown(key)}: {text}" for key, text in value.items())
    if value is True:
        return "yes"
    if value is None:
        return "—"
    return str(value)


def statistics(rules: Rules) -> str:
    """The batch-statistics split, and "sync" where the strategy synchronises them."""
    split = shown(rules.statistics_split)
    return f"{split}, sync" if rules.synchronized_statistics else split


def others(rules: Rules) -> str:
    """The fields without a column whose value differs from their default, `name`: value each."""
    defaults = type(rules)()
    return "<br>".join(f"`{each.name}`: {shown(getattr(rules, each.name))}" for each in fields(rules)
                       if each.name not in COLUMNS and each.name not in ("synchronized_statistics", "compilers")
                       and getattr(rules, each.name) != getattr(defaults, each.name)) or "—"


def legend(plugins: list[StrategyPlugin]) -> list[str]:
    """Each field of the plugins' rules types with its documentation, the common type's first."""
    documented: dict[str, str] = {}
    for rules_type in sorted({type(plugin.rules) for plugin in plugins} | {Rules}, key=lambda t: len(t.__mro__)):
        documented.update({name: doc for name, doc in rule_docs(rules_type).items() if name not in documented})
    return [f"- `{name}`: {doc}" for name, doc in documented.items()]


def render(plugins: Iterable[StrategyPlugin] | None = None) -> list[str]:
    """The section's Markdown lines, heading, field list and table, of `plugins` (the registered
    ones where not given)."""
    chosen = registered() if plugins is None else list(plugins)
    lines = [HEADING, "", INTRO, "", *legend(chosen), "",
             "| strategy | framework | " + " | ".join(HEADINGS) + " | also |",
             "| --- | --- | " + " | ".join("---" for _ in HEADINGS) + " | --- |"]
    for plugin in chosen:
        rules = plugin.rules
        values = [shown(rules.devices), shown(rules.kinds), shown(rules.launch), shown(rules.compile_modes),
                  statistics(rules), others(rules)]
        lines.append(f"| {plugin.strategy} | {plugin.framework} | " + " | ".join(map(cell, values)) + " |")
    return lines + [""]
