"""The first screen's sentences on equal terms (issue 46): device types compared at equal precision on
equal work, why two types that ran one family share no work, and what a buyer needs that no ratio
says (memory capacity, multi-GPU evidence, prices).

- `family_sentences`: per family, the type beside the reference at each precision both ran, on
  the work both did (`type_figures` pairs on the work fingerprint); never one type's best precision
  over the other's.
- `apart_reasons`: (type, family) -> why the two types' rows of a family pair nowhere, in words
  ("the H100 80GB HBM3 ×1 record ran the older ResNet-50 recipe: NCHW, plain SGD ...").
- `buyer_facts`: each GPU type's memory and what ran out of it; that no record spans more than
  one real GPU, where none does; which types have no sourced price, and why.

Nothing here writes HTML; `overview.build_overview` places the sentences.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from suites.report.analyses.device_types import BEST
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.work import why_apart

#: Precisions in the order a sentence lists them.
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16")
#: Below this many common problems a precision's ratio is a single ratio, not a geometric mean (C8).
MIN_PROBLEMS_FOR_MEAN = 3
#: A failure that is the device's memory running out (torch, TF, XLA say it so).
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemory|RESOURCE_EXHAUSTED", re.IGNORECASE)


def fmt_ratio(value: float) -> str:
    """'1.20×', '48×', '0.031×' (three significant figures at most)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return "–"
    if value >= 100:
        return f"{value:,.0f}×"
    if value >= 10:
        return f"{value:.1f}×"
    if value >= 0.1:
        return f"{value:.2f}×"
    return f"{value:.2g}×"


def _order(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


def equal_precision_ratios(figures: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each type's figure over the reference's on the same work, the same precision and the same
    precision policy: type, family, precision, log ratio, problems (k) and machines."""
    view = figures[figures["precision"].ne(BEST)]
    ref = view[view["type"].eq(reference)]
    keys = ["family", "work_key", "policy", "precision", "scope"]
    merged = view[view["type"].ne(reference)].merge(ref[[*keys, "value"]], on=keys, suffixes=("", "_ref"))
    if merged.empty:
        return pd.DataFrame(columns=["type", "family", "precision", "log", "k", "machines"])
    merged = merged.assign(log=np.log(merged["value"] / merged["value_ref"]))
    return merged.groupby(["type", "family", "precision"], as_index=False).agg(
        log=("log", "mean"), k=("work_key", "nunique"), machines=("machines", "max"))


def family_sentences(figures: pd.DataFrame, reference: str, families: list[str],
                     limits_unknown: dict[str, set[str]],
                     apart: dict[tuple[str, str], str]) -> tuple[list[str], set[str]]:
    """At most three sentences: per family, the type with the most work in common with the
    reference, at each precision both ran ("conv2d at equal precision, H200 ×1 over the reference
    H100 80GB HBM3 ×1: 1.03× in fp32, 1.10× in tf32 ..."), and one sentence for the families the two
    ran without any work in common, saying why; and the types among them whose limits were not
    recorded (marked '*', said once under the verdict)."""
    ratios = equal_precision_ratios(figures, reference)
    totals = figures[figures["type"].eq(reference) & figures["precision"].ne(BEST)].groupby("family")["work_key"]
    out, unrecorded = [], set()
    for name in families:
        rows = ratios[ratios["family"].eq(name)]
        if rows.empty:
            continue
        coverage = rows.groupby("type").agg(k=("k", "sum"), log=("log", "mean"))
        device = coverage.sort_values(["k", "log"], ascending=False, kind="stable").index[0]
        mine = rows[rows["type"].eq(device)].sort_values("precision", key=lambda p: p.map(_order))
        said = [f"{fmt_ratio(float(np.exp(row.log)))} in {row.precision}"
                + (f" (geometric mean of {int(row.k)} problems)" if row.k >= MIN_PROBLEMS_FOR_MEAN else "")
                for row in mine.itertuples()]
        listed = ", ".join(said[:-1]) + f" and {said[-1]}" if len(said) > 1 else said[0]
        unknown = sorted(set(limits_unknown.get(name, set())) & {device, reference})
        unrecorded.update(unknown)
        k, machines = int(mine["k"].max()), int(mine["machines"].max())
        total = int(totals.nunique().get(name, k))
        out.append(f"{name} at equal precision, {device} over the reference {reference}: {listed} "
                   f"({k}/{total} {'problem' if total == 1 else 'problems'} of equal work, up to {machines} "
                   f"{'machine' if machines == 1 else 'machines'} per problem, comparable rows only)"
                   f"{'*' if unknown else ''}.")
    unpaired = apart_sentence({key: text for key, text in apart.items() if key[1] in families}, reference)
    return (out[:2] + [unpaired] if unpaired else out[:3]), unrecorded


def apart_sentence(apart: dict[tuple[str, str], str], reference: str) -> str:
    """One sentence for every family a type and the reference ran with no work in common: which,
    and why (the reasons of equal text said once)."""
    if not apart:
        return ""
    by_reason: dict[str, list[str]] = {}
    for (device, name), text in sorted(apart.items()):
        by_reason.setdefault(f"{device}: {text}" if len({d for d, _ in apart}) > 1 else text, []).append(name)
    devices = " and ".join(sorted({device for device, _ in apart}))
    names = [name for group in by_reason.values() for name in group]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    reasons = "; ".join(f"{', '.join(group)}: {text}" if len(by_reason) > 1 else text
                        for text, group in by_reason.items())
    return f"{listed}: {devices} and the reference {reference} did no work in common, so no ratio ({reasons})."


def apart_reasons(frame: ReportFrame, reference: str | None) -> dict[tuple[str, str], str]:
    """(type, family) -> why the type's comparable rows of the family and the reference's pair on no
    work (`work.why_apart`, on one row of each, at one precision where they share one)."""
    if reference is None:
        return {}
    rows = frame.comparable
    if "work_key" not in rows or rows.empty:
        return {}
    rows = rows.assign(type=frame.device_types.loc[rows.index], family=frame.families.loc[rows.index])
    ref = rows[rows["type"].eq(reference)]
    out = {}
    training = rows["workload"].eq("train_step")  # kernels of other shapes are other problems, nothing to explain
    for (device, name), mine in rows[rows["type"].ne(reference) & training].groupby(["type", "family"], sort=True):
        theirs = ref[ref["family"].eq(name)]
        if theirs.empty or set(mine["work_key"]) & set(theirs["work_key"]):
            continue
        # one model at one batch on both sides: a recipe apart (another model or batch is another
        # problem, nothing to explain)
        size = ["param_model", "param_batch"]
        common = mine[size].astype(str).merge(theirs[size].astype(str).drop_duplicates())
        if common.empty:
            continue
        model, batch = common.iloc[0]
        mine = mine[mine["param_model"].astype(str).eq(model) & mine["param_batch"].astype(str).eq(batch)]
        theirs = theirs[theirs["param_model"].astype(str).eq(model) & theirs["param_batch"].astype(str).eq(batch)]
        shared = sorted(set(mine["precision"]) & set(theirs["precision"]), key=_order)
        if shared:
            mine, theirs = mine[mine["precision"].eq(shared[0])], theirs[theirs["precision"].eq(shared[0])]
        text = why_apart(mine.iloc[0], theirs.iloc[0], frame.definitions)
        if text:
            out[(str(device), str(name))] = text
    return out


def _gib(value: float) -> str:
    return f"{value:.0f} GiB"


def memory_sentence(frame: ReportFrame) -> str | None:
    """Each GPU type's memory, what ran out of it (and the largest batch of that model that ran
    there), and each other type's largest batch of that model: "H100 80GB HBM3 ×1 (80 GiB a GPU)
    ran out of memory at ResNet-50 bf16 batch 1024 (batch 512 ran); H200 ×1 (140 GiB) ran ResNet-50
    up to batch 256 and never tried more"."""
    latest = frame.latest.assign(type=frame.device_types, family=frame.families)
    # types with a figure on real hardware (`loc`: assign on an empty view would take every row's type)
    real = set(frame.device_types.loc[frame.comparable.index])
    gpu = latest[latest["device"].astype(str).eq("gpu") & latest["type"].isin(real)]
    if gpu.empty or "device_memory_gib" not in gpu:
        return None
    failed = gpu[gpu["status"].eq("failed") & gpu["reason"].fillna("").astype(str).str.contains(OUT_OF_MEMORY)]
    ran = gpu[gpu["status"].eq("ok")]
    batch = pd.to_numeric(ran["param_batch"], errors="coerce") if "param_batch" in ran else pd.Series(dtype=float)
    parts = []
    for device, group in gpu.groupby("type", sort=True):
        memory = group["device_memory_gib"].dropna()
        head = f"{device} ({_gib(float(memory.max()))} a GPU)" if not memory.empty else str(device)
        mine = failed[failed["type"].eq(device)]
        if not mine.empty:
            out = mine.iloc[0]
            fitted = batch[ran["type"].eq(device) & ran["family"].eq(out["family"])
                           & ran["precision"].eq(out["precision"])].max()
            fit = f" (batch {int(fitted)} ran)" if pd.notna(fitted) else ""
            parts.append(f"{head} ran out of memory at {out['family']} {out['precision']} batch "
                         f"{out.get('param_batch')}{fit}")
        else:
            tried = [f"{family} up to batch {int(batch[ran['type'].eq(device) & ran['family'].eq(family)].max())}"
                     for family in sorted(set(failed["family"]))
                     if batch[ran["type"].eq(device) & ran["family"].eq(family)].notna().any()]
            parts.append(f"{head} ran out of memory in no record" + (f" (it ran {', '.join(tried)} and never "
                                                                       f"tried more)" if tried else ""))
    return "Memory: " + "; ".join(parts) + "."


def multi_gpu_sentence(frame: ReportFrame) -> str | None:
    """Where no usable record spans more than one real GPU: say so, and where to get a projection."""
    usable = frame.usable
    gpu = usable[usable["device"].astype(str).eq("gpu")]
    if gpu.empty:
        return None
    real = gpu[~gpu["emulated"].fillna(False).astype(bool)]
    if (real["n_devices"].fillna(1) > 1).any():
        return None
    emulated = int(gpu["emulated"].fillna(False).astype(bool).sum())
    shared = f" (its {emulated} multi-rank rows share one GPU: emulated)" if emulated else ""
    return (f"No record spans more than one real GPU{shared}, so nothing here measures multi-GPU scaling; "
            f"`parbench predict` projects it from these records: `parbench report --predict-to DEVICE:N` adds "
            f"them, marked PROJECTED, in the view Before you rent.")


def price_sentence(frame: ReportFrame) -> str | None:
    """The device types with no sourced price, and why: they have no cost cell."""
    rows = frame.comparable
    if rows.empty or "price_sourced" not in rows:
        return None
    rows = rows.assign(type=frame.device_types)
    unpriced = rows[~rows["price_sourced"].astype("boolean").fillna(False).astype(bool)]
    if unpriced.empty:
        return None
    said = []
    for device, group in unpriced.groupby("type", sort=True):
        rule = str(group["price_rule"].fillna("").iloc[0]).strip()
        said.append(f"{device}" + (f" ({rule})" if rule else ""))
    return "No sourced price, so no cost cell: " + "; ".join(said) + "."


def buyer_facts(frame: ReportFrame) -> list[str]:
    """What a buyer needs beside the ratios (see the module), the sentences that apply."""
    return [text for text in (memory_sentence(frame), multi_gpu_sentence(frame), price_sentence(frame)) if text]
