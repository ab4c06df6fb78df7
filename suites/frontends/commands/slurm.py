"""`parbench slurm`: the batch script that runs a suite across a Slurm allocation, and, with
`--submit`, its submission (`sbatch`).

The script asks for the nodes (whole: `--exclusive`, as a benchmark needs), the GPUs of each and
one task a node, and runs `parbench run` once, on the first node; inside the allocation that run
starts every case whose ranks span nodes as one srun step (`suites.runner.slurm`). A user already
inside an allocation (`salloc -N 2`) runs `parbench run` directly.

The script is data: every value in an `#SBATCH` line is checked against what Slurm accepts
(`suites.frontends.sbatch_values`) and quoted as sbatch reads it, and the command is shell-quoted,
so no option can add a line or a command. The file is written through `OutputFile`: checked
before anything else, written whole, and an existing file replaced only where parbench wrote it
(its `SCRIPT_SIGNATURE` line) or `--force` asks.
"""
from __future__ import annotations

import argparse
import shlex
import os
import shutil
import subprocess
import sys
from pathlib import Path

from suites import knobs
from suites.cases.filters import select
from suites.errors import UserError
from suites.frontends.sbatch_values import check_directives, sbatch_value
from suites.grids.grid import DEFAULT_SUITE, load_suite
from suites.measure.scratch import TMPDIR_ENV, shared_temp_dir
from suites.records.output_files import OutputFile, output_path
from suites.records.store import DEFAULT_RESULTS_DIR

SUMMARY = "write (and with --submit, submit) the Slurm batch script that runs a suite across N nodes"
KNOBS: tuple[str, ...] = ()

#: The line every script `parbench slurm` writes carries: a file with it is ours to write again.
SCRIPT_SIGNATURE = "# written by `parbench slurm`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help=f"built-in suite name or path of a .toml grid (default {DEFAULT_SUITE})")
    parser.add_argument("--nodes", type=int, required=True, help="nodes to allocate")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs each node brings (default 0: a CPU run)")
    parser.add_argument("--partition", help="Slurm partition, or several separated by commas (default: the cluster's)")
    parser.add_argument("--time", help="time limit, as Slurm takes it: minutes or [D-]HH:MM:SS (e.g. 2:00:00)")
    parser.add_argument("--filter", help="choose cases, as `parbench run --filter`")
    parser.add_argument("--results", type=output_path, default=DEFAULT_RESULTS_DIR,
                        help="results directory, on a file system every node shares (default results/)")
    parser.add_argument("--label", help="machine label stored with every record (default: the first node's)")
    parser.add_argument("--script", type=output_path, help="where to write the script (default: print it)")
    parser.add_argument("--force", action="store_true",
                        help="replace a file at --script that parbench did not write (never a records file)")
    parser.add_argument("--submit", action="store_true", help="submit it with sbatch (needs --script)")


def batch_script(args: argparse.Namespace, workdir: Path, python: str = sys.executable) -> str:
    """The sbatch script for `args`: Slurm's directives, then one `parbench run`."""
    directives = [f"--job-name={sbatch_value(f'parbench-{Path(args.suite).stem}')}", f"--nodes={args.nodes}",
                  "--ntasks-per-node=1", "--exclusive", f"--output={sbatch_value(f'{workdir}/parbench-%j.out')}"]
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
    return "\n".join(["#!/bin/bash", SCRIPT_SIGNATURE, *(f"#SBATCH {directive}" for directive in directives),
                      "set -euo pipefail", f"cd {shlex.quote(str(workdir))}", shlex.join(command), ""])


def _check(args: argparse.Namespace, workdir: Path) -> None:
    check_directives(args, workdir)
    knobs.check_label(args.label)
    if args.submit and args.script is None:
        raise UserError("--submit needs --script FILE: the script sbatch runs is kept there")
    if args.force and args.script is None:
        raise UserError("--force replaces an existing --script FILE: give --script too, or leave out --force")
    if args.submit and shutil.which("sbatch") is None:
        raise UserError("--submit needs sbatch, which is not on PATH here; submit the script from a Slurm login node")


def run(args: argparse.Namespace) -> int:
    workdir = Path.cwd()
    _check(args, workdir)
    output = None
    if args.script is not None:
        output = OutputFile(args.script, "--script", SCRIPT_SIGNATURE.encode(), replace_any=args.force,
                            how_to_replace="pass --force to replace it")
        output.check()
    suite = load_suite(str(args.suite))  # a suite that does not load fails here, not on the cluster
    select(suite.cases, args.filter, suite.name)  # ... and a filter that matches no case of it
    script = batch_script(args, workdir)
    if output is None:
        print(script, end="")
        return 0
    output.write(script)
    print(f"batch script: {args.script}")
    if args.submit:
        # sbatch hands the job this environment: the temp folder it names is the system's, not this
        # command's own run folder, which is gone by the time the job starts (Slurm would make it again)
        environment = {**os.environ, TMPDIR_ENV: str(shared_temp_dir())}
        submitted = subprocess.run(["sbatch", "--parsable", str(args.script)], capture_output=True, text=True,
                                   env=environment)
        if submitted.returncode != 0:
            said = "; ".join((submitted.stderr.strip() or submitted.stdout.strip()).splitlines())
            raise UserError(f"sbatch refused the script: {said}")
        job = submitted.stdout.strip().split(";")[0]
        print(f"submitted: Slurm job {job}; its output goes to parbench-{job}.out, its records to {args.results}/")
    return 0
