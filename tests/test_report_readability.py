"""The report's first screen and its views read plainly (issue 47 item 9): rates without
scientific notation, one caveat said once, no '≈' beside 'beyond noise', no empty or unlabelled
column, counts that match the matrix, a key for every mark, and a chart whose title, labels and
colours are all on the picture. Fixture records, no clock."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from suites.report.analyses.choice import sentence
from suites.report.content import build_content
from suites.report.load.numbers import compact
from suites.report.overview import build_overview
from suites.report.render import figures
from suites.report.render.glossary import key
from suites.report.render.html import render
from suites.report.sections import summary
from suites.cases.case import Case
from tests.test_report_analysis import frame_of, matmul, options, row, table

XEON, EPYC = {"cpu_model": "Xeon", "cores": 4}, {"cpu_model": "EPYC", "cores": 2}
H100 = {"device_name": "NVIDIA H100 80GB HBM3", "bound_by": ""}


def first_screen(html: str) -> str:
    """The page's text from its header to the evidence, tags and inline styles dropped."""
    screen = html[html.index("<header>"):html.index('<section id="evidence">')]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", screen, flags=re.S)))


def page(records: pd.DataFrame) -> str:
    return render(build_content(records, options()), "t", 1, [])


@pytest.mark.parametrize("value, text", [(2.716e5, "272k"), (1.005e6, "1M"), (999_950, "1M"), (12_345, "12.3k"),
                                         (2284.9, "2285"), (0.6218, "0.6218"), (483.1, "483.1"), (3.5e12, "3.5T"),
                                         (float("nan"), "–")])
def test_a_rate_reads_with_an_si_suffix_never_an_exponent(value, text):
    assert compact(value) == text


def test_a_leader_beyond_noise_without_a_crown_is_not_written_as_about_equal():
    row_ = pd.Series({"problem": "conv2d", "leader": "A", "runner_up": "B", "throughput": 2.716e5,
                      "throughput_unit": "samples/s", "configs": 2, "margin": 1.85, "beyond_noise": True,
                      "noise_test": "beyond noise (Mann-Whitney p=5.6e-07)", "fastest": None,
                      "no_fastest": "what limits A, B was not recorded", "cheapest": None, "no_cheapest": "",
                      "most_efficient": None, "no_most_efficient": ""})
    text = sentence(row_, "USD")
    assert "≈" not in text and "A leads B (272k samples/s; 1.85× B, beyond noise" in text
    assert "but no fastest: what limits A, B was not recorded" in text and "e+05" not in text
    within = sentence(pd.Series({**row_, "beyond_noise": False, "noise_test": "within noise (p=0.2)",
                                 "no_fastest": "A ≈ B (within noise (p=0.2))"}), "USD")
    assert "A ≈ B (272k samples/s" in within and within.endswith("no fastest, the two are within noise.")


def test_the_summary_table_has_no_empty_or_unlabelled_column():
    records = table(row(matmul(), 2e-3, "a", **XEON), row(matmul(), 1e-3, "b", **EPYC))
    (shown,) = summary.build(frame_of(records), options()).tables
    assert "per" not in shown.headers and all(header.strip() for header in shown.headers)
    for index, header in enumerate(shown.headers):  # no prices: the cost column is left out, not shown empty
        assert any(cells[index].text not in ("", "–") for cells in shown.rows), header


def test_the_header_counts_in_words_and_names_a_device_type_the_matrix_leaves_out():
    contended = {"contended": True, "contention": "others took 60% of its cores"}
    records = table(row(matmul(), 2e-3, "xeon", **XEON), row(matmul(), 1e-4, "gpu", device_name=H100["device_name"]),
                    row(matmul(), 1e-3, "mine", **EPYC, **contended))
    result = build_overview(frame_of(records), None, "prices: test")
    assert result.header[:3] == ["3 machines", "3 device types", "1 problem"]
    assert "EPYC · 2 cores (1 contended)" in result.not_in_matrix
    assert not any("(s)" in part for part in result.header)


def test_the_launch_caveat_is_said_once_under_the_verdict_not_in_each_sentence():
    conv = dict(params={"batch": 4, "h": 16, "w": 16, "cin": 8, "cout": 8, "kernel": 3, "layout": "nhwc"})
    records = table(row(matmul(), 2e-3, "cpu", **XEON), row(matmul(device="gpu"), 1e-5, "gpu", **H100),
                    row(Case.make("conv2d", "torch", "cpu", **conv), 2e-3, "cpu", **XEON),
                    row(Case.make("conv2d", "torch", "gpu", **conv), 1e-5, "gpu", **H100))
    html = page(records)
    screen = first_screen(html)
    assert screen.count("What limited H100 80GB HBM3 ×1 was not recorded") == 1
    assert screen.count("comparable rows only)*.") == 2


def test_the_first_screen_keys_the_marks_it_shows_and_only_those():
    records = table(row(matmul(), 2e-3, "a", **XEON), row(matmul(), 1e-3, "b", **EPYC))
    screen = first_screen(page(records))
    assert "Key: what the marks and terms on this screen mean" in screen and "k/K" in screen
    assert "emulated devices: ranks sharing" not in screen  # nothing emulated: 'emu' is not explained
    terms = [term for term, _ in key(["H100 ×1 – 1.00× 2/3 1.2×† 0.9× emu", "44 superseded", "n/a (1 rank)"])]
    assert terms == ["–", "k/K", "†", "emu", "superseded", "n/a (1 rank)"]


def test_no_rate_on_the_page_is_written_in_scientific_notation():
    records = table(row(matmul(), 1e-7, "a", **XEON), row(matmul(), 2e-7, "b", **EPYC))
    html = page(records)
    assert not re.search(r"\d\.\d+e[+-]\d\d [A-Za-z]", html)


def test_the_precision_chart_keeps_its_title_labels_and_legend_on_the_picture():
    long = "nvidia-h200-2026-11-26 · gpu×1 · torch single bf16 · conv2d batch=16,cin=64,cout=64,h=56,kernel=3,w=56"
    labels = pd.Series([long, "h100 · gpu×1 · torch single fp16 · matmul k=4096,m=4096,n=4096"] * 8)
    keys = pd.Series(["bf16", "fp16"] * 8)
    figure = figures._bars(labels, pd.Series(range(1, 17), dtype=float), figures._palette(keys), keys,
                           "speedup over fp32", "precision speedup over fp32, by precision",
                           " [first 16 of 94; all in the table]", reference=1.0)
    renderer = FigureCanvasAgg(figure).get_renderer()
    width, height = figure.bbox.width, figure.bbox.height
    (axes,) = figure.axes
    texts = [*figure.texts, *axes.get_yticklabels()]
    assert {text.get_text() for text in figure.texts} >= {"precision speedup over fp32, by precision",
                                                          "first 16 of 94; all in the table"}
    for text in texts:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height, text.get_text()
    (legend,) = figure.legends
    assert [text.get_text() for text in legend.get_texts()] == ["bf16", "fp16"]
