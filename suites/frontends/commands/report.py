"""`parbench report`: one self-contained HTML report over any mix of result files and folders."""
from __future__ import annotations

import argparse
import os
import re
import warnings
from pathlib import Path

from suites.errors import UserError
from suites.frontends.commands.predict import COUNT, WORK
from suites.records.output_files import output_path
from suites.records.store import ResultsWarning
from suites.report.render.terminal import terminal

SUMMARY = "write reports/index.html comparing every result under PATHS (default results/); --csv/--parquet export"
KNOBS: tuple[str, ...] = ("PARBENCH_PRICES", "PARBENCH_REFERENCES", "PARBENCH_PEAKS")


def results_argument(value: str) -> str:
    """argparse type of an argument naming results to read (a path; for compare also a machine label
    or run id): an empty value is refused (Path reads '' as '.', the current folder, unasked)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty value names no results; give a results file or folder (. for "
                                         "the current folder)")
    return value


def results_path(value: str) -> Path:
    return Path(results_argument(value))


#: A loader warning about one line of a file: 'PATH:LINE: what; line skipped'.
LINE_PROBLEM = re.compile(r"^(?P<path>.+?):\d+: ")


def per_file(problems: list[str]) -> list[str]:
    """The loader's warnings with those about lines of one file said once (its first, and how many
    more): a file of garbage is one line, not one per line of it."""
    first: dict[str, int] = {}
    more: dict[str, int] = {}
    said: list[str] = []
    for message in problems:
        match = LINE_PROBLEM.match(message)
        if match and match["path"] in first:
            more[match["path"]] = more.get(match["path"], 0) + 1
            continue
        if match:
            first[match["path"]] = len(said)
        said.append(message)
    for path, count in more.items():
        said[first[path]] += f"; and {count} more line(s) of it skipped"
    return said


def results_problems(caught: list[warnings.WarningMessage]) -> list[str]:
    """The loader's ResultsWarnings among `caught`, said once a file (`per_file`)."""
    return per_file([str(w.message) for w in caught if issubclass(w.category, ResultsWarning)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=results_path, default=[Path("results")],
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
    add_predict_arguments(parser)


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """`--predict-*`: `parbench predict`'s options under a prefix, for the report's "before you rent"
    view (docs/predict.md); without --predict-to nothing is projected."""
    group = parser.add_argument_group("before you rent: PROJECTED figures beside the measured ones (docs/predict.md)")
    group.add_argument("--predict-to", action="append", default=[], metavar="DEVICE:N|DEVICE:GxK",
                       help="project onto this target (repeatable), e.g. \"H100 SXM:8\" or \"H200:8x2\"")
    group.add_argument("--predict-model", default=PREDICT_DEFAULTS["predict_model"],
                       help="the model to project (default resnet50)")
    group.add_argument("--predict-sizes", help="the model's sizes, NAME=VALUE[,...]")
    group.add_argument("--predict-precision", default=PREDICT_DEFAULTS["predict_precision"],
                       help="fp32, tf32, fp16 or bf16 (default bf16)")
    group.add_argument("--predict-strategy", default=PREDICT_DEFAULTS["predict_strategy"],
                       help="the strategy on the targets (default ddp)")
    group.add_argument("--predict-framework", default=PREDICT_DEFAULTS["predict_framework"],
                       help="torch or tf (default torch)")
    group.add_argument("--predict-optimizer", help="sgd, momentum, adam, adamw (default: the standard suite's)")
    base = group.add_mutually_exclusive_group()
    base.add_argument("--predict-from", nargs="+", metavar="RESULTS",
                      help="records whose best matching one is the base (default: the report's PATHS)")
    base.add_argument("--predict-base", metavar="DEVICE:N=THROUGHPUT[@BATCH]",
                      help="a published base instead of records, as `parbench predict --base`")
    group.add_argument("--predict-network", help="the inter-node fabric (default: the catalogue's)")
    group.add_argument("--predict-scaling", choices=("weak", "strong"), default=PREDICT_DEFAULTS["predict_scaling"],
                       help="weak keeps the per-device batch, strong the global batch (default weak)")
    group.add_argument("--predict-global-batch", type=COUNT.argument, help="strong scaling's global batch")
    group.add_argument("--predict-batch", type=COUNT.argument, help="per-device batch (default: the base's)")
    group.add_argument("--predict-samples", type=WORK.argument, help="work the chart prices: this many samples")
    group.add_argument("--predict-tokens", type=WORK.argument, help="work the chart prices: this many tokens")


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
    from suites.report.analyses.comparison import baseline_problem, parse_baseline
    from suites.report.render.exports import PARQUET_MISSING, parquet_available, write_csv, write_parquet
    from suites.report.render.html import render, write
    from suites.report.load.files import load_files, result_files
    from suites.report.analyses.prices import PriceTable
    from suites.report.content import build_content
    from suites.report.sections.base import ReportOptions
    from suites.hardware.references import load_references
    from suites.strategies.jobs import case_work
    from suites.workloads.training import default_sizes
    from suites.measure.work_definitions import current

    console = terminal(stderr=True)
    if args.parquet and not parquet_available():
        raise UserError(PARQUET_MISSING)
    if args.reference is not None and not args.reference.strip():
        raise UserError("--reference is empty: give a machine label or device type, or leave it out")
    make_output_folder(args.output)
    try:
        baseline = parse_baseline(args.baseline) if args.baseline else None
    except ValueError as error:
        raise UserError(str(error)) from None
    prices = PriceTable.load(args.prices)
    projections = project(args, prices)  # before any loading: a bad --predict-* costs nothing
    references = load_references(str(args.references) if args.references else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        files = result_files(args.paths)
        frame = load_files(files, case_work)
    problems = results_problems(caught)
    if frame.empty:  # one line: what was passed over on the way is why nothing was found
        why = f" ({problems[0]}{f'; and {len(problems) - 1} more' if len(problems) > 1 else ''})" if problems else ""
        raise UserError(f"no results found under {', '.join(map(str, args.paths))}{why}; run `parbench run` first, "
                        f"or pass the folders that hold parbench, asv or pytest-benchmark results")
    if baseline and (problem := baseline_problem(frame, baseline)):
        raise UserError(problem)
    for message in problems:
        console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)  # one line each
    try:
        content = build_content(frame, ReportOptions(prices=prices, baseline=baseline, reference=args.reference,
                                                     references=references, model_sizes=default_sizes(),
                                                     projections=projections,
                                                     definitions=current()))
    except ValueError as error:
        raise UserError(str(error)) from None
    path = write(render(content, args.title, len(files), problems), args.output)
    print(f"report: {path}")
    if args.csv:
        print(f"csv: {write_csv(content.frame, args.output / 'results.csv')}")
    if args.parquet:
        print(f"parquet: {write_parquet(content.frame, args.output / 'results.parquet')}")
    return 0


#: `parbench predict`'s options named in its one-line errors, said as the report's ('--to' -> '--predict-to').
PREDICT_OPTIONS = re.compile(r"(?<![\w-])--(to|from|base|network|global-batch|batch|sizes|model)\b")
#: The --predict-* options' defaults: any other value given without --predict-to is refused.
PREDICT_DEFAULTS = {"predict_model": "resnet50", "predict_precision": "bf16", "predict_strategy": "ddp",
                    "predict_framework": "torch", "predict_scaling": "weak"}


def project(args: argparse.Namespace, prices):  # noqa: ANN001, ANN201 (a PriceTable; a DataFrame or None)
    """The projections the report's "before you rent" view shows (`projections_frame`), computed
    here so the report never imports the predictor; None without --predict-to."""
    given = [name for name, value in vars(args).items() if name.startswith("predict_") and name != "predict_to"
             and value is not None and value != PREDICT_DEFAULTS.get(name)]
    if not args.predict_to:
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} needs --predict-to DEVICE:N (e.g. --predict-to "
                            f"\"H100 SXM:8\"): the targets to project onto")
        return None
    from suites.frontends.commands.predict import base_of
    from suites.predict.catalogue import Catalogue
    from suites.predict.projection import Options, parse_target, projections_frame
    from suites.predict.workload import parse_sizes, resolve_workload

    try:
        catalogue = Catalogue.load(None)
        workload = resolve_workload(args.predict_model, parse_sizes(args.predict_sizes), args.predict_precision,
                                    args.predict_strategy, args.predict_framework, args.predict_optimizer)
        targets = [parse_target(text, catalogue) for text in args.predict_to]
        said = f"--predict-network {args.predict_network}" if args.predict_network else \
            f"default: {catalogue.default_fabric}"
        fabric = catalogue.fabric(args.predict_network or catalogue.default_fabric)
        paths = args.predict_from or [str(path) for path in args.paths]
        base = base_of(argparse.Namespace(records=None if args.predict_base else paths, base=args.predict_base),
                       workload, catalogue)
        options = Options(fabric, said, args.predict_scaling, args.predict_global_batch, args.predict_batch,
                          samples=args.predict_samples, tokens=args.predict_tokens, prices=prices)
        frame = projections_frame(workload, base, targets, options, catalogue)
    except UserError as error:
        raise UserError(PREDICT_OPTIONS.sub(r"--predict-\1", str(error))) from None
    return frame.assign(model=workload.model, precision=str(workload.precision),
                        base=f"{base.samples_per_s:,.1f} samples/s on {base.devices} x {base.device_name} "
                             f"({base.kind}: {base.source})")
