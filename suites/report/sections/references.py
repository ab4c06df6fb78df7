"""Published reference figures (`suites.hardware.references`), each beside the runs here that match it
(`analyses.references`), the runs of the same models that match none and why, and the runs beside
other accelerators' rows. Never in a rank or a mean (C11)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from suites.hardware.references import ReferenceRow, load_references
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.references import (ModelSizes, at_sizes, matches, model_label, model_runs,
                                               why_unmatched)
from suites.report.render.page import Section
from suites.report.render.tables import Cell, Table
from suites.report.sections.base import ReportOptions

TITLE, ANCHOR, NAV = "Published reference figures", "references", "References"
TEXT = [
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
        left = [_cell(model_label(reference)), _cell(reference.device), _cell(reference.precision),
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
            rows.append([_cell(model_label(reference)), _cell(_run(row)), _cell(str(row["device_name"] or "–")),
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


def reference_tables(usable: pd.DataFrame, references: Sequence[ReferenceRow], sizes: ModelSizes) -> list[Table]:
    """The tables of the section over `usable` (the latest usable rows): reference rows with their
    matching runs; the other runs of the referenced models; runs beside other accelerators' rows
    (each of the last two only where it has rows)."""
    runs = model_runs(usable, {reference.model for reference in references})
    tables = [reference_table(references, runs, sizes)]
    for table in (unmatched_table(references, runs, sizes), other_accelerators_table(references, runs, sizes)):
        if table.rows:
            tables.append(table)
    return tables


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    references = options.references if options.references is not None else load_references()
    return Section(TITLE, ANCHOR, nav=NAV, text=list(TEXT),
                   tables=reference_tables(frame.usable, references, options.model_sizes))
