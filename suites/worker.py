"""Entry point of an out-of-process case (isolated worker or one rank): runs it, writes its outcome."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .case import Case
from .execute import Outcome, execute_in_process, failed
from .timing import TimingConfig
from .workloads.user_model import load_plugins


def outcome_path(out: Path) -> Path:
    """Where this process writes its outcome. parbench's own launcher gives every rank its own
    --out; torchrun starts every rank with the same command line (and sets TORCHELASTIC_RUN_ID),
    so there rank 0 writes OUT and rank r > 0 writes OUT.rank<r>."""
    rank = int(os.environ.get("RANK", "0"))
    if "TORCHELASTIC_RUN_ID" in os.environ and rank > 0:
        return out.with_name(f"{out.name}.rank{rank}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m suites.worker")
    parser.add_argument("--case", required=True, help="the case as JSON, or its id "
                        "(e.g. train_step/torch/cpu:2/ddp/fp32/batch=32,model=mlp)")
    parser.add_argument("--timing", default="{}", help="TimingConfig fields as JSON (default: defaults)")
    parser.add_argument("--out", required=True, type=Path,
                        help="where to write the outcome JSON (under torchrun, rank r > 0 "
                             "writes OUT.rank<r>)")
    args = parser.parse_args()
    load_plugins()  # user models registered by the parent process
    case = (Case.from_dict(json.loads(args.case)) if args.case.lstrip().startswith("{")
            else Case.from_id(args.case))
    timing = TimingConfig.from_mapping(json.loads(args.timing))
    try:
        outcome: Outcome = execute_in_process(case, timing)
    except Exception as error:  # anything outside the runnable's own stages
        outcome = failed(error, "worker")
    out = outcome_path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(outcome.to_dict()))
    tmp.replace(out)  # the launcher never sees half a file


if __name__ == "__main__":
    main()
