"""The report's first screen (report-guide.md §2): which device type, for which workloads, how sure.

- A row is a *device type* and a column a workload *family* (`analyses.device_types`).
- A *cell* of the device-type × family matrix is the geometric mean, over the family's problems
  both types measured, of the type's figure over the reference type's (rule C8). A type's figure
  on a problem is its best comparable configuration (framework, strategy, compile) on each
  machine, pooled over machines by the median (C7); the spread over machines is shown as the
  ratio's min–max. Only `comparable` rows enter (C2, C3): emulated, contended, starved, bimodal,
  launch- or host-bound rows and rows above a peak are in no cell.
- Metrics: speed (throughput), cost (the reference's cost per unit of work over the type's, so
  above 1 is cheaper; sourced prices only, C9) and energy (samples or GFLOP per joule, within one
  energy scope, C10). Precision: each one alone, or each type's best passing precision.

Nothing here writes HTML: `build_overview` returns data the template renders.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suites.report.analyses.comparability import counts_text
from suites.report.analyses.device_types import (BEST, host_type, limits_unknown, ordered_families,
                                                 paired_ratios, pick_reference_type, type_figures)
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.machines import no_finding
from suites.report.analyses.selection import pairable
from suites.report.equal_terms import apart_reasons, buyer_facts, family_sentences, fmt_ratio
from suites.report.load.numbers import compact
from suites.report.render.glossary import key
from suites.report.render.page import Grid, GridCell, Overview

#: Columns of the matrix: the device type, at most this many families, and "machines".
MAX_FAMILIES = 9
#: Below this many common problems a cell lists its single ratios instead of a mean (C8).
MIN_PROBLEMS_FOR_MEAN = 3
METRICS = {"speed": "speed", "cost": "cost per unit of work", "energy": "work per joule"}
#: The strategies whose plugin runs one device (`Rules.one_device`; the report reads
#: records, not plugins, and a test holds the two equal). A one-device run of any other strategy
#: measures its wrapper's overhead (C11).
ONE_DEVICE_STRATEGIES = frozenset({"single"})


# --- the matrix ---------------------------------------------------------------------------------

def _cell(ratios: pd.DataFrame, reference_problems: int, reference: bool, apart: str = "") -> GridCell:
    if reference:
        return GridCell("1.00×", f"the reference: {reference_problems} problem(s)", "ref")
    if ratios.empty:
        return GridCell("–", f"no work in common with the reference: {apart}" if apart else
                        "no problem of this family measured by both this type and the reference", "none")
    k = len(ratios)
    # each side's precision: equal in a precision's view, named in the best-passing one
    lines = [f"{problem}: {fmt_ratio(r)} ({config}; {int(m)} machine(s); the reference ran {ran_ref})"
             for problem, r, config, m, ran_ref in zip(ratios["problem"], ratios["ratio"], ratios["config"],
                                                       ratios["machines"], ratios["ran_ref"])]
    mixed = sorted({f"{ran} vs {ran_ref}" for ran, ran_ref in zip(ratios["ran"], ratios["ran_ref"]) if ran != ran_ref})
    spread = ""
    if (ratios["machines"] > 1).any():
        low, high = (float(np.exp(np.log(ratios[c]).mean())) for c in ("ratio_low", "ratio_high"))
        spread = f"{fmt_ratio(low)}–{fmt_ratio(high)} across machines"
    if k >= MIN_PROBLEMS_FOR_MEAN:
        mean = float(np.exp(np.log(ratios["ratio"]).mean()))
        text = fmt_ratio(mean)
        title = f"geometric mean of {k} ratios; " + "; ".join(lines)
    else:
        text = ", ".join(fmt_ratio(r) for r in ratios["ratio"])
        title = f"{k} problem(s), too few for a mean: " + "; ".join(lines)
    return GridCell(text, title + (f"; {spread}" if spread else ""), "", f"{k}/{reference_problems}" +
                (f" · {spread}" if spread else "") + (f" · {', '.join(mixed)}" if mixed else ""))


def matrix(figures: pd.DataFrame, reference: str, precision: str, metric: str, families: list[str],
           machines: dict[str, int], apart: dict[tuple[str, str], str] | None = None) -> Grid:
    """Device type × family for one precision (or BEST) and one metric, pairing equal work
    (`type_figures`); `apart`: (type, family) -> why the two pair on no work."""
    view = figures[figures["precision"].eq(precision)]
    ref = view[view["type"].eq(reference)]
    merged = view.merge(ref[["family", "work_key", "policy", "scope", "value", "ran"]],
                        on=["family", "work_key", "policy", "scope"], suffixes=("", "_ref"))
    merged["ratio"] = merged["value"] / merged["value_ref"]
    merged["ratio_low"] = merged["low"] / merged["value_ref"]
    merged["ratio_high"] = merged["high"] / merged["value_ref"]
    types = sorted(set(view["type"]), key=lambda t: (t != reference, t))
    rows = []
    for device in types:
        cells = [GridCell(device, f"{machines.get(device, 0)} machine(s)", "label")]
        for name in families:
            reference_problems = int(ref[ref["family"].eq(name)]["work_key"].nunique())
            if reference_problems == 0:
                cells.append(GridCell("–", "the reference measured no problem of this family", "none"))
                continue
            mine = merged[merged["type"].eq(device) & merged["family"].eq(name)]
            cells.append(_cell(mine, reference_problems, device == reference, (apart or {}).get((device, name), "")))
        cells.append(GridCell(str(machines.get(device, 0)), "", "num"))
        rows.append(cells)
    label = "best passing precision" if precision == BEST else precision
    return Grid(f"{metric}-{precision}", f"{METRICS[metric]} · {label}", ["device type", *families, "machines"],
                rows, caption=f"{METRICS[metric]} relative to {reference} (= 1.00×), {label}; a cell is the "
                              f"geometric mean over the family's problems both measured (k/K below it; under "
                              f"{MIN_PROBLEMS_FOR_MEAN}, the single ratios); hover a cell for its problems")


# --- the verdict --------------------------------------------------------------------------------

def limits_note(unrecorded: set[str]) -> str:
    """The verdict's one caveat on the device types whose records say nothing of what limits them."""
    if not unrecorded:
        return ""
    names = " and ".join(sorted(unrecorded))
    return (f"* What limited {names} was not recorded (the records predate parbench's limit verdict), so a "
            f"launch-bound figure there cannot be told from the device's.")


def _precision_sentence(frame: ReportFrame) -> str | None:
    """On the machine with the most training rows: the best precision against fp32 on one
    training problem, paired within one run (C5), or why there is no fp32 baseline."""
    rows = frame.pairable
    training = rows[rows["workload"].eq("train_step") & rows["strategy"].eq("single")
                    & rows["compile"].astype(str).isin(["none", "", "nan"])]
    if training.empty:
        return None
    machine = training["machine"].value_counts().index[0]
    mine = training[training["machine"].eq(machine)]
    types = frame.device_types
    for problem, group in sorted(mine.groupby("problem"), key=lambda item: -len(item[1])):
        fp32 = group[group["precision"].eq("fp32")]
        others = group[group["precision"].ne("fp32")]
        if others.empty:
            continue
        best = others.loc[others["throughput"].idxmax()]
        if fp32.empty:
            all_fp32 = frame.latest
            all_fp32 = all_fp32[all_fp32["machine"].eq(machine) & all_fp32["problem"].eq(problem)
                                & all_fp32["precision"].eq("fp32") & all_fp32["strategy"].eq("single")]
            why = ("failed its numerics check" if (all_fp32["check_passed"].eq(False)).any()
                   else "did not run or is not comparable")
            return (f"On {types.loc[best.name]} ({machine}), {problem}: fp32 {why}, so there is no fp32 baseline; "
                    f"{best['precision']} ran at {compact(best['throughput'])} {best['throughput_unit']}.")
        same_run = fp32[fp32["run_id"].eq(best["run_id"])]
        base = (same_run if not same_run.empty else fp32).iloc[0]
        where = "same run" if not same_run.empty else "across runs"
        emulated = " (emulated)" if bool(best.get("emulated")) else ""
        return (f"On {types.loc[best.name]} ({machine}), {problem}: {best['precision']} is "
                f"{fmt_ratio(best['throughput'] / base['throughput'])} fp32 ({where}{emulated})"
                f"{_equal_terms_caveat(best, base)}.")
    return None


def _equal_terms_caveat(best: pd.Series, base: pd.Series) -> str:
    """What undoes a within-machine ratio: a swing of a side between runs at least as large (C6),
    a side probably launch-bound (`comparability`)."""
    said = []
    ratio = float(best["throughput"] / base["throughput"])
    swings = {str(row["precision"]): float(row.get("run_swing", 1.0)) for row in (best, base)}
    if no_finding(ratio, *swings.values()):
        precision, swing = max(swings.items(), key=lambda item: item[1])
        said.append(f"within the {fmt_ratio(swing)} swing of {precision} between runs: no finding")
    if "probably-launch-bound" in (best.get("why_not"), base.get("why_not")):
        said.append("probably launch-bound: not a hardware figure")
    return "; " + "; ".join(said) if said else ""


def _cheapest_sentence(figures: pd.DataFrame, frame: ReportFrame, families: list[str]) -> str | None:
    """Only where at least two types have sourced prices that differ (C9): else cost order is
    speed order, or nothing is priced, and no crown is given."""
    rows = frame.comparable
    if "price_sourced" not in rows:
        return None
    priced = rows[rows["price_sourced"].astype("boolean").fillna(False).astype(bool)]
    if priced.empty:
        return None
    prices = priced.assign(type=frame.device_types).groupby("type")["price_per_hour"].first()
    if len(prices) < 2 or prices.nunique() < 2:
        return None
    view = figures[figures["precision"].eq(BEST)]
    for name in families:
        group = view[view["family"].eq(name) & view["type"].isin(prices.index)]
        common = group.groupby("problem")["type"].nunique()
        common = common[common >= 2]
        if common.empty:
            continue
        problem = common.index[0]
        ranked = group[group["problem"].eq(problem)].sort_values("value", ascending=False)
        top, second = ranked.iloc[0], ranked.iloc[1]
        return (f"Cheapest per unit of work on {problem}: {top['type']} ({fmt_ratio(top['value'] / second['value'])} "
                f"cheaper than {second['type']}; sourced prices, sustained throughput).")
    return None


# --- strategy × precision grids -----------------------------------------------------------------

def strategy_grids(frame: ReportFrame, max_columns: int = 11) -> list[Grid]:
    """Per host type: rows framework · strategy × devices, columns precision (+compile); a cell is
    a speedup on the same machine and framework, geometric mean over training problems, paired
    within one run where one exists (C5): a strategy's over the single device at the same precision,
    a single device's (a precision's) over its fp32 eager run (`paired_ratios`). Built from group
    aggregates, so a fleet's thousands of rows cost one merge, not a search per cell."""
    current = frame.latest
    training = current[current["workload"].eq("train_step") & current["status"].isin(["ok", "failed"])].copy(deep=False)
    if training.empty:
        return []
    training["host"] = host_type(training)
    training["column"] = training["precision"].astype(str) + training["compile"].astype(str).map(
        lambda c: "" if c in ("none", "", "nan") else f" +{c}")
    training["row"] = (training["framework"].astype(str) + " · " + training["strategy"].astype(str) + " ×"
                       + training["n_devices"].astype(str))
    # Within a machine, emulated rows pair (labelled), and probably launch-bound ones with that
    # caveat (‡); launch- and host-bound ones do not enter a mean here: they measure the host, so a
    # precision or strategy "speedup" from them is not one.
    good = pairable(training)
    good = good[good["why_not"].isin(["", "emulated", "probably-launch-bound"])]
    pairs = paired_ratios(good)
    summary = (pairs.groupby(["host", "row", "column"]).agg(log=("log_ratio", "mean"), n=("log_ratio", "size"),
                                                            across=("across", "any"),
                                                            emulated=("emulated", "any"),
                                                            caveat=("caveat", "any"),
                                                            no_finding=("no_finding", "all")).to_dict("index")
               if not pairs.empty else {})
    good_cells = set(zip(good["host"], good["row"], good["column"]))
    grids = []
    for host, group in training.groupby("host", sort=True):
        columns = sorted(set(group["column"]), key=lambda c: (c.split(" ")[0] != "fp32", " +" in c, c))[:max_columns]
        row_order = sorted(set(group["row"]), key=lambda r: (r.split(" · ")[0], " single " not in f" {r} ", r))
        cells_of = dict(tuple(group.groupby(["row", "column"])))
        rows = []
        for row_label in row_order:
            cells = [GridCell(row_label, "", "label")]
            for column in columns:
                key = (host, row_label, column)
                cells.append(_strategy_cell(cells_of.get((row_label, column)), summary.get(key),
                                            key in good_cells))
            rows.append(cells)
        machines = group["machine"].nunique()
        grids.append(Grid(f"strategy-{host}", f"{host}: strategy × precision", ["framework · strategy ×devices",
                                                                                *columns], rows,
                          caption=f"speedup on the same machine and framework, geometric mean over training "
                                  f"problems ({machines} machine(s)): a strategy's row over the single device "
                                  f"at the same precision (eager), the single device's row over its fp32 eager "
                                  f"run; † across runs; emu: emulated devices (ranks sharing one CPU or GPU); "
                                  f"‡ probably launch-bound: not a hardware figure; ≈ within the swing of a side "
                                  f"between runs: no finding"))
    return grids


def _strategy_cell(cell_rows: pd.DataFrame | None, paired: dict | None, usable: bool) -> GridCell:
    if cell_rows is None or cell_rows.empty:
        return GridCell("", "", "none")
    strategy, devices = str(cell_rows["strategy"].iloc[0]), int(cell_rows["n_devices"].iloc[0])
    if devices == 1 and strategy not in ONE_DEVICE_STRATEGIES:
        return GridCell("1 device", "1 device: overhead only; never a strategy's win", "grey")
    if cell_rows["status"].eq("ok").all() and cell_rows["check_passed"].eq(False).all():
        return GridCell("FAIL", "failed its numerics check", "fail")
    if cell_rows["status"].eq("failed").all():
        return GridCell("failed", "; ".join(sorted(set(cell_rows["reason"].fillna("").astype(str))))[:300], "fail")
    if not usable:
        reasons = "; ".join(sorted(set(cell_rows["why_not_text"].fillna("").astype(str)) - {""})) or \
            "; ".join(sorted(set(cell_rows["status"].astype(str))))
        return GridCell("–", reasons[:300], "none")
    if not paired:
        return GridCell("no base", "no single-device eager baseline of this framework on this machine at the "
                        "precision it compares with", "none")
    across, emulated = bool(paired["across"]), bool(paired["emulated"])
    caveat, no_finding = bool(paired.get("caveat")), bool(paired.get("no_finding"))
    text = (("≈" if no_finding else "") + fmt_ratio(math.exp(paired["log"])) + ("†" if across else "")
            + ("‡" if caveat else "") + (" emu" if emulated else ""))
    return GridCell(text, f"{int(paired['n'])} problem(s)" + ("; across runs" if across else "") +
                    ("; emulated: measures the emulation" if emulated else "") +
                    ("; probably launch-bound: not a hardware figure" if caveat else "") +
                    ("; within the swing of a side between runs: no finding" if no_finding else ""),
                    "emu" if emulated else "caveat" if caveat or no_finding else "")


# --- the whole first screen ---------------------------------------------------------------------

def header_line(frame: ReportFrame, prices: str) -> list[str]:
    records, current = frame.records, frame.latest
    real = frame.usable
    real = real[~real["emulated"].fillna(False).astype(bool)]
    types = frame.device_types.loc[real.index]
    counts = current["status"].value_counts()
    parts = [count(records["machine"].nunique(), "machine"), count(types.nunique(), "device type"),
             count(current["problem"].nunique(), "problem"),
             f"{len(records)} records: " + ", ".join(f"{int(counts.get(s, 0))} {s}"
                                                   for s in ("ok", "unavailable", "failed"))
             + (f", {len(records) - len(current)} superseded" if len(records) > len(current) else ""),
             prices]
    return parts


def count(n: int, noun: str) -> str:
    """'1 machine', '3 machines': no '(s)' on the first screen."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def not_in_matrix_line(frame: ReportFrame, shown: set[str]) -> str:
    """The device types the header counts (real hardware that ran) with no comparable figure, so in
    no matrix row, each with why (e.g. every row contended)."""
    real = frame.usable
    real = real[~real["emulated"].fillna(False).astype(bool)]
    types = frame.device_types.loc[real.index]
    missing = sorted(set(types) - shown)
    if not missing:
        return ""
    reasons = [f"{name} ({counts_text(real[types.eq(name)])})" for name in missing]
    return (f"Ran, but in no comparison (none of its figures is comparable): {'; '.join(reasons)}. Its rows are "
            f"in the problems' tables below.")


def not_comparable_line(current: pd.DataFrame) -> str:
    left_out = current[~current["comparable"].astype(bool)]
    if left_out.empty:
        return ""
    return f"Not comparable, so in no cell, ratio, rank, price or crown: {counts_text(left_out)}."


def build_overview(frame: ReportFrame, reference: str | None, prices: str) -> Overview:
    current, rows = frame.latest, frame.comparable
    types, families_of = frame.device_types, frame.families
    figures = {metric: type_figures(rows, types, families_of, metric) for metric in METRICS}
    speed = figures["speed"]
    chosen = pick_reference_type(speed, frame.records["machine"], types, reference)
    overview = Overview(header=header_line(frame, prices), verdict=[], reference=chosen,
                        not_comparable=not_comparable_line(current))
    families = ordered_families(set(speed["family"]))[:MAX_FAMILIES] if not speed.empty else []
    machines = rows.assign(type=types).groupby("type")["machine"].nunique().to_dict() if not rows.empty else {}
    if chosen is None:
        overview.no_matrix = "No comparable figure on any device type, so no device can be compared; see why below."
    elif speed["type"].nunique() < 2:
        overview.no_matrix = (f"One device type ({chosen}) has comparable figures, so there is nothing to rank it "
                              f"against; the strategy × precision grids below compare what ran on it.")
    else:
        # equal precisions first (the first is shown): a hardware ratio compares equal precision;
        # "best passing" is the labelled exception, whose cells say each side's precision
        precisions = sorted(set(speed["precision"]) - {BEST},
                            key=lambda p: ["fp32", "tf32", "bf16", "fp16"].index(p)
                            if p in ("fp32", "tf32", "bf16", "fp16") else 9) + [BEST]
        # keys are positions, never text from the records: they become element ids and CSS selectors
        overview.precision_choices = [(f"p{index}", "best passing" if p == BEST else p)
                                      for index, p in enumerate(precisions)]
        apart = apart_reasons(frame, chosen)
        for metric in METRICS:
            if figures[metric].empty or chosen not in set(figures[metric]["type"]):
                continue
            overview.metric_choices.append((metric, METRICS[metric]))
            for index, precision in enumerate(precisions):
                grid = matrix(figures[metric], chosen, precision, metric, families, machines, apart)
                grid.key = f"{metric}-p{index}"
                overview.matrices.append(grid)
        sentences, unrecorded = family_sentences(speed, chosen, families, limits_unknown(rows, types, families_of),
                                                 apart)
        overview.verdict += sentences
        overview.verdict_note = limits_note(unrecorded)
        cheapest = _cheapest_sentence(figures["cost"], frame, families)
        if cheapest:
            overview.verdict.append(cheapest)
    precision = _precision_sentence(frame)
    if precision:
        overview.verdict.append(precision)
    overview.verdict = overview.verdict[:5]
    overview.facts = buyer_facts(frame)
    overview.strategy_grids = strategy_grids(frame)
    overview.not_in_matrix = not_in_matrix_line(frame, set(speed["type"]))
    overview.key = key(screen_text(overview))
    return overview


def screen_text(overview: Overview) -> list[str]:
    """Every string the first screen shows (what its key explains)."""
    grids = [*overview.matrices, *overview.strategy_grids]
    return [*overview.header, *overview.verdict, overview.verdict_note, *overview.facts, overview.no_matrix,
            overview.not_in_matrix,
            overview.not_comparable, *(grid.caption for grid in grids),
            *(cell.text + " " + cell.note for grid in grids for row in grid.rows for cell in row)]
