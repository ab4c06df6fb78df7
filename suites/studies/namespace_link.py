"""Validation data for `parbench predict`: a 2-node gloo DDP/FSDP training step over a rate-limited link,
measured beside the one-rank record and the measured link it is to be predicted from.

    python -m suites.studies.namespace_link --out results/samples/namespace-gloo-2026-11-28
        [--rates 1gbit,5gbit,unlimited] [--rounds 1] [--budget 6]
        [--rows suites/predict/validation/namespace_gloo.toml]

Makes two hosts on this machine — two network namespaces joined by a veth pair
(`suites.studies.netns_hosts`; needs root and iproute2) — and for each link rate, in turn (the
order reversed every other round, so a drifting machine does not favour one rate):

1. limits both veth ends with `tc qdisc replace ... tbf` (none for `unlimited`);
2. runs one suite across the namespaces as two nodes (`parbench run --nnodes 2 --node-rank R
   --rdzv-endpoint ...`, one thread per rank so the two ranks do not fight for two cores): gloo
   all-reduces of a small and a large buffer, whose alpha-beta fit is the link; the training step
   on one rank on node 0, the base; the same step under ddp and fsdp on 2 nodes x 1 rank, weak
   scaling (the same per-device batch);
3. keeps the records under OUT/<run>/ (`parbench/records-namespace-gloo.jsonl`, each node's log) and
   makes one validation row per 2-node case (`suites.studies.link_rows`).

The rows go to --rows, a table of them to OUT/summary.md and stdout. The namespaces, and every
process in them, are gone at the end, also on failure or Ctrl-C.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from suites.errors import UserError
from suites.records.store import ResultsStore, load_records
from suites.studies import netns_hosts
from suites.studies.link_rows import Row, Run, markdown_table, rows_of, toml_document

#: The training case: an mlp with ~13.7 MB of fp32 gradients (a 2-rank all-reduce of them takes
#: ~110 ms at 1 Gbit/s) and a one-thread step of ~0.1-0.2 s on this class of CPU.
MODEL = "mlp"
SIZES = {"hidden": 1024, "depth": 4}
PER_DEVICE_BATCH = 128
#: All-reduce buffers whose line is the link: latency from the small one, bandwidth from both.
LINK_BYTES = (1024, 16 * 1024 * 1024)
#: Machine label of the records, which names their file (`ResultsStore.path_for`).
LABEL = "namespace-gloo"
#: Node 0's rendezvous port on its namespace's address (a fresh namespace has every port free).
PORT = 29400
#: A tbf bucket holds at least this much, and at least BURST_S of traffic at its rate: a smaller
#: one held a veth limited to 5 Gbit/s at 3.0 Gbit/s (1 MB: 4.7 Gbit/s).
MIN_BURST_BYTES = 256 * 1024
BURST_S = 0.002
#: How long a run (all its cases on both nodes) may take before it is stopped.
RUN_LIMIT_S = 1800.0
RATE = re.compile(r"(\d+(?:\.\d+)?)(mbit|gbit)")
UNLIMITED = "unlimited"


@dataclass(frozen=True)
class LinkRate:
    """A tbf rate as tc writes it ("1gbit", "200mbit"), or no limit (gbit None)."""

    name: str
    gbit: float | None

    def tc_argv(self, namespace: str, interface: str) -> list[str]:
        """The tc command that sets this rate on `interface` in `namespace` (unlimited: removes the qdisc)."""
        if self.gbit is None:
            return ["tc", "-n", namespace, "qdisc", "del", "dev", interface, "root"]
        burst = max(MIN_BURST_BYTES, int(self.gbit * 1e9 / 8 * BURST_S))
        return ["tc", "-n", namespace, "qdisc", "replace", "dev", interface, "root", "tbf", "rate", self.name,
                "burst", str(burst), "latency", "50ms"]


def parse_rates(text: str) -> list[LinkRate]:
    rates = []
    for word in (item.strip().lower() for item in text.split(",") if item.strip()):
        matched = RATE.fullmatch(word)
        if word == UNLIMITED:
            rates.append(LinkRate(word, None))
        elif matched and float(matched.group(1)) > 0:
            value = float(matched.group(1))
            rates.append(LinkRate(word, value if matched.group(2) == "gbit" else value / 1000))
        else:
            raise UserError(f"--rates: {word!r} is not a link rate; write rates as tc does, e.g. "
                            f"--rates 1gbit,5gbit,200mbit,{UNLIMITED}")
    if not rates:
        raise UserError("--rates names no rate; e.g. --rates 1gbit,5gbit")
    return rates


def suite_text(budget_s: float) -> str:
    """The suite each run runs on both nodes."""
    sizes = "".join(f", {key} = {value}" for key, value in SIZES.items())
    training = f'{{ model = "{MODEL}", batch = {PER_DEVICE_BATCH}{sizes} }}'
    return f'''description = "Namespace link study: the link, the one-rank base and ddp/fsdp on 2 nodes"

[timing]
budget_s = {budget_s}

[[grid]]
workload = "allreduce"
framework = "torch"
device = "cpu"
strategy = "ddp"
n_devices = 2
params = {{ bytes = [{", ".join(map(str, LINK_BYTES))}], backend = "gloo" }}

[[grid]]
workload = "train_step"
framework = "torch"
device = "cpu"
strategy = "single"
n_devices = 1
params = {training}

[[grid]]
workload = "train_step"
framework = "torch"
device = "cpu"
strategy = ["ddp", "fsdp"]
n_devices = 2
params = {training}
'''


def run_name(rate: LinkRate, round_index: int) -> str:
    return rate.name if round_index == 0 else f"{rate.name}-r{round_index + 1}"


def rate_order(rates: list[LinkRate], round_index: int) -> list[LinkRate]:
    """Every other round backwards: ABC, CBA, ..."""
    return rates if round_index % 2 == 0 else rates[::-1]


def refusal() -> str | None:
    """Why the study cannot run here, or None."""
    why = netns_hosts.missing()
    if why is None and shutil.which("tc") is None:
        why = "not installed: tc (iproute2)"
    if why is None:
        return None
    if "root" in why:
        return f"{why}: run the study as root (sudo)"
    return f"{why}: install iproute2 (apt-get install iproute2)" if "not installed" in why else why


def node_argv(hosts: netns_hosts.Hosts, rank: int, suite: Path, results: Path) -> list[str]:
    """`parbench run` as node `rank` of two, inside its namespace."""
    return hosts.command(rank, [
        sys.executable, "-m", "suites", "run", "--suite", str(suite), "--results", str(results), "--label", LABEL,
        "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", f"{hosts.addresses[0]}:{PORT}",
        "--rdzv-timeout", "120"])


def limit_link(hosts: netns_hosts.Hosts, rate: LinkRate) -> str:
    """Set `rate` on both veth ends; the command for one end, as the rows quote it ("" unlimited)."""
    commands = [rate.tc_argv(name, interface) for name, interface in zip(hosts.names, hosts.interfaces)]
    for argv in commands:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if done.returncode != 0 and rate.gbit is not None:  # deleting an absent qdisc is no error
            raise UserError(f"`{shlex.join(argv)}` failed: {done.stderr.strip()}; is the sch_tbf module available?")
    return "" if rate.gbit is None else shlex.join(commands[0]) + " (and on the other end)"


def run_nodes(hosts: netns_hosts.Hosts, suite: Path, results: Path) -> list[int]:
    """Both nodes' `parbench run`, each logging to results/node<R>.log; their exit codes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PARBENCH_THREADS": "1"}
    processes = []
    for rank in (0, 1):
        with open(results / f"node{rank}.log", "w") as log:
            processes.append(subprocess.Popen(node_argv(hosts, rank, suite, results), env=env, stdout=log,
                                              stderr=subprocess.STDOUT))
    try:
        return [process.wait(timeout=RUN_LIMIT_S) for process in processes]
    finally:
        for process in processes:  # a run past its limit, or Ctrl-C: the namespaces' cleanup ends the rest
            if process.poll() is None:
                process.terminate()


def study_command(argv: list[str]) -> str:
    return shlex.join(["python", "-m", "suites.studies.namespace_link", *argv])


def measure(hosts: netns_hosts.Hosts, rate: LinkRate, name: str, out: Path, suite: Path,
            command: str) -> tuple[list[Row], list[str]]:
    """One run at `rate`: its rows, and a line for each thing that went wrong."""
    results = out / name
    results.mkdir(parents=True)
    tc_command = limit_link(hosts, rate)
    load_before = os.getloadavg()[0]
    print(f"{name}: running the suite on both nodes (logs: {results}/node0.log, node1.log) ...", flush=True)
    codes = run_nodes(hosts, suite, results)
    print(f"{name}: nodes exited {codes}; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
          flush=True)
    record_file = ResultsStore(results).path_for(LABEL)  # node 0 keeps them all, under the label
    records = list(load_records([record_file])) if record_file.is_file() else []
    # as run by hand: without `ip netns exec NAME` and this interpreter's path
    node_command = (shlex.join(["python", *node_argv(hosts, 0, suite, results)[5:]])
                    + " (node 1: --node-rank 1, in the other namespace)")
    run = Run(name=name, records=str(record_file), tc_command=tc_command, node_command=node_command)
    if not records:
        why = last_line(results / "node0.log")
        return [], [f"{name}: no records: the nodes exited {codes}; node 0's last line: {why}"]
    rows, problems = rows_of(records, run, records[0].timestamp[:10], command)
    if any(codes) and not problems:
        problems.append(f"{name}: a node exited with {codes}; see {results}/node0.log and node1.log")
    return rows, problems


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(empty)"


def write_rows(runs: dict[str, list[Row]], rows_path: Path, summary: Path, command: str) -> str:
    """The rows of the runs so far to `rows_path` and their table to `summary` (after each run, so an
    interrupted study keeps what it measured); the table."""
    header = (f"Validation rows of `parbench predict`: 2-node gloo runs over a rate-limited veth between two network "
              f"namespaces of one machine, and the one-rank base measured in the same run.\nWritten by: {command}")
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows_path.write_text(toml_document([row for rows in runs.values() for row in rows], header))
    table = markdown_table(runs)
    summary.write_text(f"{header}\n\n{table}")
    return table


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m suites.studies.namespace_link",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the records, logs and summary (new)")
    parser.add_argument("--rates", default=f"1gbit,5gbit,{UNLIMITED}", help="tbf rates, tc's notation")
    parser.add_argument("--rounds", type=int, default=1, help="runs at each rate, order reversed each round")
    parser.add_argument("--budget", type=float, default=6.0, help="timing budget per case, seconds (default 6)")
    parser.add_argument("--rows", type=Path, default=Path("suites/predict/validation/namespace_gloo.toml"),
                        help="where the validation rows go")
    args = parser.parse_args(argv)
    try:
        return study(args, study_command(argv))
    except UserError as error:
        print(f"namespace_link: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"namespace_link: interrupted; the finished runs' records and rows are kept ({args.out}, {args.rows}); "
              f"the namespaces are gone", file=sys.stderr)
        return 130


def study(args: argparse.Namespace, command: str) -> int:
    rates = parse_rates(args.rates)
    if args.rounds < 1 or args.budget <= 0:
        raise UserError("--rounds must be at least 1 and --budget above 0 seconds")
    if args.out.exists() and any(args.out.iterdir()):
        raise UserError(f"--out {args.out} is not empty: the rows name records by case id, so each study needs "
                        f"a folder of its own; pass a new --out")
    print(f"This study creates two network namespaces joined by a veth pair, limits the veth with tc tbf at "
          f"{', '.join(rate.name for rate in rates)} ({args.rounds} round(s)), and runs parbench across them as two "
          f"nodes; it needs root and iproute2. Records and logs go to {args.out}/, rows to {args.rows}.", flush=True)
    why = refusal()
    if why:
        raise UserError(why)
    args.out.mkdir(parents=True, exist_ok=True)
    suite = args.out / "suite.toml"
    suite.write_text(suite_text(args.budget))
    runs: dict[str, list[Row]] = {}
    problems: list[str] = []
    with netns_hosts.two_hosts() as hosts:
        for round_index in range(args.rounds):
            for rate in rate_order(rates, round_index):
                name = run_name(rate, round_index)
                runs[name], found = measure(hosts, rate, name, args.out, suite, command)
                problems += found
                table = write_rows(runs, args.rows, args.out / "summary.md", command)
    print(table, end="")
    print(f"{sum(map(len, runs.values()))} row(s) written to {args.rows}; records under {args.out}/")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
