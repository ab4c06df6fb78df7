"""The HTML report in a real browser: headless Chromium (Debian's) driven by playwright.

Runs on real records: two machine labels with different thread counts, unavailable cases,
an injected crash, and a machine label that is an HTML script tag. Skipped only where
chromium or playwright is missing (tests/browser/setup.sh installs both; CI runs it).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from suites.frontends.cli import main
from tests.report_support import MACHINES, OK_CASES, XSS_LABEL, run_machine

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
    run_machine(root / "results", XSS_LABEL, 1, cases=OK_CASES[:1], with_failure=False)
    assert main(["report", str(root / "results"), "-o", str(root / "reports")]) == 0
    return root / "reports" / "index.html"


@pytest.fixture(scope="module")
def page(report):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: run tests/browser/setup.sh")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
                                             args=CHROMIUM_FLAGS, timeout=120_000)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.problems = []  # console errors/warnings, page errors, dialogs, requests off the page
        page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("request", lambda r: page.problems.append(f"request: {r.url}")
                if not r.url.startswith(("file:", "data:")) else None)
        page.goto(report.as_uri(), wait_until="load")
        yield page
        browser.close()


def test_report_loads_without_console_errors_dialogs_or_network(page):
    assert page.problems == []


def test_figures_are_decoded_images(page):
    sizes = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    # throughput per problem (3); the precision and % of peak charts too where the rows are
    # comparable, which live runs on a loaded machine (contended) are not
    assert len(sizes) >= 3
    assert all(width > 100 and height > 50 for width, height in sizes)


def test_tables_summary_and_sections_are_there(page):
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
        assert page.locator(f"section#{anchor}").count() == 1, anchor
    failures = page.inner_text("#not-ok")
    assert "injected fault" in failures and "unavailable" in failures
    environments = page.inner_text("#environments")
    assert "torch=1" in environments and "torch=2" in environments


def test_machine_label_with_script_tag_renders_as_text(page):
    assert page.locator("script").count() == 1  # the report's own sort script only
    assert XSS_LABEL in page.inner_text("#environments")


def test_clicking_a_numeric_header_sorts_the_table(page):
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


def test_summary_table_fits_a_1400_px_window(page):
    """Every column of "what to choose" (the last is "configs") is in view without scrolling sideways."""
    wrap = page.locator("#summary .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth")
    assert page.locator("#summary th").last.evaluate("h => h.getBoundingClientRect().right <= window.innerWidth")
