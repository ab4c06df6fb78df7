"""`parbench list`: the suites, and the cases a suite expands to."""
from __future__ import annotations

import argparse

from rich.table import Table

from suites.cases.case import Case
from suites.cases.filters import select
from suites.errors import UserError
from suites.grids.grid import builtin_suite_names, load_suite
from suites.report.render.terminal import terminal

SUMMARY = "list the built-in suites, or the cases of one suite (--suite)"
KNOBS: tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", help="a built-in suite name or the path of a .toml grid")
    parser.add_argument("--filter", help="choose cases (see `parbench run --help`)")
    parser.add_argument("--availability", action="store_true",
                        help="with --suite: after each id, a tab and 'available', or 'unavailable: ' and why not "
                             "on this machine (imports the frameworks)")


def run(args: argparse.Namespace) -> int:
    console = terminal()
    if args.suite is not None and not args.suite.strip():
        raise UserError("--suite is empty: give a built-in suite name or the path of a .toml grid, or leave out "
                        "--suite to list the suites")
    if args.availability and not args.suite:
        raise UserError("--availability needs --suite SUITE: it says which of that suite's cases run here")
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
        # one id per line, unwrapped: scripts read this (and split the availability off at the tab)
        print(f"{case.id}\t{availability(case)}" if args.availability else case.id)
    return 0


def availability(case: Case) -> str:
    """'available', or 'unavailable: <why not here>', as `parbench run` would record it."""
    from suites.runner.plan import plan, unavailable_reason

    reason = unavailable_reason(plan(case))
    return f"unavailable: {reason}" if reason else "available"
