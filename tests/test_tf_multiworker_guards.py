"""TF clusters started by hand, and what a parameter-server step is fed (issue 32).

1. Workers started by hand from TF_CONFIG on one multi-GPU machine without CUDA_VISIBLE_DEVICES
   each see every GPU, and TF puts every one on GPU 0: a GPU case refuses to start them, in one
   line that says how to start them instead. Fake TF_CONFIGs and environments: no cluster forms.
2. A parameter-server step schedules each worker's update on that worker's own iterator over a
   per-worker dataset built once (`ClusterCoordinator.create_per_worker_dataset`), which repeats
   the same fixed batches: no batch is built on the host and shipped with a timed step.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.errors import UserError
from suites.frameworks.tf.cluster import Task, same_host
from suites.strategies.jobs import job_for
from suites.strategies.registry import plugin_for

REPO = Path(__file__).resolve().parent.parent
TINY = {"model": "mlp", "batch": 4, "hidden": 16, "depth": 2}


def cluster_case(strategy: str, n: int, device: str = "gpu", **params: object) -> Case:
    return Case.make("train_step", "tf", device, strategy, "fp32", n, {**TINY, **params})


def tf_config(cluster: dict[str, list[str]], job: str = "worker", index: int = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})


@pytest.fixture
def no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# --- 1: hand-started workers sharing a machine's GPUs ---------------------------------------------
def test_two_hand_started_gpu_workers_on_one_host_without_visible_devices_are_refused(monkeypatch,
                                                                                      no_visible_devices):
    case = cluster_case("multiworker", 2)
    monkeypatch.setenv("TF_CONFIG", tf_config({"worker": ["127.0.0.1:2222", "localhost:2223"]}, index=1))
    with pytest.raises(UserError) as refused:
        plugin_for(case).this_rank(job_for(case))
    reason = str(refused.value)
    assert "\n" not in reason
    assert "worker 0 (127.0.0.1:2222), worker 1 (localhost:2223) on one machine" in reason
    assert "CUDA_VISIBLE_DEVICES is not set" in reason and "train on GPU 0" in reason
    assert "worker 0 CUDA_VISIBLE_DEVICES=0, worker 1 =1" in reason and "parbench run" in reason
    assert "chief" not in reason  # a multiworker cluster has none


@pytest.mark.parametrize("visible", ["1", ""])
def test_a_worker_given_its_gpus_or_none_runs(monkeypatch, visible):
    case = cluster_case("multiworker", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("TF_CONFIG", tf_config({"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, index=1))
    assert plugin_for(case).this_rank(job_for(case)) == 1


def test_workers_on_machines_of_their_own_and_cpu_cases_are_not_refused(monkeypatch, no_visible_devices):
    case = cluster_case("multiworker", 2)
    monkeypatch.setenv("TF_CONFIG", tf_config({"worker": ["host-a:2222", "host-b:2222"]}, index=1))
    assert plugin_for(case).this_rank(job_for(case)) == 1
    on_cpus = cluster_case("multiworker", 2, device="cpu")
    monkeypatch.setenv("TF_CONFIG", tf_config({"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}))
    assert plugin_for(on_cpus).this_rank(job_for(on_cpus)) == 0


def test_a_parameter_server_task_sharing_its_machine_is_told_what_each_task_needs(monkeypatch, no_visible_devices):
    """The chief and the parameter server on host-a with worker 0, worker 1 elsewhere: every task
    on host-a is refused (its GPU would be GPU 0 too), worker 1 alone on host-b is not."""
    case = cluster_case("parameter_server", 2)
    cluster = {"chief": ["host-a:1"], "worker": ["host-a:2", "host-b:2"], "ps": ["host-a:3"]}
    for job, index in (("chief", 0), ("worker", 0), ("ps", 0)):
        monkeypatch.setenv("TF_CONFIG", tf_config(cluster, job, index))
        with pytest.raises(UserError, match=r"chief 0 \(host-a:1\), worker 0 \(host-a:2\), ps 0 \(host-a:3\) on "
                                            r"one machine .* the chief and parameter servers none"):
            plugin_for(case).this_rank(job_for(case))
    monkeypatch.setenv("TF_CONFIG", tf_config(cluster, "worker", 1))
    assert plugin_for(case).this_rank(job_for(case)) == 2


def test_parbenchs_own_launcher_gives_every_task_its_gpu_and_is_not_refused(monkeypatch, no_visible_devices):
    """Its tasks all listen on 127.0.0.1, each with the CUDA_VISIBLE_DEVICES `rank_env` set."""
    for case in (cluster_case("multiworker", 2), cluster_case("parameter_server", 2)):
        plugin, job = plugin_for(case), job_for(case)
        world = plugin.processes(job)
        for rank in range(world):
            env = plugin.rank_env(job, rank, world, list(range(3000, 3000 + world)))
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            assert plugin.this_rank(job) == rank
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES")


def test_this_machines_names_for_itself_are_one_host():
    def task(host: str) -> Task:
        return Task("worker", 0, f"{host}:2222")

    own = socket.gethostname()
    assert same_host(task("127.0.0.1"), task("localhost")) and same_host(task(own), task("127.0.0.1"))
    assert same_host(task("[::1]"), task("LOCALHOST")) and same_host(task("10.0.0.5"), task("10.0.0.5"))
    assert not same_host(task("10.0.0.5"), task("10.0.0.6")) and not same_host(task("host-b"), task("127.0.0.1"))


def test_the_worker_command_refuses_in_one_line_before_any_cluster_forms(tmp_path):
    case = cluster_case("multiworker", 2)
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    env["TF_CONFIG"] = tf_config({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    done = subprocess.run([sys.executable, "-m", "suites", "worker", "--case", case.id, "--out", str(tmp_path / "o")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("parbench worker: TF_CONFIG puts worker 0 (127.0.0.1:1), worker 1 (127.0.0.1:2) on one")
    assert not (tmp_path / "o").exists()


# --- 2: a parameter-server step is fed by each worker's own dataset ----------------------------------
class _Coordinator:
    """A stand-in for `ClusterCoordinator`: what the trainer builds and schedules on it."""

    def __init__(self) -> None:
        self.datasets: list[object] = []
        self.scheduled: list[tuple[object, tuple]] = []

    def create_per_worker_dataset(self, dataset_fn):
        self.datasets.append(dataset_fn)
        return [dataset_fn]  # iterable, as a per-worker dataset is

    def schedule(self, fn, args=()):
        self.scheduled.append((fn, args))


class _Strategy:
    def __init__(self) -> None:
        self.dataset_fns: list[object] = []

    def distribute_datasets_from_function(self, dataset_fn):
        self.dataset_fns.append(dataset_fn)
        return dataset_fn


@pytest.fixture(scope="module")
def setup():
    """The training set-up of a small case (its runnable's, without a cluster)."""
    pytest.importorskip("tensorflow")
    from suites.frameworks.tf.training import TfTrainStep

    step = TfTrainStep(job_for(cluster_case("single", 1, device="cpu", batch=2)))
    step.setup()
    return step._training_setup(step.trainer.setup.compute_dtype, step.trainer.setup.scaling)


def test_parameter_server_steps_take_batches_from_each_workers_dataset_built_once(setup):
    import numpy as np
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer
    from suites.strategies.tf.parameter_server.trainer import ParameterServerTrainer

    trainer = ParameterServerTrainer.__new__(ParameterServerTrainer)  # no cluster: its parts alone
    Trainer.__init__(trainer, setup, replicas=1)
    trainer.strategy, trainer.coordinator, trainer.workers = _Strategy(), _Coordinator(), 2
    trainer._seeds, trainer._iterator, trainer._timed = [], None, object()
    batches = [trainer.random_batch(seed) for seed in (1, 2)]
    for index in range(3):
        trainer.step(batches[index % 2])
    assert len(trainer.coordinator.datasets) == 1  # built once, at the first step
    assert len(trainer.coordinator.scheduled) == 3 * 2  # one update per worker per step
    iterators = {id(args[0]) for _, args in trainer.coordinator.scheduled}
    assert len(iterators) == 1 and all(fn is trainer._timed and len(args) == 1
                                       for fn, args in trainer.coordinator.scheduled)
    assert not any(isinstance(arg, (tf.Tensor, np.ndarray)) for _, args in trainer.coordinator.scheduled
                   for arg in args)  # nothing built on the host rides along with a step
    (dataset_fn,) = trainer.coordinator.datasets
    dataset_fn.python_function()  # what each worker runs: the strategy's input pipeline over...
    assert trainer.strategy.dataset_fns == [trainer._worker_dataset]
    drawn = [x.numpy() for x, _ in trainer._worker_dataset().take(4)]  # ...the same batches, repeated
    expected = [trainer._random_local_batch(tf.constant(seed), 0)[0].numpy() for seed in (1, 2)]
    for got, want in zip(drawn, expected * 2):
        np.testing.assert_array_equal(got, want)
