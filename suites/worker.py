"""Entry point of an out-of-process case (isolated worker or one rank): runs it, writes its outcome."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .case import Case
from .execute import Outcome, execute_in_process, failed
from .timing import TimingConfig


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m suites.worker")
    parser.add_argument("--case", required=True, help="the case as JSON")
    parser.add_argument("--timing", required=True, help="TimingConfig as JSON")
    parser.add_argument("--out", required=True, type=Path, help="where to write the outcome JSON")
    args = parser.parse_args()
    case = Case.from_dict(json.loads(args.case))
    timing = TimingConfig.from_mapping(json.loads(args.timing))
    try:
        outcome: Outcome = execute_in_process(case, timing)
    except Exception as error:  # anything outside the runnable's own stages
        outcome = failed(error, "worker")
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(outcome.to_dict()))
    tmp.replace(args.out)  # the launcher never sees half a file


if __name__ == "__main__":
    main()
