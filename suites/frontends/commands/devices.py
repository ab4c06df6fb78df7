"""`parbench devices`: what hardware each framework sees here, and why a kind is missing."""
from __future__ import annotations

import argparse
import json

from rich.table import Table

from suites.cases.vocabulary import DeviceKind, Precision
from suites.hardware.devices import DeviceInfo, discover_all
from suites.hardware.peaks import PeakTable
from suites.report.render.terminal import terminal
from suites.measure.energy_meters import meter_for

SUMMARY = "show the CPU/GPU/TPU each framework sees, and why a missing kind is missing"
KNOBS: tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def table_peak(peaks: PeakTable, info: DeviceInfo) -> dict[str, object]:
    """The fp32 peak `% of peak` uses for this device, with the table entry it came from, or
    why there is none (e.g. a MIG slice, a GPU the table does not list)."""
    found = peaks.lookup(info, Precision.FP32)
    return {"fp32_tflops": found.tflops, "entry": found.entry, "reason": found.reason}


def energy_counter(info: DeviceInfo) -> str:
    """'' where the device's energy can be read over a case's timed steps, else why not."""
    ordinals = range(info.count) if info.kind is DeviceKind.GPU else ()
    return meter_for(info.kind, ordinals).reason


def run(args: argparse.Namespace) -> int:
    infos = discover_all()
    peaks = PeakTable.load()
    available = {id(info): table_peak(peaks, info) for info in infos if info.available}
    energy = {kind: energy_counter(next(info for info in infos if info.kind is kind and info.available))
              for kind in {info.kind for info in infos if info.available}}
    if args.json:
        print(json.dumps([{**info.to_dict(), **({"peak_table": available[id(info)],
                                                 "energy_reason": energy[info.kind]}
                                                if id(info) in available else {})}
                          for info in infos], indent=2))
        return 0
    table = Table(title="devices")
    for column in ("framework", "device", "count", "names / reason", "table peak (fp32)", "details"):
        table.add_column(column)
    for info in infos:
        what = ", ".join(info.names) if info.available else f"[yellow]{info.reason}[/]"
        peak = available.get(id(info))
        shown = ("" if peak is None else f"{peak['fp32_tflops']:.3g} TFLOP/s ({peak['entry']})"
                 if peak["fp32_tflops"] is not None else f"[yellow]{peak['reason']}[/]")
        details = ", ".join(f"{k}={v}" for k, v in info.details.items())
        table.add_row(str(info.framework), str(info.kind), str(info.count), what, shown, details)
    console = terminal()
    console.print(table, markup=True)
    for kind, reason in sorted(energy.items(), key=lambda item: str(item[0])):
        console.print(f"energy ({kind}): "
                      + (f"[yellow]{reason}[/]" if reason else "read over each case's timed steps"))
    return 0
