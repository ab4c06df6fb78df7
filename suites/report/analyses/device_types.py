"""Device types and workload families (report-guide §2), and each type's figures pooled over machines.

- A *device type* is the hardware a figure ran on, machines pooled: a GPU's name × how many of
  them the case used (a 1-GPU and an 8-GPU system are different rows, as on Lambda's page), a
  CPU's model × its usable cores (several ranks on one CPU are the same CPU).
- A *family* is a column of the first screen: each standard model, the small training steps, and
  each kernel workload (matmul, conv2d, allreduce, ...).
- A type's figure on a problem is its best comparable configuration (framework, strategy, compile)
  on each machine, pooled over machines by the median (C7), with the min and max over machines.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from suites.report.analyses.choice import cost_per_unit
from suites.report.analyses.machines import no_finding

#: Families in the order a buyer reads them: standard models first, kernels last.
STANDARD_MODELS = {"resnet50": "ResNet-50", "bert_base": "BERT-base", "gpt2_small": "GPT-2 small",
                   "llama_block": "Llama block"}
SMALL_TRAINING = "train steps (small)"
FAMILY_ORDER = [*STANDARD_MODELS.values(), SMALL_TRAINING, "conv2d", "matmul", "allreduce"]
#: The "precision" of a type's best passing precision.
BEST = "best"


def short_gpu_name(name: str) -> str:
    return name.removeprefix("NVIDIA ").strip() or "GPU"


def device_type(frame: pd.DataFrame) -> pd.Series:
    """'H100 80GB HBM3 ×1', 'AMD EPYC · 2 cores': per row (see the module)."""
    name = frame["device_name"].fillna("").astype(str)
    cpu_model = frame["cpu_model"].fillna("").astype(str) if "cpu_model" in frame else name
    cores = frame["cpu_cores"] if "cpu_cores" in frame else pd.Series(np.nan, index=frame.index)
    count = frame["n_devices"].fillna(1).astype(int).astype(str)
    labels = []
    for device, dev_name, model, core_count, n in zip(frame["device"].astype(str), name, cpu_model, cores, count):
        if device == "cpu":
            cpu = (model or dev_name or "CPU").strip()
            labels.append(f"{cpu} · {int(core_count)} cores" if pd.notna(core_count) else cpu)
        elif device == "gpu":
            labels.append(f"{short_gpu_name(dev_name)} ×{n}")
        else:
            labels.append(f"{dev_name or device.upper()} ×{n}")
    return pd.Series(labels, index=frame.index, dtype=object)


def host_type(frame: pd.DataFrame) -> pd.Series:
    """A machine's hardware without the device count, for the strategy grids: 'H100 80GB HBM3 GPUs'."""
    types = device_type(frame)
    gpu = frame["device"].astype(str).eq("gpu")
    return types.where(~gpu, frame["device_name"].fillna("").astype(str).map(short_gpu_name) + " GPUs")


def family(frame: pd.DataFrame) -> pd.Series:
    """Each row's workload family: its standard model, the small training steps, or its kernel workload."""
    model = frame["param_model"].astype(object) if "param_model" in frame else pd.Series(None, index=frame.index)
    out = []
    for workload, name in zip(frame["workload"].astype(str), model):
        if workload == "train_step":
            out.append(STANDARD_MODELS.get(str(name), SMALL_TRAINING))
        else:
            out.append(workload)
    return pd.Series(out, index=frame.index, dtype=object)


def ordered_families(families: set[str]) -> list[str]:
    """`families` in `FAMILY_ORDER`, others after them alphabetically."""
    known = [name for name in FAMILY_ORDER if name in families]
    return known + sorted(families - set(known))


def figure_column(rows: pd.DataFrame, metric: str) -> pd.Series:
    """The per-row figure of `metric`, higher is better (NaN where it does not apply)."""
    if metric == "speed":
        return rows["throughput"]
    if metric == "cost":
        cost, _ = cost_per_unit(rows)
        sourced = rows["price_sourced"].astype("boolean").fillna(False).astype(bool) if "price_sourced" in rows \
            else pd.Series(False, index=rows.index)
        return (1.0 / cost).where(sourced & cost.gt(0))
    per_joule = rows["samples_per_joule"].where(rows["samples_per_joule"].notna(), rows["gflop_per_joule"])
    trusted = rows["energy_why_not"].fillna("").eq("") if "energy_why_not" in rows else True
    return per_joule.where(per_joule.gt(0) & trusted)  # a flagged reading is in no ratio (`energy_why_not`)


#: The columns of `type_figures`.
FIGURE_COLUMNS = ["type", "family", "work_key", "policy", "problem", "precision", "ran", "value", "low", "high",
                  "machines", "config", "scope"]


def pair_key(rows: pd.DataFrame) -> pd.Series:
    """What a row pairs on across device types: its work without the precision (`work.add_work`),
    else (a frame made without it) its problem; a row whose work is unresolved pairs with nothing."""
    if "work_key" not in rows:
        return rows["problem"].astype(str)
    key = rows["work_key"].fillna("").astype(str)
    return key.where(key.ne(""), "unresolved " + rows.index.astype(str))


def type_figures(rows: pd.DataFrame, types: pd.Series, families: pd.Series, metric: str) -> pd.DataFrame:
    """Per device type, family, work and precision (plus BEST): the median over machines of each
    machine's best figure among `rows` (the comparable ones), its min and max, how many machines,
    which configuration gave the best one and in which precision it ran (`ran`). Rows pair on their
    work (`pair_key`) and, within one precision, on who applies it (`policy`: autocast, the
    strategy's own, TF's mixed policy); BEST rows on the work alone, `ran` saying each side's
    precision. `problem` is the label. `types`, `families`: each row's, by index."""
    if rows.empty:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    policy = rows["precision_policy"].fillna("").astype(str) if "precision_policy" in rows else rows["precision"]
    rows = rows.assign(type=types, family=families, value=figure_column(rows, metric), work_key=pair_key(rows),
                       policy=policy, ran=rows["precision"].astype(str),
                       scope=rows["energy_scope"].fillna("").astype(str) if metric == "energy" else "")
    rows = rows[rows["value"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    keys = ["type", "family", "work_key", "policy", "precision", "scope"]
    config = (rows["framework"].astype(str) + " " + rows["strategy"].astype(str) + " " + rows["precision"].astype(str)
              + rows["compile"].astype(str).map(lambda c: "" if c in ("none", "", "nan") else f" +{c}"))
    # only what is pooled: a fleet's rows are many
    rows = rows[[*keys, "problem", "ran", "machine", "value"]].assign(config=config)
    best_precision = rows.assign(precision=BEST, policy="")
    both = pd.concat([rows, best_precision], ignore_index=True)
    per_machine = (both.sort_values("value", ascending=False, kind="stable")
                   .drop_duplicates(subset=[*keys, "machine"], keep="first"))
    pooled = per_machine.groupby(keys, as_index=False, sort=False).agg(
        problem=("problem", "first"), ran=("ran", "first"), value=("value", "median"), low=("value", "min"),
        high=("value", "max"), machines=("machine", "nunique"), config=("config", "first"))
    return pooled[FIGURE_COLUMNS]


def pick_reference_type(figures: pd.DataFrame, machines: pd.Series, types: pd.Series, wanted: str | None) -> str | None:
    """`wanted` (a device type, or a machine label: that machine's best-covered type), else the type
    the most figures of other types can be set beside (equal work at equal precision), then the one
    that measured the most problems; ties alphabetical. `machines`, `types`: each record's."""
    if figures.empty:
        return None
    equal = figures[figures["precision"].ne(BEST)]
    coverage = equal.groupby("type")["work_key"].nunique()
    shared_by = equal.groupby(["work_key", "policy", "precision"])["type"].transform("nunique")
    shared = equal[shared_by.gt(1)].groupby("type").size().reindex(coverage.index, fill_value=0)
    if wanted:
        if wanted in coverage.index:
            return wanted
        of_machine = machines.eq(wanted)
        if of_machine.any():
            mine = coverage[coverage.index.isin(set(types[of_machine]))]
            if not mine.empty:
                return sorted(mine.index, key=lambda label: (-mine[label], label))[0]
    return sorted(coverage.index, key=lambda label: (-shared[label], -coverage[label], label))[0]


def limits_unknown(rows: pd.DataFrame, types: pd.Series, families: pd.Series) -> dict[str, set[str]]:
    """family -> the GPU device types whose rows of it (the comparable ones) carry no `bound_by` verdict."""
    rows = rows[rows["device"].astype(str).eq("gpu") & rows["bound_by"].fillna("").astype(str).eq("")]
    if rows.empty:
        return {}
    rows = rows.assign(type=types, family=families)
    return {name: set(group["type"]) for name, group in rows.groupby("family")}


def eager(compile_column: pd.Series) -> pd.Series:
    """Rows run without a compiler."""
    return compile_column.astype(str).isin(["none", "", "nan"])


def paired_ratios(good: pd.DataFrame) -> pd.DataFrame:
    """Each usable training row beside its base on the same machine, framework and problem, from the
    same run where one exists (C5): a strategy's row beside the single device at the same precision
    (eager), a single device's (a precision's) beside its fp32 eager row. One row per usable row that
    has a base, with `log_ratio`, `across` (another run), `emulated`, `caveat` (either side probably
    launch-bound: `comparability`) and `no_finding` (the ratio within the swing of a side between
    runs: `machines.no_finding`)."""
    single = good["strategy"].eq("single") & good["n_devices"].eq(1)
    base = good[single & eager(good["compile"])]
    keys = ["machine", "framework", "problem", "base_precision"]
    rows = good.reset_index().assign(base_precision=np.where(single.to_numpy(), "fp32", good["precision"].astype(str)))
    columns = ["run_id", "throughput", "why_not", *[c for c in ("run_swing",) if c in good]]
    pairs = rows.merge(base.assign(base_precision=base["precision"].astype(str))[[*keys, *columns]], on=keys,
                       suffixes=("", "_base"))
    if pairs.empty:
        return pairs.assign(log_ratio=[], across=[], caveat=[], no_finding=[])
    pairs["across"] = pairs["run_id"].ne(pairs["run_id_base"])
    pairs = pairs.sort_values("across", kind="stable").drop_duplicates("index", keep="first")
    pairs["log_ratio"] = np.log(pairs["throughput"] / pairs["throughput_base"])
    pairs["caveat"] = pairs["why_not"].eq("probably-launch-bound") | pairs["why_not_base"].eq("probably-launch-bound")
    swings = (pairs["run_swing"], pairs["run_swing_base"]) if "run_swing" in pairs else ()
    pairs["no_finding"] = [no_finding(float(np.exp(log)), *sides)
                           for log, *sides in zip(pairs["log_ratio"], *swings)]
    return pairs
