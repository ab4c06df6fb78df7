"""`parbench worker`: one process of one case, as torchrun or a TF_CONFIG task starts it
(`suites.runner.case_process`). Its `--out` file is checked before the case runs (`OutputFile`):
a folder that is missing or cannot be written is one line, not a traceback after the measurement."""
from __future__ import annotations

import argparse
import sys

from suites.errors import UserError
from suites.records.output_files import OutputFile
from suites.runner import case_process
from suites.runner.case_process import SUMMARY, add_arguments

#: The worker checks the case knobs itself, in the process that runs the case.
KNOBS: tuple[str, ...] = ()
#: How an outcome file the worker wrote starts (`case_process.write_outcome`: the JSON of
#: `Outcome.to_dict`): a file that does is the worker's own to write again.
OUTCOME_SIGNATURE = b'{"status": '


def run(args: argparse.Namespace) -> None:
    """Check `--out`, then run the case (`case_process.run`; never returns)."""
    if args.out is not None:
        try:
            OutputFile(args.out, "--out", OUTCOME_SIGNATURE).check()
        except UserError as error:
            sys.exit(f"parbench worker: {error}")
    case_process.run(args)


__all__ = ["KNOBS", "SUMMARY", "add_arguments", "run"]
