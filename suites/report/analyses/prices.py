"""The price table (suites/prices.toml, user-editable) and the cost columns it yields.

cost per million samples = price per hour / 3600 / sustained samples_per_s * 1e6
cost per PFLOP           = price per hour / 3600 * 1000 / sustained TFLOP/s
(sustained: at steps timed / seconds timed, what a long run pays for; see report.derived)
Price per hour of a row: its machine label's entry in [machines] if any (the whole machine),
else n_devices x the [[device]] row that names the device (GPU/TPU: whole words, as the peaks
table matches: `suites.hardware.peaks.best_match`), else for CPU cases [cpu] per_core_hour x the
cores the run could use. A row without `per_hour` gives no price, and its `no_price_reason` says
why; so does a device no row names.

A price is *sourced* unless its row's `source` calls it illustrative (the shipped [cpu]
per_core_hour is "illustrative: about a general-purpose cloud vCPU's price"): a price the user
gives for a machine or device with no source of its own is what they pay, so it is sourced. Costs
are computed from either, but only sourced prices crown a configuration "cheapest" (report-guide
C9); an illustrative one says so in its rule.

Every price given must be a finite number > 0 (a negative or NaN one would rank a machine
"cheapest" at a negative cost), a table's `version` one this parbench reads (`VERSIONS`), and
every top-level entry one it knows (`ENTRIES`: a misspelt `[machine]` would price nothing,
silently): a bad entry in the user's file (or the shipped one) is a UserError naming the file, the
entry and its value, never a guess and never a traceback.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suites import knobs
from suites.cases.user_files import shipped_table, user_table
from suites.errors import UserError
from suites.hardware.peaks import best_match

PRICES_ENV = "PARBENCH_PRICES"
#: The price table versions parbench has shipped (suites/prices.toml): their entries are read alike
#: (a later version added a date and sources, and matches device names by whole words).
VERSIONS = (1, 2, 3)
#: The top-level entries of a price table.
ENTRIES = ("version", "currency", "date", "machines", "device", "cpu")
#: How `price_rule` begins where a row has no price; the reason follows.
NO_PRICE = "no price"
COST_COLUMNS = ["price_per_hour", "price_rule", "price_sourced", "cost_per_m_samples", "cost_per_pflop"]
#: How a price row's `source` begins when the price is an estimate, not a price anyone lists.
ILLUSTRATIVE = "illustrative"
#: How a price rule ends where its price is illustrative (the page shows the rule).
ILLUSTRATIVE_MARK = " (illustrative)"


def illustrative(source: Any) -> bool:
    return isinstance(source, str) and source.strip().lower().startswith(ILLUSTRATIVE)


@dataclass(frozen=True)
class PriceTable:
    currency: str
    machines: dict[str, float]
    devices: tuple[dict[str, Any], ...]
    cpu_per_core_hour: float | None
    sources: tuple[str, ...]
    user_devices: int = 0  # how many of `devices`' leading rows came from the user's file (they win)
    cpu_source: str = ""  # where [cpu] per_core_hour comes from ('illustrative: ...' for the shipped one)

    @classmethod
    def load(cls, user_file: str | Path | None = None) -> "PriceTable":
        """The shipped table, overridden by `user_file` or else by $PARBENCH_PRICES."""
        data = shipped_table("prices.toml")
        check_prices(data, "suites/prices.toml", "fix the shipped table")
        sources = [f"suites/prices.toml (read {data['date']})" if data.get("date") else "suites/prices.toml"]
        user_devices = 0
        cpu_source = str(data.get("cpu", {}).get("source", ""))
        user_file = user_file or knobs.read(PRICES_ENV)
        if user_file:
            way_out = f"fix the file, or drop --prices / unset {PRICES_ENV}"
            user = user_table(user_file, "price table", way_out)
            check_prices(user, str(user_file), way_out)
            data = {**data, **{k: v for k, v in user.items() if k not in ("machines", "device", "cpu")},
                    "machines": {**data.get("machines", {}), **user.get("machines", {})},
                    "device": [*user.get("device", []), *data.get("device", [])],
                    "cpu": {**data.get("cpu", {}), **user.get("cpu", {})}}
            sources.insert(0, str(user_file))
            user_devices = len(user.get("device", []))
            if "per_core_hour" in user.get("cpu", {}):  # the user's own price: its source, or theirs
                cpu_source = str(user["cpu"].get("source", ""))
        return cls(currency=str(data.get("currency", "USD")),
                   machines={str(k): float(v) for k, v in data.get("machines", {}).items()},
                   devices=tuple(data.get("device", [])),
                   cpu_per_core_hour=data.get("cpu", {}).get("per_core_hour"), sources=tuple(sources),
                   user_devices=user_devices, cpu_source=cpu_source)

    def per_hour(self, machine: str, device: str, device_name: str, n_devices: int,
                 cpu_cores: float) -> tuple[float, str]:
        """(price per hour, which rule gave it); NaN and "no price: <why>" when none applies."""
        if machine in self.machines:
            return self.machines[machine], f"machine {machine}"
        if device == "cpu":
            if self.cpu_per_core_hour is not None and cpu_cores == cpu_cores and cpu_cores:
                return (self.cpu_per_core_hour * cpu_cores, f"{cpu_cores:g} cores x {self.cpu_per_core_hour:g}/h"
                        + (ILLUSTRATIVE_MARK if illustrative(self.cpu_source) else ""))
            return np.nan, f"{NO_PRICE}: no [cpu] per_core_hour, or the machine's cores are unknown"
        entry = best_match(device_name, self.devices, self.user_devices)
        if entry is not None and entry.get("per_hour") is not None:
            return (entry["per_hour"] * n_devices, f"{n_devices} x {entry['match']} {entry['per_hour']:g}/h"
                    + (ILLUSTRATIVE_MARK if illustrative(entry.get("source")) else ""))
        if entry is not None:
            return np.nan, f"{NO_PRICE}: {entry.get('no_price_reason') or 'its row gives no per_hour'}"
        return np.nan, f"{NO_PRICE}: no row of the price table names the device {device_name!r}"


def check_prices(data: dict[str, Any], source: str, way_out: str) -> None:
    """Refuse a price table whose sections are misshapen or whose prices are not finite numbers > 0.

    UserError: "price table FILE: ENTRY: VALUE is not ...; WAY_OUT", the first bad entry."""
    def bad(entry: str, problem: str) -> UserError:
        return UserError(f"price table {source}: {entry}: {problem}; {way_out}")

    def price(entry: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise bad(entry, f"{value!r} is not a price: expected a finite number > 0 (per hour)")

    unknown = sorted(set(data) - set(ENTRIES))
    if unknown:
        raise bad(unknown[0], f"not an entry of a price table (it has {', '.join(ENTRIES)})")
    version = data.get("version", VERSIONS[-1])
    if isinstance(version, bool) or version not in VERSIONS:
        raise bad("version", f"{version!r} is not a price table version this parbench reads "
                             f"({', '.join(map(str, VERSIONS))})")
    for section in ("machines", "cpu"):
        if not isinstance(data.get(section, {}), dict):
            raise bad(section, f"expected a table ([{section}]), got {data[section]!r}")
    for machine, value in data.get("machines", {}).items():
        price(f"machines.{machine}", value)
    if "per_core_hour" in data.get("cpu", {}):
        price("cpu.per_core_hour", data["cpu"]["per_core_hour"])
    rows = data.get("device", [])
    if not isinstance(rows, list):
        raise bad("device", f"expected an array of tables ([[device]]), got {rows!r}")
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("match"), str):
            raise bad(f"device[{index}]", f"expected a [[device]] table with a match string, got {row!r}")
        if "per_hour" in row:
            price(f"device[{index}] (match {row['match']!r}).per_hour", row["per_hour"])


def add_costs(frame: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    keys = ["machine", "device", "device_name", "n_devices", "cpu_cores"]
    combos = frame[keys].drop_duplicates()
    priced = pd.DataFrame(
        [table.per_hour(m, d, name, int(n) if n == n else 1, float(c) if pd.notna(c) else np.nan)
         for m, d, name, n, c in combos.itertuples(index=False)],
        columns=["price_per_hour", "price_rule"], index=combos.index)
    priced["price_sourced"] = priced["price_per_hour"].notna() & ~priced["price_rule"].str.endswith(ILLUSTRATIVE_MARK)
    frame = frame.drop(columns=[c for c in COST_COLUMNS if c in frame]).merge(
        pd.concat([combos, priced], axis=1), on=keys, how="left")
    per_second = frame["price_per_hour"] / 3600.0
    # What a long run pays for: the sustained rate (median-based where no timed span is known).
    sustained = (frame["sustained_throughput"] / frame["throughput"]).fillna(1.0)
    frame["cost_per_m_samples"] = per_second / (frame["samples_per_s"] * sustained) * 1e6
    frame["cost_per_pflop"] = per_second * 1000.0 / (frame["tflops"] * sustained)
    return frame
