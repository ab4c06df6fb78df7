"""Does parbench's DDP measurement add overhead? Compare it with a plain torchrun script.

    python -m suites.selfchecks.ddp_overhead [--rounds 6] [--budget 8]

Runs the training suite's DDP case (train_step, mlp, 2 gloo ranks on the CPU, fp32, batch 32
per rank) through parbench's rank launcher and timer, and `suites.selfchecks.plain_ddp` — the same
model shape and batch in a hand-written loop — through torchrun, with the same threads per
rank. Two ranks sharing two cores over loopback vary by ±5% from one run to the next, so one
pair of runs can't resolve 3%: the two run in `--rounds` paired rounds, each giving both the
same time (`--budget` seconds of timing), in ABBA order (whichever runs first in a round
measured ~3% slower here, so the order alternates and an even number of rounds balances it).
The figure is the geometric mean of the rounds' ratios. Target: parbench within 3% of the
plain loop.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.grids.grid import load_suite
from suites.runner.launchers import free_ports, threads_per_process
from suites.runner.deadline import case_timeout
from suites.runner.launchers import rank_cpus, run_ranks
from suites.strategies.jobs import job_for

CASE = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 32})
TARGET = 0.03
PLAIN_TIMEOUT_S = 180.0
#: Steps per timed repeat of the plain loop.
PLAIN_STEPS = 50


def parbench_step_s(timing: TimingConfig) -> float:
    outcome = run_ranks(job_for(CASE), timing)
    if outcome.status is not Status.OK or outcome.measurement is None:
        raise SystemExit(f"parbench's DDP case did not run: {outcome.status}: {outcome.reason}")
    return outcome.measurement.median


def plain_step_s(threads: int, repeats: int, pin: bool) -> float:
    """Run the plain script under torchrun (rendezvous on 127.0.0.1, port picked now)."""
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        raise SystemExit("torchrun is not on PATH (it comes with torch)")
    with tempfile.TemporaryDirectory(prefix="parbench-plain-") as tmp:
        out = Path(tmp) / "plain.json"
        command = [torchrun, "--nproc-per-node", str(CASE.n_devices), "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{free_ports(1)[0]}", "--max-restarts", "0",
                   "-m", "suites.selfchecks.plain_ddp", "--batch", str(CASE.param_dict["batch"]),
                   "--threads", str(threads), "--steps", str(PLAIN_STEPS),
                   "--repeats", str(repeats), "--out", str(out), *(["--pin"] if pin else [])]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            log = process.communicate(timeout=PLAIN_TIMEOUT_S)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            log = f"timed out after {PLAIN_TIMEOUT_S:.0f} s"
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                    process.wait(timeout=5)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        if not out.exists():
            raise SystemExit(f"the plain DDP script failed:\n{log[-3000:]}")
        return float(json.loads(out.read_text())["step_s"])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.selfchecks.ddp_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6,
                        help="paired rounds of both, in ABBA order; even balances the order (default 6)")
    parser.add_argument("--budget", type=float, default=8.0,
                        help="seconds of timing per run, for both (default 8)")
    args = parser.parse_args()
    if args.rounds < 1 or args.budget <= 0:
        parser.error("--rounds must be at least 1 and --budget positive")
    threads = threads_per_process(CASE, CASE.n_devices)
    pin = rank_cpus(job_for(CASE), CASE.n_devices) is not None  # pinned alike when parbench pins
    timing = replace(load_suite("training").timing, budget_s=args.budget)
    print(f"case {CASE.id}: {CASE.n_devices} gloo ranks x {threads} thread(s)"
          f"{', pinned to disjoint cores' if pin else ''}; {args.budget:g} s of timing per run; "
          f"parbench timeout per run {case_timeout(timing):.0f} s")
    ours, plain = [], []

    def repeats() -> int:
        """As many plain repeats as fill the budget at parbench's latest step time."""
        return max(9, math.ceil(args.budget / (PLAIN_STEPS * (ours[-1] if ours else 0.01))))

    for round_index in range(args.rounds):
        # ABBA order: whichever runs second in a round never gets a systematic edge
        if round_index % 2 == 0:
            ours.append(parbench_step_s(timing))
            plain.append(plain_step_s(threads, repeats(), pin))
        else:
            plain.append(plain_step_s(threads, repeats(), pin))
            ours.append(parbench_step_s(timing))
        print(f"round {round_index + 1}: parbench {ours[-1] * 1e3:.3f} ms/step, "
              f"plain torchrun {plain[-1] * 1e3:.3f} ms/step "
              f"(ratio {ours[-1] / plain[-1]:.3f})", flush=True)
    ratio = statistics.geometric_mean([a / b for a, b in zip(ours, plain)])
    print(f"over {args.rounds} rounds: median parbench {statistics.median(ours) * 1e3:.3f} ms/step, "
          f"plain {statistics.median(plain) * 1e3:.3f} ms/step; geometric mean of the round "
          f"ratios {ratio:.3f} ({'within' if abs(ratio - 1) <= TARGET else 'OUTSIDE'} the "
          f"{TARGET:.0%} target)")
    return 0 if abs(ratio - 1) <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
