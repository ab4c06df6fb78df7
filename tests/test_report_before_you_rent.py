"""The report's "before you rent" view (issue 44): PROJECTED rows beside measured ones, marked,
banded and sourced, and never in a measured table, ratio, crown, matrix, export or stored record.
Projections come from `parbench predict`'s own model over a published base (no records needed)."""
from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

import pandas as pd
import pytest

from suites.cases.case import Case
from suites.errors import UserError
from suites.frontends.cli import main
from suites.frontends.commands import report
from suites.predict.base import parse_base
from suites.predict.catalogue import Catalogue
from suites.predict.projection import Options, parse_target, projections_frame
from suites.predict.workload import resolve_workload
from suites.report.analyses.prices import PriceTable
from suites.report.content import build_content
from suites.report.render.html import render
from suites.report.sections import before_you_rent
from tests.test_report_analysis import frame_of, options, row, table

SAMPLE = Path(__file__).resolve().parent.parent / "results" / "samples" / "h200-2026-11-26" / "records.jsonl"
BASE = "H100 SXM:1=3981@256"


@pytest.fixture(scope="module")
def prices() -> PriceTable:
    return PriceTable.load(None)


@pytest.fixture(scope="module")
def projections(prices) -> pd.DataFrame:
    """ResNet-50 bf16 DDP on 8 H100 and 2 x 8 H200, from a published one-H100 figure, priced for
    1.28e8 samples: what `parbench report --predict-to` hands the report."""
    catalogue = Catalogue.load(None)
    workload = resolve_workload("resnet50", {}, "bf16", "ddp", "torch", None)
    base = parse_base(BASE, catalogue)
    targets = [parse_target(text, catalogue) for text in ("H100 SXM:8", "H200:8x2")]
    frame = projections_frame(workload, base, targets, Options(catalogue.fabric(catalogue.default_fabric), "default",
                                                               samples=1.28e8, prices=prices), catalogue)
    return frame.assign(model="resnet50", precision="bf16", base=f"3,981 samples/s on 1 x H100 (published: {BASE})")


def measured() -> pd.DataFrame:
    """One H100 ResNet-50 bf16 record and a CPU matmul: what the projections stand beside."""
    resnet = Case.make("train_step", "torch", "gpu", precision="bf16", params={"model": "resnet50", "batch": 256})
    matmul = Case.make("matmul", "torch", "cpu", params={"m": 128, "n": 128, "k": 128})
    return table(row(resnet, 256 / 2200, "h100-box", device_name="NVIDIA H100 80GB HBM3", bound_by="compute"),
                 row(matmul, 1e-3, "cpu-box", cpu_model="EPYC"))


def page(records: pd.DataFrame, prices: PriceTable, projected: pd.DataFrame | None) -> str:
    html = render(build_content(records, options(prices, projections=projected)), "t", 1, [])
    return re.sub(r"Generated [^<]*", "", html)


def without_view(html: str) -> str:
    """The page less the "before you rent" view (its collapsed block)."""
    return re.sub(r'<details class="view" id="before-you-rent">.*?</template></details>', "", html, flags=re.S)


def test_projected_rows_stand_beside_measured_ones_marked_banded_and_sourced(projections, prices):
    section = before_you_rent.build(frame_of(measured(), prices), options(prices, projections=projections))
    main_table, inputs = section.tables
    kinds = [cells[0].text for cells in main_table.rows]
    assert kinds == ["measured", "PROJECTED", "PROJECTED"]
    assert [cells[0].css for cells in main_table.rows] == ["", "projected", "projected"]
    headers = main_table.headers
    h100 = dict(zip(headers, (cell.text for cell in main_table.rows[1])))
    assert h100["hardware"] == "H100 SXM5 80GB ×8" and re.fullmatch(r"[\d.]+k–[\d.]+k", h100["band (samples/s)"])
    assert re.search(r"published: [^;]*base samples per s", h100["inputs and notes"])
    assert re.search(r"catalogued: [^;]*intra link gbs", h100["inputs and notes"])
    assert "assumed: host margin" in h100["inputs and notes"]
    assert dict(zip(headers, (cell.text for cell in main_table.rows[2])))["hardware"] == "H200 SXM 141GB 8×2 nodes"
    assert {"published", "catalogued", "assumed"} <= {cells[3].text for cells in inputs.rows}
    assert "vs" not in " ".join(headers) and "×" not in " ".join(headers)  # no ratio against a measurement
    assert section.figures and "128M samples" in section.figures[0][1]


def test_a_projection_enters_no_measured_table_ratio_crown_matrix_or_export(projections, prices):
    records = measured()
    plain, with_projections = page(records, prices, None), page(records, prices, projections)
    assert "PROJECTED" in with_projections and "H100 SXM5 80GB" in with_projections
    assert without_view(with_projections) == without_view(plain)
    content = build_content(records, options(prices, projections=projections))
    assert len(content.frame) == len(records) and not content.frame["machine"].str.contains("SXM5").any()
    assert "H100 SXM5" not in " ".join(content.overview.header + content.overview.verdict)


def test_without_predict_to_the_view_only_says_how_to_ask(prices):
    section = before_you_rent.build(frame_of(measured(), prices), options(prices))
    assert section.text == [before_you_rent.HOW] and not section.tables and not section.figures
    assert section.anchor == "before-you-rent"  # the first screen's pointer to `parbench predict` lands here


def test_the_cost_chart_prices_the_asked_work_at_each_targets_speed(projections):
    points, work = before_you_rent.cost_points(projections)
    assert work == "128M samples" and list(points["label"]) == ["H100 SXM5 80GB ×8"]  # the H200 has no price
    h100 = projections.iloc[0]
    assert points["hours"].iloc[0] == pytest.approx(1.28e8 / h100["samples_per_s"] / 3600)
    assert points["cost"].iloc[0] == pytest.approx(h100["cost_of_work"])
    low, point, high = (points[column].iloc[0] for column in ("hours_low", "hours", "hours_high"))
    assert low <= point <= high and low < high  # the band: the point is its fast end here


def test_parbench_report_predict_to_projects_from_the_reports_records_and_stores_nothing(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    lines = [line for line in SAMPLE.read_text(encoding="utf-8").splitlines() if '"resnet50"' in line]
    (results / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stored = hashlib.sha256((results / "records.jsonl").read_bytes()).hexdigest()
    assert main(["report", str(results), "-o", str(tmp_path / "out"), "--csv", "--predict-to", "H100 SXM:8",
                 "--predict-to", "H200:8x2"]) == 0
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    view = html[html.index('id="before-you-rent"'):]
    assert "PROJECTED" in view and "(measured: record train_step/torch/gpu:" in view
    assert '<a href="#before-you-rent">' in html  # no record spans two real GPUs: the first screen points here
    assert "PROJECTED" not in (tmp_path / "out" / "results.csv").read_text(encoding="utf-8")
    assert "SXM5" not in (tmp_path / "out" / "results.csv").read_text(encoding="utf-8")
    assert hashlib.sha256((results / "records.jsonl").read_bytes()).hexdigest() == stored
    assert sorted(path.name for path in results.iterdir()) == ["records.jsonl"]


@pytest.mark.parametrize("argv, said", [
    (["--predict-to", "H900:8", "--predict-base", BASE], "unknown device 'H900'; closest: H200"),
    (["--predict-base", BASE], "--predict-base needs --predict-to DEVICE:N"),
    (["--predict-to", "H100 SXM:8", "--predict-base", "H100 SXM:1=3981"],
     "(--predict-base ...@BATCH) or --predict-batch"),
    (["--predict-to", "H100 SXM:8", "--predict-model", "nope", "--predict-base", BASE], "unknown model 'nope'"),
])
def test_bad_predict_options_are_one_line_naming_the_report_option(tmp_path, argv, said):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    with pytest.raises(UserError, match=re.escape(said)) as raised:
        report.project(parser.parse_args([str(tmp_path), *argv]), PriceTable.load(None))
    assert "\n" not in str(raised.value)
