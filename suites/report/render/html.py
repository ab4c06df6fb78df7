"""Render the report as ONE self-contained HTML file: CSS, script and figures inline, no network.

Jinja2 autoescape is on for every value, so text from results files (machine labels, model
names, reasons, paths) is always shown as text. The Content-Security-Policy in the page allows
only inline styles/scripts and data: images, so a report can load nothing from anywhere.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

from suites.report.render.exports import write_whole
from suites.report.render.page import ReportContent

TEMPLATE = "report.html.j2"


def environment() -> Environment:
    return Environment(loader=PackageLoader("suites.report.render", "templates"), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=False, lstrip_blocks=False)


def render(content: ReportContent, title: str, files: int, warnings: list[str]) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return environment().get_template(TEMPLATE).render(
        content=content, title=title, generated=generated, files=files, warnings=warnings)


def write(html: str, directory: Path) -> Path:
    """`directory`/index.html, whole: a failed write (a full disk) leaves the previous report."""
    return write_whole(directory / "index.html", lambda temporary: temporary.write_text(html, encoding="utf-8"))
