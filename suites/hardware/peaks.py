"""Peak throughput: from the editable peaks table, and measured on this machine by `calibrate`."""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from suites import knobs
from suites.cases.user_files import field_problem, shipped_table, user_table
from suites.cases.vocabulary import DeviceKind, Precision
from suites.errors import UserError
from suites.hardware.devices import DeviceInfo
from suites.ranges import Range

PEAKS_ENV = "PARBENCH_PEAKS"
CALIBRATION_FILE = "calibration.json"


#: The top-level entries of a peaks table, each an array of tables but `version`.
PEAKS_ENTRIES = ("version", "gpu", "tpu", "cpu")
PRECISIONS = tuple(str(precision) for precision in Precision)
VERSION = Range(int, 1)
#: A GPU or TPU entry: one device's dense peak per precision (TFLOP/s), bandwidth and tensor clock.
DEVICE_PEAKS: dict[str, type[str] | Range] = {
    "match": str, **{key: Range(float, 0, True, unit="TFLOP/s") for key in PRECISIONS},
    "bandwidth_gbs": Range(float, 0, True, unit="GB/s"), "clock_mhz": Range(float, 0, True, unit="MHz"),
    "clock_source": str}
#: A CPU entry: FLOP per cycle per core of a microarchitecture (`uarch`) or vector extension (`isa`).
CPU_PEAKS: dict[str, type[str] | Range] = {
    "uarch": str, "isa": str, **{key: Range(float, 0, True, unit="FLOP per cycle per core") for key in PRECISIONS}}


def check_peaks(data: Mapping[str, Any], source: str, way_out: str) -> None:
    """Refuse a peaks table with an entry it does not declare or a peak that is not a finite number
    > 0 (a negative or NaN peak would give a negative or NaN % of peak on every record, a text one a
    traceback mid-run). UserError: "SOURCE: ENTRY: why; WAY_OUT", the first bad entry."""
    def bad(entry: str, problem: str) -> UserError:
        return UserError(f"{source}: {entry}: {problem}; {way_out}")

    unknown = [key for key in data if key not in PEAKS_ENTRIES]
    if unknown:
        raise bad(unknown[0], f"not an entry of a peaks table (it has {', '.join(PEAKS_ENTRIES)}: a device's peaks "
                              'go in a [[gpu]], [[tpu]] or [[cpu]] table, e.g. [[gpu]] match = "H100" fp32 = 67.0)')
    if "version" in data and (problem := field_problem({"version": data["version"]}, {"version": VERSION})):
        raise bad(*problem)
    for kind in ("gpu", "tpu", "cpu"):
        entries = data.get(kind, [])
        if not isinstance(entries, list):
            raise bad(kind, f"expected an array of tables ([[{kind}]]), got {entries!r}")
        for index, entry in enumerate(entries):
            if problem := entry_problem(kind, entry):
                raise bad(f"{kind}[{index}]{problem[0]}", problem[1])


def entry_problem(kind: str, entry: Any) -> tuple[str, str] | None:
    """(" (NAME).KEY" or "", why) for a [[gpu]], [[tpu]] or [[cpu]] entry that is not a table naming
    its device (`match`; a CPU's `uarch` or `isa`) with declared keys of declared kinds; else None."""
    named = ("uarch", "isa") if kind == "cpu" else ("match",)
    name = next((entry[key] for key in named if isinstance(entry, dict) and isinstance(entry.get(key), str)), None)
    if name is None:
        return "", f"expected a [[{kind}]] table with a {' or '.join(named)} string, got {entry!r}"
    problem = field_problem(entry, CPU_PEAKS if kind == "cpu" else DEVICE_PEAKS)
    return (f" ({name!r}).{problem[0]}", problem[1]) if problem else None


#: MIG's marker in a device name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), as a whole token.
MIG_TOKEN = "mig"


def name_tokens(name: str) -> tuple[str, ...]:
    """The words of a device name or `match` string: lower case, split at every character that is
    not a letter or digit ("NVIDIA H100-PCIe_80GB" -> nvidia, h100, pcie, 80gb)."""
    return tuple(token for token in re.split(r"[^0-9a-z]+", name.lower()) if token)


def is_mig_slice(name: str) -> bool:
    """A MIG instance: a slice of a GPU, named with the whole GPU's model plus "MIG <profile>"."""
    return MIG_TOKEN in name_tokens(name)


@dataclass(frozen=True)
class PeakLookup:
    """A peaks-table look-up: `tflops` (one device), the entry it came from, or why there is none."""
    tflops: float | None
    entry: str = ""  # the GPU entry's `match` or the CPU entry's `isa`; "" when none matched
    reason: str = ""  # why `tflops` is None; "" when it is known


@dataclass(frozen=True)
class PeakTable:
    gpu: tuple[dict[str, Any], ...]
    cpu: tuple[dict[str, Any], ...]
    version: int
    user_gpu: int = 0  # how many of `gpu`'s leading entries came from PARBENCH_PEAKS (they win)
    #: TPU entries, matched on the TPU's name (its accelerator type) as GPU entries are.
    tpu: tuple[dict[str, Any], ...] = ()
    user_tpu: int = 0

    @classmethod
    def load(cls) -> "PeakTable":
        data = shipped_table("peaks.toml")
        check_peaks(data, "suites/peaks.toml", "fix the shipped table")
        gpu, cpu, tpu = (list(data.get(kind, [])) for kind in ("gpu", "cpu", "tpu"))
        user_gpu = user_tpu = 0
        user_file = knobs.read(PEAKS_ENV)
        if user_file:
            what, way_out = f"peaks table ({PEAKS_ENV})", f"fix the file or unset {PEAKS_ENV}"
            user = user_table(user_file, what, way_out)
            check_peaks(user, f"{what} {user_file}", way_out)
            user_gpu, user_tpu = len(user.get("gpu", [])), len(user.get("tpu", []))
            gpu = list(user.get("gpu", [])) + gpu
            cpu = list(user.get("cpu", [])) + cpu
            tpu = list(user.get("tpu", [])) + tpu
        return cls(tuple(gpu), tuple(cpu), int(data.get("version", 0)), user_gpu, tuple(tpu), user_tpu)

    def peak_tflops(self, device: DeviceInfo, precision: Precision) -> float | None:
        """Peak of one device (not the sum over several) in `precision`, or None if unknown
        (`lookup` says why)."""
        return self.lookup(device, precision).tflops

    def lookup(self, device: DeviceInfo, precision: Precision) -> PeakLookup:
        """`peak_tflops` with the entry it used, or the reason it has none."""
        key = str(precision)
        if device.kind in (DeviceKind.GPU, DeviceKind.TPU):
            if not device.names:
                return PeakLookup(None, reason=f"the {device.kind} reports no name to look up in the peaks table")
            name = device.names[0]
            entry = self.entry_for(device)
            if entry is None:
                if device.kind is DeviceKind.GPU and is_mig_slice(name):
                    return PeakLookup(None, reason=(
                        f"{name!r} is a MIG slice, which has only a share of the GPU's units: the whole "
                        f"GPU's peak does not apply (an entry in {PEAKS_ENV} whose match names MIG and "
                        "the slice's profile would)"))
                return PeakLookup(None, reason=f"no peaks-table entry matches the {device.kind} name {name!r}")
            match = str(entry["match"])
            if entry.get(key) is None:
                return PeakLookup(None, match, f"the peaks-table entry {match!r} gives no {key} peak")
            return PeakLookup(float(entry[key]), match)
        if device.kind is DeviceKind.CPU:
            return self._cpu_lookup(device, key)
        return PeakLookup(None, reason=f"the peaks table has no {device.kind} entries")

    def cpu_entry(self, device: DeviceInfo) -> dict[str, Any] | None:
        """The CPU entry for this CPU: the first whose `uarch` is its microarchitecture
        (`suites.hardware.devices.cpu_microarchitecture`), or whose `isa` is one of its vector
        extensions (a user's entry may name one; the shipped ones name microarchitectures, as
        an extension alone does not say how many FMA units run it). PARBENCH_PEAKS's come first."""
        uarch, isa = device.details.get("uarch"), device.details.get("isa", [])
        for entry in self.cpu:
            if (uarch and entry.get("uarch") == uarch) or ("isa" in entry and entry["isa"] in isa):
                return entry
        return None

    def _cpu_lookup(self, device: DeviceInfo, key: str) -> PeakLookup:
        """FLOP per cycle per core (the CPU's entry) x usable cores x the highest clock a core
        reaches (`cpu_clock_ghz`): an upper bound, as a peak must be. Where the entry or the clock
        is unknown there is no table peak, and why: `parbench calibrate` measures one."""
        entry = self.cpu_entry(device)
        calibrate = "; `parbench calibrate` measures this machine's peak, which % of peak then uses"
        if entry is None:
            uarch = device.details.get("uarch")
            what = (f"its microarchitecture {uarch!r} has no entry" if uarch else
                    f"its microarchitecture is not known ({device.details.get('uarch_reason') or 'not detected'})")
            return PeakLookup(None, reason=f"the CPU's FLOP per cycle is unknown: {what}{calibrate}")
        name = str(entry.get("uarch") or entry.get("isa"))
        if key not in entry:
            return PeakLookup(None, name, f"the CPU entry {name!r} gives no {key} figure")
        ghz = cpu_clock_ghz()
        if not ghz:
            return PeakLookup(None, name, (
                "the highest clock this CPU reaches is unknown (no cpufreq cpuinfo_max_freq readable; "
                f"/proc/cpuinfo's MHz is the current or base clock, which a core exceeds){calibrate}"))
        cores = device.details.get("usable_cores") or os.cpu_count() or 1
        return PeakLookup(entry[key] * cores * ghz / 1000.0, name)

    def bandwidth_gbs(self, device: DeviceInfo) -> float | None:
        """Peak memory bandwidth of one GPU or TPU chip from the table, GB/s; None elsewhere (a
        CPU's is measured: `measured_bandwidth`) or where its entry gives none."""
        entry = self.entry_for(device)
        return float(entry["bandwidth_gbs"]) if entry and entry.get("bandwidth_gbs") else None

    def clock_mhz(self, device: DeviceInfo) -> float | None:
        """The SM clock the GPU entry's tensor figures assume (its `clock_mhz`): the clock a peak
        is scaled from (`suites.records.bound_by`); None where the entry gives none."""
        entry = self.entry_for(device)
        return float(entry["clock_mhz"]) if entry and entry.get("clock_mhz") else None

    def entry_for(self, device: DeviceInfo) -> dict[str, Any] | None:
        """The GPU or TPU entry for the device's (first) name; None for a CPU or no match."""
        if not device.names or device.kind not in (DeviceKind.GPU, DeviceKind.TPU):
            return None
        if device.kind is DeviceKind.TPU:
            return best_match(device.names[0], self.tpu, self.user_tpu)
        return self.gpu_entry(device.names[0])

    def gpu_entry(self, name: str) -> dict[str, Any] | None:
        """The GPU entry for a device name, or None (`best_match`; PARBENCH_PEAKS's entries win)."""
        return best_match(name, self.gpu, self.user_gpu)


def best_match(name: str, entries: tuple[dict[str, Any], ...], user_entries: int = 0) -> dict[str, Any] | None:
    """The entry of a table (peaks, prices) whose `match` names the device `name`, or None.

    An entry matches when every token of its `match` is a whole token of the name
    (`name_tokens`, so case and separators do not matter): "L4" matches "NVIDIA L4" but not
    "NVIDIA L40S", "A100" matches "NVIDIA A100-SXM4-80GB" but not "NVIDIA RTX A1000". Among
    the matches, one of the first `user_entries` entries (the user's file) beats a shipped one;
    then the most specific wins (more tokens, then more characters), so "H100 NVL" beats "H100"
    for an H100 NVL; then the first in the table. A MIG slice matches only entries that
    themselves name MIG: the whole GPU's entry does not describe a slice of it.
    """
    tokens = set(name_tokens(name))
    mig = MIG_TOKEN in tokens
    best: tuple[tuple[int, int, int, int], dict[str, Any]] | None = None
    for index, entry in enumerate(entries):
        wanted = name_tokens(str(entry.get("match", "")))
        if not wanted or not tokens.issuperset(wanted) or (mig and MIG_TOKEN not in wanted):
            continue
        rank = (0 if index < user_entries else 1, -len(wanted), -sum(map(len, wanted)), index)
        if best is None or rank < best[0]:
            best = (rank, entry)
    return best[1] if best else None


#: Where Linux's cpufreq tells each core's clock range.
CPU_SYSFS = Path("/sys/devices/system/cpu")


def cpu_clock_ghz(sysfs: Path = CPU_SYSFS, cpus: Iterable[int] | None = None) -> float | None:
    """The highest clock a core of `cpus` (default: this process's usable cores) reaches, GHz:
    the largest cpufreq `cpuinfo_max_freq` (kHz, boost included). None where no core's is
    readable (many VMs have no cpufreq): /proc/cpuinfo's "cpu MHz" is the current clock (often
    the base clock on a VM), which a core may exceed, so a peak from it is no upper bound."""
    if cpus is None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except (OSError, AttributeError):
            cpus = range(os.cpu_count() or 1)
    highest = None
    for cpu in cpus:
        try:
            khz = int((Path(sysfs) / f"cpu{cpu}" / "cpufreq" / "cpuinfo_max_freq").read_text().strip())
        except (OSError, ValueError):
            continue
        if khz > 0 and (highest is None or khz > highest):
            highest = khz
    return highest / 1e6 if highest else None


def calibration_path(results_dir: Path) -> Path:
    return Path(results_dir) / CALIBRATION_FILE


#: Key of a device's calibration entry that holds its measured memory bandwidth (beside its
#: precisions' peaks): {"gbs": GB/s, "how": what measured it}.
BANDWIDTH_KEY = "bandwidth"


class CalibrationWarning(UserWarning):
    """A calibration file that cannot be used: the run goes on with the table's peaks alone."""


#: Each key of a device's calibration entry, and the figure its {figure: number, "how": text} holds:
#: a precision's measured peak (TFLOP/s) or the memory bandwidth (`BANDWIDTH_KEY`, GB/s).
CALIBRATED: dict[str, tuple[str, Range]] = {
    **{key: ("tflops", Range(float, 0, True, unit="TFLOP/s")) for key in PRECISIONS},
    BANDWIDTH_KEY: ("gbs", Range(float, 0, True, unit="GB/s"))}
#: The calibration files already said to be unusable in this process, with why (said once each).
_SAID: set[tuple[str, str]] = set()


def calibration_problem(data: Any) -> str | None:
    """Why `data` is not a calibration table, {machine: {device key: {`CALIBRATED` key: {figure:
    number > 0, "how": text}}}} (where in it, then why), or None where it is one."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, not an object of machines"
    for machine, devices in data.items():
        if not isinstance(devices, dict):
            return f"{machine}: expected an object of devices, got {devices!r}"
        for device, entries in devices.items():
            if not isinstance(entries, dict):
                return f"{machine}.{device}: expected an object of figures, got {entries!r}"
            for key, entry in entries.items():
                if key not in CALIBRATED:
                    return f"{machine}.{device}.{key}: unknown key; allowed: {', '.join(CALIBRATED)}"
                figure, accepted = CALIBRATED[key]
                if not isinstance(entry, dict) or figure not in entry:
                    return f"{machine}.{device}.{key}: expected {{{figure!r}: number, 'how': text}}, got {entry!r}"
                if problem := field_problem(entry, {figure: accepted, "how": str}):
                    return f"{machine}.{device}.{key}.{problem[0]}: {problem[1]}"
    return None


def read_calibration(path: Path) -> dict[str, Any]:
    """The calibration table stored at `path`, {} where there is none; UserError naming the file
    and why where it cannot be read or is not one (`calibration_problem`)."""
    if not path.exists():
        return {}
    if not path.is_file():  # a FIFO would block the read for ever
        raise UserError(f"{path}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise UserError(f"{path}: not JSON ({error})") from None
    if problem := calibration_problem(data):
        raise UserError(f"{path}: not a calibration table: {problem}")
    return data


def load_calibration(results_dir: Path) -> dict[str, Any]:
    """{machine: {device key: {precision: {"tflops": ..., "how": ...}, ...}}}, as `calibrate` stored it.
    A file that cannot be used counts as empty, said once (a CalibrationWarning) with the way out:
    the run goes on against the table's peaks, and the file is left as it is."""
    path = calibration_path(results_dir)
    try:
        return read_calibration(path)
    except UserError as error:
        if (str(path), str(error)) not in _SAID:
            _SAID.add((str(path), str(error)))
            warnings.warn(f"{error}; its measured peaks are not used: fix it, or move it away and run "
                          "`parbench calibrate` again", CalibrationWarning, stacklevel=2)
        return {}


def device_key(device: DeviceInfo) -> str:
    return f"{device.kind}:{device.names[0] if device.names else '?'}"


def measured_peak(results_dir: Path, machine: str, device: DeviceInfo, precision: Precision) -> float | None:
    """This machine's peak in `precision` as `parbench calibrate` measured it, TFLOP/s; None if not."""
    entry = load_calibration(results_dir).get(machine, {}).get(device_key(device), {}).get(str(precision))
    return float(entry["tflops"]) if entry else None


def measured_bandwidth(results_dir: Path, machine: str, device: DeviceInfo) -> float | None:
    """This machine's memory bandwidth as `parbench calibrate` measured it, GB/s; None if not."""
    entry = load_calibration(results_dir).get(machine, {}).get(device_key(device), {}).get(BANDWIDTH_KEY)
    return float(entry["gbs"]) if entry else None


def save_calibration(results_dir: Path, machine: str, device: DeviceInfo, precision: Precision,
                     tflops: float, how: str) -> Path:
    return _save(results_dir, machine, device, str(precision), {"tflops": tflops, "how": how})


def save_bandwidth(results_dir: Path, machine: str, device: DeviceInfo, gbs: float, how: str) -> Path:
    return _save(results_dir, machine, device, BANDWIDTH_KEY, {"gbs": gbs, "how": how})


def _save(results_dir: Path, machine: str, device: DeviceInfo, key: str, value: dict[str, Any]) -> Path:
    """Add one figure to the calibration file; one that cannot be read is never overwritten (the
    other machines' and devices' figures in it would go): UserError with the way out."""
    path = calibration_path(results_dir)
    try:
        data = read_calibration(path)
    except UserError as error:
        raise UserError(f"{error}; not overwritten: fix it, or move it away and run `parbench calibrate` "
                        "again") from None
    data.setdefault(machine, {}).setdefault(device_key(device), {})[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return path
