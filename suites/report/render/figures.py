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
from matplotlib.patches import Patch
from PIL import Image

from suites.report.load.columns import config_label
from suites.report.load.numbers import compact

WIDTH_IN = 9.0
BAR_IN = 0.32
COLORS = ("#3b6ea8", "#d08a2c", "#4c9a5a", "#b5495b", "#7a5ca8", "#5aa3a8", "#8c6d46", "#6b6b6b")


def plain(text: str) -> str:
    return str(text).replace("$", r"\$")


#: At most this many bars (configurations) in one bar chart: the fastest / first ones; the chart's
#: title says how many more there are (all are in its table). Charts cost time and bytes per bar,
#: so a fleet of machines would otherwise draw thousands.
MAX_BARS = 16
#: Curves in the scaling chart.
MAX_SERIES = 8
DPI = 80


def png(figure: Figure, tight: bool = True) -> str:
    """The figure as base64 PNG. `tight`: trim to what is drawn (one more layout pass); charts
    that set their own margins (`_bars`) skip it."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight" if tight else None)
    # a chart has few colours: a 256-colour palette PNG is a third of the size, and reads the same
    buffer.seek(0)
    with Image.open(buffer) as image:
        small = io.BytesIO()
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            small, format="png", optimize=True)
    return base64.b64encode(small.getvalue()).decode("ascii")


def _top(rows: pd.DataFrame, limit: int) -> tuple[pd.DataFrame, str]:
    """The first `limit` rows, and the title's note on the rest ('' when none is left out)."""
    if len(rows) <= limit:
        return rows, ""
    return rows.iloc[:limit], f" [first {limit} of {len(rows)}; all in the table]"


def _palette(keys: pd.Series) -> dict[str, str]:
    """A colour per key, in sorted order (the same key, the same colour, in one chart)."""
    return {key: COLORS[i % len(COLORS)] for i, key in enumerate(sorted(keys.unique()))}


def _labels(rows: pd.DataFrame, with_problem: bool = False) -> pd.Series:
    """Configuration labels; emulated rows say so (`config_label`), in figures as in tables."""
    return config_label(rows) + (" · " + rows["problem"] if with_problem else "")


#: Characters of one line of a bar's label: a longer line ends in '…' (the whole label is in the
#: table beside the chart), so no label runs off the figure's left edge.
LABEL_CHARS = 58
#: Inches one character of an 8 pt label takes, at most (DejaVu Sans averages ~0.55 em; digits and
#: capitals are wider): what the left margin is sized by.
CHAR_IN = 8 * 0.62 / 72
#: Inches of the top margin per line of title or legend.
LINE_IN = 0.2


def bar_label(label: str) -> str:
    """A bar's label on at most two lines, split at a ' · ' (configuration, then problem), each
    line cut to `LABEL_CHARS` with '…'."""
    parts = str(label).split(" · ")
    lines, line = [], ""
    for part in parts:
        joined = f"{line} · {part}" if line else part
        if line and len(joined) > LABEL_CHARS and len(lines) == 0:
            lines.append(line)
            line = part
        else:
            line = joined
    lines.append(line)
    return "\n".join(text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…" for text in lines)


def _bars(labels: pd.Series, values: pd.Series, colors: dict[str, str], keys: pd.Series, xlabel: str,
          title: str, more: str = "", xerr: np.ndarray | None = None, reference: float | None = None) -> Figure:
    """Horizontal bars, one per label, coloured by `keys` (`colors`, named in a legend). The title
    (and `more`, on its own line) is left-aligned over the whole figure, and the left margin is
    sized from the longest label line, so no text is cut off."""
    shown = [bar_label(label) for label in labels]
    lines = max((text.count("\n") + 1 for text in shown), default=1)
    bar_in = BAR_IN * (1.0 if lines == 1 else 1.35)
    top_in = LINE_IN * (2 + bool(more)) + 0.15
    height = top_in + 0.6 + bar_in * len(labels)
    figure = Figure(figsize=(WIDTH_IN, height))
    longest = max((len(line) for text in shown for line in text.split("\n")), default=0)
    left = min(0.62, (0.2 + longest * CHAR_IN) / WIDTH_IN)
    figure.subplots_adjust(left=left, right=0.97, top=1 - top_in / height, bottom=0.55 / height)
    axes = figure.add_subplot()
    positions = np.arange(len(labels))
    axes.barh(positions, values, xerr=xerr, color=[colors[key] for key in keys], capsize=3,
              error_kw={"elinewidth": 1})
    axes.set_yticks(positions, [plain(text) for text in shown], fontsize=8)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    axes.set_xlabel(plain(xlabel))
    figure.text(0.01, 1 - 0.1 / height, plain(title), fontsize=10, ha="left", va="top")
    if more:
        figure.text(0.01, 1 - (0.1 + LINE_IN) / height, plain(more.strip(" []")), fontsize=8, ha="left", va="top",
                    color="#555")
    handles = [Patch(color=color, label=plain(key)) for key, color in colors.items()]
    figure.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.01, 1 - (0.1 + LINE_IN * (1 + bool(more)))
                                                                     / height),
                  ncol=min(len(handles), 6), fontsize=8, frameon=False, handlelength=1.2, borderaxespad=0)
    if reference is not None:
        axes.axvline(reference, color="#444", linewidth=1, linestyle="--")
    axes.grid(axis="x", alpha=0.3)
    return figure


def scaling(curves: pd.DataFrame) -> str:
    """Speedup over one device (with the ideal line) and efficiency, per series."""
    figure = Figure(figsize=(WIDTH_IN, 3.6))
    speed, efficiency = figure.subplots(1, 2)
    keys = ["machine", "framework", "device", "strategy", "precision", "compile", "workload", "params", "scaling"]
    series = curves.groupby(keys, sort=True).ngroups
    if series > MAX_SERIES:  # the first MAX_SERIES curves (all are in the table)
        chosen = curves.groupby(keys, sort=True).ngroup() < MAX_SERIES
        curves = curves[chosen]
        figure.suptitle(f"first {MAX_SERIES} of {series} curves; all in the table", fontsize=8)
    for index, (key, curve) in enumerate(curves.groupby(keys, sort=True)):
        machine, framework, device, strategy, precision, compiler, workload, params, mode = key
        compiled = "" if compiler in ("", "none") else f"+{compiler}"
        label = plain(f"{machine} {framework} {strategy} {precision}{compiled} {workload} {params} ({mode})")
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
    figure.legend(loc="lower center", fontsize=7, ncol=1,
                  bbox_to_anchor=(0.5, -0.02 - 0.045 * curves.groupby(keys).ngroups))
    return png(figure)


def precision(pairs: pd.DataFrame) -> str:
    """Mixed/reduced precision speedup over fp32 on the same machine, device and strategy."""
    pairs = pairs[pairs["speedup"].notna()].sort_values("speedup", ascending=False)
    pairs, more = _top(pairs, MAX_BARS)
    across = pairs["pairing"] if "pairing" in pairs else pd.Series("", index=pairs.index)
    labels = (_labels(pairs, with_problem=True)
              + across.map(lambda how: " · [across runs]" if "across runs" in how else ""))
    return png(_bars(labels, pairs["speedup"], _palette(pairs["precision"]), pairs["precision"],
                     "speedup over fp32 (throughput ratio; dashed: 1.0×)", "precision speedup over fp32, by precision",
                     more, reference=1.0), tight=False)


def peak(rows: pd.DataFrame) -> str:
    """% of the peaks table's figure per configuration and problem."""
    rows, more = _top(rows.sort_values("pct_peak_table", ascending=False), MAX_BARS)
    labels = _labels(rows, with_problem=True)
    return png(_bars(labels, rows["pct_peak_table"], _palette(rows["machine"]), rows["machine"],
                     "% of peak (peaks table)", "% of peak: 100 · TFLOP/s / (N · peak of one device in this "
                     "precision), by machine", more), tight=False)




MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def roofline(rows: pd.DataFrame, device: str) -> str:
    """One device's roofline, log-log: per precision the roof min(peak, AI · bandwidth) with its
    ridge point (AI = peak / bandwidth), and one point per kernel case at (arithmetic intensity,
    TFLOP/s of one device); colour by framework and workload, marker by precision."""
    figure = Figure(figsize=(WIDTH_IN, 5.0))
    axes = figure.add_subplot()
    intensity = rows["arithmetic_intensity"]
    low, high = float(intensity.min()) / 4, float(intensity.max()) * 4
    roofs = rows.groupby("precision")[["roof_peak_tflops", "roof_bandwidth_gbs"]].first()
    precisions = {name: MARKERS[i % len(MARKERS)] for i, name in enumerate(sorted(rows["precision"].unique()))}
    for index, (name, (peak_tflops, bandwidth)) in enumerate(roofs.iterrows()):
        ridge = peak_tflops * 1000.0 / bandwidth
        xs = np.geomspace(min(low, ridge / 4), max(high, ridge * 4), 200)
        style = ("-", "--", "-.", ":")[index % 4]
        axes.plot(xs, np.minimum(peak_tflops, xs * bandwidth / 1000.0), color="#333", linestyle=style, linewidth=1.2,
                  label=plain(f"roof {name}: {peak_tflops:.3g} TFLOP/s, {bandwidth:.3g} GB/s"))
        axes.scatter([ridge], [peak_tflops], color="#333", marker="|", s=200, zorder=4)
        axes.annotate(plain(f"ridge {ridge:.3g} FLOP/B"), (ridge, peak_tflops), xytext=(4, 6),
                      textcoords="offset points", fontsize=7)
    kinds = (rows["framework"] + " " + rows["workload"])
    colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(sorted(kinds.unique()))}
    per_device = rows["tflops"] / rows["n_devices"].astype(float)
    for (kind, name), index in rows.assign(kind=kinds).groupby(["kind", "precision"], sort=True).groups.items():
        axes.scatter(intensity[index], per_device[index], color=colors[kind], marker=precisions[name], s=28,
                     alpha=0.85, zorder=3)
    for name, color in colors.items():
        axes.scatter([], [], color=color, marker="o", label=plain(name))
    for name, marker in precisions.items():
        axes.scatter([], [], color="#888", marker=marker, label=plain(f"precision {name}"))
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity, FLOP per byte (analytic FLOP / fewest bytes moved)")
    axes.set_ylabel("TFLOP/s of one device")
    axes.set_title(plain(f"roofline: {device} (one point per kernel case)"), fontsize=10)
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=7, loc="lower right")
    return png(figure)


#: A fixed colour per `bound_by` verdict, the same in every report.
VERDICT_COLORS = {"compute": "#3b6ea8", "memory": "#4c9a5a", "power": "#b5495b", "launch": "#d08a2c",
                  "communication": "#7a5ca8", "unknown": "#9a9a9a"}


def bound_by(counts: pd.DataFrame) -> str:
    """How many cases each verdict covers, one stacked bar per device (`counts`: one row per
    device label, one column per verdict)."""
    if len(counts) > MAX_BARS:  # the devices with the most cases
        counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False, kind="stable").index]
    counts, more = _top(counts, MAX_BARS)
    figure = Figure(figsize=(WIDTH_IN, 1.2 + BAR_IN * len(counts)))
    axes = figure.add_subplot()
    positions = np.arange(len(counts))
    left = np.zeros(len(counts))
    for verdict in counts.columns:
        axes.barh(positions, counts[verdict], left=left, color=VERDICT_COLORS.get(verdict, "#6b6b6b"),
                  label=plain(verdict))
        left += counts[verdict].to_numpy()
    axes.set_yticks(positions, [plain(label) for label in counts.index], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("cases")
    axes.set_title(f"what limits each figure (bound_by), cases per device{more}", fontsize=10)
    axes.legend(fontsize=7, loc="lower right")
    axes.grid(axis="x", alpha=0.3)
    return png(figure)


def _plain_log_labels(axes) -> None:  # noqa: ANN001 (matplotlib Axes)
    """Log axes labelled '10k', '1M', '0.5' (compact), never '1e5' (report-guide G2)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in (axes.xaxis, axes.yaxis):  # 1-2-5 steps: a range within one decade still has labels
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: compact(value)))
        axis.set_minor_formatter(NullFormatter())


def cost_time(points: pd.DataFrame, work: str, currency: str) -> str:
    """PROJECTED cost of `work` against the hours it takes, one point per target, log-log: the
    point is the projection, the segment its band (a slower step costs proportionally more at one
    hourly price, so the band runs along a line through the origin). `points`: label, hours,
    hours_low, hours_high, cost, cost_low, cost_high (the band's ends; NaN where it is open)."""
    figure = Figure(figsize=(WIDTH_IN, 4.2))
    axes = figure.add_subplot()
    for index, (_, point) in enumerate(points.iterrows()):
        color = COLORS[index % len(COLORS)]
        if pd.notna(point["hours_high"]):
            axes.plot([point["hours_low"], point["hours_high"]], [point["cost_low"], point["cost_high"]],
                      color=color, linewidth=3, alpha=0.45, solid_capstyle="butt")
        axes.scatter([point["hours"]], [point["cost"]], color=color, marker="D", s=36, zorder=3)
        axes.annotate(plain(point["label"]), (point["hours"], point["cost"]), xytext=(6, 5),
                      textcoords="offset points", fontsize=8, color=color)
    axes.set_xscale("log")
    axes.set_yscale("log")
    _plain_log_labels(axes)
    axes.set_xlabel(plain(f"hours for {work} (PROJECTED; the bar is the band)"))
    axes.set_ylabel(plain(f"{currency} for {work}"))
    axes.margins(0.25)
    axes.grid(alpha=0.3, which="both")
    figure.text(0.01, 0.99, plain(f"PROJECTED, not measured: cost against time for {work}, per target"),
                fontsize=10, ha="left", va="top")
    figure.subplots_adjust(left=0.1, right=0.97, top=0.9, bottom=0.14)
    return png(figure, tight=False)
