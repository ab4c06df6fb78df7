"""`parbench devices`: what hardware each framework sees here, and why a kind is missing."""
from __future__ import annotations

import argparse
import json

from rich.table import Table

from suites.kept.devices import discover_all
from suites.report.display import terminal

SUMMARY = "show the CPU/GPU/TPU each framework sees, and why a missing kind is missing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    infos = discover_all()
    if args.json:
        print(json.dumps([info.to_dict() for info in infos], indent=2))
        return 0
    table = Table(title="devices")
    for column in ("framework", "device", "count", "names / reason", "details"):
        table.add_column(column)
    for info in infos:
        what = ", ".join(info.names) if info.available else f"[yellow]{info.reason}[/]"
        details = ", ".join(f"{k}={v}" for k, v in info.details.items())
        table.add_row(str(info.framework), str(info.kind), str(info.count), what, details)
    terminal().print(table, markup=True)
    return 0
