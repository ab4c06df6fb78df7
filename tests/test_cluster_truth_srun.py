"""Issue 48 items 3 and 7: the srun step of a case over both nodes of a 2 x 8-GPU allocation —
each task's CPUs and GPUs said to srun, each rank's cores and GPUs recorded, gloo's sockets on
the node's own interface, NCCL's left to NCCL and its transport recorded."""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.errors import UserError
from suites.runner import slurm
from suites.runner.interfaces import interface_of
from suites.runner.nodes import NodeSpan
from suites.runner.slurm import _rank_script, nccl_transport, srun_command
from suites.runner.spanning import GPU_SLOT_ENV, cpu_ranges, nodes_details
from suites.strategies.jobs import job_for
from tests.cluster_truth import TWO_BY_EIGHT, eight_gpus_a_node  # noqa: F401 (fixture)

DDP16 = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 16, {"model": "mlp", "batch": 32})
DDP2_CPU = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 32})


def test_a_gpu_step_gives_each_rank_its_cpus_and_every_gpu_of_its_node(tmp_path):
    """`salloc -N 2 --gpus-per-node=8` on 128-CPU nodes: 16 CPUs a rank, the node's 8 GPUs seen by
    each rank (before: no --cpus-per-task, so one CPU a rank, and no GPU flags)."""
    where = dataclasses.replace(TWO_BY_EIGHT, cpus_per_node=128)
    assert srun_command(job_for(DDP16), where, 16, tmp_path) == [
        "srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--cpus-per-task=16", "--gpus-per-node=8",
        "--gpu-bind=none", "--kill-on-bad-exit=1", f"--output={tmp_path}/rank%t.log",
        f"--error={tmp_path}/rank%t.log", "--multi-prog", str(tmp_path / "multi-prog.conf")]


def test_the_allocations_cpus_per_task_win_and_a_cpu_rank_takes_its_whole_node(tmp_path):
    asked = dataclasses.replace(TWO_BY_EIGHT, cpus_per_node=128, cpus_per_task=12)
    assert "--cpus-per-task=12" in srun_command(job_for(DDP16), asked, 16, tmp_path)
    cpu_step = srun_command(job_for(DDP2_CPU), dataclasses.replace(TWO_BY_EIGHT, cpus_per_node=64), 2, tmp_path)
    assert "--cpus-per-task=64" in cpu_step and not [flag for flag in cpu_step if flag.startswith("--gpu")]


def test_each_ranks_cores_and_gpus_are_kept_in_rank_order():
    nodes = [{"node": "gpu-b", "rank": 8, "cpus": "0-15", "visible_gpus": "0,1,2,3,4,5,6,7", "hostname": "b"},
             {"node": "gpu-a", "rank": 0, "cpus": "0-15", "visible_gpus": "0,1,2,3,4,5,6,7", "hostname": "a"}]
    details = nodes_details(nodes, "slurm")
    assert details["ranks"] == [{"rank": 0, "node": "gpu-a", "cpus": "0-15", "visible_gpus": "0,1,2,3,4,5,6,7"},
                                {"rank": 8, "node": "gpu-b", "cpus": "0-15", "visible_gpus": "0,1,2,3,4,5,6,7"}]
    assert cpu_ranges({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


# --- item 7: sockets --------------------------------------------------------------------------
def run_script(tmp_path, env_of_rank: dict, node_env: dict, address: str | None) -> str:
    script = tmp_path / "rank.sh"
    script.write_text(_rank_script(["sh", "-c", 'printf %s "${GLOO_SOCKET_IFNAME-unset}"'], env_of_rank, address))
    return subprocess.run(["sh", str(script)], env={"PATH": "/usr/bin:/bin", **node_env}, capture_output=True,
                          text=True).stdout


def test_a_slurm_rank_binds_gloo_to_the_interface_of_its_nodes_address(tmp_path):
    assert interface_of("127.0.0.1") == "lo"
    pythonpath = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}  # the package, as srun's cwd has it
    assert run_script(tmp_path, {}, pythonpath, "127.0.0.1") == "lo"
    assert run_script(tmp_path, {}, {**pythonpath, "GLOO_SOCKET_IFNAME": "ib0"}, "127.0.0.1") == "ib0"  # the user's
    assert run_script(tmp_path, {}, pythonpath, "192.0.2.77") == "unset"  # no interface holds it: left to gloo


def test_a_node_groups_ranks_bind_gloo_only_and_take_their_nodes_gpu(monkeypatch):
    span = NodeSpan(group=None, nodes=("node0", "node1"), addresses=("10.1.0.1", "10.1.0.2"), gpus_per_node=8,
                    interface="eth1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2,1,0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    placed = span.bound_here({GPU_SLOT_ENV: "1", "RANK": "9"})
    assert placed == {"GLOO_SOCKET_IFNAME": "eth1", "CUDA_VISIBLE_DEVICES": "2", "RANK": "9"}


def test_nccls_transport_is_read_from_the_rank_logs(tmp_path):
    (tmp_path / "rank0.log").write_text("gpu-a:1:1 [0] NCCL INFO Using network IB\n")
    (tmp_path / "rank8.log").write_text("gpu-b:1:1 [0] NCCL INFO Using network IB\nstep 3\n")
    assert nccl_transport([tmp_path / "rank0.log", tmp_path / "rank8.log", tmp_path / "missing.log"]) == "IB"
    (tmp_path / "rank8.log").write_text("NCCL INFO Using network Socket\n")
    assert nccl_transport([tmp_path / "rank0.log", tmp_path / "rank8.log"]) == "IB/Socket"
    assert nccl_transport([tmp_path / "missing.log"]) is None


# --- item 4: parbench places ranks from the allocation's first node only ------------------------
ALLOCATED = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "128"}


@pytest.fixture
def slurm_answers(monkeypatch):
    """scontrol and srun on PATH, scontrol answering for the nodes gpu-a and gpu-b."""
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    answers = {("show", "hostnames", "gpu-[a-b]"): "gpu-a\ngpu-b\n",
               ("show", "node", "-o", "gpu-a"): "NodeName=gpu-a NodeAddr=10.1.0.1",
               ("show", "node", "-o", "gpu-b"): "NodeName=gpu-b NodeAddr=10.1.0.2"}
    monkeypatch.setattr(slurm, "_scontrol", lambda *args: answers[args])
    monkeypatch.setattr(slurm, "_KNOWN", {})


@pytest.mark.parametrize("node, where", [(None, "outside its nodes"), ("gpu-b", "on its node gpu-b")])
def test_parbench_off_the_allocations_first_node_refuses_in_one_line(slurm_answers, node, where):
    """`salloc -N 2 parbench run` runs parbench on the host salloc was typed on (no SLURMD_NODENAME):
    before, it placed every case from there."""
    env = {**ALLOCATED, **({"SLURMD_NODENAME": node} if node else {})}
    with pytest.raises(UserError) as refused:
        slurm.allocation(env)
    said = str(refused.value)
    assert "\n" not in said and where in said and "not on its first node gpu-a" in said
    assert "srun -N1 -n1 --overlap parbench run" in said


def test_on_the_first_node_the_allocation_is_read_whole(slurm_answers):
    where = slurm.allocation({**ALLOCATED, "SLURMD_NODENAME": "gpu-a", "SLURM_STEP_ID": "0"})
    assert where == slurm.Allocation("4711", ("gpu-a", "gpu-b"), ("10.1.0.1", "10.1.0.2"), 8, 128, 0, True)
    assert "--overlap" in srun_command(job_for(DDP16), where, 16, Path("/x"))  # beside parbench's own step
