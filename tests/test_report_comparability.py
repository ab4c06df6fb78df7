"""The report never prints an untrue ratio, rank or crown (report-guide §3, C2-C5, C9, C11).

Each row's `comparable` / `pairable` / `why_not` flags are decided once, when the records load
(suites.report.analyses.comparability); every section that draws a ratio, a speedup, a rank or a crown
reads them, and where a pair or a crown cannot be given the page says why instead of a number.

Rows are fixtures with chosen step times (tests.test_report_analysis.row), or records built
directly and loaded through the store, so the expected verdicts are exact.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.bound_by import BoundBy
from suites.records.contention import Contention
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.report.analyses.choice import choices
from suites.report.analyses.comparability import flag
from suites.report.analyses.compilation import compile_pairs
from suites.report.render.html import render
from suites.report.render.tables import whole
from suites.report.load.files import load_results
from suites.report.analyses.prices import PriceTable
from suites.report.analyses.relative import relative_performance
from suites.report.content import build_content
from suites.report.sections import baseline, limits, peak, precision, problems, summary
from suites.report.sections.base import ReportOptions
from tests.test_report_analysis import NO_PRICES, frame_of, matmul, options, pairs_of, row, table

CONTENTION = "others took 60% of its 2 cores"


def page(frame, prices: PriceTable | None = None) -> str:
    """The rendered report's text, tags and entities stripped."""
    html = render(build_content(frame, ReportOptions(prices or NO_PRICES)), "t", 1, [])
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    text = re.sub(r"<[^>]+>", " ", html)
    return re.sub(r"\s+", " ", text.replace("&#39;", "'").replace("&amp;", "&").replace("&lt;", "<")
                  .replace("&gt;", ">"))


def cells(section, header: str, where: dict[str, str]) -> list[str]:
    """The `header` cells of the rows of `section`'s first table (its on-demand columns included)
    whose columns hold `where`; "machine" is read from a problem table's configuration label."""
    result = whole(section.tables[0])
    index = {name: i for i, name in enumerate(result.headers)}

    def holds(cells, column: str, value: str) -> bool:
        if column == "machine" and column not in index:
            return cells[index["configuration"]].text.split(" · ")[0] == value
        return cells[index[column]].text == value

    return [cells[index[header]].text for cells in result.rows
            if all(holds(cells, column, value) for column, value in where.items())]


# --- C3 / C5: a contended or bimodal row is in no ratio, and the page says why ---------------------

def test_a_contended_pair_gives_no_ratio_and_the_page_says_why():
    frame = table(row(matmul(), 2e-3, "box"),
                  row(matmul(precision="bf16"), 1e-3, "box", contended=True, contention=CONTENTION))
    pairs = pairs_of(frame, {"precision": "fp32"})
    (pair,) = pairs.itertuples()
    assert np.isnan(pair.speedup) and pair.pairing == ""  # 2.00x on paper: never drawn
    assert pair.no_ratio.startswith("no ratio: the bf16 row is contended") and CONTENTION in pair.no_ratio
    section = precision.build(frame_of(frame), options())
    assert cells(section, "speedup vs fp32", {"precision": "bf16"}) == ["–"]
    assert not section.figures  # no bar drawn for a pair without a ratio
    text = page(frame)
    assert "no ratio: the bf16 row is contended" in text and "2.00×" not in text


def test_a_contended_eager_twin_gives_no_compile_speedup():
    eager = row(matmul(), 2e-3, "box", contended=True, contention=CONTENTION, compile_s=0.0)
    compiled = row(matmul(compile="inductor"), 1e-3, "box", compile_s=3.0)
    frame = frame_of(table(eager, compiled))
    (pair,) = compile_pairs(frame.records, frame.latest).itertuples()
    assert np.isnan(pair.speedup) and pair.break_even == ""
    assert pair.no_ratio.startswith("no ratio: the eager row is contended")


def test_a_bimodal_pair_gives_no_ratio_and_the_page_says_why():
    frame = table(row(matmul(), 2e-3, "box", bimodal=True), row(matmul(precision="bf16"), 1e-3, "box"))
    (pair,) = pairs_of(frame, {"precision": "fp32"}).itertuples()
    assert np.isnan(pair.speedup)
    assert pair.no_ratio.startswith("no ratio: the fp32 row is bimodal: its step times fall in two clusters")
    assert "no ratio: the fp32 row is bimodal" in page(frame)


def test_a_contended_row_is_in_no_cross_machine_ratio_or_crown():
    """The contended machine's row is the faster one on paper: it wins nothing."""
    frame = table(row(matmul(), 2e-3, "quiet"), row(matmul(), 1e-3, "busy", contended=True, contention=CONTENTION))
    pairs = pairs_of(frame, {"machine": "quiet"})
    assert np.isnan(pairs["speedup"].iloc[0]) and "the busy row is contended" in pairs["no_ratio"].iloc[0]
    (sentence,) = [line for line in summary.build(frame_of(frame), options()).text
                   if line.startswith("On matmul")]
    assert "only quiet" in sentence and "busy" not in sentence.split(";")[0] and "1 contended" in sentence


def test_a_row_whose_record_says_starved_or_bimodal_loads_as_not_comparable(tmp_path):
    """The flags are read from the record as stored; a record without them reads as not flagged."""
    store = ResultsStore(tmp_path)
    store.ensure_writable()
    quiet = tuple(1e-3 * (1 + 0.01 * np.linspace(-1, 1, 10)))
    two_modes = quiet[:5] + tuple(2e-3 * (1 + 0.01 * np.linspace(-1, 1, 5)))
    starved = Contention.from_dict({"cores": 2, "contended": False, "why": "", "starved": True})
    for case, samples, contention in ((matmul(), quiet, None), (matmul(precision="bf16"), two_modes, None),
                                      (matmul(precision="fp16"), quiet, starved)):
        store.append(Record(case=case, status=Status.OK, run_id="r1", timestamp="2026-01-01T00:00:00+00:00",
                            suite="t", environment={"machine": "box"}, measurement=Measurement(samples=samples),
                            metrics={"tflops": 1.0}, contention=contention))
    flags = flag(load_results(tmp_path)).set_index("precision")[["comparable", "pairable", "why_not"]]
    assert flags.loc["fp32"].tolist() == [True, True, ""]
    assert flags.loc["bf16"].tolist() == [False, False, "bimodal"]
    assert flags.loc["fp16"].tolist() == [False, False, "starved"]


# --- C5: pairs within a machine come from one run; the fallback is labelled -----------------------

def test_a_pair_prefers_its_own_run_over_a_later_one():
    frame = table(row(matmul(), 2e-3, "box", run="r1", time="2025-01-01T00:00:00+00:00"),
                  row(matmul(precision="bf16"), 1e-3, "box", run="r1", time="2025-01-01T00:00:00+00:00"),
                  row(matmul(), 4e-3, "box", run="r2", time="2025-02-01T00:00:00+00:00"))
    (pair,) = pairs_of(frame, {"precision": "fp32"}).itertuples()
    assert pair.pairing == "same run" and pair.run_id_base == "r1" and pair.speedup == pytest.approx(2.0)


def test_a_pair_across_runs_of_one_environment_is_labelled_so():
    frame = table(row(matmul(), 2e-3, "box", run="r1", libraries="torch 2.5"),
                  row(matmul(precision="bf16"), 1e-3, "box", run="r2", libraries="torch 2.5"))
    (pair,) = pairs_of(frame, {"precision": "fp32"}).itertuples()
    assert pair.pairing == "across runs" and pair.speedup == pytest.approx(2.0)
    section = precision.build(frame_of(frame), options())
    assert cells(section, "paired", {"precision": "bf16"}) == ["across runs"]
    assert "across runs" in page(frame)


def test_a_pair_across_environments_gives_no_ratio():
    frame = table(row(matmul(), 2e-3, "box", run="r1", libraries="torch 2.5"),
                  row(matmul(precision="bf16"), 1e-3, "box", run="r2", libraries="torch 2.6"))
    (pair,) = pairs_of(frame, {"precision": "fp32"}).itertuples()
    assert np.isnan(pair.speedup)
    assert pair.no_ratio.startswith("no ratio: the only fp32 row is from another environment (run r1)")


def test_a_baseline_that_failed_its_check_is_named_not_dropped():
    frame = table(row(matmul(), 2e-3, "box", check_passed=False, check_metric="max_rel_err", check_value=0.5),
                  row(matmul(precision="bf16"), 1e-3, "box"))
    (pair,) = pairs_of(frame, {"precision": "fp32"}).itertuples()
    assert np.isnan(pair.speedup)
    assert pair.no_ratio == "no ratio: the fp32 row failed its numerics check (max_rel_err 0.5)"


# --- C3: above a peak ----------------------------------------------------------------------------

def test_nothing_above_the_peak_is_ranked_and_the_page_says_the_peak_is_wrong():
    """The row at 150% of its peak table is the fastest on paper: it is ranked nowhere."""
    frame = table(row(matmul(), 1e-3, "wrong-peak", pct_peak_table=150.0),
                  row(matmul(), 2e-3, "a", pct_peak_table=60.0), row(matmul(), 3e-3, "b", pct_peak_table=40.0))
    costed = frame_of(frame)
    choice = choices(costed.comparable).iloc[0]
    assert choice["fastest"].startswith("a ·") and choice["runner_up"].startswith("b ·")
    best, reference = relative_performance(costed, None)
    assert "wrong-peak" not in " ".join(best["hardware"]) and not reference.startswith("wrong-peak")
    (problem,) = problems.build(costed, options())
    assert cells(problem, "of fastest", {"machine": "wrong-peak"}) == ["–"]
    assert cells(problem, "of fastest", {"machine": "a"}) == ["1.00×"]
    (why,) = cells(problem, "flags / not comparable", {"machine": "wrong-peak"})
    assert why == "above the peak (150% of the peak table)"
    ours = peak.build(costed, options())
    assert [cells[0].text for cells in ours.tables[0].rows][-1] == "wrong-peak"  # listed last, not first
    assert cells(ours, "note", {"machine": "wrong-peak"}) == ["above the peak: the peak table is wrong for this device"]
    assert any("the peak table is wrong for this device" in line for line in ours.text)
    text = page(frame)
    assert "above the peak" in text and "the peak table is wrong for this device" in text
    assert "wrong-peak · cpu×1 · torch single fp32 is fastest" not in text


# --- C9 / C4: prices and crowns --------------------------------------------------------------------

def illustrative_cpu(source: str) -> PriceTable:
    return PriceTable("USD", {}, (), 0.05, ("test",), cpu_source=source)


def test_an_illustrative_price_crowns_nothing():
    # two machines of 2 and 8 cores: two hourly prices, but both from the illustrative per-core price
    frame = table(row(matmul(), 1e-3, "small", cores=2), row(matmul(), 0.9e-3, "big", cores=8))
    prices = illustrative_cpu("illustrative: about a cloud vCPU's price")
    costed = frame_of(frame, prices)
    choice = choices(costed.comparable).iloc[0]
    assert choice["cheapest"] is None or choice["cheapest"] != choice["cheapest"]
    assert choice["no_cheapest"].startswith("the only prices are illustrative")
    assert set(costed.records["price_rule"].str.endswith("(illustrative)")) == {True}
    sentences = [line for line in summary.build(costed, options(prices)).text if line.startswith("On matmul")]
    assert "is cheapest" not in sentences[0] and "no cheapest: the only prices are illustrative" in sentences[0]
    # the same prices, sourced, do crown the cheaper one
    sourced = choices(frame_of(frame, illustrative_cpu("as listed on a provider's page")).comparable).iloc[0]
    assert sourced["cheapest"].startswith("small ·")


def test_the_shipped_cpu_price_is_illustrative_and_crowns_nothing():
    frame = table(row(matmul(), 1e-3, "small", cores=2), row(matmul(), 0.9e-3, "big", cores=8))
    costed = frame_of(frame, PriceTable.load())
    assert not costed.records["price_sourced"].any()
    assert "is cheapest" not in page(frame, PriceTable.load())


def test_one_hourly_price_for_every_candidate_crowns_no_cheapest():
    """Two machines at one price per hour: cost order is speed order, so 'cheapest' says nothing."""
    prices = PriceTable("USD", {"a": 3.0, "b": 3.0}, (), None, ())
    choice = choices(frame_of(table(row(matmul(), 1e-3, "a"), row(matmul(), 2e-3, "b")), prices).comparable).iloc[0]
    assert choice["fastest"].startswith("a ·") and choice["cheapest"] is None
    assert "cost order is speed order" in choice["no_cheapest"]


def test_a_leader_within_noise_of_its_runner_up_is_not_crowned():
    frame = frame_of(table(row(matmul(), 1.00e-3, "a", spread=0.2), row(matmul(), 1.01e-3, "b", spread=0.2)))
    choice = choices(frame.comparable).iloc[0]
    assert choice["fastest"] is None and "within noise" in choice["no_fastest"]
    (sentence,) = [line for line in summary.build(frame, options()).text if line.startswith("On matmul")]
    assert " ≈ " in sentence and "no fastest" in sentence and "is fastest" not in sentence


def test_an_emulated_row_is_never_crowned_nor_in_a_cross_machine_ratio():
    """On paper the emulated VM row is the fastest, the cheapest and the most per watt."""
    ddp = Case.make("train_step", "torch", "cpu", strategy="ddp", n_devices=2,
                    params={"model": "mlp", "batch": 64, "scaling": "weak"})
    single = Case.make("train_step", "torch", "cpu", strategy="ddp", n_devices=2,
                       params={"model": "mlp", "batch": 64, "scaling": "weak"})
    frame = table(row(single, 2e-3, "real-a", energy_watts=100.0), row(single, 3e-3, "real-b", energy_watts=90.0),
                  row(ddp, 1e-3, "vm", emulated=True, energy_watts=10.0))
    prices = PriceTable("USD", {"real-a": 1.0, "real-b": 2.0, "vm": 0.01}, (), None, ())
    costed = frame_of(frame, prices)
    choice = choices(costed.comparable).iloc[0]
    for crown in ("fastest", "cheapest", "most_efficient", "runner_up"):
        assert "vm" not in str(choice[crown]), crown
    assert choice["fastest"].startswith("real-a")
    pairs = pairs_of(frame, {"machine": "real-a"}).set_index("machine")
    assert np.isnan(pairs.loc["vm", "speedup"]) and "the vm row is emulated" in pairs.loc["vm", "no_ratio"]
    (problem,) = problems.build(costed, options(prices))
    assert cells(problem, "of fastest", {"machine": "vm"}) == ["–"]
    assert cells(problem, "cost (USD)", {"machine": "vm"}) == ["–"]  # no price for what is not comparable
    section = baseline.build(costed, options(prices, baseline={"machine": "real-a"}))
    assert cells(section, "speedup", {"configuration": "vm · cpu×2 · torch ddp fp32 (emulated)"}) == ["–"]


def test_a_launch_bound_row_is_left_out_of_ranks_and_relative_performance():
    launch = BoundBy("launch", "the GPU was busy 5% of each step")
    frame = table(row(matmul(), 1e-3, "host-bound", bound_by=launch.verdict), row(matmul(), 2e-3, "a"),
                  row(matmul(), 3e-3, "b"))
    assert choices(frame_of(frame).comparable).iloc[0]["fastest"].startswith("a ·")
    best, _ = relative_performance(frame_of(frame), None)
    assert not best["hardware"].str.startswith("host-bound").any()


def test_a_one_rank_allreduce_is_na_never_best():
    case = Case.make("allreduce", "torch", "gpu", "ddp", "fp32", 1, {"bytes": 1 << 20})
    frame = flag(table(row(case, 3.4e-5, "a", busbw_gbs=0.0), row(case, 3.5e-5, "b", busbw_gbs=0.0)))
    assert set(frame["why_not"]) == {"no-work"}
    assert set(frame["why_not_text"]) == {"n/a (1 rank): a step does no work to divide by (a one-rank all-reduce "
                                          "moves no bytes)"}
    assert choices(frame_of(frame).comparable).empty
    assert "n/a (1 rank)" in page(frame)


# --- a record without a field is listed as "not recorded" ------------------------------------------

def test_a_record_without_bound_by_is_listed_as_not_recorded(tmp_path):
    store = ResultsStore(tmp_path)
    store.ensure_writable()
    samples = tuple(1e-3 * (1 + 0.01 * np.linspace(-1, 1, 10)))
    for machine, bound in (("new", BoundBy("compute", "at 90% of the roof")), ("old", None)):
        store.append(Record(case=matmul(), status=Status.OK, run_id=f"run-{machine}",
                            timestamp="2026-01-01T00:00:00+00:00", suite="t", environment={"machine": machine},
                            measurement=Measurement(samples=samples), metrics={"tflops": 1.0}, bound_by=bound))
    frame = frame_of(load_results(tmp_path))
    section = limits.build(frame, options())
    assert sorted(cells(section, "bound by", {})) == ["compute", "not recorded"]
    assert cells(section, "bound by", {"machine": "old"}) == ["not recorded"]
    assert any("1 of 2 rows have no bound_by verdict: not recorded" in line and "old" in line
               for line in section.text)
    assert frame.records.set_index("machine").loc["old", "comparable"]  # not recorded is not guilty


def test_no_fastest_where_what_limits_a_gpu_candidate_was_not_recorded(tmp_path):
    """A launch-bound GPU figure from before bound_by could lose to a CPU: no crown on its word."""
    store = ResultsStore(tmp_path)
    store.ensure_writable()
    for machine, device, step_s, bound in (("cpu-box", "cpu", 1e-3, BoundBy("compute", "at 90% of the roof")),
                                           ("old-gpu", "gpu", 2e-3, None)):
        samples = tuple(step_s * (1 + 0.001 * np.linspace(-1, 1, 12)))
        case = Case.make("matmul", "torch", device, params={"m": 512, "n": 512, "k": 512})
        store.append(Record(case=case, status=Status.OK, run_id=f"run-{machine}",
                            timestamp="2026-01-01T00:00:00+00:00", suite="t", environment={"machine": machine},
                            measurement=Measurement(samples=samples), metrics={"tflops": 1.0 / step_s},
                            bound_by=bound))
    crowns = choices(frame_of(load_results(tmp_path), PriceTable.load()).comparable).iloc[0]
    assert crowns["fastest"] is None
    assert "was not recorded" in crowns["no_fastest"] and "old-gpu" in crowns["no_fastest"]


# --- parbench compare -------------------------------------------------------------------------------

def store_of(folder: Path, machine: str, records: list[tuple[Case, tuple[float, ...], dict]]) -> None:
    store = ResultsStore(folder)
    store.ensure_writable()
    for case, samples, metrics in records:
        store.append(Record(case=case, status=Status.OK, run_id=f"run-{machine}",
                            timestamp="2026-01-01T00:00:00+00:00", suite="t", environment={"machine": machine},
                            measurement=Measurement(samples=samples), metrics=metrics))


def test_compare_says_why_a_slowdown_is_no_regression_and_na_for_no_work(tmp_path, capsys):
    allreduce = Case.make("allreduce", "torch", "gpu", "ddp", "fp32", 1, {"bytes": 1 << 20})
    quiet = tuple(1e-3 * (1 + 0.002 * np.linspace(-1, 1, 12)))
    slower = tuple(s * 1.02 for s in quiet)  # 2% slower, far beyond its tight spread
    store_of(tmp_path, "a", [(matmul(), quiet, {"tflops": 1.0}), (allreduce, quiet, {"busbw_gbs": 0.0})])
    store_of(tmp_path, "b", [(matmul(), slower, {"tflops": 0.98}), (allreduce, slower, {"busbw_gbs": 0.0})])
    assert main(["compare", "a", "b", "--results", str(tmp_path), "--fail-on-regression", "0.05"]) == 0
    out = capsys.readouterr().out
    (matmul_line,) = [line for line in out.splitlines() if "matmul" in line]
    assert "B slower" in matmul_line and "p=" in matmul_line
    assert "below the --fail-on-regression threshold of 5%" in out and "2.0% slower in median" in out
    (allreduce_line,) = [line for line in out.splitlines() if "allreduce" in line]
    assert "IQRs overlap" not in allreduce_line and "n/a" in allreduce_line
