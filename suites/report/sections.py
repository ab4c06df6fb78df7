"""The report's content: analyses of the tidy table turned into tables, figures and sentences.

Everything here is data for the template (suites/report/render/templates/report.html.j2); nothing
here writes HTML.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from suites.records.check import NOT_CHECKED
from suites.records.metric_registry import METRICS
from suites.report.render import figures
from suites.report.analyses.choice import candidates, choices, cost_per_unit, emulated_configs, sentence
from suites.report.analyses.comparability import counts_text, flagged
from suites.report.load.columns import CONFIG, ENVIRONMENT, config_label
from suites.report.analyses.compilation import compile_pairs
from suites.report.analyses.limits import (NOT_RECORDED, VERDICT_TEXT, limit_columns, limits_summary, verdict_counts,
                                  verdict_table_columns)
from suites.report.analyses.comparison import describe, speedup
from suites.report.analyses.noise import ALPHA, MIN_SAMPLES
from suites.hardware.references import ReferenceRow, load_references
from suites.report.analyses.prices import NO_PRICE, PriceTable, add_costs
from suites.report.analyses.references import SECTION_TEXT as REFERENCE_TEXT
from suites.report.overview import Overview, build_overview
from suites.report.analyses.references import ModelSizes, reference_tables
from suites.report.analyses.relative import NotComparableReference, relative_performance
from suites.report.analyses.scaling import left_out as scaling_left_out
from suites.report.analyses.scaling import scaling
from suites.report.analyses.selection import latest, not_comparable, not_ok, usable
from suites.report.render.tables import (MAX_COLUMNS, Format, Table, build, fmt_bytes, fmt_check, fmt_fits, fmt_flag,
                                  fmt_fraction, fmt_gib, fmt_id, fmt_share, fmt_joules, fmt_number, fmt_pct, fmt_ratio,
                                  fmt_seconds, fmt_text, fmt_watts)

#: Formulas of the comparisons, shown in the report after the derived metrics' (`metric_formulas`).
REPORT_FORMULAS = {
    "throughput": "samples/s where the workload counts samples, else TFLOP/s, else all-reduce busbw, else steps/s; "
                  "from the median step time (speedups, rankings and noise tests use it)",
    "sustained": "throughput · median step / (seconds timed / steps timed): what a long run sustains, slow blocks "
                 "included; costs use it (= throughput where a source stored no timed span, e.g. asv)",
    "speedup": "throughput / throughput of the baseline row (same everything but the baseline's columns)",
    "scaling efficiency": "thr(N) / (N · thr(1)) from one run on one machine; weak scaling (per-device batch "
                          "fixed) unless the case declares scaling=strong (global batch fixed)",
    "relative performance": "geometric mean over problems of best throughput / the reference's best throughput, "
                            "per precision",
    "cost per M samples": "price per hour / 3600 / sustained samples/s · 1e6",
    "cost per PFLOP": "price per hour / 3600 · 1000 / sustained TFLOP/s",
    "per watt": "throughput / energy_watts (perf per watt: samples/s per W = samples per joule; TFLOP/s per W); "
                "beside the cost per unit of work (perf per dollar)",
    "memory fits": "GPU: the largest peak reserved (torch; TensorFlow reports none: allocated) of one GPU <= one GPU's "
                   "memory (nvidia-smi memory.total); CPU: the sum of the rank processes' peak resident sets <= the "
                   "machine's RAM. The CUDA context (a few hundred MiB) is in no peak.",
    "noise": f"Mann-Whitney U (two-sided, normal approximation, tie-corrected) on the raw samples when both sides "
             f"have ≥{MIN_SAMPLES}, beyond noise when p < {ALPHA}; otherwise beyond noise when the IQRs do not "
             f"overlap. Step times are compared per unit of work.",
}


def metric_formulas() -> dict[str, str]:
    """'name [unit]' -> formula of every derived metric, for the report's Method section."""
    return {f"{metric.name} [{metric.unit}]": metric.formula for metric in METRICS.values()}


@dataclass
class Section:
    title: str
    anchor: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (base64 PNG, alt text)
    nav: str = ""  # short name in the page's navigation bar ('' = title)


#: Rows of a problem's tables on the page (fastest comparable first; every row in --csv): a fleet's
#: problem has a row per machine and configuration, and the page is the decision, not the dump.
PROBLEM_ROWS = 50


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


@dataclass
class ReportOptions:
    prices: PriceTable
    baseline: dict[str, str] | None = None
    reference: str | None = None
    #: Published figures to set the runs beside; None: the shipped table and $PARBENCH_REFERENCES.
    references: tuple[ReferenceRow, ...] | None = None
    #: Each model's default integer sizes (`suites.workloads.training.default_sizes`, given by
    #: the report command): what a reference row's sizes are compared with.
    model_sizes: ModelSizes = field(default_factory=dict)


def _row_class(row: pd.Series) -> str:
    """CSS classes of a table row; a contended row is shaded as a noisy one (its figure is as doubtful)."""
    return " ".join(name for name, on in (("emulated", row.get("emulated") is True),
                                          ("noisy", row.get("noisy") is True or row.get("contended") is True),
                                          ("bad", row.get("status") == "failed")) if on)


#: Configuration columns of a table; "devices" is added by `with_devices`.
CONFIG_SPEC = [("machine", "machine", fmt_text), ("devices", "devices", fmt_text),
               ("framework", "framework", fmt_text), ("strategy", "strategy", fmt_text),
               ("precision", "precision", fmt_text), ("compile", "compile", fmt_text)]


def with_devices(frame: pd.DataFrame) -> pd.DataFrame:
    """Add 'devices', e.g. 'gpu×4': kind and count in one short column."""
    return frame.assign(devices=frame["device"] + "×" + frame["n_devices"].astype(str))


def not_ranked_text(frame: pd.DataFrame) -> list[str]:
    """One line per problem with emulated rows: they are named, and not ranked."""
    ranked = set(candidates(frame)["problem"])  # = choices(frame)'s problems, without judging noise
    return [f"Not ranked on {problem}: {', '.join(labels)}; emulated devices share one CPU (or fewer GPUs than "
            f"ranks), so they measure the emulation, not hardware"
            + ("" if problem in ranked else " (no real hardware ran this problem)") + "."
            for problem, labels in emulated_configs(frame).items()]


def not_comparable_text(frame: pd.DataFrame) -> list[str]:
    """The one "not comparable" line: counts by reason of the usable rows left out of every
    ratio, rank, price and crown (each row's reason is in its problem's table)."""
    left_out = not_comparable(latest(frame))
    if left_out.empty:
        return []
    return [f"Not comparable, so in no ratio, rank, price or crown ({len(left_out)} of "
            f"{len(usable(latest(frame)))} rows that ran): {counts_text(left_out)}. Each row says why in its "
            f"problem's table ('not comparable'); a figure above a peak is never ranked: the peak table is wrong "
            f"for that device, or the timing is."]


def no_price_text(frame: pd.DataFrame) -> list[str]:
    """Why configurations that could be chosen have no price (each device and reason once)."""
    rows = candidates(frame)
    rows = rows[rows["price_per_hour"].isna()]
    named = (rows["device"] + " " + rows["device_name"].where(rows["device_name"].ne(""), "(unnamed)"))
    return [f"No price for {device} on {machine}: {rule.removeprefix(NO_PRICE + ': ')}."
            for device, machine, rule in sorted(set(zip(named, rows["machine"], rows["price_rule"])))]


def _crowned(table: pd.DataFrame, crown: str) -> pd.Series:
    """A crown column for display: the winner, else 'none: why' ('' where nothing competed)."""
    why = table[f"no_{crown}"].fillna("").astype(str)
    return table[crown].where(table[crown].notna(), why.map(lambda text: f"none: {text}" if text else ""))


def summary(frame: pd.DataFrame, currency: str) -> Section:
    frame = flagged(frame)
    table = choices(frame)
    left_out = not_comparable(latest(frame))
    others = {problem: counts_text(group) for problem, group in left_out.groupby("problem", sort=True)}
    text = ([sentence(row, currency, others.get(row["problem"], "")) for _, row in table.iterrows()]
            + not_ranked_text(frame) + not_comparable_text(frame) + no_price_text(frame))
    section = Section("Summary: what to choose", "summary", nav="Summary", text=text or [
        "No case ran successfully, so there is nothing to choose between; see the unavailable and failed cases below."])
    shown = table.assign(fastest=_crowned(table, "fastest"), cheapest=_crowned(table, "cheapest"),
                         most_efficient=_crowned(table, "most_efficient"))
    section.tables.append(build(shown, [
        ("problem", "problem", fmt_text), ("first", "leader", fmt_text), ("throughput", "throughput", fmt_number),
        ("unit", "throughput_unit", fmt_text), ("runner-up", "runner_up", fmt_text),
        ("× runner-up", "margin", fmt_ratio), ("noise", "noise_test", fmt_text), ("fastest", "fastest", fmt_text),
        ("cheapest", "cheapest", fmt_text), (f"cost ({currency})", "cost", fmt_number), ("per", "cost_unit", fmt_text),
        ("most per watt", "most_efficient", fmt_text), ("per W", "per_watt", fmt_number),
        ("configs", "configs", fmt_number)], caption="Per problem, among comparable rows only (real hardware; none "
                "contended, starved, bimodal, launch- or host-bound, or above a peak): a crown goes only beyond "
                "noise of the runner-up, 'cheapest' only from a sourced price"))
    return section


def relative(frame: pd.DataFrame, reference: str | None) -> tuple[Section, str | None]:
    """The section, and the reference hardware's machine label."""
    try:
        table, chosen = relative_performance(frame, reference)
    except NotComparableReference as error:
        return Section("Relative performance", "relative", text=[f"No relative performance: {error}."]), None
    section = Section("Relative performance", "relative", text=[
        f"Reference: {chosen} = 1.00. Per problem and precision, each hardware's best throughput over frameworks and "
        f"strategies divided by the reference's; the geometric mean over the problems both measured. Only "
        f"comparable rows count: emulated rows (several logical devices sharing one CPU are not hardware), "
        f"contended, starved, bimodal, launch- or host-bound rows and rows above a peak are left out (see the "
        f"summary's 'not comparable' line)."
        if chosen else "No comparable results to compare (see the summary's 'not comparable' line)."])
    section.tables.append(build(table, [("hardware", "hardware", fmt_text), ("precision", "precision", fmt_text),
                                        ("relative performance", "relative", fmt_ratio),
                                        ("problems", "problems", fmt_number)]))
    machine = table.loc[table["hardware"].eq(chosen), "machine"].iloc[0] if chosen else None
    return section, machine


MEMORY_TEXT = (
    "Peak memory is the largest of one device over the timed steps: on a GPU the bytes its framework's allocator "
    "held (torch also shows what its caching allocator reserved), on a CPU the rank process's resident set "
    "(runtime included). Training state = peak − what the device or process held when the case's setup began, "
    "before the model was built; on a CPU it also holds what the runtime first allocates during a case (thread "
    "pools, kernel caches), which a process's first case pays and later in-process cases find in their baseline. "
    "'fits' compares a GPU's peak with one GPU's memory, and on a CPU the rank processes' peaks together with "
    "the machine's RAM, which they share; where the machine's provenance names it. Rows without memory figures "
    "(older records, asv, pytest-benchmark) show –.")


def memory_columns(group: pd.DataFrame) -> list[tuple[str, str, Format]]:
    """The memory columns of a problem's table, where any of its rows measured memory."""
    if not group["peak_memory_bytes"].notna().any():
        return []
    reserved = ([("peak reserved", "peak_reserved_bytes", fmt_bytes)]
                if group["peak_reserved_bytes"].notna().any() else [])
    return [("peak memory", "peak_memory_bytes", fmt_bytes), *reserved,
            ("training state", "training_state_bytes", fmt_bytes),
            ("device memory", "device_memory_gib", fmt_gib), ("fits", "memory_fits", fmt_fits)]


def energy_columns(group: pd.DataFrame) -> list[tuple[str, str, Format]]:
    """A problem's energy columns: J per step always (– where unread); watts and work per joule
    where any row read its devices' energy."""
    columns: list[tuple[str, str, Format]] = [("energy / step", "energy_j_per_step", fmt_joules)]
    if group["energy_j_per_step"].notna().any():
        per_joule = (("samples/J", "samples_per_joule") if group["samples_per_joule"].notna().any()
                     else ("GFLOP/J", "gflop_per_joule"))
        columns += [("power", "energy_watts", fmt_watts), (*per_joule, fmt_number)]
    return columns


def energy_text(group: pd.DataFrame) -> str:
    """Why rows of a problem have no energy figures (each reason once), or ''."""
    missing = group[group["energy_j_per_step"].isna() & group["energy_reason"].ne("")]
    reasons = sorted(missing["energy_reason"].unique())
    if not reasons:
        return ""
    return (f"Energy not measured for {len(missing)} of {len(group)} rows: " + "; ".join(reasons) + ". "
            "The energy columns show – there: never zero.")


def per_problem(frame: pd.DataFrame, currency: str) -> list[Section]:
    rows = usable(latest(flagged(frame))).copy(deep=False)
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
        tflops = [("TFLOP/s", "tflops", fmt_number)] if unit != "TFLOP/s" and group["tflops"].notna().any() else []
        exchange = ([("all-reduce share", "exchange_share", fmt_fraction)]
                    if group["exchange_share"].notna().any() else [])
        tokens = ([("tokens/s", "tokens_per_s", fmt_number), ("MFU", "mfu_pct", fmt_pct)]
                  if group["tokens_per_s"].notna().any() else [])
        memory = memory_columns(group)
        limits = limit_columns(group)
        energy = energy_columns(group)
        why_no_energy = energy_text(group)
        if why_no_energy:
            section.text.append(why_no_energy)
        labelled = with_devices(group).assign(configuration=config_label(group), flags=badges(group))
        verdict = [("bound by", "bound_by", fmt_text)] if group["bound_by"].ne("").any() else []
        # The default table: at most 12 columns (report-guide T1); the rest are opt-in groups below it.
        main = build(labelled, [
            ("configuration", "configuration", fmt_text), (f"{unit} (median)", "throughput", fmt_number),
            ("sustained", "sustained_throughput", fmt_number), ("of fastest", "vs_fastest", fmt_share),
            ("median step", "median_s", fmt_seconds), ("IQR", "iqr_s", fmt_seconds),
            ("% peak", "pct_peak_table", fmt_pct), (f"cost ({currency})", "cost", fmt_number),
            ("per", "cost_unit", fmt_text), *verdict, ("check", "check_passed", fmt_check),
            ("flags / not comparable", "flags", fmt_text)], css=_row_class, max_rows=PROBLEM_ROWS)
        extra = [*tflops, *tokens, *exchange, *[column for column in limits if column not in verdict],
                 ("% peak (measured)", "pct_peak_measured", fmt_pct), ("n", "n", fmt_number)]
        for name, spec in (("work and limits", extra), ("memory", memory),
                           ("energy", [*energy, (f"{unit} per W", "throughput_per_watt", fmt_number)]),
                           ("provenance", [("device name", "device_name", fmt_text), ("price", "price_rule", fmt_text),
                                           ("source", "source", fmt_text), ("run", "run_id", fmt_text)])):
            if spec:
                main.more.append(build(labelled, [("configuration", "configuration", fmt_text),
                                                  *spec[:MAX_COLUMNS - 1]], css=_row_class, max_rows=PROBLEM_ROWS))
        section.tables.append(main)
        # No chart repeats the table (report-guide G1, G4): 'of fastest' carries an in-cell bar.
        if memory:
            section.text.append(MEMORY_TEXT)
        sections.append(section)
    return sections


#: How every speedup section says it pairs rows (rule C5), and why a pair may give no ratio.
PAIRING_TEXT = ("Within a machine a ratio pairs rows of one run; failing that, a row of another run in the same "
                "environment, labelled 'across runs'; never another environment. No ratio is drawn from a "
                "contended, starved or bimodal row or one above a peak; an emulated row pairs only within its "
                "machine, labelled 'emulation'. Where no pair can be made, 'no ratio' says why.")


def default_baseline(frame: pd.DataFrame, reference_machine: str | None) -> tuple[dict[str, str], list[str]]:
    """Several machines: the reference machine. One machine: single-device strategy."""
    machines = usable(frame)["machine"].unique()
    if len(machines) > 1 and reference_machine:
        return {"machine": reference_machine}, []
    return {"strategy": "single"}, ["n_devices"]


def _baseline_labels(pairs: pd.DataFrame) -> pd.Series:
    base = pd.DataFrame({c: pairs[f"{c}_base"] if f"{c}_base" in pairs else pairs[c] for c in CONFIG})
    return config_label(base)


def versus_baseline(frame: pd.DataFrame, baseline: dict[str, str], free: list[str]) -> Section:
    pairs = speedup(frame, baseline, free)
    section = Section(f"Speedup vs baseline ({describe(baseline)})", "baseline", nav="Speedup vs baseline", text=[
        f"Each configuration against the row that differs only in {', '.join([*baseline, *free])}; "
        f"speedup = throughput / baseline throughput. Choose another baseline with "
        f"`parbench report --baseline COLUMN=VALUE`."])
    section.text.append(PAIRING_TEXT if "machine" not in baseline else
                        "Across machines both rows must be comparable: real hardware, none contended, starved, "
                        "bimodal, launch- or host-bound, or above a peak; where not, 'no ratio' says why.")
    if pairs.empty:
        section.text.append("No pairs: no usable row has a matching baseline row.")
        return section
    pairs["config"] = config_label(pairs)
    pairs["baseline_config"] = _baseline_labels(pairs)
    section.tables.append(build(_ratio_order(pairs), [
        ("problem", "problem", fmt_text), ("configuration", "config", fmt_text),
        ("baseline", "baseline_config", fmt_text), ("speedup", "speedup", fmt_ratio),
        ("noise", "noise_test", fmt_text), ("paired", "pairing", fmt_text), ("no ratio", "no_ratio", fmt_text),
        ("emulated", "emulated", fmt_flag)], css=_row_class))
    return section


def _ratio_order(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per problem, the pairs with a ratio by speedup, then those without (each saying why)."""
    return pairs.assign(has_ratio=pairs["speedup"].notna()).sort_values(
        ["problem", "has_ratio", "speedup"], ascending=[True, False, False], kind="stable")


def scaling_section(frame: pd.DataFrame) -> Section:
    curves = scaling(frame)
    section = Section("Scaling", "scaling", text=[
        "efficiency = thr(N) / (N · thr(1)), all points of a curve from one run on one machine. Weak scaling keeps the "
        "per-device batch fixed (global batch N · batch); strong scaling (declared by the case: scaling=strong) keeps "
        "the global batch fixed. Emulated devices share one CPU: their curves measure the emulation, not hardware. "
        "A contended, starved or bimodal point, or one above a peak, is left out of its curve."])
    dropped = scaling_left_out(frame)
    if not dropped.empty:
        section.text.append(f"Left out of the scaling curves ({len(dropped)} rows): {counts_text(dropped)}.")
    if curves.empty:
        section.text.append("No scaling curves: no run measured the same case on 1 and more devices successfully.")
        return section
    section.figures.append((figures.scaling(curves), "scaling speedup and efficiency against device count"))
    section.tables.append(build(curves, [
        ("machine", "machine", fmt_text), ("framework", "framework", fmt_text), ("device", "device", fmt_text),
        ("strategy", "strategy", fmt_text), ("precision", "precision", fmt_text), ("problem", "problem", fmt_text),
        ("scaling", "scaling", fmt_text), ("N", "n_devices", fmt_number), ("throughput", "throughput", fmt_number),
        ("unit", "throughput_unit", fmt_text), ("speedup", "speedup", fmt_ratio),
        ("efficiency", "efficiency", fmt_fraction), ("emulated", "emulated", fmt_flag), ("run", "run_id", fmt_text)],
        css=_row_class))
    return section


def precision_section(frame: pd.DataFrame) -> Section:
    pairs = speedup(frame, {"precision": "fp32"})
    section = Section("Precision: speedup over fp32, with the numerics check", "precision", nav="Precision", text=[
        "speedup = throughput in the lower precision / fp32 throughput of the same case on the same machine. "
        "The check column is the lower-precision case's numerics check (kernels: against float64 NumPy; training: "
        "against the fp32 loss trajectory); a case that fails it is a failed case and is listed below instead."])
    section.text.append(PAIRING_TEXT)
    if pairs.empty:
        section.text.append("No pairs: no case ran in fp32 and in another precision on the same machine.")
        return section
    if pairs["speedup"].notna().any():
        section.figures.append((figures.precision(pairs), "speedup of each precision over fp32"))
    section.tables.append(build(with_devices(_ratio_order(pairs)), [
        *CONFIG_SPEC, ("problem", "problem", fmt_text), ("speedup vs fp32", "speedup", fmt_ratio),
        ("noise", "noise_test", fmt_text), ("paired", "pairing", fmt_text), ("no ratio", "no_ratio", fmt_text),
        ("check", "check_passed", fmt_check),
        ("check metric", "check_metric", fmt_text), ("check value", "check_value", fmt_number),
        ("emulated", "emulated", fmt_flag)], css=_row_class))
    return section


def compile_section(frame: pd.DataFrame) -> Section:
    pairs = compile_pairs(frame)
    section = Section("Compilation: speedup over eager, compile time and break-even", "compile", nav="Compile", text=[
        f"Each compiled case beside its eager twin (compile none, everything else the same, same machine). "
        f"speedup: {METRICS['compile_speedup'].formula}. compile s: first step − median step of the compiled case, "
        f"never part of its step time. break-even: {METRICS['compile_break_even_steps'].formula}. "
        f"recompiles: {METRICS['recompiles'].formula}. The check column is the compiled case's own numerics check."])
    section.text.append(PAIRING_TEXT)
    if pairs.empty:
        section.text.append("No pairs: no case ran compiled and eager on the same machine.")
        return section
    section.tables.append(build(with_devices(_ratio_order(pairs)), [
        ("problem", "problem", fmt_text), *CONFIG_SPEC, ("speedup vs eager", "speedup", fmt_ratio),
        ("noise", "noise_test", fmt_text), ("paired", "pairing", fmt_text), ("no ratio", "no_ratio", fmt_text),
        ("median", "median_s", fmt_seconds),
        ("eager median", "median_s_base", fmt_seconds), ("compile s", "compile_s", fmt_number),
        ("break-even steps", "break_even", fmt_text), ("recompiles", "recompiles", fmt_number),
        ("check", "check_passed", fmt_check), ("check value", "check_value", fmt_number),
        ("emulated", "emulated", fmt_flag)], css=_row_class))
    return section


def peak_section(frame: pd.DataFrame) -> Section:
    rows = usable(latest(flagged(frame)))
    rows = rows[rows["pct_peak_table"].notna() | rows["pct_peak_measured"].notna()]
    section = Section("% of peak", "peak", text=[
        f"% of peak (table): {METRICS['pct_peak_table'].formula}.",
        f"% of peak (measured): {METRICS['pct_peak_measured'].formula}."])
    if rows.empty:
        section.text.append("No row has a peak to compare with (no FLOP count, or no peak known for the device).")
        return section
    above = rows["pct_peak_table"].gt(100) | rows["pct_peak_measured"].gt(100)
    if above.any():
        devices = sorted(set(rows.loc[above, "machine"] + " · " + rows.loc[above, "device"] + " "
                             + rows.loc[above, "device_name"].where(rows.loc[above, "device_name"].ne(""),
                                                                    "(unnamed)")))
        section.text.append(
            f"Above the peak ({int(above.sum())} rows, on {'; '.join(devices)}): the peak table is wrong for this "
            f"device (or the timing is), so these figures are not ranked: they are listed last, drawn in no chart, "
            f"and in no ratio, rank or price.")
    ranked = rows[~above]
    if ranked["pct_peak_table"].notna().any():
        section.figures.append((figures.peak(ranked[ranked["pct_peak_table"].notna()]),
                                "percent of peak per configuration (rows above a peak left out)"))
    ordered = rows.assign(above=above).sort_values(["above", "pct_peak_table"], ascending=[True, False], kind="stable")
    ordered["peak_note"] = ordered["above"].map({True: "above the peak: the peak table is wrong for this device",
                                                 False: ""})
    section.tables.append(build(with_devices(ordered), [
        *CONFIG_SPEC, ("problem", "problem", fmt_text), ("TFLOP/s", "tflops", fmt_number),
        ("% peak (table)", "pct_peak_table", fmt_pct), ("% peak (measured)", "pct_peak_measured", fmt_pct),
        ("device name", "device_name", fmt_text), ("note", "peak_note", fmt_text)], css=_row_class))
    return section


#: Up to this many rooflines, one per machine's device; more: one per device type.
MAX_ROOFLINES = 4
ROOF = ["arithmetic_intensity", "tflops", "roof_peak_tflops", "roof_bandwidth_gbs"]


def roofline_section(frame: pd.DataFrame) -> Section:
    """One roofline chart per device (machine, kind, model) over its kernel cases, and their table."""
    rows = usable(latest(frame))
    kernels = rows[rows["arithmetic_intensity"].notna() & rows["tflops"].notna()]
    section = Section("Roofline of the kernels", "roofline", nav="Roofline", text=[
        f"arithmetic intensity: {METRICS['arithmetic_intensity'].formula}.",
        f"bound: {METRICS['roofline_bound_tflops'].formula}; roof: {METRICS['roof_peak_tflops'].formula}; "
        f"bandwidth: {METRICS['roof_bandwidth_gbs'].formula}.",
        "of bound = TFLOP/s / bound. Left of a ridge point a kernel is bound by memory bandwidth, right of it by "
        "the peak."])
    roofed = kernels.dropna(subset=ROOF)
    if len(roofed) < len(kernels):
        section.text.append(f"{len(kernels) - len(roofed)} kernel rows have no roof: their device has no peak or no "
                            "bandwidth known (a CPU's is measured by `parbench calibrate` before the run; a GPU's is "
                            "peaks.toml's bandwidth_gbs).")
    if roofed.empty:
        section.text.append("No kernel row has a roofline to draw.")
        return section
    roofed = roofed.assign(ridge=roofed["roof_peak_tflops"] * 1000.0 / roofed["roof_bandwidth_gbs"])
    roofed = roofed.assign(ridge_side=roofed["arithmetic_intensity"].lt(roofed["ridge"]).map(
        {True: "memory", False: "compute"}))
    by_machine = roofed.groupby(["machine", "device", "device_name"], sort=True)
    if by_machine.ngroups <= MAX_ROOFLINES:
        for (machine, device, name), group in by_machine:
            label = f"{machine} · {device} · {name}" if name else f"{machine} · {device}"
            section.figures.append((figures.roofline(group, label), f"roofline of {label}"))
    else:  # a fleet: one chart per device type, its machines' points together, each precision's median roof
        section.text.append(f"{roofed['machine'].nunique()} machines: one roofline per device type, the points of "
                            f"all its machines together; each roof is the median of its machines' roofs.")
        for (device, name), group in roofed.groupby(["device", "device_name"], sort=True):
            roofs = group.groupby("precision")[["roof_peak_tflops", "roof_bandwidth_gbs"]].transform("median")
            label = f"{device} · {name}" if name else device
            label += f" ({group['machine'].nunique()} machines)"
            section.figures.append((figures.roofline(group.assign(**roofs), label), f"roofline of {label}"))
    section.tables.append(build(with_devices(roofed).sort_values(["machine", "device", "arithmetic_intensity"]), [
        *CONFIG_SPEC, ("problem", "problem", fmt_text), ("FLOP/byte", "arithmetic_intensity", fmt_number),
        ("TFLOP/s", "tflops", fmt_number), ("bound TFLOP/s", "roofline_bound_tflops", fmt_number),
        ("of bound", "roofline_fraction", fmt_fraction), ("ridge side", "ridge_side", fmt_text),
        ("peak TFLOP/s", "roof_peak_tflops", fmt_number), ("GB/s", "roof_bandwidth_gbs", fmt_number),
        ("device name", "device_name", fmt_text)], css=_row_class))
    return section


def limits_section(frame: pd.DataFrame) -> Section:
    """Each usable case's bound_by verdict with its reason and the GPU telemetry behind it, and a
    chart of the verdicts per device."""
    rows = usable(latest(frame))
    section = Section("What limits each figure", "limits", nav="Limits", text=[VERDICT_TEXT])
    judged = rows[rows["bound_by"].ne("")]
    unjudged = rows[rows["bound_by"].eq("")]
    if not unjudged.empty:
        machines = ", ".join(sorted(unjudged["machine"].unique()))
        section.text.append(
            f"{len(unjudged)} of {len(rows)} rows have no bound_by verdict: {NOT_RECORDED} (records older than the "
            f"field, or from asv / pytest-benchmark; machines: {machines}). They are listed below as '{NOT_RECORDED}', "
            f"not dropped: what limits their figures is unknown.")
    if not judged.empty:
        section.figures.append((figures.bound_by(verdict_counts(judged)), "cases per bound_by verdict and device"))
    if rows.empty:
        section.text.append("No usable row.")
        return section
    shown = with_devices(rows).assign(bound_by=rows["bound_by"].where(rows["bound_by"].ne(""), NOT_RECORDED))
    section.tables.append(build(shown.sort_values(["bound_by", "machine", "problem"]), [
        *CONFIG_SPEC, *verdict_table_columns(shown)], css=_row_class))
    return section


def references_section(frame: pd.DataFrame, references: tuple[ReferenceRow, ...], sizes: ModelSizes) -> Section:
    return Section("Published reference figures", "references", nav="References", text=list(REFERENCE_TEXT),
                   tables=reference_tables(frame, references, sizes))


def not_ok_section(frame: pd.DataFrame) -> Section:
    rows = not_ok(latest(frame)).sort_values(["status", "machine", "case_id"])
    section = Section("Unavailable and failed cases", "not-ok", text=[
        f"{(rows['status'] == 'unavailable').sum()} unavailable, {(rows['status'] == 'failed').sum()} failed "
        f"(latest record of each case on each machine). Unavailable: the hardware or software is not there; "
        f"failed: the case crashed or computed the wrong thing."])
    section.tables.append(build(rows, [
        ("status", "status", fmt_text), ("machine", "machine", fmt_text), ("case", "case_id", fmt_id),
        ("reason", "reason", fmt_text), ("emulated", "emulated", fmt_flag), ("source", "source", fmt_text),
        ("run", "run_id", fmt_text), ("file", "path", fmt_id)], css=_row_class))
    return section


def environment_section(frame: pd.DataFrame) -> Section:
    keys = ["machine", "source", *ENVIRONMENT]
    envs = (frame.groupby(keys, dropna=False, sort=True)
            .agg(runs=("run_id", "nunique"), records=("case_id", "size"), first=("timestamp", "min"),
                 last=("timestamp", "max")).reset_index())
    for column in ("first", "last"):
        envs[column] = envs[column].dt.strftime("%Y-%m-%d %H:%M UTC")
    section = Section("Environments", "environments", text=[
        "Every distinct environment each machine ran in: a machine listed twice changed software, threads or code."])
    section.tables.append(build(envs, [
        ("machine", "machine", fmt_text), ("source", "source", fmt_text), ("hostname", "hostname", fmt_text),
        ("CPU", "cpu_model", fmt_text), ("cores", "cpu_cores", fmt_number), ("memory GiB", "memory_gib", fmt_number),
        ("GPUs", "gpus", fmt_text), ("OS", "os", fmt_text), ("Python", "python", fmt_text),
        ("libraries", "libraries", fmt_text), ("parbench commit", "git_commit", fmt_text),
        ("threads", "threads", fmt_text), ("runs", "runs", fmt_number), ("records", "records", fmt_number),
        ("first", "first", fmt_text), ("last", "last", fmt_text)]))
    return section


@dataclass
class ReportContent:
    sections: list[Section]
    problems: list[Section]
    counts: dict[str, int]
    machines: list[str]
    formulas: dict[str, str]
    prices: str
    frame: pd.DataFrame
    overview: Overview


def build_content(frame: pd.DataFrame, options: ReportOptions) -> ReportContent:
    costed = add_costs(flagged(frame), options.prices)
    currency = options.prices.currency
    head = summary(costed, currency)
    head.text += limits_summary(costed)
    rel, reference_machine = relative(costed, options.reference)
    baseline, free = (options.baseline, ["n_devices"] if "strategy" in options.baseline else []) \
        if options.baseline else default_baseline(costed, reference_machine)
    current = latest(costed)
    prices = f"prices: {', '.join(options.prices.sources)} ({currency}; edit suites/prices.toml or pass --prices FILE)"
    sections = [head, rel, versus_baseline(costed, baseline, free)]
    sections += [build_section(costed) for build_section in (scaling_section, precision_section, compile_section,
                                                             peak_section, roofline_section, limits_section)]
    references = options.references if options.references is not None else load_references()
    sections.append(references_section(costed, references, options.model_sizes))
    sections += [not_ok_section(costed), environment_section(costed)]
    problems = per_problem(costed, currency)
    return ReportContent(
        sections=sections,
        problems=problems,
        counts={status: int((current["status"] == status).sum()) for status in ("ok", "unavailable", "failed")}
        | {"emulated": int(current["emulated"].fillna(False).sum()), "records": len(frame),
           "not_comparable": len(not_comparable(current)),
           "superseded": len(frame) - len(current)},
        machines=sorted(frame["machine"].unique()),
        formulas={**metric_formulas(), **REPORT_FORMULAS},
        prices=prices,
        frame=costed,
        overview=build_overview(costed, options.reference, prices),
    )
