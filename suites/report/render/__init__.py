"""Rendering: what the page and the terminal show, never what it means. HTML (`html` and the
Jinja2 templates), tables and their formats (`tables`), figures, terminal tables, the CSV/Parquet
exports. Reads the tidy table's columns (`suites.report.load`), never an analysis."""
