"""Issue 48 items 1 and 2: what the parent of a 2 x 8-GPU Slurm run decides of a case whose
ranks span both nodes — available, nccl, not emulated, % of peak over the 16 GPUs that ran — and
the GPU each rank takes on its own node. Discovery faked to 8 H100 a node (tests/cluster_truth.py)."""
from __future__ import annotations

import json
import subprocess

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.hardware.peaks import PeakTable
from suites.records.measurement import Measurement
from suites.records.store import ResultsStore
from suites.runner.execute import Outcome
from suites.runner.plan import unavailable_reason
from suites.runner.runner import RunContext, Runner
from suites.runner.slurm import _rank_script
from suites.runner.spanning import GPU_SLOT_ENV, rank_env_on_nodes
from suites.strategies.base import placing_on
from suites.strategies.jobs import job_for
from tests.cluster_truth import GPUS_PER_NODE, eight_gpus_a_node, eight_h100  # noqa: F401 (fixture)

SPANNING = {"ddp": ("torch", {"model": "mlp", "batch": 32}), "fsdp": ("torch", {"model": "mlp", "batch": 32}),
            "tensor": ("torch", {"model": "mlp", "batch": 32, "scaling": "strong"}),
            "pipeline": ("torch", {"model": "mlp", "batch": 32, "depth": 15, "microbatches": 16}),
            "multiworker": ("tf", {"model": "mlp", "batch": 32})}


def gpu16(strategy: str) -> Case:
    framework, params = SPANNING[strategy]
    return Case.make("train_step", framework, "gpu", strategy, "bf16", 16, params)


@pytest.mark.parametrize("strategy", sorted(SPANNING))
def test_a_case_over_both_nodes_is_available_on_their_16_gpus(eight_gpus_a_node, strategy):
    job = job_for(gpu16(strategy))
    assert unavailable_reason(job, eight_gpus_a_node) is None
    with placing_on(eight_gpus_a_node):
        assert not job.emulated


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "tensor"])
def test_torch_ranks_over_both_nodes_join_over_nccl(eight_gpus_a_node, strategy):
    job = job_for(gpu16(strategy))
    with placing_on(eight_gpus_a_node):
        assert job.strategy.backend(job) == "nccl"


def test_on_one_node_alone_16_ranks_still_share_its_8_gpus(eight_gpus_a_node):
    job = job_for(gpu16("ddp"))
    assert job.emulated and job.strategy.backend(job) == "gloo"


def test_the_record_of_a_16_gpu_run_is_real_and_its_peak_is_16_gpus(eight_gpus_a_node, tmp_path):
    """The record the parent stores: not emulated, % of peak against 16 H100s (before: emulated,
    against one, flagged above peak)."""
    job = job_for(gpu16("ddp"))
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TimingConfig())
    context.store.ensure_writable(context.environment["machine"])
    median = 10 * job.work()["flops_per_step"] / 16 / 989e12  # 10% of 16 H100s' bf16 dense peak

    def ran(job, timing):
        return Outcome(Status.OK, measurement=Measurement((median,) * 5),
                       details={"launcher": "slurm", "nodes": [{"node": "gpu-a"}, {"node": "gpu-b"}]})

    runner = Runner(context.timing, context, rate=lambda *_: 1e15, launcher=ran, nodes=eight_gpus_a_node)
    record = runner.run(job.case)  # a rate given: no GEMM probe
    assert record.status is Status.OK, record.reason
    assert record.emulated is False
    peak = PeakTable.load().peak_tflops(eight_h100(job.framework, job.device), job.precision)
    assert record.metrics["pct_peak_table"] == pytest.approx(100 * record.metrics["tflops"] / (16 * peak))
    assert record.metrics["pct_peak_table"] == pytest.approx(10 * 989 / peak, rel=1e-6)
    assert not record.metrics.get("above_peak")


# --- item 2: each rank's GPU on its own node ----------------------------------------------------
def test_tf_workers_over_both_nodes_each_take_a_gpu_of_their_own_node(eight_gpus_a_node):
    job = job_for(gpu16("multiworker"))
    plugin = job.strategy
    with placing_on(eight_gpus_a_node):  # as the runner launches it
        envs = [rank_env_on_nodes(plugin.rank_env(job, rank, 16, list(range(9000, 9016))), rank, GPUS_PER_NODE,
                                  eight_gpus_a_node) for rank in range(16)]
    assert [env[GPU_SLOT_ENV] for env in envs] == [str(rank % 8) for rank in range(16)]
    assert all("CUDA_VISIBLE_DEVICES" not in env for env in envs)  # the node's own set decides, on the node
    hosts = [address.rsplit(":", 1)[0] for address in json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"]]
    assert hosts == ["10.1.0.1"] * 8 + ["10.1.0.2"] * 8


@pytest.mark.parametrize("node_visible, slot, expected", [("4,5,6,7,0,1,2,3", "2", "6"),
                                                           ("GPU-aa,GPU-bb", "1", "GPU-bb"), (None, "3", "3")])
def test_a_rank_on_its_node_picks_its_slot_of_that_nodes_visible_set(tmp_path, node_visible, slot, expected):
    """On the remote node (the rank's script, run by srun there): its slot of the node's own
    CUDA_VISIBLE_DEVICES, not an index into the parent's."""
    script = tmp_path / "rank.sh"
    script.write_text(_rank_script(["sh", "-c", 'printf %s "$CUDA_VISIBLE_DEVICES"'], {GPU_SLOT_ENV: slot}))
    env = {"PATH": "/usr/bin:/bin", **({"CUDA_VISIBLE_DEVICES": node_visible} if node_visible is not None else {})}
    assert subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True).stdout == expected


def test_torch_ranks_keep_their_local_rank_on_their_node(eight_gpus_a_node):
    job = job_for(gpu16("ddp"))
    envs = [rank_env_on_nodes(job.strategy.rank_env(job, rank, 16, [29500]), rank, GPUS_PER_NODE,
                              eight_gpus_a_node) for rank in range(16)]
    assert [env["LOCAL_RANK"] for env in envs] == [str(rank % 8) for rank in range(16)]
    assert {env["LOCAL_WORLD_SIZE"] for env in envs} == {"8"} and {env["MASTER_ADDR"] for env in envs} == {"10.1.0.1"}
