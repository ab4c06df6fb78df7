"""A `multiworker` worker's waits for its peers end at the case's deadline (issue 32, N20): the
worker process sets the deadline from its timing, and the workers' lockstep all-reduces carry it
as their collective timeout, so a worker started by hand whose peer never arrives fails
(DeadlineExceededError) instead of waiting forever."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

tf = pytest.importorskip("tensorflow")

from suites.cases.case import Case  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from suites.cases.vocabulary import Status  # noqa: E402
from suites.frameworks.tf.cluster import collective_timeout_s  # noqa: E402
from suites.runner import case_process  # noqa: E402
from suites.runner.execute import Outcome  # noqa: E402
from suites.runner.launchers import case_timeout, free_ports  # noqa: E402
from suites.measure.process_env import CASE_TIMEOUT_ENV  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402
from suites.strategies.tf.multiworker.lockstep import WorkerLockstep  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CASE = Case.make("train_step", "tf", "cpu", "multiworker", "fp32", 2,
                 {"model": "mlp", "batch": 4, "hidden": 16, "depth": 2})


def test_the_collective_timeout_is_the_case_deadline(monkeypatch):
    monkeypatch.setenv(CASE_TIMEOUT_ENV, "42.5")
    assert collective_timeout_s() == 42.5
    monkeypatch.delenv(CASE_TIMEOUT_ENV)
    assert collective_timeout_s() == case_timeout(TimingConfig())  # no worker set it: the default timing's


def test_the_workers_lockstep_all_reduces_time_out_at_the_case_deadline(monkeypatch):
    monkeypatch.setenv(CASE_TIMEOUT_ENV, "42.5")
    job = job_for(CASE)
    strategy = SimpleNamespace(num_replicas_in_sync=2,
                               extended=SimpleNamespace(worker_devices=("/job:worker/task:0/device:CPU:0",)))
    lockstep = job.strategy.hooks.lockstep(job, strategy)
    assert isinstance(lockstep, WorkerLockstep) and lockstep.options.timeout_seconds == 42.5


def test_the_lockstep_gathers_through_its_timed_all_reduces():
    lockstep = WorkerLockstep(tf.distribute.MirroredStrategy(["/cpu:0"]), timeout_s=30.0)
    assert lockstep.gather(2.5) == (2.5,)
    assert lockstep.gather_bytes(b"parbench") == [b"parbench"]


def test_a_worker_sets_the_case_deadline_from_its_timing(monkeypatch, tmp_path):
    """`parbench worker --timing ...`: what it runs sees the deadline of that timing."""
    monkeypatch.setenv(CASE_TIMEOUT_ENV, "1")  # restored after the test
    seen = []

    def serve_or_execute(job, timing):
        seen.append(os.environ[CASE_TIMEOUT_ENV])
        return False, Outcome(Status.OK, "")

    monkeypatch.setattr(case_process, "_serve_or_execute", serve_or_execute)
    monkeypatch.setattr(case_process, "faulthandler", SimpleNamespace(register=lambda *a, **k: None,
                                                                      enable=lambda *a, **k: None))
    timing = TimingConfig(case_timeout_s=37.0)
    monkeypatch.setattr(sys, "argv", ["suites.worker", "--case", CASE.id,
                                      "--timing", json.dumps({"case_timeout_s": 37.0}),
                                      "--out", str(tmp_path / "outcome.json")])
    with pytest.raises(SystemExit) as exit:
        case_process.main()
    assert exit.value.code == 0 and seen == [repr(case_timeout(timing, job_for(CASE)))] == ["37.0"]


WORKER = """
import os, sys, time
from suites.frameworks.tf import backend  # noqa: F401  (TF's environment first)
import tensorflow as tf
from suites.strategies.tf.multiworker.lockstep import WorkerLockstep

index = int(sys.argv[1])
ring = tf.distribute.experimental.CommunicationImplementation.RING
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring))
lockstep = WorkerLockstep(strategy, timeout_s=float(sys.argv[2]))
print("gathered", lockstep.gather(float(index)), flush=True)
if index == 1:
    time.sleep(600)  # alive (its heartbeats go on), but never at the lockstep again
try:
    lockstep.barrier()
except tf.errors.DeadlineExceededError as error:
    print("deadline exceeded:", " ".join(error.message.split()), flush=True)
    os._exit(3)
print("the barrier passed without its peer", flush=True)
"""


@pytest.mark.out_of_ci
@pytest.mark.slow
def test_a_worker_whose_peer_never_arrives_fails_at_the_timeout(our_processes):
    """Two workers started by hand; worker 1 stays up but never reaches the next barrier: worker 0
    raises DeadlineExceededError at the lockstep's timeout instead of waiting forever."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    env = {**os.environ, "PARBENCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen(
        [sys.executable, "-c", WORKER, str(index), "5"], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
        env={**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})})
        for index in (0, 1)]
    try:
        log = workers[0].communicate(timeout=300)[0].decode(errors="replace")
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    assert "gathered (0.0, 1.0)" in log and workers[0].returncode == 3, log
    (line,) = [line for line in log.splitlines() if line.startswith("deadline exceeded:")]
    assert "Collective has timed out during execution" in line, log
    assert our_processes() == []
