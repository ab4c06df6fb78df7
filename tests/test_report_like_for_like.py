"""Issue 46, the report side: the report pairs only equal work on equal terms, and a machine is its
hardware. Each rule over the shipped samples (tests/data/h100-sample, tests/data/epyc-cpu-sample,
results/samples/h200-2026-11-26 and -26b: every case of the issue is in them), loaded once, and
the rules' edges on small fixture tables (tests/test_report_analysis.row)."""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.measure.work_definitions import current
from suites.report.analyses.comparability import SHORT_GPU_STEP_S, flag
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.machines import no_finding, one_machine_per_hardware
from suites.report.analyses.prices import PriceTable
from suites.report.load.files import load_results
from suites.report.overview import build_overview
from tests.test_report_analysis import NO_PRICES, matmul, row, table

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = (ROOT / "tests" / "data" / "h100-sample", ROOT / "tests" / "data" / "epyc-cpu-sample",
           ROOT / "results" / "samples" / "h200-2026-11-26", ROOT / "results" / "samples" / "h200-2026-11-26b")
H100, H200 = "H100 80GB HBM3 ×1", "H200 ×1"


@pytest.fixture(scope="module")
def frame() -> ReportFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tidy = load_results(SAMPLES)
    return ReportFrame.build(tidy, PriceTable.load(), current())


@pytest.fixture(scope="module")
def screen(frame):
    return build_overview(frame, None, "prices: test")


def grid(screen, key: str):
    (found,) = [grid for grid in screen.matrices if grid.key == key]
    return found


def cell(found, device: str, family: str):
    (cells,) = [cells for cells in found.rows if cells[0].text == device]
    return cells[found.headers.index(family)]


def precision_key(screen, precision: str) -> str:
    (key,) = [key for key, label in screen.precision_choices if label == precision]
    return f"speed-{key}"


# --- 1. a hardware ratio compares equal precision -------------------------------------------------

def test_the_matrix_opens_on_one_precision_and_the_best_passing_view_names_each_sides(screen):
    assert screen.reference == H100
    assert screen.precision_choices[0][1] == "fp32" and screen.precision_choices[-1][1] == "best passing"
    assert cell(grid(screen, precision_key(screen, "fp32")), H200, "conv2d").text == "1.03×"
    assert cell(grid(screen, precision_key(screen, "bf16")), H200, "conv2d").text == "1.97×"
    best = cell(grid(screen, precision_key(screen, "best passing")), H200, "conv2d")
    assert best.text == "1.73×" and "bf16 vs tf32" in best.note  # the H200's bf16 over the H100's tf32, said
    assert "the reference ran tf32" in best.title


def test_the_verdict_sets_types_side_by_side_only_at_equal_precision(screen):
    (conv,) = [line for line in screen.verdict if line.startswith("conv2d")]
    assert conv.startswith(f"conv2d at equal precision, {H200} over the reference {H100}: 1.03× in fp32, "
                           "1.10× in tf32, 1.82× in fp16 and 1.97× in bf16")
    assert not any("best passing" in line for line in screen.verdict)


# --- 2. pairing on the work fingerprint -----------------------------------------------------------

def test_the_h100s_older_resnet_recipe_pairs_with_nothing_and_the_page_says_why(frame, screen):
    latest = frame.latest
    resnet = latest[latest["problem"].str.contains("model=resnet50") & latest["status"].eq("ok")
                    & latest["strategy"].eq("single") & latest["precision"].eq("bf16")]
    by_machine = resnet.groupby("machine")["work_key"].first()
    assert by_machine["h100"] != by_machine["nvidia-h200-2026-11-26"]
    (line,) = [line for line in screen.verdict if "did no work in common" in line]
    assert f"the {H100} record ran the older ResNet-50 recipe: NCHW, plain SGD (the newer: channels_last, SGD " \
           "with momentum)" in line
    assert "ran the older BERT-base recipe: plain SGD (the newer: AdamW)" in line
    title = cell(grid(screen, precision_key(screen, "bf16")), H200, "ResNet-50").title
    assert title.startswith("no work in common with the reference: the H100")


def test_records_of_equal_work_pair_whatever_their_labels(frame):
    latest = frame.latest
    conv = latest[latest["problem"].eq("conv2d batch=16,cin=64,cout=64,h=56,kernel=3,w=56")
                  & latest["precision"].eq("fp32")]
    assert conv["machine"].nunique() == 2 and conv["work_key"].nunique() == 1


# --- 3. a machine is its hardware ------------------------------------------------------------------

def test_the_two_h200_labels_are_one_machine_and_keep_their_labels(frame, screen):
    records = frame.records
    h200 = records[records["device_name"].eq("NVIDIA H200")]
    assert set(h200["machine"]) == {"nvidia-h200-2026-11-26"}
    assert set(h200["label"]) == {"nvidia-h200-2026-11-26", "h200-2026-11-26b"}
    assert screen.header[0] == "3 machines"
    (h200_grid,) = [found for found in screen.strategy_grids if found.title.startswith("H200")]
    single = h200_grid.rows[0]
    # its fp32 ResNet-50 (first label) is the base of its bf16 one (second label): across runs, said
    assert single[h200_grid.headers.index("bf16")].text == "4.38×†"


def test_labels_of_other_hardware_stay_apart():
    frame = table(row(matmul(), 1e-3, "box-1", hardware_id="host a"),
                  row(matmul(), 1e-3, "box-2", hardware_id="host b"), row(matmul(), 1e-3, "asv-box", hardware_id=""))
    assert list(one_machine_per_hardware(frame)["machine"]) == ["box-1", "box-2", "asv-box"]


def test_a_ratio_within_the_swing_between_runs_is_no_finding(screen):
    (line,) = [line for line in screen.verdict if line.startswith("On H100")]
    assert "model=cnn: tf32 is 1.05× fp32 (same run); within the 1.22× swing of fp32 between runs: no finding" in line
    assert no_finding(1.05, 1.22) and not no_finding(1.30, 1.22) and not no_finding(1.05, 1.0)


# --- 4. energy from windows too short, or above the board's limit ---------------------------------

def test_a_power_figure_above_the_board_limit_is_flagged_and_in_no_ratio(frame):
    latest = frame.latest
    (hot,) = latest[latest["machine"].eq("h100") & latest["problem"].eq("matmul k=2048,m=2048,n=2048")
                    & latest["precision"].eq("bf16") & latest["strategy"].eq("single")].itertuples()
    assert round(hot.energy_watts) == 856
    assert "856 W per board above its 700 W limit" in hot.energy_why_not and "read over 0.25 s" in hot.energy_why_not
    assert math.isnan(hot.throughput_per_watt)
    long_window = latest[latest["machine"].eq("h100") & latest["problem"].eq("matmul k=8192,m=8192,n=8192")
                         & latest["precision"].eq("fp16")].iloc[0]
    assert long_window["energy_why_not"] == "" and long_window["throughput_per_watt"] > 0


def test_the_energy_matrix_draws_no_ratio_from_a_flagged_reading(screen):
    energy = [found for found in screen.matrices if found.key.startswith("energy-")]
    titles = " ".join(cell.title for found in energy for cells in found.rows for cell in cells)
    assert "matmul k=2048,m=2048,n=2048" not in titles


# --- 5. probably launch-bound ----------------------------------------------------------------------

def test_a_short_gpu_step_without_a_verdict_is_probably_launch_bound_never_a_cross_machine_figure(frame, screen):
    latest = frame.latest
    mlp = latest[latest["machine"].eq("h100") & latest["problem"].eq("train_step batch=32,model=mlp")
                 & latest["strategy"].eq("single") & latest["status"].eq("ok")]
    assert (mlp["median_s"] < SHORT_GPU_STEP_S).all()
    assert set(mlp["why_not"]) == {"probably-launch-bound"} and not mlp["comparable"].any()
    assert mlp["pairable"].all()  # within its machine, with the caveat
    # the EPYC's small training steps had the H100's b32 ones to pair with; none is a hardware figure
    assert cell(grid(screen, precision_key(screen, "fp32")), "AMD EPYC · 2 cores", "train steps (small)").text == "–"
    assert not any(line.startswith("train steps (small)") for line in screen.verdict)
    (h100_grid,) = [found for found in screen.strategy_grids if found.title.startswith("H100")]
    assert h100_grid.rows[0][h100_grid.headers.index("bf16")].text.endswith("‡")
    assert "probably launch-bound: not a hardware figure" in h100_grid.caption


def test_a_verdict_keeps_a_gpu_step_with_a_verdict_out_of_the_rule():
    step = Case.make("train_step", "torch", "gpu", params={"model": "mlp", "batch": 32})
    frame = flag(table(row(step, 1e-3, bound_by="compute"), row(step, 1e-3, "b", bound_by=""),
                       row(step, 2 * SHORT_GPU_STEP_S, "c", bound_by="")))
    assert list(frame["why_not"]) == ["", "probably-launch-bound", ""]


# --- 6. strategy cells at equal precision -----------------------------------------------------------

def test_a_strategy_cell_is_over_the_single_device_at_the_same_precision(frame, screen):
    latest = frame.pairable
    bf16 = latest[latest["machine"].eq("nvidia-h200-2026-11-26") & latest["precision"].eq("bf16")
                  & latest["compile"].eq("none") & latest["workload"].eq("train_step")]
    ddp = bf16[bf16["strategy"].eq("ddp")].set_index("problem")["throughput"]
    single = bf16[bf16["strategy"].eq("single")].set_index("problem")["throughput"]
    common = ddp.index.intersection(single.index)
    expected = float(np.exp(np.log(ddp[common] / single[common]).mean()))
    (h200_grid,) = [found for found in screen.strategy_grids if found.title.startswith("H200")]
    (ddp_row,) = [cells for cells in h200_grid.rows if cells[0].text == "torch · ddp ×2"]
    assert ddp_row[h200_grid.headers.index("bf16")].text == f"{expected:.2f}×† emu" == "0.42×† emu"


# --- 7. what a buyer needs on the first screen ------------------------------------------------------

def test_the_first_screen_says_memory_multi_gpu_and_prices(screen):
    memory, multi, price = screen.facts
    assert f"{H100} (80 GiB a GPU) ran out of memory at ResNet-50 bf16 batch 1024 (batch 512 ran)" in memory
    assert f"{H200} (140 GiB a GPU) ran out of memory in no record (it ran ResNet-50 up to batch 256" in memory
    assert multi.startswith("No record spans more than one real GPU") and "parbench predict" in multi
    assert f"{H200} (no price: no on-demand list price for an H200" in price


# --- 8. above the calibrated peak flags the calibration ----------------------------------------------

def test_a_figure_above_only_the_calibrated_peak_stays_ranked_with_a_note():
    frame = flag(table(row(matmul(), 1e-3, "a", pct_peak_measured=163.0, pct_peak_table=80.0),
                       row(matmul(), 1e-3, "b", pct_peak_measured=90.0, pct_peak_table=120.0)))
    calibrated, table_peak = frame.itertuples()
    assert calibrated.comparable and calibrated.notes.startswith("calibrated peak below a measured figure: run "
                                                                 "calibrate again when quiet")
    assert not table_peak.comparable and table_peak.why_not == "above-peak" and table_peak.notes == ""


def test_the_samples_have_no_figure_above_only_a_calibrated_peak_unflagged(frame):
    latest = frame.latest
    above = pd.to_numeric(latest["pct_peak_measured"], errors="coerce").gt(100)
    table_ok = ~pd.to_numeric(latest["pct_peak_table"], errors="coerce").gt(100)
    assert latest.loc[above & table_ok, "notes"].str.startswith("calibrated peak below").all()
    assert not latest.loc[above & table_ok, "why_not"].eq("above-peak").any()


def test_a_cpu_only_report_without_definitions_says_no_gpu_fact():
    step = Case.make("train_step", "torch", "cpu", params={"model": "resnet50", "batch": 8})
    result = build_overview(ReportFrame.build(table(row(step, 1e-1, "a")), NO_PRICES), None, "prices: test")
    assert [fact.split(":")[0] for fact in result.facts] == ["No sourced price, so no cost cell"]


def test_a_cpu_only_machine_with_unavailable_gpu_cases_gets_no_gpu_memory_fact():
    """A fresh clone's own run: contended CPU figures (none comparable) beside GPU cases stored
    unavailable. No GPU ran, so the first screen says nothing of a GPU's memory (it once read "GPU ×1
    ran out of memory in no record": an empty view's assign took every row's type)."""
    step = Case.make("train_step", "torch", "cpu", params={"model": "resnet50", "batch": 8})
    gpu_step = Case.make("train_step", "torch", "gpu", params={"model": "resnet50", "batch": 8})
    records = table(row(step, 1e-1, "a", contended=True),
                    row(gpu_step, 1e-1, "a", status="unavailable", reason="no gpu"))
    result = build_overview(ReportFrame.build(records, NO_PRICES, current()), None, "prices: test")
    assert not any("memory" in fact.lower() for fact in result.facts), result.facts
