"""`parbench report`: one self-contained HTML report over any mix of result files and folders."""
from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

from suites.errors import UserError
from suites.records.output_files import output_path
from suites.records.store import ResultsWarning
from suites.report.render.terminal import terminal

SUMMARY = "write reports/index.html comparing every result under PATHS (default results/); --csv/--parquet export"
KNOBS: tuple[str, ...] = ("PARBENCH_PRICES", "PARBENCH_REFERENCES", "PARBENCH_PEAKS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("results")],
                        help="result files or folders: parbench JSON Lines, asv results, pytest-benchmark JSON "
                             "(default results/)")
    parser.add_argument("-o", "--output", type=output_path, default=Path("reports"),
                        help="output folder (default reports/)")
    parser.add_argument("--csv", action="store_true", help="also write the tidy table as OUTPUT/results.csv")
    parser.add_argument("--parquet", action="store_true",
                        help="also write the tidy table as OUTPUT/results.parquet (needs pyarrow)")
    parser.add_argument("--prices", type=Path,
                        help="price table overriding suites/prices.toml (default $PARBENCH_PRICES if set)")
    parser.add_argument("--references", type=Path,
                        help="published reference figures whose rows come before suites/references.toml's "
                             "(default $PARBENCH_REFERENCES if set)")
    parser.add_argument("--baseline", action="append", metavar="COLUMN=VALUE",
                        help="baseline of the speedup table, e.g. device=cpu, strategy=single, precision=fp32, "
                             "machine=LABEL; repeat for several columns (default: the reference machine, or "
                             "strategy=single on one machine)")
    parser.add_argument("--reference", help="reference of the relative-performance summary: a machine label or "
                                            "'machine · device×N' (default: the hardware that ran the most problems)")
    parser.add_argument("--title", default="parbench report", help="report title")


def make_output_folder(folder: Path) -> None:
    """Create the output folder before any work, or say in one line why it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"-o {folder}: is a file, not a folder; pass a folder (the report is written as "
                        f"FOLDER/index.html)") from None
    except OSError as error:
        raise UserError(f"-o {folder}: cannot create it ({error.strerror}); pass a folder you can write") from None
    if not os.access(folder, os.W_OK):
        raise UserError(f"-o {folder}: not writable; pass a folder you can write")


def run(args: argparse.Namespace) -> int:
    from suites.report.analyses.comparison import parse_baseline
    from suites.report.render.exports import PARQUET_MISSING, parquet_available, write_csv, write_parquet
    from suites.report.render.html import render, write
    from suites.report.load.files import load_files, result_files
    from suites.report.analyses.prices import PriceTable
    from suites.report.content import build_content
    from suites.report.sections.base import ReportOptions
    from suites.hardware.references import load_references
    from suites.strategies.jobs import case_work
    from suites.workloads.training import default_sizes

    console = terminal(stderr=True)
    if args.parquet and not parquet_available():
        raise UserError(PARQUET_MISSING)
    make_output_folder(args.output)
    try:
        baseline = parse_baseline(args.baseline) if args.baseline else None
    except ValueError as error:
        raise UserError(str(error)) from None
    prices = PriceTable.load(args.prices)
    references = load_references(str(args.references) if args.references else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        files = result_files(args.paths)
        frame = load_files(files, case_work)
    problems = [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]
    for message in problems:
        console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)  # one line each
    if frame.empty:
        raise UserError(f"no results found under {', '.join(map(str, args.paths))}; run `parbench run` first, "
                        f"or pass the folders that hold parbench, asv or pytest-benchmark results")
    try:
        content = build_content(frame, ReportOptions(prices=prices, baseline=baseline, reference=args.reference,
                                                     references=references, model_sizes=default_sizes()))
    except ValueError as error:
        raise UserError(str(error)) from None
    path = write(render(content, args.title, len(files), problems), args.output)
    print(f"report: {path}")
    if args.csv:
        print(f"csv: {write_csv(content.frame, args.output / 'results.csv')}")
    if args.parquet:
        print(f"parquet: {write_parquet(content.frame, args.output / 'results.parquet')}")
    return 0
