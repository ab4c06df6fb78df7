"""What `parbench slurm` may write into a batch script's `#SBATCH` lines, as Slurm's grammar has it.

sbatch reads each `#SBATCH` line as a command line of its own: whitespace separates arguments,
quotes group them, a backslash escapes the next character and an unquoted `#` starts a comment
(Slurm's `_get_argument`, src/sbatch/opt.c). A value that is not plain is written in double quotes
(`sbatch_value`). A newline would end the line and put the rest into the shell script, so no value
written into the script may hold a control character; the numbers are whole and within what a
machine has.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from suites.errors import UserError

#: More nodes than the largest machine has (Fugaku: 158,976): a typo, not a request.
MAX_NODES = 200_000
#: More GPUs than any node carries (eight to sixteen today).
MAX_GPUS_PER_NODE = 64
#: Longest --time: a year (Slurm's own limit is its INFINITE).
MAX_TIME_MINUTES = 365 * 24 * 60
#: A partition name, or several separated by commas (Slurm's --partition takes a list).
PARTITIONS = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")
#: What Slurm accepts as --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_TIME = re.compile(r"(?:(?P<days>\d+)-)?(?P<first>\d+)(?::(?P<second>\d+))?(?::(?P<third>\d+))?")
#: A value sbatch takes as it is, unquoted.
PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
#: The options of `parbench slurm` whose values the script holds (in #SBATCH lines or its command).
WRITTEN_OPTIONS = ("suite", "results", "filter", "label", "partition", "time")


def sbatch_value(value: str) -> str:
    """`value` as sbatch reads it back from an #SBATCH line: as it is where plain, else in double
    quotes with backslashes and quotes escaped."""
    if PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def time_minutes(value: str) -> float | None:
    """The minutes of a Slurm --time value, or None where it is not one."""
    match = SLURM_TIME.fullmatch(value)
    if match is None:
        return None
    fields = [int(match[name]) for name in ("first", "second", "third") if match[name] is not None]
    if match["days"] is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        days, (hours, minutes, seconds) = int(match["days"]), fields + [0] * (3 - len(fields))
        if hours > 23:
            return None
    elif len(fields) == 3:  # HH:MM:SS
        days, (hours, minutes, seconds) = 0, fields
    else:  # minutes, or MM:SS
        days, hours, (minutes, seconds) = 0, 0, fields + [0] * (2 - len(fields))
    if seconds > 59 or (minutes > 59 and (days or hours or len(fields) == 3)):
        return None
    return days * 1440 + hours * 60 + minutes + seconds / 60


def _printable(option: str, value: str) -> None:
    bad = next((char for char in value if not char.isprintable()), None)
    if bad is not None:
        raise UserError(f"{option} holds the control character {bad!r}, which would break the batch script; "
                        f"give it on one line without control characters")


def check_directives(args: argparse.Namespace, workdir: Path) -> None:
    """UserError (one line naming the option) unless every value the script would hold is one Slurm
    and the shell read as given."""
    for name in WRITTEN_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            _printable(f"--{name}", str(value))
    _printable(f"the working folder {str(workdir)!r}", str(workdir))
    if "%" in str(workdir):
        raise UserError(f"the working folder {workdir} holds '%', which Slurm reads as a file-name pattern in "
                        f"#SBATCH --output; run `parbench slurm` from a folder without '%'")
    if not 1 <= args.nodes <= MAX_NODES:
        raise UserError(f"--nodes must be 1 or more (at most {MAX_NODES:,}), not {args.nodes}")
    if not 0 <= args.gpus_per_node <= MAX_GPUS_PER_NODE:
        raise UserError(f"--gpus-per-node must be 0 to {MAX_GPUS_PER_NODE}, not {args.gpus_per_node}")
    if args.partition is not None and not PARTITIONS.fullmatch(args.partition):
        raise UserError(f"--partition {args.partition!r} is not a Slurm partition name: letters, digits, '_', '.' "
                        f"and '-', several separated by commas (e.g. gpu or gpu,gpu-long)")
    if args.time is not None:
        minutes = time_minutes(args.time)
        if minutes is None:
            raise UserError(f"--time {args.time!r} is not a Slurm time; give minutes or [D-]HH:MM:SS, e.g. 2:00:00")
        if minutes > MAX_TIME_MINUTES:
            raise UserError(f"--time {args.time!r} is past a year; give the run's limit, e.g. 2-00:00:00 for two "
                            f"days")
