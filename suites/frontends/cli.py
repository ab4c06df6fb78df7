"""The `parbench` command line. Each subcommand lives in suites/frontends/commands/<name>.py."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from suites import knobs
from suites.errors import UserError
from suites.run.scratch import run_temp_dir
from suites.workloads.user_model import load_plugins

#: Subcommand modules; each has `SUMMARY`, `KNOBS` (the PARBENCH_* variables it reads, checked
#: before it starts), `add_arguments(parser)` and `run(args) -> int`.
COMMANDS = ("devices", "list", "run", "calibrate", "report", "compare", "parity", "ready")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parbench", description=(
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


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _warning_line  # one line per warning, no source location
    args = build_parser().parse_args(argv)
    try:
        knobs.check(args.knobs)
        load_plugins()  # PARBENCH_PLUGINS: files/modules that register user models
        with run_temp_dir():  # what the frameworks leave in the temp folder goes with it
            return int(args.handler(args) or 0)
    except UserError as error:
        print(f"parbench: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("parbench: interrupted; every finished record is already stored", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `parbench list | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
