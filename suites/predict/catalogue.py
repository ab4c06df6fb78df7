"""The device types and fabrics a projection targets (suites/predict/catalogue.toml), each row sourced.

Names match as the peaks and price tables match (`suites.hardware.peaks.best_match`: every word of a
row's `match` is a word of the name, the most specific row wins). A device's peaks are the peaks
table's row for its CUDA name, never copied here; the row it must be is stated (`peaks_row`) and
checked when the catalogue loads. An unknown name is a UserError naming the closest ones.
"""
from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from suites.errors import UserError
from suites.hardware.peaks import PeakTable, best_match

CATALOGUE_FILE = "catalogue.toml"


@dataclass(frozen=True)
class DeviceType:
    """One board: its memory, its intra-node link, its peaks (from the peaks table) and the share of
    the peak a large GEMM sustains on it."""

    match: str
    name: str
    label: str
    peaks_row: str
    memory_bytes: float
    memory_source: str
    link: str
    link_gbs: float
    link_source: str
    gemm_fraction: float
    gemm_source: str
    gemm_kind: str
    peak_tflops: dict[str, float]
    bandwidth_gbs: float

    @property
    def peaks_source(self) -> str:
        return f"suites/peaks.toml row {self.peaks_row!r} (its datasheet)"


@dataclass(frozen=True)
class Fabric:
    """An inter-node fabric: the bandwidth out of one node (all its NICs, one direction)."""

    match: str
    label: str
    node_gbs: float
    source: str


@dataclass(frozen=True)
class MeasuredRow:
    """One board's measured training throughput of a model (a run on that board)."""

    device: str
    model: str
    precision: str
    per_device_batch: int
    samples_per_s: float
    source: str


@dataclass(frozen=True)
class NcclConstants:
    """NCCL's tuning model's latencies (microseconds) and factors, and the fabric's share of line rate."""

    ring_base_us: float
    tree_base_us: float
    nvlink_ring_us: float
    nvlink_tree_us: float
    pcie_ring_us: float
    pcie_tree_us: float
    net_ring_us: float
    net_tree_us: float
    ring_plateau: float
    tree_bandwidth: float
    fabric_fraction: float
    fabric_fraction_low: float
    source: str


@dataclass(frozen=True)
class Catalogue:
    devices: tuple[DeviceType, ...]
    fabrics: tuple[Fabric, ...]
    measured: tuple[MeasuredRow, ...]
    nccl: NcclConstants
    default_fabric: str
    path: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Catalogue":
        """The shipped catalogue, or the user's file in its format (UserError if unreadable or misshapen)."""
        where = str(path) if path else f"suites/predict/{CATALOGUE_FILE}"
        try:
            text = Path(path).read_text() if path else resources.files("suites.predict").joinpath(
                CATALOGUE_FILE).read_text()
            data = tomllib.loads(text)
            return cls.from_data(data, where)
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
            raise UserError(f"catalogue {where}: cannot use it ({type(error).__name__}: {error}); fix the file "
                            "or drop --catalogue-file") from None

    @classmethod
    def from_data(cls, data: dict[str, Any], where: str) -> "Catalogue":
        peaks = PeakTable.load()
        devices = tuple(_device(row, peaks) for row in data["device"])
        fabrics = tuple(Fabric(str(r["match"]), str(r["label"]), float(r["node_gbs"]), str(r["source"]))
                        for r in data["fabric"])
        measured = tuple(MeasuredRow(str(r["device"]), str(r["model"]), str(r["precision"]),
                                     int(r["per_device_batch"]), float(r["samples_per_s"]), str(r["source"]))
                         for r in data.get("measured", []))
        catalogue = cls(devices, fabrics, measured, NcclConstants(**data["nccl"]), str(data["default_fabric"]),
                        where)
        catalogue.fabric(catalogue.default_fabric)  # the default must be a fabric of the file
        return catalogue

    def device(self, words: str) -> DeviceType:
        """The device type `words` names (UserError with the closest names if none)."""
        found = self.find_device(words)
        if found is not None:
            return found
        named = [d for d in self.devices if _tokens(words) <= _tokens(d.label) | _tokens(d.name)]
        if len(named) == 1:  # "V100 SXM2": the words of one board's label (its match is "V100 16GB")
            return named[0]
        if named:
            raise UserError(f"device {words!r} could be any of {', '.join(d.label for d in named)}; name one "
                            "(`parbench predict --catalogue` lists them)")
        raise UserError(f"unknown device {words!r}{closest(words, [d.label for d in self.devices])}; "
                        "`parbench predict --catalogue` lists them")

    def find_device(self, name: str) -> DeviceType | None:
        """The device type a record's or user's device name names, or None."""
        entry = best_match(name, tuple({"match": d.match, "device": d} for d in self.devices))
        return entry["device"] if entry else None

    def fabric(self, words: str) -> Fabric:
        entry = best_match(words, tuple({"match": f.match, "fabric": f} for f in self.fabrics))
        if entry is None:
            raise UserError(f"unknown network {words!r}{closest(words, [f.match for f in self.fabrics])}; "
                            "`parbench predict --catalogue` lists the fabrics")
        return entry["fabric"]

    def measured_for(self, device: DeviceType, model: str, precision: str) -> MeasuredRow | None:
        """The measured row of `model` in `precision` on `device`, if the catalogue has one."""
        return next((row for row in self.measured if row.model == model and row.precision == precision
                     and self.find_device(row.device) == device), None)


def _device(row: dict[str, Any], peaks: PeakTable) -> DeviceType:
    entry = peaks.gpu_entry(str(row["name"]))
    if entry is None or entry["match"] != row["peaks_row"]:
        raise ValueError(f"device {row['label']!r}: the peaks table's row for {row['name']!r} is "
                         f"{entry and entry['match']!r}, not peaks_row {row['peaks_row']!r}")
    return DeviceType(
        match=str(row["match"]), name=str(row["name"]), label=str(row["label"]), peaks_row=str(row["peaks_row"]),
        memory_bytes=float(row["memory_gib"]) * 2**30, memory_source=str(row["memory_source"]),
        link=str(row["link"]), link_gbs=float(row["link_gbs"]), link_source=str(row["link_source"]),
        gemm_fraction=float(row["gemm_fraction"]), gemm_source=str(row["gemm_source"]),
        gemm_kind=str(row["gemm_kind"]),
        peak_tflops={key: float(entry[key]) for key in ("fp32", "tf32", "fp16", "bf16") if key in entry},
        bandwidth_gbs=float(entry["bandwidth_gbs"]))


def _tokens(words: str) -> set[str]:
    """A name's words, lowercased, split at anything but letters and digits ("Tesla V100-SXM2-16GB")."""
    return set(re.findall(r"[a-z0-9]+", words.lower()))


def closest(words: str, names: list[str]) -> str:
    """"; closest: a, b" for the names nearest `words` (difflib), or "" if none is near."""
    lowered = {name.lower(): name for name in names}
    near = difflib.get_close_matches(words.lower(), list(lowered), n=3, cutoff=0.3)
    return f"; closest: {', '.join(lowered[n] for n in near)}" if near else f"; known: {', '.join(names)}"
