"""The report's reference-comparison section: a machine's own figure beside published ones.

Each row of the reference table (`suites.hardware.references`) is listed with its source and
conditions, and beside it every run that matches it: the same model at the row's sizes (the
model's defaults unless the row names others), the same precision and device count, on a device
whose name has every word of the row's `match`, set beside the run's figure in the row's unit
(`ReferenceRow.run_figure`: samples/s, tokens/s, or either per device).
A row no run matches says so; nothing is estimated for it. The runs of the same models that
match no row are listed after, each with why (another device, smaller sizes, ...), so a CPU
machine's figures stand beside the GPU references without pretending to be comparable.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from suites.hardware.references import ReferenceRow
from suites.report.analyses.selection import latest, usable
from suites.report.render.tables import Cell, Table

#: model -> its integer size parameters at their defaults (`suites.workloads.training.default_sizes`,
#: given by the caller: the report reads records, not the code that ran them). A model not
#: named here has no sizes to compare: its runs match a row that names no sizes.
ModelSizes = Mapping[str, Mapping[str, int]]

SECTION_TEXT = [
    "Published figures (suites/references.toml; PARBENCH_REFERENCES adds rows of your own) with their "
    "source and conditions, and beside each the runs here that match it: same model at the sizes the "
    "figure was published at (its defaults unless the row names others), same precision, same device "
    "count, a device whose name has every word of the row's match. "
    "Published figures come from their authors' own pipelines (real data, data loaders, their "
    "optimizer); parbench times a training step on synthetic data, so a ratio near 1 says the "
    "hardware and framework perform as published, not that the two measured the same thing.",
    "A row's unit says which figure of a run stands beside it: img/s, samples/s and sequences/s "
    "the run's samples/s; tokens/s its tokens of the global batch per second; a unit per GPU "
    "(Megatron's and NeMo's tokens/s/GPU) the run's figure divided by its device count. A row "
    "measured at other than the model's default sizes names them (llama_block (seq=8192)) and "
    "matches only runs at those sizes.",
]


def _size_values(model: str, row: pd.Series, sizes: ModelSizes) -> dict[str, tuple[int, int]]:
    """Each integer size parameter of `model`: (the run's value, the model's default); a
    parameter the run does not state is at its default."""
    values = {}
    for name, default in sizes.get(model, {}).items():
        value = row.get(f"param_{name}")
        stated = not (value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)))
        values[name] = (int(value) if stated else default, default)
    return values


def size_differences(model: str, row: pd.Series, sizes: ModelSizes) -> list[str]:
    """The size parameters of `row` that differ from `model`'s defaults ("image=64"); other
    choices of the model (batch norm's mode) are not sizes and do not count."""
    return [f"{name}={value}" for name, (value, default) in _size_values(model, row, sizes).items()
            if value != default]


def at_sizes(reference: ReferenceRow, row: pd.Series, sizes: ModelSizes) -> bool:
    """The run is the row's model at the sizes the figure was published at: the model's defaults
    but for the row's `sizes`. A row naming a size the model does not have matches nothing."""
    wanted = dict(reference.sizes)
    values = _size_values(reference.model, row, sizes)
    return set(wanted) <= set(values) and all(value == wanted.get(name, default)
                                              for name, (value, default) in values.items())


def matches(reference: ReferenceRow, row: pd.Series, sizes: ModelSizes) -> bool:
    return (row.get("param_model") == reference.model and row.get("precision") == reference.precision
            and int(row.get("n_devices", 0)) == reference.n_devices
            and reference.matches_device(str(row.get("device_name") or ""))
            and at_sizes(reference, row, sizes) and reference.run_figure(row) is not None)


def why_unmatched(references: Sequence[ReferenceRow], row: pd.Series, sizes: ModelSizes) -> str:
    """Why no reference row matches `row`, from the closest rows of its model."""
    model = row.get("param_model")
    of_model = [r for r in references if r.model == model]
    if not of_model:
        return f"no reference row for {model}"
    if not any(at_sizes(r, row, sizes) for r in of_model):
        published = sorted({_sizes_text(r) or "its defaults" for r in of_model})
        rows = f" (the rows are at {'; '.join(published)})" if any(r.sizes for r in of_model) else ""
        differences = ", ".join(size_differences(str(model), row, sizes)) or "its defaults"
        return f"not {model} at its published size: {differences}{rows}"
    same_device = [r for r in of_model
                   if r.matches_device(str(row.get("device_name") or "")) and at_sizes(r, row, sizes)]
    if not same_device:
        return f"no reference row for {row.get('device')} {row.get('device_name') or '(unnamed device)'}"
    if not any(r.run_figure(row) is not None for r in same_device):
        units = ", ".join(sorted({r.unit for r in same_device}))
        return f"the rows for this device are in {units}, which this run does not report"
    return ("the rows for this device are for "
            f"{', '.join(sorted({f'{r.precision} x{r.n_devices}' for r in same_device}))}, "
            f"not {row.get('precision')} x{row.get('n_devices')}")


def _sizes_text(reference: ReferenceRow) -> str:
    return ", ".join(f"{name}={value}" for name, value in reference.sizes)


def _model(reference: ReferenceRow) -> str:
    sizes = _sizes_text(reference)
    return f"{reference.model} ({sizes})" if sizes else reference.model


def _cell(text: str, sort: Any = None) -> Cell:
    return Cell(text, str(sort if sort is not None else text))


def _figure(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _run(row: pd.Series) -> str:
    emulated = " (emulated)" if row.get("emulated") is True else ""
    batch = row.get("param_batch")
    per_device = ("" if batch is None or (isinstance(batch, float) and math.isnan(batch))
                  else f", batch {int(batch)}/device")
    mode = row.get("param_batchnorm")
    batchnorm = f", batchnorm {mode}" if isinstance(mode, str) and mode else ""
    return (f"{row['machine']}: {row['framework']} {row['strategy']}, {row['device']}×{int(row['n_devices'])}"
            f"{emulated}{per_device}{batchnorm}")


def reference_table(references: Sequence[ReferenceRow], runs: pd.DataFrame, sizes: ModelSizes) -> Table:
    rows = []
    for reference in references:
        matched = [row for _, row in runs.iterrows() if matches(reference, row, sizes)]
        left = [_cell(_model(reference)), _cell(reference.device), _cell(reference.precision),
                _cell(str(reference.n_devices), reference.n_devices),
                _cell(f"{_figure(reference.samples_per_s)} {reference.unit}", f"{reference.samples_per_s:020.3f}"),
                _cell(f"{reference.source}. {reference.conditions}".strip())]
        if not matched:
            rows.append(left + [_cell("no matching run"), _cell("–", ""), _cell("–", "")])
        for row in matched:
            own = float(reference.run_figure(row))
            rows.append(left + [_cell(_run(row)), _cell(_figure(own), f"{own:020.3f}"),
                                _cell(f"{own / reference.samples_per_s:.2f}×",
                                      f"{own / reference.samples_per_s:012.4f}")])
    return Table(headers=["model", "reference device", "precision", "devices", "published", "source and conditions",
                          "run here", "here, in the published unit", "here / published"],
                 rows=rows, numeric=[False, False, False, True, True, False, False, True, True], identifier=[False] * 9,
                 caption="Published reference figures, each beside the matching runs")


def unmatched_table(references: Sequence[ReferenceRow], runs: pd.DataFrame, sizes: ModelSizes) -> Table:
    rows = []
    for _, row in runs.iterrows():
        if any(matches(reference, row, sizes) for reference in references):
            continue
        own = float(row["samples_per_s"])
        rows.append([_cell(str(row["param_model"])), _cell(_run(row)), _cell(str(row["device_name"] or "–")),
                     _cell(str(row["precision"])), _cell(_figure(own), f"{own:020.3f}"),
                     _cell(why_unmatched(references, row, sizes))])
    return Table(headers=["model", "run here", "device", "precision", "samples/s", "why no reference row matches"],
                 rows=rows, numeric=[False, False, False, False, True, False], identifier=[False] * 6,
                 caption="Runs of the same models that match no reference row (not comparable with the figures above)")


def other_accelerators_table(references: Sequence[ReferenceRow], runs: pd.DataFrame,
                             sizes: ModelSizes) -> Table:
    """Each run at its model's published size beside the reference rows of the same model,
    precision and device count measured on *other* devices: what a buyer weighs (this GPU's
    figure over an A100 row's)."""
    rows = []
    for _, row in runs.iterrows():
        for reference in references:
            if (reference.model != row.get("param_model") or reference.precision != row.get("precision")
                    or reference.n_devices != int(row.get("n_devices", 0))
                    or reference.matches_device(str(row.get("device_name") or ""))
                    or not at_sizes(reference, row, sizes) or reference.run_figure(row) is None):
                continue
            own = float(reference.run_figure(row))
            ratio = own / reference.samples_per_s
            rows.append([_cell(_model(reference)), _cell(_run(row)), _cell(str(row["device_name"] or "–")),
                         _cell(reference.precision), _cell(str(reference.n_devices), reference.n_devices),
                         _cell(_figure(own), f"{own:020.3f}"), _cell(reference.device),
                         _cell(f"{_figure(reference.samples_per_s)} {reference.unit}",
                               f"{reference.samples_per_s:020.3f}"),
                         _cell(f"{ratio:.2f}×", f"{ratio:012.4f}"),
                         _cell(f"{reference.source}. {reference.conditions}".strip())])
    return Table(headers=["model", "run here", "device here", "precision", "devices", "here, in the published unit",
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


def reference_tables(frame: pd.DataFrame, references: Sequence[ReferenceRow], sizes: ModelSizes) -> list[Table]:
    """The tables of the section: reference rows with their matching runs; the other runs of the
    referenced models; runs beside other accelerators' rows (each of the last two only where it
    has rows)."""
    runs = model_runs(frame, {reference.model for reference in references})
    tables = [reference_table(references, runs, sizes)]
    for table in (unmatched_table(references, runs, sizes), other_accelerators_table(references, runs, sizes)):
        if table.rows:
            tables.append(table)
    return tables
