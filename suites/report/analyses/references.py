"""Published reference figures beside a machine's own: which runs match a reference row, and why not.

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
from typing import Mapping, Sequence

import pandas as pd

from suites.hardware.references import ReferenceRow

#: model -> its integer size parameters at their defaults (`suites.workloads.training.default_sizes`,
#: given by the caller: the report reads records, not the code that ran them). A model not
#: named here has no sizes to compare: its runs match a row that names no sizes.
ModelSizes = Mapping[str, Mapping[str, int]]

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
        published = sorted({sizes_text(r) or "its defaults" for r in of_model})
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


def sizes_text(reference: ReferenceRow) -> str:
    return ", ".join(f"{name}={value}" for name, value in reference.sizes)


def model_label(reference: ReferenceRow) -> str:
    sizes = sizes_text(reference)
    return f"{reference.model} ({sizes})" if sizes else reference.model


def model_runs(runs: pd.DataFrame, models: set[str]) -> pd.DataFrame:
    """The training runs of `models` among `runs` (the latest usable ones: ok, with a throughput,
    check not failed)."""
    if "param_model" not in runs.columns:
        return runs.iloc[0:0]
    runs = runs[runs["param_model"].isin(models) & runs["samples_per_s"].notna()]
    return runs.sort_values(["param_model", "machine", "device", "n_devices", "framework", "strategy", "precision"])
