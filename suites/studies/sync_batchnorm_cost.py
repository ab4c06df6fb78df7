"""What does synchronised batch norm cost? ResNet's step with batchnorm "local" vs "sync".

    python -m suites.studies.sync_batchnorm_cost [--framework torch|tf] [--rounds 4]
        [--params "batch=4,image=64,width=16,resnet_depth=14"] [--results DIR]

Runs the data-parallel resnet50 case of the framework (torch ddp, TF mirrored) on 2 devices
(emulated on a CPU; `--device gpu` on GPUs) with each batch norm mode, in `--rounds` paired
rounds in ABBA order (a VM drifts by ~10% between runs, so only figures from one run,
interleaved, are compared), each a full parbench case with its numerics check, stored under
`--results`. Prints each round's median steps and the geometric mean of the rounds' sync/local
ratios: the step-time cost of synchronising the statistics.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.grids.grid import load_suite
from suites.records.store import ResultsStore
from suites.runner.runner import RunContext, Runner

STRATEGIES = {"torch": "ddp", "tf": "mirrored"}
DEFAULT_PARAMS = "batch=4,image=64,width=16,resnet_depth=14"


def parse_params(text: str) -> dict[str, int | str]:
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {key: int(value) if value.isdigit() else value for key, value in pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.studies.sync_batchnorm_cost",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=sorted(STRATEGIES), default="torch")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=4, help="paired rounds, ABBA order (default 4)")
    parser.add_argument("--params", default=DEFAULT_PARAMS,
                        help=f"train_step parameters besides model and batchnorm (default {DEFAULT_PARAMS})")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    store = ResultsStore(args.results)
    context = RunContext(suite="sync-batchnorm-cost", store=store, timing=load_suite("standard").timing)
    store.ensure_writable(context.environment["machine"])
    params = {"model": "resnet50", **parse_params(args.params)}
    cases = {mode: Case.make("train_step", args.framework, args.device, STRATEGIES[args.framework],
                             args.precision, 2, {**params, "batchnorm": mode}) for mode in ("local", "sync")}
    medians: dict[str, list[float]] = {"local": [], "sync": []}
    for round_index in range(args.rounds):
        order = ("local", "sync") if round_index % 2 == 0 else ("sync", "local")
        for mode in order:
            record = Runner.storing(context).run(cases[mode])
            if record.status is not Status.OK or record.measurement is None:
                print(f"{cases[mode].id}: {record.status}: {record.reason}", file=sys.stderr)
                return 1
            medians[mode].append(record.measurement.median)
            print(f"round {round_index + 1} {mode}: median step {record.measurement.median * 1e3:.1f} ms "
                  f"(n={record.measurement.n}), check {record.check}", flush=True)
    ratio = statistics.geometric_mean([sync / local for sync, local in zip(medians["sync"], medians["local"])])
    print(f"{args.framework} {STRATEGIES[args.framework]} x2 {args.device} {args.precision} {args.params}: "
          f"median over rounds local {statistics.median(medians['local']) * 1e3:.1f} ms, sync "
          f"{statistics.median(medians['sync']) * 1e3:.1f} ms; geometric mean of the rounds' sync/local "
          f"ratios {ratio:.3f} (sync costs {ratio - 1:+.1%} per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
