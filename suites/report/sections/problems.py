"""Per problem: every configuration that ran it, fastest comparable first, with its spread, share of
the fastest, cost, limits and flags (at most 12 columns, report-guide T1), and the work, memory,
energy and provenance columns on demand. Not comparable rows come after, never ranked."""
from __future__ import annotations

import pandas as pd

from suites.records.check import NOT_CHECKED
from suites.report.analyses.choice import cost_per_unit
from suites.report.analyses.frame import ReportFrame
from suites.report.load.columns import config_label
from suites.report.render.page import Section
from suites.report.render.tables import (MAX_COLUMNS, Column, fmt_bytes, fmt_check, fmt_fits, fmt_fraction, fmt_gib,
                                         fmt_joules, fmt_number, fmt_pct, fmt_seconds, fmt_share, fmt_text, fmt_watts,
                                         tabulate)
from suites.report.sections.base import ReportOptions, limit_columns, row_class, with_devices


#: Rows of a problem's tables on the page (fastest comparable first; every row in --csv): a fleet's
#: problem has a row per machine and configuration, and the page is the decision, not the dump.
PROBLEM_ROWS = 50
#: The on-demand column group of where a row's figure and price come from.
PROVENANCE = [Column("device name", "device_name", fmt_text), Column("price", "price_rule", fmt_text),
              Column("source", "source", fmt_text), Column("run", "run_id", fmt_text)]


def badges(frame: pd.DataFrame) -> pd.Series:
    """Short flags of a row: 'noisy · straggler · numerics not checked · contended (load 2.7 on 2
    cores) · emulated' — its own marks, then each reason it is not comparable, by its head (the explanation of each is
    in the report's method, and `why_not_text` keeps it whole in the exports)."""
    marks = [column for column in ("noisy", "straggler") if column in frame]
    own = ([[column for column in marks if row.get(column) is True] for row in frame[marks].to_dict("records")]
           if marks else [[] for _ in range(len(frame))])
    if "check_metric" in frame:  # a check left undone (its reference over budget): the figure is unchecked
        for mine, metric in zip(own, frame["check_metric"]):
            if metric == NOT_CHECKED:
                mine.append("numerics not checked")
    why = frame["why_not_text"].fillna("").astype(str) if "why_not_text" in frame else pd.Series("", index=frame.index)
    heads = [[reason.split(": ")[0] for reason in text.split("; ") if reason] for text in why]
    return pd.Series([" · ".join(dict.fromkeys([*mine, *theirs])) for mine, theirs in zip(own, heads)],
                     index=frame.index, dtype=object)


MEMORY_TEXT = (
    "Peak memory is the largest of one device over the timed steps: on a GPU the bytes its framework's allocator "
    "held (torch also shows what its caching allocator reserved), on a CPU the rank process's resident set "
    "(runtime included). Training state = peak − what the device or process held when the case's setup began, "
    "before the model was built; on a CPU it also holds what the runtime first allocates during a case (thread "
    "pools, kernel caches), which a process's first case pays and later in-process cases find in their baseline. "
    "'fits' compares a GPU's peak with one GPU's memory, and on a CPU the rank processes' peaks together with "
    "the machine's RAM, which they share; where the machine's provenance names it. Rows without memory figures "
    "(older records, asv, pytest-benchmark) show –.")


def memory_columns(group: pd.DataFrame) -> list[Column]:
    """The memory columns of a problem's table, where any of its rows measured memory."""
    if not group["peak_memory_bytes"].notna().any():
        return []
    reserved = ([Column("peak reserved", "peak_reserved_bytes", fmt_bytes)]
                if group["peak_reserved_bytes"].notna().any() else [])
    return [Column("peak memory", "peak_memory_bytes", fmt_bytes), *reserved,
            Column("training state", "training_state_bytes", fmt_bytes),
            Column("device memory", "device_memory_gib", fmt_gib), Column("fits", "memory_fits", fmt_fits)]


def energy_columns(group: pd.DataFrame) -> list[Column]:
    """A problem's energy columns: J per step always (– where unread); watts and work per joule
    where any row read its devices' energy."""
    columns: list[Column] = [Column("energy / step", "energy_j_per_step", fmt_joules)]
    if group["energy_j_per_step"].notna().any():
        per_joule = (Column("samples/J", "samples_per_joule", fmt_number) if group["samples_per_joule"].notna().any()
                     else Column("GFLOP/J", "gflop_per_joule", fmt_number))
        columns += [Column("power", "energy_watts", fmt_watts), per_joule]
    return columns


def energy_text(group: pd.DataFrame) -> str:
    """Why rows of a problem have no energy figures (each reason once), or ''."""
    missing = group[group["energy_j_per_step"].isna() & group["energy_reason"].ne("")]
    reasons = sorted(missing["energy_reason"].unique())
    if not reasons:
        return ""
    return (f"Energy not measured for {len(missing)} of {len(group)} rows: " + "; ".join(reasons) + ". "
            "The energy columns show – there: never zero.")


def build(frame: ReportFrame, options: ReportOptions) -> list[Section]:
    """A section per problem: every configuration that ran it, fastest comparable first."""
    currency = options.prices.currency
    rows = frame.usable
    rows["cost"], rows["cost_unit"] = cost_per_unit(rows)
    # A row that is not comparable is in no ratio and no price (rule C3): its own figure stays.
    rows["cost"] = rows["cost"].where(rows["comparable"])
    rows["cost_unit"] = rows["cost_unit"].where(rows["comparable"], "")
    sections = []
    for index, (problem, group) in enumerate(rows.groupby("problem", sort=True)):
        # comparable rows first, fastest first; the rest after them, never ranked among them
        group = group.sort_values(["comparable", "throughput"], ascending=[False, False], kind="stable")
        fastest = group.loc[group["comparable"], "throughput"].max()
        group["vs_fastest"] = (group["throughput"] / fastest).where(group["comparable"] & (fastest > 0))
        unit = group["throughput_unit"].iloc[0]
        section = Section(problem, f"problem-{index}", text=[
            f"Throughput in {unit} from the median step (rankings and noise use it); 'sustained' is the same "
            f"figure at seconds timed / steps timed, what a long run keeps up, and costs use it. Sorted fastest "
            f"first; 'of fastest' is against the fastest comparable row. Rows that are not comparable (emulated, "
            f"contended, starved, bimodal, launch- or host-bound, above a peak) come after, with no 'of fastest' "
            f"and no cost; the 'flags / not comparable' column says why. Click a column header to sort."])
        tflops = ([Column("TFLOP/s", "tflops", fmt_number)]
                  if unit != "TFLOP/s" and group["tflops"].notna().any() else [])
        exchange = ([Column("all-reduce share", "exchange_share", fmt_fraction)]
                    if group["exchange_share"].notna().any() else [])
        tokens = ([Column("tokens/s", "tokens_per_s", fmt_number), Column("MFU", "mfu_pct", fmt_pct)]
                  if group["tokens_per_s"].notna().any() else [])
        memory = memory_columns(group)
        limits = limit_columns(group)
        energy = energy_columns(group)
        why_no_energy = energy_text(group)
        if why_no_energy:
            section.text.append(why_no_energy)
        labelled = with_devices(group).assign(configuration=config_label(group), flags=badges(group))
        verdict = [Column("bound by", "bound_by", fmt_text)] if group["bound_by"].ne("").any() else []
        # The default table: at most 12 columns (report-guide T1); the rest are opt-in groups below it.
        main = tabulate(labelled, [
            Column("configuration", "configuration", fmt_text), Column(f"{unit} (median)", "throughput", fmt_number),
            Column("sustained", "sustained_throughput", fmt_number), Column("of fastest", "vs_fastest", fmt_share),
            Column("median step", "median_s", fmt_seconds), Column("IQR", "iqr_s", fmt_seconds),
            Column("% peak", "pct_peak_table", fmt_pct), Column(f"cost ({currency})", "cost", fmt_number),
            Column("per", "cost_unit", fmt_text), *verdict, Column("check", "check_passed", fmt_check),
            Column("flags / not comparable", "flags", fmt_text)], css=row_class, max_rows=PROBLEM_ROWS)
        extra = [*tflops, *tokens, *exchange, *[column for column in limits if column not in verdict],
                 Column("% peak (measured)", "pct_peak_measured", fmt_pct), Column("n", "n", fmt_number)]
        for name, spec in (("work and limits", extra), ("memory", memory),
                           ("energy", [*energy, Column(f"{unit} per W", "throughput_per_watt", fmt_number)]),
                           ("provenance", PROVENANCE)):
            if spec:
                main.more.append(tabulate(labelled, [Column("configuration", "configuration", fmt_text),
                                                     *spec[:MAX_COLUMNS - 1]], css=row_class, max_rows=PROBLEM_ROWS))
        section.tables.append(main)
        # No chart repeats the table (report-guide G1, G4): 'of fastest' carries an in-cell bar.
        if memory:
            section.text.append(MEMORY_TEXT)
        sections.append(section)
    return sections
