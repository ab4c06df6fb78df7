"""The decision rows: per problem, the fastest configuration and the cheapest per unit of work.

Only rows that ran and passed their numerics check compete, and only on real hardware: emulated
rows (several logical devices or ranks sharing one CPU) measure the emulation, so they never
win a ranking or a price comparison; `emulated_configs` names them for the summary to list
apart. A problem with one configuration ranks nothing: its sentence says so. The fastest is compared with the
runner-up (noise rule: suites.report.noise), so "X is fastest" says when X and the runner-up
are within each other's spread. Cheapest is per million samples where the workload counts
samples, else per PFLOP. Most efficient is the highest throughput per watt, where energy was read.
"""
from __future__ import annotations

import pandas as pd

from suites.report.columns import config_label
from suites.report.comparison import noise_columns, positive
from suites.report.selection import latest, real_hardware, usable

PAIR = ["throughput", "median_s", "samples_s", "q1_s", "q3_s"]


def cost_per_unit(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    samples = frame["cost_per_m_samples"].notna()
    cost = frame["cost_per_m_samples"].where(samples, frame["cost_per_pflop"])
    unit = pd.Series("per M samples", index=frame.index).where(samples, "per PFLOP")
    return cost, unit.where(cost.notna(), "")


def candidates(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that may be chosen: the latest, usable, on real hardware."""
    return real_hardware(usable(latest(frame))).copy()


def emulated_configs(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Per problem, the labels of its usable emulated rows (left out of `choices`)."""
    rows = usable(latest(frame))
    rows = rows[rows["emulated"].fillna(False).astype(bool)]
    return {str(problem): sorted(config_label(group)) for problem, group in rows.groupby("problem", sort=True)}


def choices(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with real hardware: fastest, runner-up with the noise verdict, cheapest.
    Needs cost columns."""
    rows = candidates(frame)
    if rows.empty:
        return pd.DataFrame(columns=["problem", "fastest", "throughput", "throughput_unit", "runner_up",
                                     "margin", "beyond_noise", "noise_test", "cheapest", "cost", "cost_unit",
                                     "most_efficient", "per_watt", "configs"])
    rows["config"] = config_label(rows)
    rows["cost"], rows["cost_unit"] = cost_per_unit(rows)
    ranked = rows.sort_values(["problem", "throughput"], ascending=[True, False])
    first = ranked.groupby("problem").nth(0).set_index("problem")
    second = ranked.groupby("problem").nth(1).set_index("problem")
    pairs = first[["config", *PAIR]].join(second[["config", *PAIR]].add_suffix("_base"), how="left")
    has_second = pairs["config_base"].notna()
    judged = noise_columns(pairs[has_second])
    cheapest = (rows.dropna(subset=["cost"]).sort_values("cost").groupby("problem").nth(0)
                .set_index("problem")[["config", "cost", "cost_unit"]].rename(columns={"config": "cheapest"}))
    efficient = (rows.dropna(subset=["throughput_per_watt"]).sort_values("throughput_per_watt", ascending=False)
                 .groupby("problem").nth(0).set_index("problem")[["config", "throughput_per_watt"]]
                 .rename(columns={"config": "most_efficient", "throughput_per_watt": "per_watt"}))
    table = pd.DataFrame({
        "fastest": first["config"], "throughput": first["throughput"],
        "throughput_unit": first["throughput_unit"], "runner_up": pairs["config_base"],
        "margin": pairs["throughput"] / positive(pairs["throughput_base"]),
        "configs": rows.groupby("problem")["config"].nunique(),
    }).join(judged).join(cheapest).join(efficient)
    return table.reset_index()


def sentence(row: pd.Series, currency: str) -> str:
    """'On matmul k=512,..., X is fastest (1.3x the runner-up Y, beyond noise); Z is cheapest ...';
    with one configuration: 'On ..., only X ran (...): nothing to rank it against.'."""
    if row["configs"] == 1:
        return (f"On {row['problem']}, only {row['fastest']} ran on real hardware ({row['throughput']:.4g} "
                f"{row['throughput_unit']}): nothing to rank it against.")
    text = f"On {row['problem']}, {row['fastest']} is fastest ({row['throughput']:.4g} {row['throughput_unit']}"
    if isinstance(row.get("runner_up"), str) and pd.notna(row["margin"]):
        text += f"; {row['margin']:.2f}x {row['runner_up']}, {row['noise_test']}"
    elif isinstance(row.get("runner_up"), str):  # the runner-up does no work per step: nothing to divide by
        text += f"; runner-up {row['runner_up']}: no ratio"
    text += ")"
    if isinstance(row.get("cheapest"), str):
        text += f"; {row['cheapest']} is cheapest ({row['cost']:.3g} {currency} {row['cost_unit']})"
    if isinstance(row.get("most_efficient"), str):
        text += (f"; {row['most_efficient']} does the most per watt ({row['per_watt']:.3g} "
                 f"{row['throughput_unit']} per W)")
    return text + "."
