"""What every section shares: the options of a report, the configuration columns, a row's CSS
classes, and the column groups of more than one section. A section imports this and the analyses,
never another section."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from suites.hardware.references import ReferenceRow
from suites.records.work_fingerprint import Definitions
from suites.report.analyses.prices import PriceTable
from suites.report.analyses.references import ModelSizes
from suites.report.render.tables import Column, fmt_number, fmt_text, fmt_watts


@dataclass
class ReportOptions:
    """What a report is built with besides its records (`parbench report`'s options)."""
    prices: PriceTable
    baseline: dict[str, str] | None = None
    reference: str | None = None
    #: Published figures to set the runs beside; None: the shipped table and $PARBENCH_REFERENCES.
    references: tuple[ReferenceRow, ...] | None = None
    #: Each model's default integer sizes (`suites.workloads.training.default_sizes`, given by
    #: the report command): what a reference row's sizes are compared with.
    model_sizes: ModelSizes = field(default_factory=dict)
    #: `parbench report --predict-to`'s projections, computed by the front end (the report never
    #: imports the predictor): one row per target as `suites.predict.projection.projections_frame`
    #: returns it, plus `model`, `precision` and `base` (what it was projected from). Read by the
    #: "before you rent" section only: no projection enters a measured table, ratio or export.
    projections: pd.DataFrame | None = None
    #: What a case's names mean (`suites.measure.work_definitions.current`, given by the report
    #: command): how an older record's work is resolved; None: older records pair with nothing.
    definitions: Definitions | None = None


def row_class(row: pd.Series) -> str:
    """CSS classes of a table row; a contended row is shaded as a noisy one (its figure is as doubtful)."""
    return " ".join(name for name, on in (("emulated", row.get("emulated") is True),
                                          ("noisy", row.get("noisy") is True or row.get("contended") is True),
                                          ("bad", row.get("status") == "failed")) if on)


#: Configuration columns of a table; "devices" is added by `with_devices`.
CONFIG_COLUMNS = [Column("machine", "machine", fmt_text), Column("devices", "devices", fmt_text),
                  Column("framework", "framework", fmt_text), Column("strategy", "strategy", fmt_text),
                  Column("precision", "precision", fmt_text), Column("compile", "compile", fmt_text)]


def with_devices(frame: pd.DataFrame) -> pd.DataFrame:
    """Add 'devices', e.g. 'gpu×4': kind and count in one short column."""
    return frame.assign(devices=frame["device"] + "×" + frame["n_devices"].astype(str))


def ratio_order(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per problem, the pairs with a ratio by speedup, then those without (each saying why)."""
    return pairs.assign(has_ratio=pairs["speedup"].notna()).sort_values(
        ["problem", "has_ratio", "speedup"], ascending=[True, False, False], kind="stable")


#: How every speedup section says it pairs rows (rule C5), and why a pair may give no ratio.
PAIRING_TEXT = ("Within a machine a ratio pairs rows of one run; failing that, a row of another run in the same "
                "environment, labelled 'across runs'; never another environment. No ratio is drawn from a "
                "contended, starved or bimodal row or one above a peak; an emulated row pairs only within its "
                "machine, labelled 'emulation'. Where no pair can be made, 'no ratio' says why.")


def gpu_columns(group: pd.DataFrame) -> list[Column]:
    """Clock and power columns, where any row of `group` has GPU telemetry."""
    if not group["gpu_sm_clock_mhz"].notna().any() and not group["gpu_power_w"].notna().any():
        return []
    return [Column("SM MHz", "gpu_sm_clock_mhz", fmt_number), Column("max MHz", "gpu_max_sm_clock_mhz", fmt_number),
            Column("GPU power", "gpu_power_w", fmt_watts), Column("power limit", "gpu_power_limit_w", fmt_watts),
            Column("°C max", "gpu_temperature_c", fmt_number), Column("clock events", "gpu_clock_events", fmt_text)]


def limit_columns(group: pd.DataFrame) -> list[Column]:
    """The verdict, then the GPU's clocks and power where measured: beside a table's throughput."""
    verdict = [Column("bound by", "bound_by", fmt_text)] if group["bound_by"].ne("").any() else []
    return [*verdict, *gpu_columns(group)]
