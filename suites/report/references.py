"""The report's reference-comparison section: a machine's own figure beside published ones.

Each row of the reference table (`suites.kept.references`) is listed with its source and
conditions, and beside it every run that matches it: the same model at its default sizes, the
same precision and device count, on a device whose name has every word of the row's `match`.
A row no run matches says so; nothing is estimated for it. The runs of the same models that
match no row are listed after, each with why (another device, smaller sizes, ...), so a CPU
machine's figures stand beside the GPU references without pretending to be comparable.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from suites.kept.references import ReferenceRow
from suites.report.selection import latest, usable
from suites.report.tables import Cell, Table
from suites.workloads.training import MODELS

SECTION_TEXT = [
    "Published figures (suites/references.toml; PARBENCH_REFERENCES adds rows of your own) with their "
    "source and conditions, and beside each the runs here that match it: same model at its default "
    "sizes, same precision, same device count, a device whose name has every word of the row's match. "
    "Published figures come from their authors' own pipelines (real data, data loaders, their "
    "optimizer); parbench times a training step on synthetic data, so a ratio near 1 says the "
    "hardware and framework perform as published, not that the two measured the same thing.",
]


def size_differences(model: str, row: pd.Series) -> list[str]:
    """The size parameters of `row` that differ from `model`'s defaults ("image=64"); other
    choices of the model (batch norm's mode) are not sizes and do not count."""
    if model not in MODELS:
        return []
    spec = MODELS[model]()
    differences = []
    for name, declared in type(spec).size_fields().items():
        if not isinstance(declared.default, int):
            continue
        value = row.get(f"param_{name}")
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
            continue
        if int(value) != declared.default:
            differences.append(f"{name}={int(value)}")
    return differences


def matches(reference: ReferenceRow, row: pd.Series) -> bool:
    return (row.get("param_model") == reference.model and row.get("precision") == reference.precision
            and int(row.get("n_devices", 0)) == reference.n_devices
            and reference.matches_device(str(row.get("device_name") or ""))
            and not size_differences(reference.model, row))


def why_unmatched(references: Sequence[ReferenceRow], row: pd.Series) -> str:
    """Why no reference row matches `row`, from the closest rows of its model."""
    model = row.get("param_model")
    sizes = size_differences(str(model), row)
    if sizes:
        return f"not {model} at its published size: {', '.join(sizes)}"
    same_device = [r for r in references if r.model == model and r.matches_device(str(row.get("device_name") or ""))]
    if not same_device:
        return f"no reference row for {row.get('device')} {row.get('device_name') or '(unnamed device)'}"
    return (f"the rows for this device are for {', '.join(sorted({f'{r.precision} x{r.n_devices}' for r in same_device}))}, "
            f"not {row.get('precision')} x{row.get('n_devices')}")


def _cell(text: str, sort: Any = None) -> Cell:
    return Cell(text, str(sort if sort is not None else text))


def _figure(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _run(row: pd.Series) -> str:
    emulated = " (emulated)" if row.get("emulated") is True else ""
    batch = row.get("param_batch")
    per_device = "" if batch is None or (isinstance(batch, float) and math.isnan(batch)) else f", batch {int(batch)}/device"
    mode = row.get("param_batchnorm")
    batchnorm = f", batchnorm {mode}" if isinstance(mode, str) and mode else ""
    return (f"{row['machine']}: {row['framework']} {row['strategy']}, {row['device']}×{int(row['n_devices'])}"
            f"{emulated}{per_device}{batchnorm}")


def reference_table(references: Sequence[ReferenceRow], runs: pd.DataFrame) -> Table:
    rows = []
    for reference in references:
        matched = [row for _, row in runs.iterrows() if matches(reference, row)]
        left = [_cell(reference.model), _cell(reference.device), _cell(reference.precision),
                _cell(str(reference.n_devices), reference.n_devices),
                _cell(f"{_figure(reference.samples_per_s)} {reference.unit}", f"{reference.samples_per_s:020.3f}"),
                _cell(f"{reference.source}. {reference.conditions}".strip())]
        if not matched:
            rows.append(left + [_cell("no matching run"), _cell("–", ""), _cell("–", "")])
        for row in matched:
            own = float(row["samples_per_s"])
            rows.append(left + [_cell(_run(row)), _cell(_figure(own), f"{own:020.3f}"),
                                _cell(f"{own / reference.samples_per_s:.2f}×", f"{own / reference.samples_per_s:012.4f}")])
    return Table(headers=["model", "reference device", "precision", "devices", "published", "source and conditions",
                          "run here", "samples/s here", "here / published"],
                 rows=rows, numeric=[False, False, False, True, True, False, False, True, True], identifier=[False] * 9,
                 caption="Published reference figures, each beside the matching runs")


def unmatched_table(references: Sequence[ReferenceRow], runs: pd.DataFrame) -> Table:
    rows = []
    for _, row in runs.iterrows():
        if any(matches(reference, row) for reference in references):
            continue
        own = float(row["samples_per_s"])
        rows.append([_cell(str(row["param_model"])), _cell(_run(row)), _cell(str(row["device_name"] or "–")),
                     _cell(str(row["precision"])), _cell(_figure(own), f"{own:020.3f}"),
                     _cell(why_unmatched(references, row))])
    return Table(headers=["model", "run here", "device", "precision", "samples/s", "why no reference row matches"],
                 rows=rows, numeric=[False, False, False, False, True, False], identifier=[False] * 6,
                 caption="Runs of the same models that match no reference row (not comparable with the figures above)")


def other_accelerators_table(references: Sequence[ReferenceRow], runs: pd.DataFrame) -> Table:
    """Each run at its model's published size beside the reference rows of the same model,
    precision and device count measured on *other* devices: what a buyer weighs (this GPU's
    figure over an A100 row's)."""
    rows = []
    for _, row in runs.iterrows():
        if size_differences(str(row["param_model"]), row):
            continue
        own = float(row["samples_per_s"])
        for reference in references:
            if (reference.model != row.get("param_model") or reference.precision != row.get("precision")
                    or reference.n_devices != int(row.get("n_devices", 0))
                    or reference.matches_device(str(row.get("device_name") or ""))):
                continue
            ratio = own / reference.samples_per_s
            rows.append([_cell(reference.model), _cell(_run(row)), _cell(str(row["device_name"] or "–")),
                         _cell(reference.precision), _cell(str(reference.n_devices), reference.n_devices),
                         _cell(_figure(own), f"{own:020.3f}"), _cell(reference.device),
                         _cell(f"{_figure(reference.samples_per_s)} {reference.unit}", f"{reference.samples_per_s:020.3f}"),
                         _cell(f"{ratio:.2f}×", f"{ratio:012.4f}"), _cell(f"{reference.source}. {reference.conditions}".strip())])
    return Table(headers=["model", "run here", "device here", "precision", "devices", "samples/s here",
                          "published on", "published", "here / published", "source and conditions"],
                 rows=rows, numeric=[False, False, False, False, True, True, False, True, True, False],
                 identifier=[False] * 10,
                 caption="Runs here beside the published figures of other accelerators (same model, size, "
                         "precision and device count)")


def model_runs(frame: pd.DataFrame, models: set[str]) -> pd.DataFrame:
    """The latest usable training runs of `models` (ok, with a throughput, check not failed)."""
    if "param_model" not in frame.columns:
        return frame.iloc[0:0]
    runs = usable(latest(frame))
    runs = runs[runs["param_model"].isin(models) & runs["samples_per_s"].notna()]
    return runs.sort_values(["param_model", "machine", "device", "n_devices", "framework", "strategy", "precision"])


def reference_tables(frame: pd.DataFrame, references: Sequence[ReferenceRow]) -> list[Table]:
    """The tables of the section: reference rows with their matching runs; the other runs of the
    referenced models; runs beside other accelerators' rows (each of the last two only where it
    has rows)."""
    runs = model_runs(frame, {reference.model for reference in references})
    tables = [reference_table(references, runs)]
    for table in (unmatched_table(references, runs), other_accelerators_table(references, runs)):
        if table.rows:
            tables.append(table)
    return tables
