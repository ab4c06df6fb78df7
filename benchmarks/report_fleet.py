"""The report's own speed at fleet scale: `parbench report` over a synthetic fleet of N machines.

The fleet is generated from the real H100 sample records (tests/data/h100-sample/records.jsonl.gz,
106 records of one machine): each machine gets a copy of every record with its own label in
`environment.machine` (file `records-<label>.jsonl`), its step-time samples jittered by a seeded
RNG (one factor per machine, a little per sample; rate metrics scaled to match), and a few rows
made emulated, contended or failed. Same seed, same fleet, byte for byte.

    python benchmarks/report_fleet.py --machines 10 [--machines 100 ...] [--keep DIR]

builds the report in a child process (`python -m suites report FLEET -o OUT`, as a person runs it)
and prints build seconds (wall, interpreter start included), peak memory of the child (ru_maxrss)
and the bytes it wrote. asv tracks the same three figures for 10 machines (`ReportFleet10`); a
1,000-machine fleet is left to the command line, to keep asv runs short.

Importing this module does nothing but define functions and a class (asv imports it to list
benchmarks).
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "h100-sample" / "records.jsonl.gz"
SEED = 20261124

#: Metrics that are rates (scale as 1 / step time) and times (scale as step time).
RATE_METRICS = ("tflops", "pct_peak_table", "pct_peak_measured", "samples_per_s", "samples_per_s_sustained",
                "samples_per_joule", "samples_per_kwh", "gflop_per_joule", "tokens_per_s", "mfu_pct", "busbw_gbs",
                "algbw_gbs")
TIME_FIELDS = ("first_step_s", "timed_s", "sustained_step_s")


def sample_records(path: Path = SAMPLE) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def machine_label(index: int) -> str:
    return f"h100-{index:04d}"


def _contention(why: str) -> dict[str, Any]:
    return {"load_before": 3.2, "load_after": 3.4, "steal_fraction": 0.0, "cores": 16, "contended": True,
            "why": why, "others_core_share": 0.31, "own_core_share": 0.62, "starved": False,
            "method": "synthetic", "attempts": 1, "attempt_shares": [0.31]}


def machine_records(records: list[dict[str, Any]], index: int, seed: int = SEED) -> list[dict[str, Any]]:
    """Machine `index`'s copy of `records`: relabelled, jittered, and about one row in 25 of its ok
    rows changed each way (contended, emulated, failed), chosen by the seeded RNG."""
    rng = random.Random(seed * 100_003 + index)
    label = machine_label(index)
    factor = math.exp(rng.gauss(0.0, 0.05))  # this machine is a few per cent faster or slower
    ok = [i for i, record in enumerate(records) if record.get("status") == "ok" and record.get("measurement")]
    changed = rng.sample(ok, min(len(ok), 4))
    how = dict(zip(changed, ("contended", "contended", "emulated", "failed")))
    out = []
    for i, source in enumerate(records):
        record = json.loads(json.dumps(source))  # deep copy
        record["run_id"] = f"{record['run_id']}-m{index:04d}"
        environment = record.setdefault("environment", {})
        environment["machine"] = label
        environment["hostname"] = label
        measurement = record.get("measurement")
        if measurement:
            measurement["samples_s"] = [s * factor * math.exp(rng.gauss(0.0, 0.01))
                                        for s in measurement.get("samples_s") or ()]
            for name in TIME_FIELDS:
                if isinstance(measurement.get(name), (int, float)):
                    measurement[name] *= factor
        metrics = record.get("metrics") or {}
        for name in RATE_METRICS:
            if isinstance(metrics.get(name), (int, float)):
                metrics[name] /= factor
        change = how.get(i)
        if change == "contended":
            record["contention"] = _contention("others took 31% of the case's cores (synthetic fleet)")
        elif change == "emulated":
            record["emulated"] = True
        elif change == "failed":
            record["status"] = "failed"
            record["reason"] = "synthetic fleet: injected failure (device lost during timing)"
            record["check"] = None
        out.append(record)
    return out


def write_fleet(directory: Path, machines: int, seed: int = SEED, sample: Path = SAMPLE) -> list[Path]:
    """`directory`/records-<label>.jsonl for each of `machines` machines."""
    records = sample_records(sample)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(machines):
        path = directory / f"records-{machine_label(index)}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for record in machine_records(records, index, seed):
                handle.write(json.dumps(record, sort_keys=True) + "\n")
        paths.append(path)
    return paths


def bytes_written(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def build(fleet: Path, output: Path, timeout: float | None = None) -> dict[str, float]:
    """`python -m suites report fleet -o output` in a child process: its wall seconds, its peak
    resident memory (MB) and the MB it wrote. Raises CalledProcessError if the build fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "suites", "report", str(fleet), "-o", str(output)], check=True,
                   cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    # ru_maxrss of children is the largest of any child so far (KiB on Linux): a larger one is this build's
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": seconds, "peak_mb": (peak if peak > before else float("nan")) / 1024,
            "written_mb": bytes_written(output) / 1e6}


def measure(machines: int, keep: Path | None = None, seed: int = SEED) -> dict[str, float]:
    """Generate the fleet, build its report, measure; everything in a temp folder unless `keep`."""
    work = Path(tempfile.mkdtemp(prefix=f"parbench-fleet-{machines}-")) if keep is None else keep
    try:
        fleet, output = work / "fleet", work / "report"
        write_fleet(fleet, machines, seed)
        figures = build(fleet, output)
        return {"machines": machines, "records": 106 * machines, **figures}
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


class ReportFleet10:
    """asv: one report build over a 10-machine fleet (setup_cache runs it once; each track_ reads it)."""
    machines = 10
    timeout = 300

    def setup_cache(self) -> dict[str, float]:
        return measure(self.machines)

    def track_build_seconds(self, figures: dict[str, float]) -> float:
        return figures["seconds"]

    track_build_seconds.unit = "seconds"

    def track_peak_memory_mb(self, figures: dict[str, float]) -> float:
        return figures["peak_mb"]

    track_peak_memory_mb.unit = "MB"

    def track_written_mb(self, figures: dict[str, float]) -> float:
        return figures["written_mb"]

    track_written_mb.unit = "MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, action="append",
                        help="fleet size; repeat for several (default 10)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--keep", type=Path, help="build in this folder and keep the fleet and the report")
    args = parser.parse_args(argv)
    for machines in args.machines or [10]:
        keep = args.keep / str(machines) if args.keep else None
        figures = measure(machines, keep, args.seed)
        print(f"{machines} machines ({figures['records']} records): {figures['seconds']:.1f} s, "
              f"peak {figures['peak_mb']:.0f} MB, wrote {figures['written_mb']:.2f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
