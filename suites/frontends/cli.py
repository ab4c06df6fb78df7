"""The `parbench` command line. Each subcommand lives in suites/frontends/commands/<name>.py."""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import warnings
from typing import NoReturn

from suites import knobs
from suites.errors import UserError
from suites.measure.scratch import run_temp_dir
from suites.runner.termination import Terminated, signals_raise
from suites.workloads.user_model import load_plugins

#: Subcommand modules; each has `SUMMARY`, `KNOBS` (the PARBENCH_* variables it reads, checked
#: before it starts), `add_arguments(parser)` and `run(args) -> int`.
COMMANDS = ("devices", "list", "run", "calibrate", "report", "compare", "memory", "parity", "predict", "ready", "slurm",
            "worker")


class OneLineParser(argparse.ArgumentParser):
    """argparse's complaints (a bad option value, a missing argument) as parbench's other errors:
    one line and exit code 2 (`main`), not the usage and a line; the usage is a --help away."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="parbench", description=(
        "Time matmul/conv kernels, collectives and training steps in TensorFlow and PyTorch "
        "across devices, strategies and precisions; store every measurement with provenance."))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"suites.frontends.commands.{name.replace('-', '_')}")
        # argparse %-formats `help` (not `description`): a literal % must be doubled there.
        command = sub.add_parser(name, help=module.SUMMARY.replace("%", "%%"), description=module.SUMMARY)
        module.add_arguments(command)
        command.set_defaults(handler=module.run, knobs=module.KNOBS)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    print(f"warning: {message}", file=sys.stderr)


def _kept(args: argparse.Namespace) -> str:
    """What an interrupted command leaves behind: its finished records, or nothing (a rehearsal stores none)."""
    if getattr(args, "rehearse", False):
        return "a rehearsal stores nothing"
    return "every finished record is already stored"


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _warning_line  # one line per warning, no source location
    try:
        args = build_parser().parse_args(argv)
    except UserError as error:  # argparse's (`OneLineParser`)
        print(f"parbench: error: {error}", file=sys.stderr)
        return 2
    if args.command == "worker":  # a case's own process: its signals, exit codes and knobs are the worker's
        args.handler(args)
    try:
        knobs.check(args.knobs)
        load_plugins()  # PARBENCH_PLUGINS: files/modules that register user models
        # SIGTERM/SIGHUP unwind as Ctrl-C does: launched processes stopped, temp folders removed
        with signals_raise(), run_temp_dir():  # what the frameworks leave in the temp folder goes with it
            code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a full disk shows here, not as an error Python ignores at exit
        return code
    except UserError as error:
        print(f"parbench: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"parbench: interrupted; {_kept(args)}", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"parbench: stopped by {stop}: the case in progress and its processes were stopped; "
              f"{_kept(args)}", file=sys.stderr)
        return stop.exit_code
    except BrokenPipeError:  # `parbench list | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141
    except OSError as error:  # `parbench list > /dev/full`: the output could not be written
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        where = f" {error.filename}" if error.filename else " the output"
        print(f"parbench: error: cannot write{where}: {error.strerror}", file=sys.stderr)
        try:
            sys.stdout.flush()
        except OSError:  # stdout it was: what is left unwritten goes, with no second error at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2


if __name__ == "__main__":
    sys.exit(main())
