"""TF clusters joined by TF_CONFIG: ParameterServerStrategy's asynchronous checks, a killed
worker, two "machines" started by hand with their own TF_CONFIG, a missing peer; Horovod's
unavailability."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest


tf = pytest.importorskip("tensorflow")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import plugin_for  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from suites.cases.vocabulary import Status  # noqa: E402
from suites.errors import UserError  # noqa: E402
from suites.strategies.tf.parameter_server.trainer import WorkerUpdate  # noqa: E402
from suites.frameworks.tf.trainers import SingleDeviceTrainer  # noqa: E402
from suites.frameworks.tf.training import CHECK_SEED, TfTrainStep  # noqa: E402
from suites.frameworks.tf.mixed import LossScaling  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.runner.execute import execute_in_process  # noqa: E402
from suites.runner.plan import plan, unavailable_reason  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402
from suites.runner.launchers import free_ports  # noqa: E402
from suites.runner.runner import RunContext, Runner  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = TimingConfig(budget_s=0.3, warmup_s=0.05, min_time_s=0.05, block_min_s=0.005)
TINY = {"model": "mlp", "batch": 4, "hidden": 16, "depth": 2}


def cluster_case(strategy: str, n: int, precision: str = "fp32", **params: object) -> Case:
    return Case.make("train_step", "tf", "cpu", strategy, precision, n, {**TINY, **params})


def context(tmp_path: Path, timing: TimingConfig = FAST) -> RunContext:
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    return RunContext(suite="test", store=store, timing=timing)



# --- parameter_server: the rules ------------------------------------------------------------
def test_parameter_server_cluster_is_a_chief_workers_and_parameter_servers():
    case = cluster_case("parameter_server", 2, ps=2)
    plugin = plugin_for(case)
    assert plugin.processes(job_for(case)) == 5 and plugin.ports_needed(job_for(case)) == 5
    configs = [json.loads(plugin.rank_env(job_for(case), rank, 5, [1, 2, 3, 4, 5])["TF_CONFIG"]) for rank in range(5)]
    assert configs[0]["cluster"] == {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"],
                                     "ps": ["127.0.0.1:4", "127.0.0.1:5"]}
    assert [tuple(c["task"].values()) for c in configs] == [("chief", 0), ("worker", 0), ("worker", 1),
                                                           ("ps", 0), ("ps", 1)]


def test_a_tf_config_gives_the_rank_and_must_match_the_case(monkeypatch):
    case = cluster_case("parameter_server", 2)
    plugin = plugin_for(case)
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    assert plugin.this_rank(job_for(case)) == 3
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {**cluster, "worker": ["b:1"]},
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(UserError, match="TF_CONFIG's cluster has .* but case .* needs"):
        plugin.this_rank(job_for(case))
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 5}}))
    with pytest.raises(UserError, match="task index 5 is outside job 'worker'"):
        plugin.this_rank(job_for(case))


def test_mixed_precision_with_several_asynchronous_workers_is_unavailable():
    assert "trains asynchronously" in unavailable_reason(plan(cluster_case("parameter_server", 2, "bf16")))
    assert unavailable_reason(plan(cluster_case("parameter_server", 1, "bf16"))) is None


class _Updates:
    """A stand-in for the parameter-server trainer: the updates its workers would return."""

    asynchronous = True

    def __init__(self, updates: list[WorkerUpdate], local_batch: int, weights) -> None:
        self.updates, self.local_batch, self.weights = updates, local_batch, weights

    def numpy_batch(self, x, y):
        return x, y

    def worker_updates(self, batch):
        return self.updates

    def weight_copies(self):
        return [self.weights]


def _update(step: TfTrainStep, rows: slice, weights, x, y) -> WorkerUpdate:
    setup = replace(step._training_setup(tf.float32, LossScaling(False)), weights=weights,
                    global_batch=rows.stop - rows.start)
    trainer = SingleDeviceTrainer(setup, "/CPU:0")
    loss, (gradients,) = trainer.checked_step(trainer.numpy_batch(x[rows], y[rows]))
    return WorkerUpdate(rows, dict(weights), gradients, loss)


def test_asynchronous_check_compares_each_update_with_its_own_batch_at_the_weights_it_read():
    """Two updates: the first at the initial weights, the second at weights moved meanwhile.
    The check passes when each gradient is its own rows' at its own weights, and fails when an
    update's gradient belongs to other rows, or when no update read the initial weights."""
    step = TfTrainStep(job_for(cluster_case("single", 1, batch=8)))
    step.setup()
    x, y = step.spec.make_batch(step.job.check_job().workload.global_batch, CHECK_SEED)  # 2 samples
    initial = step.weights
    moved = {name: value + 0.01 for name, value in initial.items()}
    first, second = slice(0, 1), slice(1, 2)
    right = [_update(step, first, initial, x, y), _update(step, second, moved, x, y)]
    step.check_trainer = lambda work: _Updates(right, 1, initial)
    check = step.check()
    assert check.passed and check.value < 1e-5, check
    assert "each of 2 update(s)" in check.detail and "1 read the initial weights" in check.detail
    swapped = replace(right[1], gradients=_update(step, first, moved, x, y).gradients)
    step.check_trainer = lambda work: _Updates([right[0], swapped], 1, initial)
    assert not step.check().passed
    step.check_trainer = lambda work: _Updates([_update(step, first, moved, x, y), right[1]], 1, initial)
    failed = step.check()
    assert not failed.passed and "no update read the initial weights" in failed.detail


# --- parameter_server: real clusters --------------------------------------------------------
@pytest.mark.out_of_ci
@pytest.mark.slow
@pytest.mark.parametrize("workers, servers", [(1, 1), (2, 1)])
def test_parameter_server_updates_match_the_reference(tmp_path, our_processes, workers, servers):
    case = cluster_case("parameter_server", workers, ps=servers)
    record = Runner.storing(context(tmp_path)).run(case)
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.emulated and record.check.passed and record.check.value <= 1e-5, record.check
    assert f"each of {workers} update(s)" in record.check.detail
    if workers == 1:  # the first update is single-device training's first step
        assert "1 read the initial weights" in record.check.detail
    tasks = ["chief 0", *(f"worker {i}" for i in range(workers)), *(f"ps {i}" for i in range(servers))]
    assert [machine["task"] for machine in record.details["machines"]] == tasks
    memory = record.measurement.memory
    assert [peak.rank for peak in memory] == list(range(len(tasks)))
    assert all(peak.peak_bytes >= peak.baseline_bytes > 0 for peak in memory)
    assert record.metrics["samples_per_s"] == pytest.approx(workers * 4 / record.measurement.median)
    assert our_processes() == []


def _established(port: int) -> bool:
    """Whether some TCP connection to 127.0.0.1:`port` is established (the cluster formed)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                return True
    return False


@pytest.mark.out_of_ci
@pytest.mark.slow
def test_parameter_server_worker_killed_mid_case_gives_a_failed_record(tmp_path, our_processes):
    case = cluster_case("parameter_server", 1)
    killed: list[int] = []

    def kill_the_worker() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for pid in our_processes():
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                config = next((e[len(b"TF_CONFIG="):] for e in environ if e.startswith(b"TF_CONFIG=")), None)
                if config and json.loads(config)["task"]["type"] == "worker":
                    port = int(json.loads(config)["cluster"]["worker"][0].rsplit(":", 1)[1])
                    if _established(port):  # the chief is connected: the case is under way
                        time.sleep(1.0)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    record = Runner.storing(context(tmp_path, replace(FAST, budget_s=30.0))).run(case)
    killer.join()
    assert killed
    assert record.status is Status.FAILED
    assert record.reason == "rank 1 exited with code -9 before reporting"
    assert our_processes() == []


# --- several machines: processes started by hand with their own TF_CONFIG ----------------------
def _machine(case: Case, cluster: dict, job: str, index: int, results: Path, env: dict) -> subprocess.Popen:
    tf_config = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
    return subprocess.Popen(
        [sys.executable, "-m", "suites", "worker", "--case", case.id, "--timing", json.dumps(asdict(FAST)),
         "--results", str(results), "--label", "two-machines"],
        cwd=REPO, env={**os.environ, **env, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True)


def _finish(processes: list[subprocess.Popen]) -> list[str]:
    try:
        return [process.communicate(timeout=180)[0].decode(errors="replace") for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.out_of_ci
@pytest.mark.slow
def test_two_machines_with_their_own_tf_config_run_a_multiworker_case(tmp_path, our_processes):
    """Two "machines" on 127.0.0.1, each started with `parbench worker` and a
    hand-written TF_CONFIG: worker 0 stores one record, with both machines' provenance."""
    case = cluster_case("multiworker", 2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    threads = {"PARBENCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    machines = [_machine(case, cluster, "worker", index, tmp_path / "results", threads) for index in (0, 1)]
    logs = _finish(machines)
    assert [machine.returncode for machine in machines] == [0, 0], logs
    (record,) = ResultsStore(tmp_path / "results").load()
    assert record.case == case and record.status is Status.OK and record.check.passed
    assert record.suite == "tf_config" and record.details["launcher"] == "tf_config"
    assert record.environment["machine"] == "two-machines"
    assert [machine["task"] for machine in record.details["machines"]] == ["worker 0", "worker 1"]
    assert all(machine["libraries"]["tensorflow-cpu"] for machine in record.details["machines"])
    assert len(record.measurement.rank_medians) == 2
    assert our_processes() == []


def test_a_missing_machine_fails_at_the_rendezvous_timeout_with_its_address(monkeypatch):
    """Worker 0 of 2 started by hand, worker 1 never: the case fails at the rendezvous timeout,
    its reason naming the missing worker's address (in this process: the runnable's setup is
    what `parbench worker` runs, and it fails before TF would block)."""
    case = cluster_case("multiworker", 2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    monkeypatch.setenv("PARBENCH_RENDEZVOUS_TIMEOUT_S", "1")
    start = time.monotonic()
    outcome = execute_in_process(job_for(case), FAST)
    assert outcome.status is Status.FAILED and 1.0 <= time.monotonic() - start < 30
    assert outcome.reason.startswith(f"setup: RendezvousTimeout: rendezvous timed out: worker 1 "
                                     f"({cluster['worker'][1]}) did not come up within 1 s")


# --- Horovod ---------------------------------------------------------------------------------
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_horovod_cases_are_unavailable_with_the_build_error_and_versions(framework):
    case = Case.make("train_step", framework, "cpu", "horovod", "fp32", 2, TINY)
    reason = unavailable_reason(plan(case))
    assert reason.startswith("Horovod is not supported")
    assert "0.28.1" in reason and "torch 2.13.0" in reason and "tensorflow-cpu 2.21.0" in reason


def test_the_new_strategy_rules_import_no_framework():
    code = ("import sys, suites.strategies.tf.parameter_server, suites.strategies.tf.horovod, "
            "suites.strategies.torch.horovod; "
            "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, check=True)
