"""`parbench predict`: project a training step onto device types, counts, nodes and fabrics (docs/predict.md)."""
from __future__ import annotations

import argparse
import json
import math

from rich.table import Table

from suites.errors import UserError
from suites.predict.base import BATCH, Base, parse_base, record_base, reference_base
from suites.predict.catalogue import Catalogue
from suites.predict.projection import Options, parse_target, project
from suites.predict.validation import score, validate
from suites.predict.workload import parse_sizes, resolve_workload
from suites.ranges import Range
from suites.report.render.terminal import terminal

SUMMARY = ("project a training step onto device types, counts, nodes and fabrics you do not have: throughput, "
           "memory and fit, cost and what limits it, each with its inputs' sources and an error band; "
           "--validate scores the projection on published and measured rows")
KNOBS: tuple[str, ...] = ("PARBENCH_PRICES", "PARBENCH_PEAKS")
#: A batch (per device or global) or a pipeline's micro-batches: `--base ...@BATCH`'s range, declared once.
COUNT = BATCH
#: Work to price: samples or tokens.
WORK = Range(float, low=0, low_excluded=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50", help="a built-in or registered model, or llama3_8b")
    parser.add_argument("--sizes", help="the model's sizes, NAME=VALUE[,...] (e.g. seq=8192)")
    parser.add_argument("--precision", default="bf16", help="fp32, tf32, fp16 or bf16 (default bf16)")
    parser.add_argument("--strategy", default="ddp", help="a strategy plugin of the framework (default ddp)")
    parser.add_argument("--framework", default="torch", help="torch or tf (default torch)")
    parser.add_argument("--optimizer", help="sgd, momentum, adam, adamw (default: the standard suite's for the model)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from", dest="records", nargs="+", metavar="RESULTS",
                        help="results folders or record files: the best matching record is the base")
    source.add_argument("--base", help="a published figure, DEVICE:N=THROUGHPUT[@PER_DEVICE_BATCH] "
                                       "(e.g. \"H100 SXM:1=2789@256\"), or ref:DEVICE:N: a suites/references.toml row")
    parser.add_argument("--to", action="append", default=[], metavar="DEVICE:N|DEVICE:GxK",
                        help="a target (repeatable): N devices, or G per node on K nodes")
    parser.add_argument("--network", help="the inter-node fabric (default: the catalogue's, said in the output)")
    parser.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                        help="weak keeps the per-device batch, strong the global batch (default weak)")
    parser.add_argument("--global-batch", type=COUNT.argument,
                        help="strong scaling's global batch (default: the base's)")
    parser.add_argument("--batch", type=COUNT.argument, help="per-device batch (default: the base's)")
    parser.add_argument("--microbatches", type=COUNT.argument, default=4, help="a pipeline's micro-batches (default 4)")
    parser.add_argument("--host-margin", type=float, default=0.10,
                        help="throughput a multi-device step may lose that the model leaves out: the band's "
                             "slow end (assumed, default 0.10)")
    parser.add_argument("--samples", type=WORK.argument, help="work to price: this many samples")
    parser.add_argument("--tokens", type=WORK.argument, help="work to price: this many tokens")
    parser.add_argument("--prices", help="price table overriding suites/prices.toml (default $PARBENCH_PRICES)")
    parser.add_argument("--catalogue-file", help="a catalogue of your own in suites/predict/catalogue.toml's format")
    parser.add_argument("--catalogue", action="store_true", help="list the device types and fabrics, with sources")
    parser.add_argument("--validate", action="store_true", help="score the projection on the shipped validation set")
    parser.add_argument("--json", action="store_true", help="print JSON: one object per target (or the validation)")


def run(args: argparse.Namespace) -> int:
    catalogue = Catalogue.load(args.catalogue_file)
    if args.catalogue:
        return show_catalogue(catalogue, args.json)
    if args.validate:
        rows = validate(catalogue)
        print(json.dumps({"rows": rows, "summary": score(rows)}, indent=1, default=str) if args.json
              else validation_text(rows))
        return 0
    if not args.to:
        raise UserError("give at least one target, --to DEVICE:N (e.g. --to \"H100 SXM:8\"), or --catalogue / "
                        "--validate")
    if not (0 <= args.host_margin < 1):
        raise UserError(f"--host-margin {args.host_margin}: a share between 0 and 1")
    workload = resolve_workload(args.model, parse_sizes(args.sizes), args.precision, args.strategy,
                                args.framework, args.optimizer)
    targets = [parse_target(text, catalogue) for text in args.to]
    fabric_said = f"--network {args.network}" if args.network else f"default: {catalogue.default_fabric}"
    fabric = catalogue.fabric(args.network or catalogue.default_fabric)
    base = base_of(args, workload, catalogue)
    options = Options(fabric, fabric_said, args.scaling, args.global_batch, args.batch, args.microbatches,
                      args.host_margin, args.samples, args.tokens, price_table(args.prices))
    projections = [project(workload, base, target, options, catalogue) for target in targets]
    if args.json:
        print(json.dumps([p.to_dict() for p in projections], indent=1, default=str))
    else:
        console = terminal()
        console.print(f"PROJECTED (not measured): {workload.label}, {args.scaling} scaling; base: "
                      f"{base.samples_per_s:,.1f} samples/s on {base.devices} x {base.device_name} ({base.kind}: "
                      f"{base.source}); network {fabric.label} ({fabric_said})", highlight=False)
        console.print(projection_table(projections))
        for projection in projections:
            for note in [*projection.notes, *([projection.error] if projection.error else [])]:
                console.print(f"- {projection.device} x{projection.devices}: {note}", highlight=False)
    return 0


def base_of(args: argparse.Namespace, workload, catalogue: Catalogue) -> Base:  # noqa: ANN001
    if args.records:
        return record_base(args.records, workload, catalogue)
    if args.base and args.base.startswith("ref:"):
        return reference_base(args.base, workload, catalogue)
    if args.base:
        return parse_base(args.base, catalogue)
    raise UserError("give a base: --from RESULTS (records of this workload), --base DEVICE:N=THROUGHPUT[@BATCH] "
                    "or --base ref:DEVICE:N")


def price_table(path: str | None):  # noqa: ANN201
    from suites.report.analyses.prices import PriceTable

    return PriceTable.load(path)


def number(value: float | None, digits: int | None = None) -> str:
    """Thousands separated; one decimal under 100 unless `digits` says otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{(1 if abs(value) < 100 else 0) if digits is None else digits}f}"


def gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:,.1f}"


def projection_table(projections: list) -> Table:  # noqa: ANN001
    grid = Table(title="projected per target (band: low-high samples/s)")
    for column in ("target", "batch/dev", "samples/s", "band", "per device", "tokens/s", "step ms", "limited by",
                   "GiB/dev", "fits", "max batch", "cost/M samples"):
        grid.add_column(column)
    for p in projections:
        name = f"{p.device} {p.devices // p.nodes}x{p.nodes}" if p.nodes > 1 else f"{p.device} x{p.devices}"
        if p.error:
            grid.add_row(name, "-", "cannot project", *["-"] * 9)
            continue
        band = f"{number(p.band[0])}-{number(p.band[1])}" if p.band else "-"
        grid.add_row(name, str(p.per_device_batch), number(p.samples_per_s), band, number(p.per_device_samples_per_s),
                     number(p.tokens_per_s), number(p.step_s * 1000, 1), p.limited_by or "-",
                     gib(p.memory_per_device_bytes),
                     "-" if p.fits is None else "yes" if p.fits else "NO", number(p.max_batch_per_device, 0),
                     number(p.cost_per_million, 2) if p.cost_per_million is not None else p.price_rule or "-")
    return grid


def show_catalogue(catalogue: Catalogue, as_json: bool) -> int:
    devices = [{"device": d.label, "match": d.match, "cuda_name": d.name,
                "memory_gib": round(d.memory_bytes / 2**30, 2),
                "memory_source": d.memory_source, "link": d.link, "link_gbs": d.link_gbs, "link_source": d.link_source,
                "peaks": d.peak_tflops, "bandwidth_gbs": d.bandwidth_gbs, "peaks_source": d.peaks_source,
                "gemm_fraction": d.gemm_fraction, "gemm_source": d.gemm_source} for d in catalogue.devices]
    fabrics = [{"network": f.label, "match": f.match, "node_gbs": f.node_gbs, "source": f.source,
                "default": f.match == catalogue.default_fabric} for f in catalogue.fabrics]
    if as_json:
        print(json.dumps({"catalogue": catalogue.path, "devices": devices, "fabrics": fabrics}, indent=1))
        return 0
    print(f"catalogue: {catalogue.path}")
    for d in devices:
        print(f"{d['device']} (match {d['match']!r}): {d['memory_gib']} GiB [{d['memory_source']}]; {d['link']} "
              f"{d['link_gbs']} GB/s [{d['link_source']}]; peaks {d['peaks']} TFLOP/s, {d['bandwidth_gbs']} GB/s "
              f"[{d['peaks_source']}]; GEMM {d['gemm_fraction']} of peak [{d['gemm_source']}]")
    for f in fabrics:
        print(f"{f['network']} (match {f['match']!r}{', default' if f['default'] else ''}): {f['node_gbs']} GB/s "
              f"per node [{f['source']}]")
    print(f"NCCL constants: {catalogue.nccl.source}")
    return 0


SECTIONS = {"weak": "weak scaling (per-device batch kept)", "strong": "strong scaling (global batch kept)",
            "device": "one board from another", "collective": "nccl-tests bus bandwidth",
            "namespace": "this machine, 2 namespaces, gloo", "memory": "memory: fits against recorded runs"}


def validation_text(rows: list[dict]) -> str:
    """Every row (base, target, measured, predicted, error, band, inside; `contended` beside the error of a
    row measured under contention), a heading per section, then each section's summary."""
    lines = [f"{'row':34} {'policy':9} {'base':>11} {'target':28} {'measured':>11} {'predicted':>11} "
             f"{'error':>17} {'band':>23} in"]
    section = None
    order = list(SECTIONS)
    for row in sorted(rows, key=lambda r: order.index(r["policy"]) if r["policy"] in order else len(order)):
        if row["policy"] != section:
            section = row["policy"]
            lines.append(f"-- {row.get('section') or SECTIONS.get(section, section)}")
        band = f"{number(row['band_low'])}-{number(row['band_high'])}" if row.get("band_low") is not None else "-"
        error = "-" if row.get("error") is None else f"{100 * row['error']:+.1f}%"
        error += " contended" if row.get("contended") else ""
        lines.append(f"{row['id'][:34]:34} {row['policy']:9} {number(row.get('base'), 1):>11} {row['target'][:28]:28} "
                     f"{number(row['measured'], 1):>11} {number(row.get('predicted'), 1):>11} {error:>17} {band:>23} "
                     f"{'yes' if row.get('inside') else 'no' if row.get('inside') is not None else '-'}"
                     + (f"  ({row['note']})" if row.get("note") else ""))
    lines.append("")
    for policy, values in score(rows).items():
        lines.append(f"{policy}: {summary_text(values)}")
        if values.get("with_contended"):
            lines.append(f"{policy} with its {values['contended_rows']} contended rows: "
                         f"{summary_text(values['with_contended'])}")
    return "\n".join(lines)


def summary_text(values: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items()
                     if k != "with_contended")
