"""A suite across a Slurm allocation, on a real 2-node cluster started on this machine
(tests/slurm_cluster.py): `salloc -N 2 srun -N1 -n1 --overlap parbench run --suite GRID` (on the
allocation's first node) runs each case whose ranks span
nodes as one srun step, every other case where parbench runs, and a case needing more nodes than
the allocation has is unavailable with the count."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suites.runner import slurm
from suites.runner.spanning import GPU_SLOT_ENV, NODE_ENV, rank_env_on_nodes
from tests.slurm_cluster import missing, two_node_cluster

pytest.importorskip("torch")

#: salloc runs its command where it was typed; parbench must run on the allocation's first node.
ON_FIRST_NODE = ("srun", "-N1", "-n1", "--overlap")

#: How each case of these suites is timed: a few samples, and a contended measurement not taken again.
#: What these tests check is where ranks run and what is kept, not a timing; and on this one host a
#: spanning case's ranks on the other node count as other work to the measuring node's, so every such
#: case would be contended and measured `contention_retries` (2) more times.
QUICK_TIMING = "warmup_s = 0.02\nmin_samples = 3\nmin_time_s = 0.01\ncontention_retries = 0\n"


def suite_toml(description: str, budget_s: float, *cases: tuple[str, str, int], model: str = "mlp") -> str:
    """A suite file of `model` training steps (QUICK_TIMING), one (framework, strategy or [strategies],
    devices) each."""
    blocks = "".join(f'''
[[grid]]
workload = "train_step"
framework = "{framework}"
device = "cpu"
strategy = {strategy}
n_devices = {devices}
params = {{ model = "{model}", batch = 16 }}
''' for framework, strategy, devices in cases)
    return f'description = "{description}"\n\n[timing]\nbudget_s = {budget_s}\n{QUICK_TIMING}{blocks}'


#: One case per way ranks are placed on the nodes (torch's rendezvous, a TF cluster's TF_CONFIG), one
#: needing more nodes than the allocation has, and one that runs where parbench runs. (FSDP's ranks
#: are placed as DDP's: `spanning.rank_env_on_nodes` does not look at the strategy.)
GRID = suite_toml("Slurm: ranks across two nodes, and a case on one", 0.2, ("torch", '"ddp"', 2),
                  ("torch", '"ddp"', 4), ("tf", '"multiworker"', 2), ("torch", '"single"', 1))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = missing()
    if why:
        pytest.skip(why)
    with two_node_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def records_of(results: Path) -> dict[str, dict]:
    return {record["case"]["strategy"] + f"x{record['case']['n_devices']}": record
            for path in results.rglob("*.jsonl") for line in path.read_text().splitlines() if line.strip()
            for record in [json.loads(line)]}


def test_a_suite_in_a_two_node_allocation_spans_the_nodes(cluster, tmp_path, our_processes):
    grid = tmp_path / "slurm.toml"
    grid.write_text(GRID)
    results = tmp_path / "results"
    run = subprocess.run(["salloc", "-N", "2", *ON_FIRST_NODE, sys.executable, "-m", "suites", "run",
                          "--suite", str(grid), "--results", str(results), "--label", "slurm-test"],
                         cwd=tmp_path, env={**__import__("os").environ, **cluster}, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = records_of(results)
    assert set(records) == {"ddpx2", "multiworkerx2", "ddpx4", "singlex1"}, run.stdout[-3000:]
    for spanning in ("ddpx2", "multiworkerx2"):
        record = records[spanning]
        assert record["status"] == "ok", record["reason"]
        assert record["check"]["passed"], record["check"]
        details = record["details"]
        assert details["launcher"] == "slurm"
        assert sorted(node["slurm_node"] for node in details["nodes"]) == ["node1", "node2"]
        assert "one physical host" in details["nodes_share_a_host"]  # both slurmd run on this machine
        assert record["emulated"] is True
    too_big = records["ddpx4"]
    assert too_big["status"] == "unavailable" and "needs 4 nodes" in too_big["reason"]
    single = records["singlex1"]
    assert single["status"] == "ok" and "nodes" not in single["details"]
    assert not list(tmp_path.glob(".parbench-slurm-*"))  # the step's folder is removed
    assert our_processes() == []


def test_outside_an_allocation_nothing_changes(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert slurm.allocation() is None
    assert slurm.allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "1"}) is None


def test_ranks_are_placed_on_the_steps_nodes():
    where = slurm.Allocation("7", ("node1", "node2"), ("10.0.0.1", "10.0.0.2"), 8)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "9", "LOCAL_RANK": "9",
           "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "16"}
    assert rank_env_on_nodes(env, 9, 8, where) == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "9", "LOCAL_RANK": "1",
        "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", NODE_ENV: "node2"}
    tf_config = {"cluster": {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]},
                 "task": {"type": "worker", "index": 1}}
    placed = rank_env_on_nodes({"TF_CONFIG": json.dumps(tf_config), "CUDA_VISIBLE_DEVICES": "1"}, 2, 2, where)
    assert json.loads(placed["TF_CONFIG"])["cluster"] == {
        "chief": ["10.0.0.1:5000"], "worker": ["10.0.0.1:5001", "10.0.0.2:5002"]}
    assert placed[GPU_SLOT_ENV] == "0" and "CUDA_VISIBLE_DEVICES" not in placed  # node2's own first GPU, there
    assert slurm._gpus_per_node({"SLURM_GPUS_PER_NODE": "h100:8"}) == 8
    assert slurm._gpus_per_node({}) == 0


@pytest.mark.parametrize("srun_log, blamed", [
    # rank 1's node died first: rank 0's broken connection is a consequence, not the cause
    ("srun: error: node2: task 1: Exited with exit code 137\nsrun: error: node1: task 0: Exited with exit code 1\n",
     "rank 1 on node2 ended without reporting: Exited with exit code 137"),
    # rank 0 failed first and --kill-on-bad-exit stopped rank 1: rank 0's own reason
    ("srun: error: node1: task 0: Exited with exit code 1\nsrun: error: node2: task 1: Killed\n",
     "rank 0: check: loss differs"),
])
def test_the_rank_that_ended_first_is_blamed(tmp_path, srun_log, blamed):
    from suites.runner.execute import Outcome, Status

    (tmp_path / "rank0.json").write_text(json.dumps(Outcome(Status.FAILED, "check: loss differs").to_dict()))
    (tmp_path / "srun.log").write_text(srun_log)
    outcome = slurm._outcome_of_step(tmp_path, 2, timed_out=False, returncode=1, took_s=3.0, deadline_s=60.0)
    assert outcome.status is Status.FAILED and outcome.reason.startswith(blamed)


DIES = suite_toml("Slurm: a node dies mid-case", 5.0, ("torch", '"ddp"', 2), ("torch", '"single"', 1))


def _rank_process(node: str, rank: int) -> int | None:
    """The pid of the case process Slurm started as `rank` on `node`, if it is running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = dict(item.split("=", 1) for item in (entry / "environ").read_bytes().decode(
                errors="replace").split("\0") if "=" in item)
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (environ.get("SLURMD_NODENAME") == node and environ.get("SLURM_PROCID") == str(rank)
                and "suites.runner.case_process" in command):
            return int(entry.name)
    return None


def test_a_node_that_dies_mid_case_fails_that_case_and_the_suite_goes_on(cluster, tmp_path, our_processes):
    import os
    import signal
    import time

    grid = tmp_path / "dies.toml"
    grid.write_text(DIES)
    results = tmp_path / "results"
    started = time.monotonic()
    temp = tmp_path / "tmp"  # this run's temp folder: what its processes leave there is theirs
    temp.mkdir()
    run = subprocess.Popen(["salloc", "-N", "2", *ON_FIRST_NODE, sys.executable, "-m", "suites", "run",
                            "--suite", str(grid), "--results", str(results), "--label", "slurm-test"],
                           cwd=tmp_path, env={**os.environ, **cluster, "TMPDIR": str(temp)}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    victim = None
    while victim is None and time.monotonic() - started < 300 and run.poll() is None:
        victim = _rank_process("node2", 1)
        time.sleep(0.2)
    assert victim is not None, "rank 1 never started on node2"
    time.sleep(2.0)  # mid-case: importing, setting up or checking
    os.kill(victim, signal.SIGKILL)  # the node's processes die
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 1, output[-3000:]  # a case failed; the run went on to the next one
    records = records_of(results)
    assert records["singlex1"]["status"] == "ok"
    record = records["ddpx2"]
    assert record["status"] == "failed" and record["reason"].startswith("rank 1 on node2 ended without reporting")
    assert "Killed" in record["reason"] or "signal" in record["reason"].lower(), record["reason"]
    assert time.monotonic() - started < 300  # well within the case's deadline, not at it
    assert not list(tmp_path.glob(".parbench-slurm-*")) and our_processes() == []
    assert not list(temp.iterdir())  # the killed ranks' temp folders went with the step's


def test_the_batch_script_asks_for_whole_nodes_and_runs_the_suite_once(tmp_path):
    from suites.frontends.cli import main

    script = tmp_path / "run.sbatch"
    assert main(["slurm", "--suite", "scaling", "--nodes", "2", "--gpus-per-node", "8", "--partition", "gpu",
                 "--time", "2:00:00", "--script", str(script)]) == 0
    text = script.read_text()
    for directive in ("--nodes=2", "--gpus-per-node=8", "--partition=gpu", "--time=2:00:00", "--exclusive",
                      "--ntasks-per-node=1"):
        assert f"#SBATCH {directive}\n" in text
    assert text.rstrip().endswith("-m suites run --suite scaling --results results --yes")


@pytest.mark.parametrize("argv, problem", [
    (["--nodes", "0"], "--nodes must be 1 or more"),
    (["--nodes", "2", "--time", "2h"], "is not a Slurm time"),
    (["--nodes", "2", "--submit"], "--submit needs --script"),
    (["--nodes", "2", "--suite", "no-such-suite"], "no-such-suite"),
])
def test_bad_slurm_arguments_get_one_line(argv, problem, capsys):
    from suites.frontends.cli import main

    assert main(["slurm", *argv]) == 2
    error = capsys.readouterr().err
    assert problem in error and error.count("\n") == 1 and "Traceback" not in error


def test_a_submitted_script_runs_the_suite_across_the_nodes(cluster, tmp_path, our_processes):
    import os
    import time

    import tempfile

    grid = tmp_path / "submitted.toml"
    grid.write_text(DIES.replace("budget_s = 5.0", "budget_s = 0.2"))
    env = {**os.environ, **cluster}
    run_folders = set(Path(tempfile.gettempdir()).glob("parbench-run-*"))
    submit = subprocess.run([sys.executable, "-m", "suites", "slurm", "--suite", str(grid), "--nodes", "2",
                             "--script", str(tmp_path / "run.sbatch"), "--submit", "--label", "slurm-test"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.split("Slurm job ")[1].split(";")[0]
    deadline = time.monotonic() + 600
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running"
        time.sleep(1.0)
    output = (tmp_path / f"parbench-{job}.out").read_text()
    records = records_of(tmp_path / "results")
    assert records["ddpx2"]["status"] == "ok", output[-3000:]
    assert records["ddpx2"]["details"]["launcher"] == "slurm" and records["singlex1"]["status"] == "ok"
    # the job got the system's temp folder, not the submitting command's (Slurm made that one again);
    # the job is over, so a new run folder of a process still running is another run's on this machine
    left = set(Path(tempfile.gettempdir()).glob("parbench-run-*")) - run_folders
    assert not [folder for folder in left if not Path("/proc", folder.name.split("-")[2]).exists()], left


def test_tf_tasks_over_hosts_of_their_own_take_tf_config_from_tfs_slurm_resolver(monkeypatch):
    """On a cluster of distinct hosts a multiworker task is told the first port and builds its
    TF_CONFIG with `SlurmClusterResolver`; on nodes of one host (the test cluster) and for a
    parameter-server cluster (whose job order the resolver would change) parbench's own stays."""
    from suites.frameworks.tf.slurm_resolver import SLURM_PORT_ENV, tf_config_from_slurm

    workers = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:5001", "127.0.0.1:5002"]},
                                        "task": {"type": "worker", "index": 1}})}
    hosts = slurm.Allocation("7", ("gpu-01", "gpu-02"), ("10.0.0.1", "10.0.0.2"), 0)
    one_host = slurm.Allocation("7", ("node1", "node2"), ("127.0.0.1", "127.0.0.1"), 0)
    assert slurm.with_tf_resolver(workers, hosts)[SLURM_PORT_ENV] == "5001"
    assert slurm.with_tf_resolver(workers, one_host) == workers
    ps = {"TF_CONFIG": json.dumps({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
                                   "task": {"type": "ps", "index": 0}})}
    assert slurm.with_tf_resolver(ps, hosts) == ps
    assert slurm.with_tf_resolver({"MASTER_ADDR": "10.0.0.1"}, hosts) == {"MASTER_ADDR": "10.0.0.1"}
    pytest.importorskip("tensorflow")
    for name, value in {"SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "gpu-[01-02]",
                        "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_STEP_NUM_TASKS": "2"}.items():
        monkeypatch.setenv(name, value)
    assert json.loads(tf_config_from_slurm({"worker": 2}, 5001)) == {
        "cluster": {"worker": ["gpu-01:5001", "gpu-02:5001"]}, "task": {"type": "worker", "index": 1}}
