"""The HTML report in a real browser: headless Chromium (Debian's) driven by playwright.

Runs on real records: two machine labels with different thread counts, unavailable cases,
an injected crash, and a machine label that is an HTML script tag. Skipped only where
chromium or playwright is missing (tests/browser/setup.sh installs both; CI runs it).
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from suites.frontends.cli import main
from tests.report_support import MACHINES, OK_CASES, XSS_LABEL, run_machine

DATA = Path(__file__).resolve().parent.parent / "data"
#: The real H100 records and a CPU run (tests/data/*/README.md): two device types, no torch needed.
SAMPLES = ("h100-sample", "epyc-cpu-sample")
MAX_COLUMNS = 12

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists() and shutil.which("chromium") is None,
                                reason="chromium is not installed: run tests/browser/setup.sh")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    pytest.importorskip("torch", reason="the report is built from real torch runs")
    root = tmp_path_factory.mktemp("browser")
    for label, threads in MACHINES.items():
        run_machine(root / "results", label, threads)
    # 3 threads: hardware of its own (same threads as another label would be that machine, under its label)
    run_machine(root / "results", XSS_LABEL, 3, cases=OK_CASES[:1], with_failure=False)
    assert main(["report", str(root / "results"), "-o", str(root / "reports")]) == 0
    return root / "reports" / "index.html"


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    for name in SAMPLES:
        with gzip.open(DATA / name / "records.jsonl.gz", "rt", encoding="utf-8") as source:
            (root / "results" / f"{name}.jsonl").parent.mkdir(exist_ok=True)
            (root / "results" / f"{name}.jsonl").write_text(source.read(), encoding="utf-8")
    assert main(["report", str(root / "results"), "-o", str(root / "reports")]) == 0
    return root / "reports" / "index.html"


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module (playwright's sync API allows one running instance at a time)."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: run tests/browser/setup.sh")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            args=CHROMIUM_FLAGS, timeout=120_000)
        yield chromium
        chromium.close()


def _open(browser, report: Path, viewport: dict[str, int]):
    """A page on `report` that records every console error, page error, dialog and request off it."""
    page = browser.new_page(viewport=viewport)
    page.problems = []  # console errors/warnings, page errors, dialogs, requests off the page
    page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: page.problems.append(f"request: {r.url}")
            if not r.url.startswith(("file:", "data:")) else None)
    page.goto(report.as_uri(), wait_until="load")
    yield page
    page.close()


@pytest.fixture(scope="module")
def page(browser, report):
    yield from _open(browser, report, {"width": 1400, "height": 1000})


@pytest.fixture(scope="module")
def sample_page(browser, sample_report):
    yield from _open(browser, sample_report, {"width": 1400, "height": 900})


def open_views(page) -> None:
    """Every on-demand view opened, as a reader clicking each one would (a view's content is put in
    place when it opens, views inside it with it)."""
    page.evaluate("""() => { for (let round = 0; round < 8; round++) {
        const closed = [...document.querySelectorAll('details')].filter(d => !d.open);
        if (!closed.length) break;
        closed.forEach(d => { d.open = true; openView(d); }); } }""")


def close_views(page) -> None:
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = false)")


def test_report_loads_without_console_errors_dialogs_or_network(page):
    assert page.problems == []


def test_figures_are_decoded_images(page):
    open_views(page)
    sizes = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert all(width > 100 and height > 50 for width, height in sizes)


def test_tables_summary_and_sections_are_there(page):
    open_views(page)
    assert page.locator("table.sortable").count() >= 8
    summary = page.inner_text("#summary")
    # each problem gets a sentence; a crown only beyond noise on comparable rows, and none for
    # "cheapest": the only price of these CPU runs is the shipped, illustrative per-core one
    # a sentence per comparable problem (a crown only beyond noise), or, where the live runs were
    # contended (a loaded machine), the line that says why nothing is ranked; never a cheapest:
    # the only price of these CPU runs is the shipped, illustrative per-core one
    assert ("is fastest" in summary or "no fastest" in summary or "only" in summary
            or "Not comparable, so in no ratio" in summary), summary[:500]
    assert "is cheapest" not in summary
    for anchor in ("relative", "baseline", "scaling", "precision", "peak", "not-ok", "environments", "method"):
        assert page.locator(f"#{anchor}").count() == 1, anchor
    failures = page.inner_text("#not-ok")
    assert "injected fault" in failures and "unavailable" in failures
    environments = page.inner_text("#environments")
    assert "torch=1" in environments and "torch=2" in environments


def test_machine_label_with_script_tag_renders_as_text(page):
    assert page.locator("script").count() == 1  # the report's own sort script only
    open_views(page)
    assert XSS_LABEL in page.inner_text("#environments")


def test_clicking_a_numeric_header_sorts_the_table(page):
    open_views(page)
    table = page.locator("#problems table.sortable").first
    headers = table.locator("thead th")
    names = [headers.nth(i).inner_text().strip() for i in range(headers.count())]
    column = names.index("median step")
    headers.nth(column).click()
    keys = table.locator("tbody tr").evaluate_all(
        f"rows => rows.map(r => parseFloat(r.cells[{column}].dataset.sort))")
    assert keys == sorted(keys) and len(keys) >= 2
    headers.nth(column).click()
    keys = table.locator("tbody tr").evaluate_all(
        f"rows => rows.map(r => parseFloat(r.cells[{column}].dataset.sort))")
    assert keys == sorted(keys, reverse=True)


def test_screenshot(page, tmp_path):
    path = tmp_path / "report.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_summary_table_fits_a_1400_px_window(sample_page):
    """Every column of "what to choose" is in view without scrolling sideways, once it is opened.
    On the sample records' page: the tiny runs' page has no such table where a busy machine made
    every one of its figures contended (none is ranked then)."""
    open_views(sample_page)
    try:
        wrap = sample_page.locator("#summary .table-wrap").first
        assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth")
        assert sample_page.locator("#summary th").last.evaluate(
            "h => h.getBoundingClientRect().right <= window.innerWidth")
    finally:
        close_views(sample_page)


# --- the page built from the real H100 records and a CPU run (report-guide §7) --------------------

def test_the_first_900_px_answer_which_device_type(sample_page):
    """B2: the header's counts, a verdict sentence and the device-type matrix with its reference
    row reading 1.00×, all above the fold; no warning block above them."""
    close_views(sample_page)
    def bottom(selector: str) -> float:
        return sample_page.locator(selector).first.evaluate("e => e.getBoundingClientRect().bottom")
    assert "2 device types" in sample_page.inner_text("header") and "records:" in sample_page.inner_text("header")
    # the reference is the type the most other figures can be set beside (issue 46): whichever it
    # is, the verdict names it and its matrix row reads 1.00x, above the fold
    reference_row = sample_page.locator(".mx:visible table.grid tbody tr").first
    (reference,) = [name for name in ("H100 80GB HBM3 ×1", "AMD EPYC · 2 cores")
                    if reference_row.inner_text().startswith(name)]
    assert bottom("#verdict p") <= 900 and f"the reference {reference}" in sample_page.inner_text("#verdict")
    assert "1.00×" in reference_row.inner_text() and bottom(".mx:visible table.grid tbody tr") <= 900
    visible = sample_page.locator(".mx:visible").inner_text()
    assert "AMD EPYC · 2 cores" in visible and "H100 80GB HBM3 ×1" in visible


def test_the_metric_and_precision_toggles_show_one_matrix_at_a_time(sample_page):
    close_views(sample_page)
    assert sample_page.locator(".mx:visible").count() == 1
    sample_page.locator("label[for='p-p1']").click()  # the first single precision
    visible = sample_page.locator(".mx:visible")
    assert visible.count() == 1 and visible.get_attribute("id") == "mx-speed-p1"
    sample_page.locator("label[for='p-p0']").click()


def test_with_views_closed_the_page_is_short_and_nothing_scrolls_sideways(sample_page):
    """B1 and B3: at most 3,000 px tall and 200 table rows, no PNG, with every view closed (a view's
    content is put in place when it opens); at 1400 px no view scrolls sideways, closed or with
    every view opened."""
    sample_page.reload()
    assert sample_page.evaluate("document.documentElement.scrollHeight") <= 3000
    assert sample_page.locator("tr").count() <= 200 and sample_page.locator("img").count() == 0
    assert sample_page.evaluate("document.documentElement.scrollWidth") <= 1400
    open_views(sample_page)
    assert sample_page.evaluate("document.documentElement.scrollWidth") <= 1400
    wide = sample_page.eval_on_selector_all(
        ".table-wrap", "ws => ws.filter(w => w.scrollWidth > w.clientWidth + 1).map(w => w.innerText.slice(0, 80))")
    assert wide == []
    close_views(sample_page)


def test_a_view_named_in_the_url_opens_with_the_views_that_hold_it(sample_page, sample_report):
    sample_page.goto(sample_report.as_uri() + "#problem-0")
    assert sample_page.locator("#problems").evaluate("d => d.open")
    assert sample_page.locator("#problem-0").evaluate("d => d.open")
    assert sample_page.locator("#problem-0 table.sortable").count() >= 1
    sample_page.goto(sample_report.as_uri())


def test_a_problems_throughput_is_an_in_cell_bar_not_a_chart(sample_page):
    """G1/G4: a problem's 'of fastest' column draws its bar in the cell; no chart repeats the table."""
    open_views(sample_page)
    bars = sample_page.eval_on_selector_all("#problems td[style*='linear-gradient']", "cells => cells.length")
    assert bars >= 10 and sample_page.locator("#problems figure").count() == 0
    close_views(sample_page)


def test_no_table_shows_more_than_12_columns(sample_page):
    """T1: a table's further columns are an opt-in group ("more columns"), never a wider table."""
    counts = sample_page.eval_on_selector_all("table", "ts => ts.map(t => t.tHead ? t.tHead.rows[0].cells.length : 0)")
    assert counts and max(counts) <= MAX_COLUMNS


def test_the_sample_page_loads_without_errors_and_keeps_a_screenshot(sample_page, tmp_path):
    """B5 and B8: no console errors or requests; the first screen saved for looking at."""
    assert sample_page.problems == []
    close_views(sample_page)
    path = tmp_path / "first-screen.png"
    sample_page.screenshot(path=str(path), full_page=False)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
