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
    return per_joule.where(per_joule.gt(0))


def type_figures(rows: pd.DataFrame, types: pd.Series, families: pd.Series, metric: str) -> pd.DataFrame:
    """Per device type, family, problem and precision (plus BEST): the median over machines of
    each machine's best figure among `rows` (the comparable ones), its min and max, how many
    machines, and which configuration gave the best one. `types`, `families`: each row's, by index."""
    if rows.empty:
        return pd.DataFrame(columns=["type", "family", "problem", "precision", "value", "low", "high", "machines",
                                     "config", "scope"])
    rows = rows.assign(type=types, family=families, value=figure_column(rows, metric),
                       scope=rows["energy_scope"].fillna("").astype(str) if metric == "energy" else "")
    rows = rows[rows["value"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["type", "family", "problem", "precision", "value", "low", "high", "machines",
                                     "config", "scope"])
    keys = ["type", "family", "problem", "precision", "scope"]
    config = (rows["framework"].astype(str) + " " + rows["strategy"].astype(str) + " " + rows["precision"].astype(str)
              + rows["compile"].astype(str).map(lambda c: "" if c in ("none", "", "nan") else f" +{c}"))
    rows = rows[[*keys, "machine", "value"]].assign(config=config)  # only what is pooled: a fleet's rows are many
    best_precision = rows.assign(precision=BEST)
    both = pd.concat([rows, best_precision], ignore_index=True)
    per_machine = (both.sort_values("value", ascending=False, kind="stable")
                   .drop_duplicates(subset=[*keys, "machine"], keep="first"))
    pooled = per_machine.groupby(keys, as_index=False, sort=False).agg(
        value=("value", "median"), low=("value", "min"), high=("value", "max"), machines=("machine", "nunique"),
        config=("config", "first"))
    return pooled


def pick_reference_type(figures: pd.DataFrame, machines: pd.Series, types: pd.Series, wanted: str | None) -> str | None:
    """`wanted` (a device type, or a machine label: that machine's best-covered type), else the
    type that measured the most problems; ties alphabetical. `machines`, `types`: each record's."""
    if figures.empty:
        return None
    coverage = figures[figures["precision"].ne(BEST)].groupby("type")["problem"].nunique()
    if wanted:
        if wanted in coverage.index:
            return wanted
        of_machine = machines.eq(wanted)
        if of_machine.any():
            mine = coverage[coverage.index.isin(set(types[of_machine]))]
            if not mine.empty:
                return sorted(mine.index, key=lambda label: (-mine[label], label))[0]
    return sorted(coverage.index, key=lambda label: (-coverage[label], label))[0]


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
    """Each usable training row beside its machine's single-device fp32 eager row of the same
    framework and problem, from the same run where one exists (C5): one row per usable row that
    has a baseline, with `log_ratio`, `across` (another run) and `emulated`."""
    base = good[good["strategy"].eq("single") & good["precision"].eq("fp32") & eager(good["compile"])
                & good["n_devices"].eq(1)]
    keys = ["machine", "framework", "problem"]
    pairs = good.reset_index().merge(base[[*keys, "run_id", "throughput"]], on=keys, suffixes=("", "_base"))
    if pairs.empty:
        return pairs.assign(log_ratio=[], across=[])
    pairs["across"] = pairs["run_id"].ne(pairs["run_id_base"])
    pairs = pairs.sort_values("across", kind="stable").drop_duplicates("index", keep="first")
    pairs["log_ratio"] = np.log(pairs["throughput"] / pairs["throughput_base"])
    return pairs
