"""The `parbench` command line. Each subcommand lives in suites/frontends/commands/<name>.py.

This module imports little at its top (no numpy, pandas or rich): a Ctrl-C in the first second
lands inside `main`, which says it in one line, instead of in an import before `main` began."""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import warnings
from typing import NoReturn

from suites import knobs, startup
from suites.errors import UserError
from suites.measure.scratch import run_temp_dir
from suites.runner.termination import Terminated, signals_raise

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


#: The standard streams, as (file descriptor, name in `sys`, mode).
STANDARD_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def reopen_closed_streams() -> list[str]:
    """Each standard stream closed when parbench started (`parbench run >&-`) opened onto the null
    device: its output is discarded, Python's `sys.stdout` is a file again (None crashed the
    run after it stored its records), and a file parbench opens later cannot take its number (a
    framework printing to fd 1 would write into it). The names of those that were closed."""
    closed = []
    for fd, name, mode in STANDARD_STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)  # the lowest free number
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, mode, closefd=False))
            closed.append(name)
    return closed


def main(argv: list[str] | None = None) -> int:
    closed = reopen_closed_streams()
    if "stdout" in closed:
        print("parbench: warning: standard output is closed: what parbench prints there is discarded",
              file=sys.stderr)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # while the command was being read: importing or parsing
        print("parbench: interrupted before the command began; nothing was run", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    from suites.workloads.user_model import load_plugins

    warnings.showwarning = _warning_line  # one line per warning, no source location
    try:
        args = build_parser().parse_args(argv)
    except UserError as error:  # argparse's (`OneLineParser`)
        print(f"parbench: error: {error}", file=sys.stderr)
        return 2
    if args.command == "worker":  # a case's own process: its signals, exit codes and knobs are the worker's
        startup.release()
        args.handler(args)
    try:
        knobs.check(args.knobs)
        load_plugins()  # PARBENCH_PLUGINS: files/modules that register user models
        startup.release()  # start-up's one line for a signal ends here; from here the command's own
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
