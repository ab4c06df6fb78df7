"""The report's matplotlib figures, each returned as a base64 PNG for embedding.

Figures are drawn on the Agg canvas directly (no pyplot state, no display needed). Text from
results goes through `plain`, so a '$' in a machine label is not read as mathtext.
"""
from __future__ import annotations

import base64
import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from suites.report.columns import config_label

WIDTH_IN = 9.0
BAR_IN = 0.32
COLORS = ("#3b6ea8", "#d08a2c", "#4c9a5a", "#b5495b", "#7a5ca8", "#5aa3a8", "#8c6d46", "#6b6b6b")


def plain(text: str) -> str:
    return str(text).replace("$", r"\$")


def png(figure: Figure) -> str:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _colors(keys: pd.Series) -> list[str]:
    order = {key: COLORS[i % len(COLORS)] for i, key in enumerate(sorted(keys.unique()))}
    return [order[key] for key in keys]


def _labels(rows: pd.DataFrame, with_problem: bool = False) -> pd.Series:
    """Configuration labels; emulated rows say so, in figures as in tables."""
    labels = config_label(rows) + (" · " + rows["problem"] if with_problem else "")
    return labels + np.where(rows["emulated"].fillna(False).astype(bool), " (emulated)", "")


def _bars(labels: pd.Series, values: pd.Series, colors: list[str], xlabel: str, title: str,
          xerr: np.ndarray | None = None, reference: float | None = None) -> Figure:
    figure = Figure(figsize=(WIDTH_IN, 1.0 + BAR_IN * len(labels)))
    axes = figure.add_subplot()
    positions = np.arange(len(labels))
    axes.barh(positions, values, xerr=xerr, color=colors, capsize=3, error_kw={"elinewidth": 1})
    axes.set_yticks(positions, [plain(label) for label in labels], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(plain(xlabel))
    axes.set_title(plain(title), fontsize=10)
    if reference is not None:
        axes.axvline(reference, color="#444", linewidth=1, linestyle="--")
    axes.grid(axis="x", alpha=0.3)
    return figure


def throughput(rows: pd.DataFrame, problem: str) -> str:
    """Throughput of each configuration on one problem; error bars span the IQR of step time
    (throughput at q3 .. at q1)."""
    rows = rows.sort_values("throughput", ascending=False)
    work = rows["throughput"] * rows["median_s"]
    low = (rows["throughput"] - work / rows["q3_s"]).clip(lower=0).fillna(0)
    high = (work / rows["q1_s"] - rows["throughput"]).clip(lower=0).fillna(0)
    labels = _labels(rows)
    unit = rows["throughput_unit"].iloc[0]
    return png(_bars(labels, rows["throughput"], _colors(rows["machine"]), unit,
                     f"{problem}: throughput (bars: median; whiskers: IQR)", np.vstack([low, high])))


def scaling(curves: pd.DataFrame) -> str:
    """Speedup over one device (with the ideal line) and efficiency, per series."""
    figure = Figure(figsize=(WIDTH_IN, 3.6))
    speed, efficiency = figure.subplots(1, 2)
    keys = ["machine", "framework", "device", "strategy", "precision", "workload", "params", "scaling"]
    for index, (key, curve) in enumerate(curves.groupby(keys, sort=True)):
        machine, framework, device, strategy, precision, workload, params, mode = key
        label = plain(f"{machine} {framework} {strategy} {precision} {workload} {params} ({mode})")
        color = COLORS[index % len(COLORS)]
        speed.plot(curve["n_devices"], curve["speedup"], marker="o", color=color, label=label)
        efficiency.plot(curve["n_devices"], curve["efficiency"], marker="o", color=color)
    top = int(curves["n_devices"].max())
    speed.plot([1, top], [1, top], color="#444", linestyle="--", linewidth=1, label="ideal")
    speed.set(xlabel="devices N", ylabel="thr(N) / thr(1)", title="speedup")
    efficiency.axhline(1.0, color="#444", linestyle="--", linewidth=1)
    efficiency.set(xlabel="devices N", ylabel="thr(N) / (N·thr(1))", title="scaling efficiency", ylim=(0, None))
    for axes in (speed, efficiency):
        axes.set_xticks(sorted(curves["n_devices"].astype(int).unique()))
        axes.grid(alpha=0.3)
    figure.legend(loc="lower center", fontsize=7, ncol=1, bbox_to_anchor=(0.5, -0.02 - 0.045 * curves.groupby(keys).ngroups))
    return png(figure)


def precision(pairs: pd.DataFrame) -> str:
    """Mixed/reduced precision speedup over fp32 on the same machine, device and strategy."""
    pairs = pairs.sort_values("speedup", ascending=False)
    labels = _labels(pairs, with_problem=True)
    return png(_bars(labels, pairs["speedup"], _colors(pairs["precision"]), "speedup over fp32 (throughput ratio)",
                     "precision speedup vs fp32 (dashed: 1.0)", reference=1.0))


def peak(rows: pd.DataFrame) -> str:
    """% of the peaks table's figure per configuration and problem."""
    rows = rows.sort_values("pct_peak_table", ascending=False)
    labels = _labels(rows, with_problem=True)
    return png(_bars(labels, rows["pct_peak_table"], _colors(rows["machine"]), "% of peak (peaks table)",
                     "% of peak: 100 · TFLOP/s / (N · peak of one device in this precision)"))
