"""Issue 48, the cluster rehearsal: `parbench run --rehearse` inside a Slurm allocation, or with
`--nnodes N`, says per GPU case what the run across the nodes would decide (available, backend,
emulated, the devices its figure is divided by, the srun step's flags), from the functions the run
decides with. Discovery faked to 8 H100 a node (tests/cluster_truth.py); nothing is run. Before:
"--rehearse runs on this machine alone: leave out --nnodes", and no decision was shown."""
from __future__ import annotations

from dataclasses import replace

import pytest

from suites.cases.case import Case
from suites.frontends.cli import main
from suites.runner.rehearsal import NodesLikeThisOne, cluster_decision
from tests.cluster_truth import DISCOVERY_USERS, eight_gpus_a_node  # noqa: F401 (fixture)


def gpu(strategy: str, n: int, **params: object) -> Case:
    return Case.make("train_step", "torch", "gpu", strategy, "bf16", n, {"model": "mlp", "batch": 32, **params})


def test_a_case_over_both_nodes_of_the_allocation_is_real_on_16_gpus_with_its_srun_step(eight_gpus_a_node):
    allocation = replace(eight_gpus_a_node, cpus_per_node=112)
    decided = cluster_decision(gpu("ddp", 16), allocation)
    assert (decided.reason, decided.backend, decided.emulated, decided.divided_by, decided.nodes) == (
        "", "nccl", False, 16, 2)
    assert decided.launch == ("srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=14 "
                              "--gpus-per-node=8 --gpu-bind=none --kill-on-bad-exit=1")


def test_a_case_that_fits_one_node_runs_there(eight_gpus_a_node):
    decided = cluster_decision(gpu("fsdp", 4), eight_gpus_a_node)
    assert (decided.reason, decided.backend, decided.emulated, decided.divided_by, decided.nodes) == (
        "", "nccl", False, 4, 1)
    assert decided.launch == "on the first node, as on one machine"


def test_a_case_needing_more_nodes_than_there_are_says_how_many(eight_gpus_a_node):
    decided = cluster_decision(gpu("ddp", 32), eight_gpus_a_node)
    assert "needs 4 nodes of 8 gpu(s) each" in decided.reason and "salloc -N 4" in decided.reason


def test_with_nnodes_the_ranks_go_through_the_node_group(eight_gpus_a_node):
    decided = cluster_decision(gpu("ddp", 16), NodesLikeThisOne(2, 8))
    assert (decided.backend, decided.emulated, decided.divided_by, decided.nodes) == ("nccl", False, 16, 2)
    assert decided.launch == "2 nodes x 8 ranks through the --nnodes group (no srun)"


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_scaling_suites_rehearsal_with_nnodes_prints_each_cases_decisions(eight_gpus_a_node, capsys,
                                                                               monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    # --max-minutes leaves every CPU rehearsal out: the decisions are what is asked here
    code, out, _ = run_cli(capsys, "run", "--suite", "scaling", "--rehearse", "--nnodes", "2", "--max-minutes", "0.05")
    assert code == 0
    assert "scaling on 2 nodes of 8 GPU(s) (--nnodes): what the run decides of each GPU case" in out
    row = next(line for line in out.splitlines() if "train_step/torch/gpu:4/ddp/fp32/batch=64,model=mlp,scaling=weak"
               in line and "│ yes" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")][1:] == [
        "yes", "nccl", "no", "4 GPU(s)", "1", "on the first node, as on one machine"]


def test_without_gpus_here_the_rehearsal_says_every_gpu_case_reads_unavailable(fresh_discovery, capsys, monkeypatch):
    from suites.hardware.devices import DeviceInfo

    for where in DISCOVERY_USERS:
        monkeypatch.setattr(f"{where}.discover", lambda framework, kind: DeviceInfo(framework, kind, 0,
                                                                                    reason="no GPU visible"))
    code, out, _ = run_cli(capsys, "run", "--suite", "scaling", "--filter", "strategy=ddp", "--rehearse", "--nnodes",
                           "2", "--max-minutes", "0.05")
    assert code == 0 and "this machine sees no GPU, so neither do the nodes decided on" in out


@pytest.mark.parametrize("extra", [["--node-rank", "0"], ["--rdzv-endpoint", "10.0.0.1:29400"]])
def test_a_rehearsal_across_machines_is_refused_in_one_line(capsys, extra):
    code, out, err = run_cli(capsys, "run", "--suite", "scaling", "--rehearse", "--nnodes", "2", *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"leave out {extra[0]}" in err
