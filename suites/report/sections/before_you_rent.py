"""Before you rent: PROJECTED figures for hardware the records do not cover, beside what was
measured of the same model and precision (issue 44; docs/predict.md).

The projections are data the front end computed (`ReportOptions.projections`, from
`parbench report --predict-to ...`); this section only shows them. A projected row is marked
PROJECTED with its band and where each input came from, and stands in no crown, no ratio against
a measurement and no device-type matrix: nothing but this section reads the projections.
"""
from __future__ import annotations

import math

import pandas as pd

from suites.report.analyses.comparability import SHORT
from suites.report.analyses.frame import ReportFrame
from suites.report.load.columns import config_label
from suites.report.load.numbers import compact
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_number, fmt_text, tabulate, with_values
from suites.report.sections.base import ReportOptions

TITLE, ANCHOR, NAV = "Before you rent: PROJECTED figures beside measured ones", "before-you-rent", "Before you rent"
HOW = ("No projection was asked for. `parbench predict` projects a training step onto device types, counts and "
       "nodes you do not have (speed, memory and fit, cost, what limits it, with an error band); "
       "`parbench report --predict-to \"H100 SXM:8\" --predict-to \"H200:8x2\"` puts its projections here, "
       "beside the measured rows of the same model (docs/predict.md).")
WHAT = ("PROJECTED rows are computed by parbench's projection model, never measured: each has its band "
        "(low–high samples/s) and the kind and source of each input (measured: a record; catalogued: a sourced "
        "data-file row; published: a reference figure; assumed: a default). They stand in no crown, no ratio "
        "against a measurement and no device-type matrix, and are in no export of the measured data.")
#: Measured rows shown beside the projections: the fastest of the model and precision.
MAX_MEASURED = 12
COLUMNS = [Column("kind", "kind", fmt_text), Column("hardware", "hardware", fmt_text),
           Column("configuration", "configuration", fmt_text), Column("batch / device", "batch", fmt_number),
           Column("samples/s", "samples_per_s", fmt_number), Column("band (samples/s)", "band", fmt_text),
           Column("per device", "per_device", fmt_number), Column("memory / device, fits", "fits", fmt_text),
           Column("limited by", "limited_by", fmt_text), Column("cost", "cost", fmt_text),
           Column("inputs and notes", "inputs_text", fmt_text)]
INPUT_COLUMNS = [Column("target", "target", fmt_text), Column("input", "input", fmt_text),
                 Column("value", "value", fmt_text), Column("kind", "kind", fmt_text),
                 Column("source", "source", fmt_text)]


def target_label(row: pd.Series) -> str:
    """'H100 SXM5 80GB ×8', 'H200 SXM 141GB 8×2 nodes'."""
    devices, nodes = int(row["devices"]), int(row["nodes"])
    return f"{row['device']} {devices // nodes}×{nodes} nodes" if nodes > 1 else f"{row['device']} ×{devices}"


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _fits(row: pd.Series) -> str:
    memory, largest = _number(row.get("memory_per_device_bytes")), _number(row.get("max_batch_per_device"))
    if memory is None:
        return ""
    said = "fits" if row.get("fits") is True else "does NOT fit" if row.get("fits") is False else "fit unknown"
    return f"{memory / 2**30:.1f} GiB, {said}" + (f" (largest batch {compact(largest)})" if largest else "")


def _kinds(inputs: object) -> str:
    """'measured: base; catalogued: link, network; assumed: host margin' from a row's inputs."""
    if not isinstance(inputs, dict):
        return ""
    kinds: dict[str, list[str]] = {}
    for name, value in inputs.items():
        kinds.setdefault(str(value.get("kind", "")), []).append(name.replace("_", " "))
    return "; ".join(f"{kind}: {', '.join(names)}" for kind, names in kinds.items())


def projected_rows(projections: pd.DataFrame, currency: str) -> pd.DataFrame:
    """The projections as rows of the view's table, each marked PROJECTED."""
    rows = []
    for _, row in projections.iterrows():
        low, high = _number(row.get("band_low")), _number(row.get("band_high"))
        cost = _number(row.get("cost_per_million"))
        rows.append({
            "kind": "PROJECTED", "hardware": target_label(row),
            "configuration": f"{row.get('workload', '')} ({row.get('scaling', '')} scaling)",
            "batch": row.get("per_device_batch"), "samples_per_s": row.get("samples_per_s"),
            "band": f"{compact(low)}–{compact(high)}" if low is not None and high is not None else "",
            "per_device": row.get("per_device_samples_per_s"), "fits": _fits(row),
            "limited_by": row.get("limited_by") or "",
            "cost": f"{compact(cost)} {currency} / M samples" if cost is not None else str(row.get("price_rule") or ""),
            "inputs_text": _kinds(row.get("inputs")) if not row.get("error") else f"cannot project: {row['error']}",
            "projected": True})
    return pd.DataFrame(rows)


def measured_rows(frame: ReportFrame, model: str, precision: str, currency: str) -> pd.DataFrame:
    """The latest rows that ran the same model in the same precision: what the projections stand beside."""
    usable = frame.usable
    if "param_model" not in usable or usable.empty:
        return pd.DataFrame()
    rows = usable[usable["workload"].eq("train_step") & usable["param_model"].astype(str).eq(model)
                  & usable["precision"].astype(str).eq(precision)]
    rows = rows.sort_values("throughput", ascending=False).head(MAX_MEASURED)
    if rows.empty:
        return pd.DataFrame()
    types = frame.device_types.loc[rows.index]
    comparable = rows["comparable"].astype(bool)
    return pd.DataFrame({
        "kind": "measured", "hardware": types + " (" + rows["machine"].astype(str) + ")",
        "configuration": config_label(rows),
        "batch": rows["param_batch"] if "param_batch" in rows else None,
        "samples_per_s": rows["throughput"], "band": "",
        "per_device": rows["throughput"] / rows["n_devices"].astype(float), "fits": "",
        "limited_by": rows["bound_by"].fillna("").astype(str) if "bound_by" in rows else "",
        "cost": rows["cost_per_m_samples"].map(lambda c: f"{compact(c)} {currency} / M samples" if pd.notna(c) else ""),
        "inputs_text": ("measured: run " + rows["run_id"].astype(str)).where(
            comparable, "measured; not comparable: " + rows["why_not"].map(lambda code: SHORT.get(code, code))),
        "projected": False})


def cost_points(projections: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """(the chart's points, the work they price): the user's --predict-samples/--tokens where given,
    else a million samples. Targets without a sourced price are left out (the table says why)."""
    rows = projections[projections["cost_per_million"].notna() & projections["samples_per_s"].notna()
                       & projections["error"].isna()]
    if rows.empty:
        return pd.DataFrame(), ""
    work = rows["cost_of_work"] / rows["cost_per_million"] * 1e6 if "cost_of_work" in rows else None
    samples = float(work.dropna().iloc[0]) if work is not None and work.notna().any() else 1e6
    hours = samples / rows["samples_per_s"] / 3600.0
    per_hour = rows["cost_per_million"] * rows["samples_per_s"] * 3600.0 / 1e6
    slow = samples / rows["band_low"].where(rows["band_low"].gt(0)) / 3600.0
    fast = samples / rows["band_high"] / 3600.0
    points = pd.DataFrame({"label": rows.apply(target_label, axis=1), "hours": hours, "cost": hours * per_hour,
                           "hours_low": fast, "hours_high": slow, "cost_low": fast * per_hour,
                           "cost_high": slow * per_hour})
    return points, f"{compact(samples)} samples"


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    section = Section(TITLE, ANCHOR, nav=NAV)
    projections = options.projections
    if projections is None or projections.empty:
        section.text.append(HOW)
        return section
    currency = options.prices.currency
    first = projections.iloc[0]
    section.text += [WHAT, f"Projected: {first.get('workload', '')}; base: {first.get('base', '')}."]
    measured = measured_rows(frame, str(first.get("model", "")), str(first.get("precision", "")), currency)
    if measured.empty:
        section.text.append(f"No record here ran {first.get('model', '')} in {first.get('precision', '')}: "
                            f"the projections stand alone.")
    rows = pd.concat([measured, projected_rows(projections, currency)], ignore_index=True)
    section.tables.append(tabulate(rows, with_values(rows, COLUMNS), caption="measured rows, then PROJECTED ones "
                                   "(hatched); no ratio is drawn between them",
                                   css=lambda row: "projected" if row["projected"] else ""))
    points, work = cost_points(projections)
    if not points.empty:
        unpriced = sorted(set(map(target_label, (row for _, row in projections.iterrows()))) - set(points["label"]))
        section.figures.append((figures.cost_time(points, work, currency),
                                f"PROJECTED cost of {work} against the hours it takes, per target (the bar: the band)"
                                + (f"; not drawn, no sourced price: {', '.join(unpriced)}" if unpriced else "")))
    else:
        section.text.append("No cost chart: no target has a sourced price (the table says why for each).")
    section.text += [f"{target_label(row)}: {note}" for _, row in projections.iterrows()
                     for note in row.get("notes") or []]
    section.tables.append(tabulate(input_rows(projections), INPUT_COLUMNS,
                                   caption="where each projection's inputs came from"))
    return section


def input_rows(projections: pd.DataFrame) -> pd.DataFrame:
    """One row per target and input: its value, kind and source."""
    rows = [{"target": target_label(row), "input": name.replace("_", " "), "value": _value_text(value.get("value")),
             "kind": value.get("kind", ""), "source": value.get("source", "")}
            for _, row in projections.iterrows() if isinstance(row.get("inputs"), dict)
            for name, value in row["inputs"].items()]
    return pd.DataFrame(rows, columns=[column.key for column in INPUT_COLUMNS])


def _value_text(value: object) -> str:
    number = _number(value)
    if number is not None and not isinstance(value, bool):
        return compact(number)
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
