"""`parbench list`: the suites, and the cases a suite expands to."""
from __future__ import annotations

import argparse

from rich.table import Table

from suites.cases.filters import select
from suites.grids.grid import builtin_suite_names, load_suite
from suites.report.render.terminal import terminal

SUMMARY = "list the built-in suites, or the cases of one suite (--suite)"
KNOBS: tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", help="a built-in suite name or the path of a .toml grid")
    parser.add_argument("--filter", help="choose cases (see `parbench run --help`)")


def run(args: argparse.Namespace) -> int:
    console = terminal()
    if not args.suite:
        table = Table(title="suites")
        table.add_column("suite")
        table.add_column("cases", justify="right")
        table.add_column("description")
        for name in builtin_suite_names():
            suite = load_suite(name)
            table.add_row(name, str(len(suite.cases)), suite.description)
        console.print(table)
        return 0
    suite = load_suite(args.suite)
    for case in select(suite.cases, args.filter, suite.name):
        print(case.id)  # one id per line, unwrapped: scripts read this
    return 0
