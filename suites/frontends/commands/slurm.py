"""`parbench slurm`: the batch script that runs a suite across a Slurm allocation, and, with
`--submit`, its submission (`sbatch`).

The script asks for the nodes (whole: `--exclusive`, as a benchmark needs), the GPUs of each and
one task a node, and runs `parbench run` once, on the first node; inside the allocation that run
starts every case whose ranks span nodes as one srun step (`suites.runner.slurm`). A user already
inside an allocation (`salloc -N 2`) runs `parbench run` directly.
"""
from __future__ import annotations

import argparse
import re
import shlex
import os
import shutil
import subprocess
import sys
from pathlib import Path

from suites.errors import UserError
from suites.grids.grid import DEFAULT_SUITE, load_suite
from suites.measure.scratch import TMPDIR_ENV, shared_temp_dir
from suites.records.store import DEFAULT_RESULTS_DIR

SUMMARY = "write (and with --submit, submit) the Slurm batch script that runs a suite across N nodes"
KNOBS: tuple[str, ...] = ()

#: What Slurm accepts as --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help=f"built-in suite name or path of a .toml grid (default {DEFAULT_SUITE})")
    parser.add_argument("--nodes", type=int, required=True, help="nodes to allocate")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs each node brings (default 0: a CPU run)")
    parser.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    parser.add_argument("--time", help="time limit, as Slurm takes it (e.g. 2:00:00)")
    parser.add_argument("--filter", help="choose cases, as `parbench run --filter`")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR,
                        help="results directory, on a file system every node shares (default results/)")
    parser.add_argument("--label", help="machine label stored with every record (default: the first node's)")
    parser.add_argument("--script", type=Path, help="where to write the script (default: print it)")
    parser.add_argument("--submit", action="store_true", help="submit it with sbatch (needs --script)")


def batch_script(args: argparse.Namespace, workdir: Path, python: str = sys.executable) -> str:
    """The sbatch script for `args`: Slurm's directives, then one `parbench run`."""
    directives = [f"--job-name=parbench-{Path(args.suite).stem}", f"--nodes={args.nodes}",
                  "--ntasks-per-node=1", "--exclusive", f"--output={workdir}/parbench-%j.out"]
    if args.gpus_per_node:
        directives.append(f"--gpus-per-node={args.gpus_per_node}")
    if args.partition:
        directives.append(f"--partition={args.partition}")
    if args.time:
        directives.append(f"--time={args.time}")
    command = [python, "-m", "suites", "run", "--suite", str(args.suite), "--results", str(args.results), "--yes"]
    if args.filter:
        command += ["--filter", args.filter]
    if args.label:
        command += ["--label", args.label]
    return "\n".join(["#!/bin/bash", *(f"#SBATCH {directive}" for directive in directives), "set -euo pipefail",
                      f"cd {shlex.quote(str(workdir))}", shlex.join(command), ""])


def _check(args: argparse.Namespace) -> None:
    if args.nodes < 1:
        raise UserError(f"--nodes must be 1 or more, not {args.nodes}")
    if args.gpus_per_node < 0:
        raise UserError(f"--gpus-per-node must be 0 or more, not {args.gpus_per_node}")
    if args.time and not SLURM_TIME.match(args.time):
        raise UserError(f"--time {args.time!r} is not a Slurm time; give minutes or [D-]HH:MM:SS, e.g. 2:00:00")
    if args.submit and args.script is None:
        raise UserError("--submit needs --script FILE: the script sbatch runs is kept there")
    if args.submit and shutil.which("sbatch") is None:
        raise UserError("--submit needs sbatch, which is not on PATH here; submit the script from a Slurm login node")


def run(args: argparse.Namespace) -> int:
    _check(args)
    load_suite(str(args.suite))  # a suite that does not load fails here, not on the cluster
    script = batch_script(args, Path.cwd())
    if args.script is None:
        print(script, end="")
        return 0
    args.script.write_text(script)
    print(f"batch script: {args.script}")
    if args.submit:
        # sbatch hands the job this environment: the temp folder it names is the system's, not this
        # command's own run folder, which is gone by the time the job starts (Slurm would make it again)
        environment = {**os.environ, TMPDIR_ENV: str(shared_temp_dir())}
        submitted = subprocess.run(["sbatch", "--parsable", str(args.script)], capture_output=True, text=True,
                                   env=environment)
        if submitted.returncode != 0:
            raise UserError(f"sbatch refused the script: {submitted.stderr.strip() or submitted.stdout.strip()}")
        job = submitted.stdout.strip().split(";")[0]
        print(f"submitted: Slurm job {job}; its output goes to parbench-{job}.out, its records to {args.results}/")
    return 0
