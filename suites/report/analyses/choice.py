"""The decision rows: per problem, the fastest configuration and the cheapest per unit of work.

Only `comparable` rows compete (suites.report.analyses.comparability): ran, passed their numerics check,
on real hardware (emulated rows measure the emulation; `emulated_configs` names them for the
summary to list apart), none contended, starved, bimodal, launch- or host-bound, or above a peak.
A problem with one configuration ranks nothing: its sentence says so. A crown goes to the first
only beyond noise of the runner-up (suites.report.analyses.noise; rule C4): otherwise "X ≈ Y" and no crown.
Fastest is by throughput. Cheapest is per million samples where the workload counts samples,
else per PFLOP, only from sourced prices (an illustrative one crowns nothing) and only among
candidates of at least two hourly prices (with one, cost order is speed order; rule C9). Most
per watt is the highest throughput per watt, within one energy scope (rule C10).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from suites.report.load.columns import config_label
from suites.report.load.numbers import compact
from suites.report.analyses.comparison import noise_columns

PAIR = ["throughput", "median_s", "samples_s", "q1_s", "q3_s"]


def cost_per_unit(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    samples = frame["cost_per_m_samples"].notna()
    cost = frame["cost_per_m_samples"].where(samples, frame["cost_per_pflop"])
    unit = pd.Series("per M samples", index=frame.index).where(samples, "per PFLOP")
    return cost, unit.where(cost.notna(), "")


def emulated_configs(rows: pd.DataFrame) -> dict[str, list[str]]:
    """Per problem, the labels of its usable emulated rows among `rows` (the latest usable ones;
    left out of `choices`)."""
    rows = rows[rows["emulated"].fillna(False).astype(bool)]
    return {str(problem): sorted(config_label(group)) for problem, group in rows.groupby("problem", sort=True)}


COLUMNS = ["problem", "leader", "throughput", "throughput_unit", "runner_up", "margin", "beyond_noise", "noise_test",
           "fastest", "no_fastest", "cheapest", "cost", "cost_unit", "no_cheapest", "most_efficient", "per_watt",
           "per_watt_scope", "no_most_efficient", "configs"]


def _judge(first: pd.Series, second: pd.Series, scale: str | None = None) -> pd.Series:
    """The noise verdict of `first` against `second` (rows of one problem); with `scale`, on step
    times per unit of work times that column (a price, a power): cost or energy per unit of work."""
    pair = {**{c: first[c] for c in PAIR}, **{f"{c}_base": second[c] for c in PAIR}}
    if scale is not None:
        pair["throughput"] = first["throughput"] / first[scale]
        pair["throughput_base"] = second["throughput"] / second[scale]
    return noise_columns(pd.DataFrame([pair])).iloc[0]


def _crown(ranked: pd.DataFrame, alone: str, scale: str | None, measure: str = "") -> tuple[str | None, str]:
    """(winner's config or None, why none): the first of `ranked` wins only beyond noise of the
    second ('X ≈ Y<measure> (within noise ...)'); alone, it wins nothing ('only X <alone>')."""
    if len(ranked) < 2:
        return None, f"only {ranked['config'].iloc[0]} {alone}" if len(ranked) else ""
    first, second = ranked.iloc[0], ranked.iloc[1]
    judged = _judge(first, second, scale)
    if bool(judged["beyond_noise"]):
        return str(first["config"]), ""
    return None, f"{first['config']} ≈ {second['config']}{measure} ({judged['noise_test']})"


def _cheapest(group: pd.DataFrame) -> tuple[str | None, float, str, str]:
    """(cheapest config or None, its cost, unit, why none). Only a sourced price crowns, and only
    among candidates of at least two hourly prices: with one, cost order is speed order."""
    priced = group.dropna(subset=["cost"])
    if priced.empty:
        return None, np.nan, "", ""
    sourced = priced[priced["price_sourced"].astype("boolean").fillna(False).astype(bool)]
    if sourced.empty:
        rules = ", ".join(sorted(set(priced["price_rule"])))
        return None, np.nan, "", f"the only prices are illustrative ({rules})"
    if sourced["price_per_hour"].nunique() < 2:
        if len(sourced) == 1:
            return None, np.nan, "", f"only {sourced['config'].iloc[0]} has a sourced price"
        return None, np.nan, "", (f"every candidate with a sourced price costs the same per hour "
                                  f"({sourced['price_rule'].iloc[0]}), so cost order is speed order")
    ranked = sourced.sort_values("cost", kind="stable")
    winner, why = _crown(ranked, "has a sourced price", "price_per_hour", " in cost")
    best = ranked.iloc[0]
    return winner, (best["cost"] if winner else np.nan), (best["cost_unit"] if winner else ""), why


def _most_efficient(group: pd.DataFrame) -> tuple[str | None, float, str, str]:
    """(config doing the most per watt or None, its figure, energy scope, why none): compared
    only within the energy scope of the best reading (NVML board vs RAPL package: rule C10)."""
    read = group.dropna(subset=["throughput_per_watt"]).sort_values("throughput_per_watt", ascending=False,
                                                                     kind="stable")
    if read.empty:
        return None, np.nan, "", ""
    scope = read["energy_scope"].iloc[0] if "energy_scope" in read else ""
    if "energy_scope" in read:
        read = read[read["energy_scope"].eq(scope)]
    winner, why = _crown(read, "read its energy" + (f" ({scope})" if scope else ""), "energy_watts", " per watt")
    best = read.iloc[0]
    return winner, (best["throughput_per_watt"] if winner else np.nan), scope, why


def _limit_not_recorded(group: pd.DataFrame) -> list[str]:
    """The accelerator configs among `group` whose record says nothing of what limits them (no
    `bound_by`): a GPU's small step may measure the host launching kernels, not the device."""
    if "bound_by" not in group or "device" not in group:
        return []
    verdict = group["bound_by"].astype("string").fillna("").str.strip()
    accelerator = group["device"].astype("string").fillna("cpu").ne("cpu")
    return sorted(set(group.loc[verdict.eq("") & accelerator, "config"]))


def choices(candidates: pd.DataFrame) -> pd.DataFrame:
    """One row per problem among `candidates`, the rows that may be chosen (the latest
    `comparable` ones: `ReportFrame.comparable`): the leader and runner-up with the noise
    verdict, and the crowns (fastest, cheapest, most per watt), each given only beyond noise of
    its runner-up (rule C4) and otherwise None with `no_<crown>` saying why. Needs cost columns."""
    rows = candidates.copy(deep=False)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows["config"] = config_label(rows)
    rows["cost"], rows["cost_unit"] = cost_per_unit(rows)
    if "price_sourced" not in rows:
        rows["price_sourced"] = False
    table = []
    for problem, group in rows.groupby("problem", sort=True):
        ranked = group.sort_values("throughput", ascending=False, kind="stable")
        first = ranked.iloc[0]
        entry = {"problem": problem, "leader": first["config"], "throughput": first["throughput"],
                 "throughput_unit": first["throughput_unit"], "runner_up": None, "margin": np.nan,
                 "beyond_noise": False, "noise_test": "", "configs": group["config"].nunique()}
        if len(ranked) > 1:
            second = ranked.iloc[1]
            judged = _judge(first, second)
            margin = first["throughput"] / second["throughput"] if second["throughput"] > 0 else np.nan
            entry.update(runner_up=second["config"], margin=margin, beyond_noise=bool(judged["beyond_noise"]),
                         noise_test=judged["noise_test"])
        entry["fastest"], entry["no_fastest"] = _crown(ranked, "is comparable", None)
        unverified = _limit_not_recorded(group)
        if entry["fastest"] and unverified:  # a launch-bound figure could be among them, unflagged
            entry["fastest"], entry["no_fastest"] = None, (
                f"what limits {', '.join(unverified)} was not recorded (records before bound_by), so a "
                f"launch-bound figure cannot be told from a device's")
        entry["cheapest"], entry["cost"], entry["cost_unit"], entry["no_cheapest"] = _cheapest(group)
        (entry["most_efficient"], entry["per_watt"], entry["per_watt_scope"],
         entry["no_most_efficient"]) = _most_efficient(group)
        table.append(entry)
    return pd.DataFrame(table, columns=COLUMNS)


def sentence(row: pd.Series, currency: str, others: str = "") -> str:
    """'On matmul k=512,..., X is fastest (1.3x the runner-up Y, beyond noise); Z is cheapest ...';
    within noise: 'X ≈ Y (...): no fastest'; with one configuration: 'On ..., only X ran (...):
    nothing to rank it against.'. `others`: the problem's usable rows left out, e.g. '2 contended'."""
    figure = f"{compact(row['throughput'])} {row['throughput_unit']}"
    if row["configs"] == 1:
        if others:
            return (f"On {row['problem']}, only {row['leader']} is comparable ({figure}): nothing to rank it "
                    f"against; not comparable: {others}.")
        return f"On {row['problem']}, only {row['leader']} ran on real hardware ({figure}): nothing to rank it against."
    if isinstance(row.get("fastest"), str):
        text = f"On {row['problem']}, {row['fastest']} is fastest ({figure}"
    elif bool(row.get("beyond_noise")):  # ahead beyond noise, uncrowned for another reason: no '≈'
        text = f"On {row['problem']}, {row['leader']} leads {row['runner_up']} ({figure}"
    else:
        text = f"On {row['problem']}, {row['leader']} ≈ {row['runner_up']} ({figure}"
    if isinstance(row.get("runner_up"), str) and pd.notna(row["margin"]):
        text += f"; {row['margin']:.2f}× {row['runner_up']}, {row['noise_test']}"
    elif isinstance(row.get("runner_up"), str):  # the runner-up does no work per step: nothing to divide by
        text += f"; runner-up {row['runner_up']}: no ratio"
    if isinstance(row.get("fastest"), str):
        text += ")"
    elif row.get("no_fastest") and (bool(row.get("beyond_noise")) or "not recorded" in str(row["no_fastest"])):
        text += f"), but no fastest: {row['no_fastest']}"
    else:
        text += "): no fastest, the two are within noise"
    if isinstance(row.get("cheapest"), str):
        text += f"; {row['cheapest']} is cheapest ({compact(row['cost'])} {currency} {row['cost_unit']})"
    elif row.get("no_cheapest"):
        text += f"; no cheapest: {row['no_cheapest']}"
    if isinstance(row.get("most_efficient"), str):
        scope = f", {row['per_watt_scope']}" if row.get("per_watt_scope") else ""
        text += (f"; {row['most_efficient']} does the most per watt ({compact(row['per_watt'])} "
                 f"{row['throughput_unit']} per W{scope})")
    elif row.get("no_most_efficient"):
        text += f"; no most per watt: {row['no_most_efficient']}"
    if others:
        text += f"; not comparable: {others}"
    return text + "."
