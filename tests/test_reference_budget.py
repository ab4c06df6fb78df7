"""The training check's reference, bounded (issue 32, N4): a reference over its FLOP budget is
not computed and the check says so (never passed); one under it is computed as before, by rank 0
with its node's share of the cores and its threads put back after; the other ranks wait for it in
a CPU group of their own, and fail at once where rank 0 fails to compute it."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from suites.cases.case import Case  # noqa: E402
from suites.cases.vocabulary import Status  # noqa: E402
from suites.frameworks.torch import distributed as torch_distributed  # noqa: E402
from suites.frameworks.torch import training as torch_training  # noqa: E402
from suites.frameworks.torch.distributed import node_share_thread_count  # noqa: E402
from suites.frameworks.torch.training import TorchTrainStep  # noqa: E402
from suites.records.check import NOT_CHECKED, Check, not_checked  # noqa: E402
from suites.measure import reference_budget  # noqa: E402
from suites.runner.launchers import free_ports  # noqa: E402
from suites.measure.reference_budget import (BUDGET_ENV, COLLECTIVE_TIMEOUT_S, REFERENCE_FLOP_BUDGET,  # noqa: E402
                                         SLOWEST_CPU_FLOP_S, ReferenceCost, flop_budget,
                                         gradient_reference_cost, over_budget, reference_threads,
                                         trajectory_reference_cost)
from suites.strategies.jobs import job_for  # noqa: E402


def train_case(strategy: str = "single", precision: str = "fp32", n: int = 1, **params: int | str) -> Case:
    return Case.make("train_step", "torch", "cpu", strategy, precision, n, {"model": "mlp", "batch": 4, **params})


def refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the reference over budget was computed")


# --- the budget ---------------------------------------------------------------------------------
def test_a_reference_over_the_budget_is_a_check_not_done_that_never_passes():
    cost = gradient_reference_cost(6e12, 16)
    check = over_budget(cost, REFERENCE_FLOP_BUDGET, detail="ddp on 8 gpu device(s)")
    assert isinstance(check, Check) and not check.passed and not check.checked
    assert check.metric == NOT_CHECKED and (check.value, check.tolerance) == (6e12, REFERENCE_FLOP_BUDGET)
    assert "6.0e+12 FLOP" in check.detail and "5.0e+11" in check.detail and "check batch of 16" in check.detail
    assert BUDGET_ENV in check.detail and "smaller batch" in check.detail and "ddp on 8 gpu" in check.detail
    assert str(check).startswith("not checked (") and "pass" not in str(check)
    assert Check.from_dict(check.to_dict()) == check  # stored and read back the same


def test_a_reference_within_the_budget_or_on_a_gpu_is_computed():
    assert over_budget(gradient_reference_cost(REFERENCE_FLOP_BUDGET, 4), REFERENCE_FLOP_BUDGET) is None
    assert over_budget(gradient_reference_cost(0.0, 4), REFERENCE_FLOP_BUDGET) is None  # FLOPs unknown
    # the fp32 trajectory on rank 0's GPU is fast whatever its FLOP; on the CPU it is bounded
    assert over_budget(trajectory_reference_cost(1e14, 4, on_cpu=False), REFERENCE_FLOP_BUDGET) is None
    on_cpu = trajectory_reference_cost(1e11, 4, on_cpu=True)
    assert on_cpu.flop == 5e11 and over_budget(on_cpu, 4e11) is not None
    # the budget is per thread rank 0 computes with: two threads, twice the FLOP
    assert over_budget(on_cpu, 4e11, threads=2) is None
    doubled = over_budget(gradient_reference_cost(1e12, 4), 4e11, threads=2)
    assert doubled is not None and doubled.tolerance == 8e11 and "2 thread(s)" in doubled.detail


def test_the_budget_can_be_raised_through_the_environment(monkeypatch):
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    assert flop_budget() == REFERENCE_FLOP_BUDGET
    monkeypatch.setenv(BUDGET_ENV, "1e13")
    assert flop_budget() == 1e13


def test_a_checked_check_reads_as_before():
    assert not_checked(2.0, 1.0, "why").checked is False
    assert Check(True, "grad_rel_l2_err", 1e-3, 5e-2).checked
    assert str(Check(False, "grad_rel_l2_err", 1.0, 5e-2)) == "FAIL (grad_rel_l2_err=1.00e+00 > 5e-02)"


def test_the_others_wait_longer_than_the_reference_can_take():
    """At least what any collective allows; for a reference at the budget, more than it takes at
    the slowest rate expected of one core."""
    assert ReferenceCost(0.0, True, "").wait_s() == COLLECTIVE_TIMEOUT_S
    at_budget = gradient_reference_cost(REFERENCE_FLOP_BUDGET, 4)
    assert at_budget.wait_s() > REFERENCE_FLOP_BUDGET / SLOWEST_CPU_FLOP_S + COLLECTIVE_TIMEOUT_S
    assert trajectory_reference_cost(1e14, 4, on_cpu=False).wait_s() < trajectory_reference_cost(
        1e14, 4, on_cpu=True).wait_s()


# --- threads ------------------------------------------------------------------------------------
@pytest.mark.parametrize("current, cores, usable, local_ranks, expected", [
    (1, 96, 96, 8, 12),   # torchrun's one thread per rank, on an 8-GPU node
    (1, 96, 96, 0, 96),   # LOCAL_WORLD_SIZE unknown: taken as one
    (1, 8, 2, 2, 2),      # pinned to 2 cores: no more threads than those
    (4, 8, 8, 8, 4),      # already more than its share: kept
    (1, 4, 4, 8, 1),      # more ranks than cores: at least one
])
def test_rank_0_takes_its_nodes_share_of_the_cores(current, cores, usable, local_ranks, expected):
    assert reference_threads(current, cores, usable, local_ranks) == expected


def test_the_threads_are_put_back_after_the_reference_even_when_it_fails(monkeypatch):
    monkeypatch.setattr(torch_distributed, "reference_threads", lambda *args: 3)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch_distributed.node_share_of_threads() as threads:
            assert threads == torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError), torch_distributed.node_share_of_threads():
            raise ValueError("the reference failed")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)


def test_the_local_world_size_comes_from_torchrun(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert torch_distributed.local_world_size() == 8
    for value in ("", "0", "x"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        assert torch_distributed.local_world_size() == 1


# --- the runnable: one process ------------------------------------------------------------------
@pytest.mark.parametrize("precision, reference", [("fp32", "reference_gradients"), ("bf16", "reference_losses")])
def test_a_check_over_budget_computes_no_reference_and_does_not_pass(monkeypatch, precision, reference):
    monkeypatch.setenv(BUDGET_ENV, "1")
    monkeypatch.setattr(torch_training, reference, refuse)
    runnable = TorchTrainStep(job_for(train_case(precision=precision)))
    runnable.setup()
    try:
        check = runnable.check()
    finally:
        runnable.teardown()
    threads = node_share_thread_count()  # the budget of 1 FLOP is per thread
    assert not check.passed and check.metric == NOT_CHECKED and check.tolerance == float(threads)
    assert check.value == pytest.approx(runnable.job.check_job().workload.flops_per_step()
                                        * (1 if precision == "fp32" else 5))
    assert "reference not computed" in check.detail and "single on 1 cpu device(s)" in check.detail


def test_a_check_within_budget_computes_its_reference_with_more_threads_and_restores_them(monkeypatch):
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    monkeypatch.setattr(torch_distributed, "reference_threads", lambda *args: 2)
    seen = []
    computed = torch_training.reference_gradients

    def reference(*args: object) -> dict:
        seen.append(torch.get_num_threads())
        return computed(*args)

    monkeypatch.setattr(torch_training, "reference_gradients", reference)
    saved = torch.get_num_threads()
    runnable = TorchTrainStep(job_for(train_case()))
    runnable.setup()
    torch.set_num_threads(1)  # as torchrun leaves a rank
    try:
        check = runnable.check()
        assert torch.get_num_threads() == 1  # what the timed steps run with
    finally:
        torch.set_num_threads(saved)
        runnable.teardown()
    assert seen == [2]
    assert check.passed and check.checked and check.metric == "grad_rel_l2_err", check


# --- ranks ----------------------------------------------------------------------------------------
def _broadcasts_on_rank(rank: int, port: int, results: dict) -> None:
    """Rank `rank` of two gloo ranks: one reference computed, then one whose compute fails."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        group = SimpleNamespace(rank=rank)
        results[rank, "computed"] = torch_distributed.ProcessGroup.broadcast_computed(group, lambda: [1, 2, 3], 60.0)

        def fails() -> None:
            raise ValueError("out of memory, say")

        try:
            torch_distributed.ProcessGroup.broadcast_computed(group, fails, 60.0)
        except Exception as error:  # noqa: BLE001 - what each rank raised is the result
            results[rank, "failed"] = f"{type(error).__name__}: {error}"
    finally:
        torch.distributed.destroy_process_group()


def test_the_other_ranks_get_rank_0s_result_or_its_failure():
    """Over a gloo group of their own; where rank 0's compute raises, it raises there and the
    others raise at once instead of waiting out the group's timeout."""
    import multiprocessing

    with multiprocessing.Manager() as manager:
        results = manager.dict()
        torch.multiprocessing.spawn(_broadcasts_on_rank, args=(free_ports(1)[0], results), nprocs=2)
        got = dict(results)
    assert got[0, "computed"] == got[1, "computed"] == [1, 2, 3]
    assert got[0, "failed"] == "ValueError: out of memory, say"
    assert (got[1, "failed"].startswith("RuntimeError: rank 0 failed")
            and "ValueError: out of memory" in got[1, "failed"])


def test_ddp_over_budget_on_two_gloo_ranks_is_not_checked_without_waiting(monkeypatch, fast_timing, our_processes):
    """Every rank returns the same check at once, computing no reference; the case is ok and
    its check is stored as not done (the report shows no check, not a pass or a FAIL). (Under the
    budget, test_torch_strategies' two-rank ddp case passes.)"""
    from suites.runner.launchers import run_ranks
    from suites.strategies.jobs import job_for

    monkeypatch.setenv(BUDGET_ENV, "1")
    outcome = run_ranks(job_for(train_case("ddp", n=2)), fast_timing)
    assert outcome.check is not None and not outcome.check.passed and outcome.check.metric == NOT_CHECKED
    # the figure stands, its check said undone: never failed for a check nobody ran, never passed
    assert outcome.status is Status.OK and str(outcome.check).startswith("not checked")
    assert outcome.check.tolerance >= 1.0
    assert reference_budget.BUDGET_ENV in outcome.check.detail
    assert our_processes() == []


def test_the_report_reads_a_check_left_undone_as_no_check_not_a_fail(tmp_path):
    """A not-checked record's figure stays usable; its check column is empty, never FAIL or pass."""
    from suites.records.record import Record
    from suites.report.load.parbench import row
    from suites.report.analyses.selection import usable
    import pandas as pd

    undone = not_checked(6e12, 5e11, "reference not computed")
    record = Record(case=train_case("ddp", n=2), status=Status.OK, run_id="r", timestamp="2026-11-26T00:00:00+00:00",
                    suite="t", environment={"machine": "m"}, check=undone)
    made = row(Record.from_dict(record.to_dict()), tmp_path / "records.jsonl")
    assert made["check_passed"] is None and made["check_metric"] == NOT_CHECKED
    frame = pd.DataFrame([{"status": "ok", "throughput": 1.0, "check_passed": made["check_passed"]}])
    assert len(usable(frame)) == 1


def test_the_reports_flags_say_a_figure_was_not_checked():
    import pandas as pd
    from suites.report.sections.problems import badges

    frame = pd.DataFrame({"check_metric": [NOT_CHECKED, "grad_rel_l2_err"], "noisy": [False, True],
                          "why_not_text": ["", ""]})
    assert list(badges(frame)) == ["numerics not checked", "noisy"]
