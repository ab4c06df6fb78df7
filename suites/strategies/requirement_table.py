"""The strategies' availability rules as a Markdown table, from the plugins' data.

One row per plugin of the registry (`suites.strategies.registry`), strategies in vocabulary
order and each strategy's frameworks together: its `requirements`
(`suites.strategies.requirements.Requirement`), name and summary, in the order
`StrategyPlugin.unavailable_reason` checks them. A requirement the plugin's class inherits says
from which class. Nothing is parsed: the rows are the plugins' own data, so the table cannot
say other than what runs. `suites.strategies.hook_table` writes it into docs/strategy-hooks.md.
"""
from __future__ import annotations

from typing import Iterable

from suites.cases.vocabulary import Framework, Strategy
from suites.strategies.base import StrategyPlugin
from suites.strategies.registry import find_plugin
from suites.strategies.requirements import Requirement

HEADING = "## Availability requirements"
INTRO = ("Each plugin's `requirements`, in the order `StrategyPlugin.unavailable_reason` checks them: the first "
         "a case does not meet gives the reason it is unavailable. \"from `Base`\" marks one the plugin's class "
         "inherits; a plugin adds its own as `Requirement` objects (suites/strategies/requirements.py).")


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def registered() -> list[StrategyPlugin]:
    """Every registered plugin, by strategy, then framework."""
    return [plugin for strategy in Strategy for framework in Framework
            if (plugin := find_plugin(framework, strategy)) is not None]


def declared_by(plugin: StrategyPlugin, requirement: Requirement) -> type:
    """The class that first lists `requirement` (the same object) in its own `requirements`,
    the most basic of the plugin's classes."""
    return next(cls for cls in reversed(type(plugin).__mro__)
                if any(each is requirement for each in vars(cls).get("requirements", ())))


def listing(plugin: StrategyPlugin) -> str:
    """The plugin's requirements, "`name`: summary" each, in order, as one table cell."""
    items = []
    for requirement in plugin.requirements:
        source = declared_by(plugin, requirement)
        inherited = f" (from `{source.__name__}`)" if source is not type(plugin) else ""
        items.append(f"`{requirement.name}`{inherited}: {requirement.summary}")
    return "<br>".join(map(cell, items)) or "—"


def render(plugins: Iterable[StrategyPlugin] | None = None) -> list[str]:
    """The section's Markdown lines, heading, introduction and table, of `plugins` (the
    registered ones where not given)."""
    lines = [HEADING, "", INTRO, "", "| strategy | framework | requirements (name: summary) |", "| --- | --- | --- |"]
    lines += [f"| {plugin.strategy} | {plugin.framework} | {listing(plugin)} |"
              for plugin in (registered() if plugins is None else plugins)]
    return lines + [""]
