"""A case is planned once into its job, or kept with the reason it has none here: a run never
ends on a case it cannot resolve."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Framework, Status
from suites.frameworks import implementations
from suites.records.store import ResultsStore
from suites.runner.plan import Unresolved, plan, unavailable_reason
from suites.runner.runner import RunContext, Runner
from suites.strategies.jobs import Job
from suites.workloads import workload_class
from suites.workloads.base import Workload

MATMUL = {"m": 8, "n": 8, "k": 8}


def test_a_workload_without_a_runnable_in_the_cases_framework_is_unavailable_with_the_way_out(monkeypatch, tmp_path):
    pytest.importorskip("tensorflow")  # without TF a tf case is unavailable for that reason first
    monkeypatch.setitem(implementations.BUILT_IN, "matmul",
                        {Framework.TORCH: "suites.frameworks.torch.kernels:TorchMatmul"})
    case = Case.make("matmul", "tf", "cpu", params=MATMUL)
    planned = plan(case)
    assert isinstance(planned, Unresolved)
    assert planned.reason == ("matmul has no tf implementation (it runs in torch); name a runnable for tf in "
                              "`suites.frameworks.implementations.BUILT_IN` to run it there")
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TimingConfig(), label="box")
    context.store.ensure_writable()
    record = Runner.storing(context).run(case)  # stored, not a traceback that ends the run
    assert record.status is Status.UNAVAILABLE and record.reason == planned.reason
    assert [stored.case for stored in ResultsStore(tmp_path).load()] == [case]


def test_a_runnable_asked_of_a_framework_without_one_says_where_to_name_it(monkeypatch):
    """Below the planning step (a test or tool building the runnable itself): the same sentence, not a KeyError."""
    monkeypatch.setitem(implementations.BUILT_IN, "matmul",
                        {Framework.TORCH: "suites.frameworks.torch.kernels:TorchMatmul"})
    with pytest.raises(ValueError, match="matmul has no tf implementation .* name a runnable for tf in"):
        implementations.runnable_class(workload_class("matmul"), Framework.TF)


def test_a_users_workload_without_a_runnable_is_told_to_name_it_in_its_implementations():
    class Unrunnable(Workload):
        name, kind, params = "unrunnable_for_test", "kernel", ()
        implementations = {Framework.TORCH: "somewhere:Runnable"}

        def flops_per_step(self) -> float:
            return 0.0

    assert implementations.missing_runnable_reason(Unrunnable, Framework.TF).endswith(
        "name a runnable for tf in its `implementations` to run it there")
    assert implementations.missing_runnable_reason(Unrunnable, Framework.TORCH) is None


def test_a_case_with_a_runnable_plans_into_its_job():
    planned = plan(Case.make("matmul", "torch", "cpu", params=MATMUL))
    assert isinstance(planned, Job) and unavailable_reason(planned) is None


def test_a_precision_the_workload_does_not_declare_is_unavailable_with_its_precisions():
    """`Workload.precisions` is a rule the plan reads: the all-reduce has no tf32 (a matmul mode)."""
    planned = plan(Case.make("allreduce", "torch", "cpu", "ddp", "tf32", 2, {"bytes": 1024}))
    assert isinstance(planned, Job)
    assert unavailable_reason(planned) == "allreduce does not run in tf32: its precisions are bf16, fp16, fp32"
    assert unavailable_reason(plan(Case.make("allreduce", "torch", "cpu", "ddp", "bf16", 2, {"bytes": 1024}))) is None
