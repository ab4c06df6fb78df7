"""Entry point of an out-of-process case (isolated worker or one rank): runs it, writes its outcome.
`parbench worker` is this command for people (torchrun, TF_CONFIG tasks); parbench's own launchers
start `python -m suites.runner.case_process`, which imports no CLI.

parbench's launcher starts it with `--out` and stores the record itself. A worker whose case
failed writes its outcome, then exits non-zero (`CASE_FAILED_EXIT`): the launcher (or torchrun)
stops its peers at once, instead of leaving them blocked in a collective that waits for it
until the process group's timeout, and names this rank and its error. Under torchrun (one
machine or several) give `--results` too: rank 0 then stores the record, with this machine's
provenance, where `parbench report` finds it. The same holds for TF cases whose processes a
user starts on each machine with their own TF_CONFIG (`multiworker`, `parameter_server`): the
strategy reads its rank from it (the chief, or worker 0, is rank 0), a parameter-server cluster's
workers and parameter servers serve until the chief is done (`suites.measure.capabilities.ServesCluster.serve`); every
rendezvous has a timeout.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
from pathlib import Path

from suites import knobs
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Status
from suites.errors import UserError
from suites.records.output_files import output_path
from suites.records.contention import Contention, judge, read_cpu
from suites.frameworks.tf.slurm_resolver import SLURM_PORT_ENV, tf_config_from_slurm
from suites.runner.execute import Outcome, execute_in_process, failed
from suites.runner.recording import RunContext, keeps_cores_busy, store_outcome
from suites.runner import watchdog
from suites.runner.deadline import case_timeout
from suites.runner.worker_options import case_option, timing_option
from suites.measure.process_env import CASE_TIMEOUT_ENV, STACKS_SIGNAL, pin_from_env
from suites.measure.scratch import run_temp_dir
from suites.measure import gpu_cpu_affinity
from suites.runner.spanning import node_provenance
from suites.measure.capabilities import ServesCluster
from suites.strategies.jobs import Job, job_for
from suites.strategies.registry import NoSuchStrategy
from suites.workloads import UnknownWorkload
from suites.workloads.user_model import load_plugins

#: The suite name stored with records of cases run directly under torchrun.
TORCHRUN_SUITE = "torchrun"
#: ... and of cases whose processes a user started with TF_CONFIG.
TF_CONFIG_SUITE = "tf_config"


def launcher_name() -> str:
    """What started this process: torchrun, a user's TF_CONFIG, or a plain worker command."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return TORCHRUN_SUITE
    return TF_CONFIG_SUITE if "TF_CONFIG" in os.environ else "worker"
def launched_world_problem(job: Job) -> str | None:
    """Under torchrun, why its WORLD_SIZE cannot run the case (issue 32, N15: a mismatch left
    every rank waiting in the rendezvous for ranks that never come, or ran a smaller world
    under the case's label), else None."""
    world = os.environ.get("WORLD_SIZE", "")
    if launcher_name() != TORCHRUN_SUITE or not world.isdigit():
        return None
    needed = job.strategy.processes(job)
    if int(world) == needed:
        return None
    return (f"torchrun started {world} processes, but {job.case.id} runs {needed}: start torchrun with "
            f"--nnodes x --nproc-per-node = {needed}, or pick the case for {world} devices")


#: Exit status of a worker that wrote (or stored) a failed outcome.
CASE_FAILED_EXIT = 1


def outcome_path(out: Path, rank: int) -> Path:
    """Where this process writes its outcome. parbench's own launcher gives every rank its own
    --out; torchrun starts every rank with the same command line (and sets TORCHELASTIC_RUN_ID),
    so there rank 0 writes OUT and rank r > 0 writes OUT.rank<r>."""
    if "TORCHELASTIC_RUN_ID" in os.environ and rank > 0:
        return out.with_name(f"{out.name}.rank{rank}")
    return out


def write_outcome(outcome: Outcome, out: Path, rank: int = 0) -> None:
    out = outcome_path(out, rank)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(outcome.to_dict()))
    tmp.replace(out)  # the launcher never sees half a file


def store_record(job: Job, outcome: Outcome, timing: TimingConfig, results: Path,
                 suite: str, label: str | None, contention: Contention | None = None) -> Path:
    """Store rank 0's outcome as a record, the way `parbench run` stores its own."""
    from suites.records.store import ResultsStore

    if "WORLD_SIZE" in os.environ and "LOCAL_WORLD_SIZE" in os.environ:
        outcome.details["nodes"] = int(os.environ["WORLD_SIZE"]) // max(1, int(os.environ["LOCAL_WORLD_SIZE"]))
    outcome.details["launcher"] = launcher_name()
    store = ResultsStore(results)
    context = RunContext(suite=suite, store=store, timing=timing, label=label)
    record = store_outcome(job, outcome, context, contention)
    return store.path_for(record.machine)


def _serve_or_execute(job: Job, timing: TimingConfig) -> tuple[bool, Outcome]:
    """Serve the case's cluster (a TF server task) or run the case; whether it served, and the
    outcome."""
    hooks = job.strategy.hooks
    try:
        served = isinstance(hooks, ServesCluster) and hooks.serve(job)
    except Exception as error:  # a serving task whose cluster never formed
        return True, failed(error, "serve")
    try:
        return served, (Outcome(Status.OK, "served the case's cluster") if served
                        else execute_in_process(job, timing))
    except Exception as error:  # anything outside the runnable's own stages
        return served, failed(error, "worker")


#: What `parbench worker` is for, in `parbench --help`.
SUMMARY = ("run one case as one process of it: a rank under torchrun (`torchrun ... -m suites worker --case ID "
           "--results DIR`), or a task of a TF cluster started with its own TF_CONFIG; parbench's own launchers "
           "start the same")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's command line: `parbench worker ...` and `python -m suites.runner.case_process ...`."""
    parser.add_argument("--case", required=True, help="the case as JSON, or its id "
                        "(e.g. train_step/torch/cpu:2/ddp/fp32/batch=32,model=mlp)")
    parser.add_argument("--timing", default="{}", help="TimingConfig fields as JSON (default: defaults)")
    parser.add_argument("--out", type=output_path,
                        help="where to write the outcome JSON (under torchrun, rank r > 0 "
                             "writes OUT.rank<r>)")
    parser.add_argument("--results", type=output_path,
                        help="results directory: rank 0 stores the case's record there")
    parser.add_argument("--suite", help=f"suite name stored with the record (default {TORCHRUN_SUITE} "
                                        f"under torchrun, {TF_CONFIG_SUITE} with TF_CONFIG, else worker)")
    parser.add_argument("--label", help="machine label stored with the record "
                                        "(default $PARBENCH_MACHINE or the hostname)")
    # parbench's launcher names itself: the worker ends once it is gone (`suites.runner.watchdog`)
    parser.add_argument(watchdog.LAUNCHER_OPTION, type=watchdog.parse_launcher, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="parbench worker", description=SUMMARY)
    add_arguments(parser)
    run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> None:
    """Run the case of `args` in this process, write or store its outcome, and exit (never returns:
    a served TF cluster task may hold up the interpreter's exit)."""
    try:
        knobs.check(knobs.CASE_KNOBS)
        knobs.check_label(args.label)
    except UserError as error:
        sys.exit(f"parbench worker: {error}")
    # Ends this process (and its group) once its launcher is gone, or past its case's deadline.
    with watchdog.watching(watchdog.watch_for(args.launcher)) as watch:
        _run_case(args, watch)


def _run_case(args: argparse.Namespace, watch: watchdog.Watch) -> None:
    """`run`'s case, under `watch`, whose deadline it sets once it knows the case."""
    port_base = knobs.read(SLURM_PORT_ENV)
    if port_base and "TF_CONFIG" in os.environ:  # a TF task of a Slurm step over hosts of their own
        jobs = {job: len(tasks) for job, tasks in json.loads(os.environ["TF_CONFIG"])["cluster"].items()}
        os.environ["TF_CONFIG"] = tf_config_from_slurm(jobs, port_base)
    pinned = pin_from_env()  # first: framework thread pools inherit the affinity
    # At a case's deadline the launcher asks for every thread's stack (into the log it keeps),
    # to say where the case hung.
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    # A crash in native code (a segfault in a collective or a kernel) leaves its Python stack in
    # the log too, which the failed record's output_tail carries.
    faulthandler.enable(all_threads=True)
    if args.out is None and args.results is None:
        sys.exit("parbench worker: give --out (the outcome as JSON), --results (a stored record), or both")
    try:
        case, timing = case_option(args.case), timing_option(args.timing)
        load_plugins()  # user models and workloads registered by the parent process
        job = job_for(case)
        # The case's deadline, for what bounds its waits inside this process (a multiworker
        # worker's collectives: `suites.frameworks.tf.cluster.collective_timeout_s`), also
        # where no launcher stops the process at it (started by hand with a TF_CONFIG).
        os.environ[CASE_TIMEOUT_ENV] = repr(case_timeout(timing, job))
        watch.expire_after(case_timeout(timing, job))
        plugin = job.strategy
        world = launched_world_problem(job)
        if world:
            raise UserError(world)
        rank = plugin.this_rank(job)
        stores = args.results is not None and rank == 0
        if stores:
            from suites.records.provenance import machine_label
            from suites.records.store import ResultsStore
            # fail before measuring, not after
            ResultsStore(args.results).ensure_writable(machine_label(args.label))
    except (UserError, NoSuchStrategy, UnknownWorkload, ValueError, TypeError) as error:
        sys.exit(f"parbench worker: {error}")

    before = read_cpu()
    with run_temp_dir():  # TF autograph's files, removed on the way out (also under torchrun)
        served, outcome = _serve_or_execute(job, timing)
    if pinned:
        outcome.details["cpus_pinned"] = pinned  # this rank's cores (rank 0's in the record)
    near_gpu = gpu_cpu_affinity.decision()
    if near_gpu:  # a GPU rank's CPUs near its GPU, or why not (rank 0's; every rank's in details.ranks)
        outcome.details["cpu_pinning"] = near_gpu
    node = node_provenance(job.case.device is DeviceKind.GPU)
    if node is not None:  # placed on a node: the record keeps every rank's node (`suites.runner.spanning`)
        outcome.details["node"] = {**node, "rank": rank}
    if args.out is not None:
        write_outcome(outcome, args.out, rank)
    if stores:
        try:
            path = store_record(job, outcome, timing, args.results, args.suite or launcher_name(), args.label,
                                judge(before, read_cpu(), os.cpu_count() or 1,
                                      outcome.measurement.cpu if outcome.measurement else None,
                                      keeps_cores_busy(job)))
        except UserError as error:  # a full disk: the record is not stored, and one line says so
            print(f"parbench worker: {error}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(2)  # as a served case exits: a TF server may hold up the interpreter's exit
        print(f"parbench worker: {case.id}: {outcome.status}; record in {path}", flush=True)
    code = CASE_FAILED_EXIT if outcome.status is Status.FAILED else 0
    if code:
        print(f"parbench worker: rank {rank}: {outcome.reason}", file=sys.stderr, flush=True)
    if served:  # a TF server cannot be stopped, and may hold up the interpreter's exit
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
