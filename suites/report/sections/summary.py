"""Summary: what to choose, per problem (report-guide §2): the leader and its runner-up, and the
crowns (fastest, cheapest, most per watt) given only beyond noise and from sourced prices (C4,
C9); then what was not ranked and why, and what limits figures (launch-bound, power-capped)."""
from __future__ import annotations

import pandas as pd

from suites.report.analyses.choice import choices, emulated_configs, sentence
from suites.report.analyses.comparability import counts_text
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.limits import limits_summary
from suites.report.analyses.prices import NO_PRICE
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_number, fmt_ratio, fmt_text, tabulate, with_values
from suites.report.sections.base import ReportOptions

TITLE, ANCHOR, NAV = "Summary: what to choose", "summary", "Summary"
NOTHING_RAN = ("No case ran successfully, so there is nothing to choose between; see the unavailable and failed "
               "cases below.")
CAPTION = ("Per problem, among comparable rows only (real hardware; none contended, starved, bimodal, launch- or "
           "host-bound, or above a peak): a crown goes only beyond noise of the runner-up, 'cheapest' only from a "
           "sourced price")


def columns(currency: str) -> list[Column]:
    return [Column("problem", "problem", fmt_text), Column("first", "leader", fmt_text),
            Column("throughput", "throughput", fmt_number), Column("unit", "throughput_unit", fmt_text),
            Column("runner-up", "runner_up", fmt_text), Column("× runner-up", "margin", fmt_ratio),
            Column("noise", "noise_test", fmt_text), Column("fastest", "fastest", fmt_text),
            Column("cheapest", "cheapest", fmt_text), Column(f"its cost ({currency})", "cost_text", fmt_text),
            Column("most per watt", "most_efficient", fmt_text),
            Column("per W", "per_watt", fmt_number), Column("configs", "configs", fmt_number)]


def not_ranked_text(frame: ReportFrame) -> list[str]:
    """One line per problem with emulated rows: they are named, and not ranked."""
    ranked = set(frame.comparable["problem"])  # the problems `choices` ranks, without judging noise
    return [f"Not ranked on {problem}: {', '.join(labels)}; emulated devices share one CPU (or fewer GPUs than "
            f"ranks), so they measure the emulation, not hardware"
            + ("" if problem in ranked else " (no real hardware ran this problem)") + "."
            for problem, labels in emulated_configs(frame.usable).items()]


def not_comparable_text(frame: ReportFrame) -> list[str]:
    """The one "not comparable" line: counts by reason of the usable rows left out of every
    ratio, rank, price and crown (each row's reason is in its problem's table)."""
    left_out = frame.not_comparable
    if left_out.empty:
        return []
    return [f"Not comparable, so in no ratio, rank, price or crown ({len(left_out)} of "
            f"{len(frame.usable)} rows that ran): {counts_text(left_out)}. Each row says why in its "
            f"problem's table ('not comparable'); a figure above a peak is never ranked: the peak table is wrong "
            f"for that device, or the timing is."]


def no_price_text(frame: ReportFrame) -> list[str]:
    """Why configurations that could be chosen have no price (each device and reason once)."""
    rows = frame.comparable
    rows = rows[rows["price_per_hour"].isna()]
    named = (rows["device"] + " " + rows["device_name"].where(rows["device_name"].ne(""), "(unnamed)"))
    return [f"No price for {device} on {machine}: {rule.removeprefix(NO_PRICE + ': ')}."
            for device, machine, rule in sorted(set(zip(named, rows["machine"], rows["price_rule"])))]


def _crowned(table: pd.DataFrame, crown: str) -> pd.Series:
    """A crown column for display: the winner, else 'none: why' ('' where nothing competed)."""
    why = table[f"no_{crown}"].fillna("").astype(str)
    return table[crown].where(table[crown].notna(), why.map(lambda text: f"none: {text}" if text else ""))


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    currency = options.prices.currency
    table = choices(frame.comparable)
    others = {problem: counts_text(group) for problem, group in frame.not_comparable.groupby("problem", sort=True)}
    text = ([sentence(row, currency, others.get(row["problem"], "")) for _, row in table.iterrows()]
            + not_ranked_text(frame) + not_comparable_text(frame) + no_price_text(frame))
    section = Section(TITLE, ANCHOR, nav=NAV, text=(text or [NOTHING_RAN]) + limits_summary(frame.usable))
    shown = table.assign(fastest=_crowned(table, "fastest"), cheapest=_crowned(table, "cheapest"),
                         most_efficient=_crowned(table, "most_efficient"),
                         cost_text=[f"{fmt_number(cost)} {unit}" if unit else ""
                                    for cost, unit in zip(table["cost"], table["cost_unit"])])
    section.tables.append(tabulate(shown, with_values(shown, columns(currency)), caption=CAPTION))
    return section
