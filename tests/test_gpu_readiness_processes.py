"""GPU readiness, processes: what the first multi-GPU run would hit in how cases are launched,
synchronised, torn down and blamed, exercised on a CPU (issue 13, items 4, 5, 15 and 16's
DataParallel sync).

- `dataparallel` + `bf16` must compute in bf16 inside nn.DataParallel's replica threads.
- A rank whose case fails exits non-zero, so its peers are stopped at once, and the record names
  the rank that failed first with its own error.
- `dataparallel` runs in its own process (a hang ends at the case timeout); torch runnables
  release their device memory at teardown.
- DataParallel's step is synchronised on every GPU it uses.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.processes import mark_processes

torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import find_plugin, plugin_for  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from suites.cases.vocabulary import Framework, Status, Strategy  # noqa: E402
from suites.frameworks.torch import backend  # noqa: E402
from suites.frameworks.torch import catalog as torch_catalog
from suites.frameworks.torch.kernels import TorchMatmul  # noqa: E402
from suites.frameworks.torch.training import TorchTrainStep  # noqa: E402
from suites.frontends.prepared import runs_in_process  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.runner import launchers  # noqa: E402
from suites.runner.eta import LAUNCH_OVERHEAD_S  # noqa: E402
from suites.runner.plan import plan  # noqa: E402
from suites.runner.runner import Runner  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402
from suites.runner.execute import FAILED_AT, Outcome  # noqa: E402
from suites.runner.runner import RunContext, Runner  # noqa: E402
from suites.measure.launch import Launch  # noqa: E402
from suites.workloads import WORKLOADS, workload_of  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = TimingConfig(budget_s=0.3, warmup_s=0.05, min_time_s=0.05, block_min_s=0.005)
DATAPARALLEL = find_plugin(Framework.TORCH, Strategy.DATAPARALLEL)


def dataparallel_case(precision: str = "bf16", n: int = 2) -> Case:
    return Case.make("train_step", "torch", "gpu", "dataparallel", precision, n,
                     {"model": "mlp", "batch": 4})


def cpu_model(case: Case) -> torch.nn.Module:
    spec = workload_of(case).model
    return torch_catalog.build(spec, spec.init_weights(0), torch.device("cpu"))


# --- item 4: dataparallel + bf16 computes in bf16 ---------------------------------------------
def _as_a_replica_thread(module: torch.nn.Module, x: torch.Tensor) -> torch.dtype:
    """Call `module` the way nn.DataParallel's `parallel_apply` calls a replica: in a thread of
    its own that enters autocast without a dtype, i.e. in the device type's default (float16 on
    CUDA; on this CPU float16 is given explicitly, CPU autocast's default being bfloat16)."""
    result: list[torch.dtype] = []

    def replica() -> None:
        with torch.autocast("cpu", dtype=torch.float16):
            result.append(module(x).dtype)

    thread = threading.Thread(target=replica)
    thread.start()
    thread.join()
    return result[0]


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_dataparallel_replicas_compute_in_the_cases_autocast_dtype(precision, dtype):
    case = dataparallel_case(precision)
    model = cpu_model(case)
    inside: list[torch.dtype] = []
    model.register_forward_pre_hook(lambda module, inputs: inside.append(torch.get_autocast_dtype("cpu")))
    wrapped = DATAPARALLEL.hooks.wrap(model, torch.device("cpu"), job_for(case))
    assert isinstance(wrapped, torch.nn.DataParallel)
    replica = wrapped.module  # what DataParallel replicates onto each GPU
    x = torch.randn(4, *model.input_shape)
    assert _as_a_replica_thread(replica, x) == dtype
    assert inside == [dtype]  # the model itself ran under the case's autocast dtype
    # The bare model, called the same way, computes in the thread's float16: the bug fixed.
    assert _as_a_replica_thread(model, x) == torch.float16


def test_dataparallel_in_fp32_replicates_the_bare_model():
    """fp32 and tf32 run no autocast at all, as a hand-written loop would."""
    model = cpu_model(dataparallel_case("fp32"))
    wrapped = DATAPARALLEL.hooks.wrap(model, torch.device("cpu"), job_for(dataparallel_case("fp32")))
    assert wrapped.module is model


# --- item 16 (part): DataParallel synchronises every GPU it uses -------------------------------
def test_dataparallel_synchronises_every_gpu_of_the_case(monkeypatch):
    cuda0 = torch.device("cuda", 0)
    assert DATAPARALLEL.hooks.devices_in_use(job_for(dataparallel_case(n=4)), cuda0) == \
        [torch.device("cuda", i) for i in range(4)]
    for strategy in (Strategy.SINGLE, Strategy.DDP):  # one device per process
        hooks = find_plugin(Framework.TORCH, strategy).hooks
        assert hooks.devices_in_use(job_for(dataparallel_case()), cuda0) == [cuda0]

    # The training runnable waits for every device its strategy names.
    single = find_plugin(Framework.TORCH, Strategy.SINGLE)

    class OnThreeGpus(type(single.hooks)):
        def devices_in_use(self, job, device):
            return DATAPARALLEL.hooks.devices_in_use(job_for(dataparallel_case(n=3)), cuda0)

    class SingleOnThreeGpus(type(single)):
        hooks = OnThreeGpus()

    job = job_for(Case.make("train_step", "torch", "cpu", "single", "fp32", params={"model": "mlp", "batch": 4}))
    runnable = TorchTrainStep(dataclasses.replace(job, strategy=SingleOnThreeGpus()))
    runnable.setup()
    waited: list[torch.device] = []
    monkeypatch.setattr(backend, "synchronize", waited.append)
    runnable.synchronize()
    assert waited == [torch.device("cuda", i) for i in range(3)]
    runnable.teardown()


# --- item 15: dataparallel in its own process; device memory released between cases ------------
def test_dataparallel_runs_isolated_with_a_deadline(monkeypatch):
    case = dataparallel_case()
    assert plugin_for(case).rules.launch is Launch.ISOLATED
    assert not runs_in_process(case)  # asv and pytest-benchmark hand it to the launcher
    started = []
    monkeypatch.setitem(launchers.LAUNCHERS, Launch.ISOLATED,
                        lambda job, timing: started.append(job.case) or Outcome(Status.OK))
    Runner(FAST).launch(job_for(case))
    assert started == [case]
    # the run's time estimate counts a process start for it
    monkeypatch.setattr("suites.runner.runner.unavailable_reason", lambda planned, nodes: None)
    assert Runner(FAST).estimate_s(plan(case)) == FAST.warmup_s + FAST.budget_s + LAUNCH_OVERHEAD_S


def test_the_training_suites_dataparallel_cases_are_asv_launched_benchmarks():
    asv_support = pytest.importorskip("suites.frontends.asv_support")
    from suites.grids.grid import load_suite

    suite = load_suite("training")
    classes = asv_support.benchmark_classes("training", "training", suite)
    gpu_dataparallel = {case.id for case in suite.cases
                        if case.strategy is Strategy.DATAPARALLEL and str(case.device) == "gpu"}
    assert gpu_dataparallel and gpu_dataparallel <= classes["TrainStepLaunched"].case_ids
    assert not gpu_dataparallel & classes["TrainStep"].case_ids


@pytest.mark.parametrize("runnable_of", [
    lambda: TorchMatmul(job_for(Case.make("matmul", "torch", "cpu",
                                              params={"m": 16, "n": 16, "k": 16}))),
    lambda: TorchTrainStep(job_for(Case.make("train_step", "torch", "cpu", "single", "bf16",
                                                 params={"model": "mlp", "batch": 4}))),
], ids=["matmul", "train_step"])
def test_torch_teardown_drops_the_cases_tensors_then_empties_the_cuda_cache(monkeypatch, runnable_of):
    """On CUDA, teardown empties the caching allocator once nothing of the case refers to its
    memory any more; on a CPU it never touches CUDA."""
    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(tensor() is None))

    runnable = runnable_of()
    runnable.setup()
    tensor = weakref.ref(next(iter(runnable.model.parameters())) if hasattr(runnable, "model")
                         else runnable.a[0])
    runnable.step()
    runnable.teardown()
    assert tensor() is None and emptied == []  # a CPU case: freed, and CUDA left alone

    runnable = runnable_of()
    runnable.setup()
    tensor = weakref.ref(next(iter(runnable.model.parameters())) if hasattr(runnable, "model")
                         else runnable.a[0])
    runnable.step()
    runnable.device = torch.device("cuda", 0)  # as set up on a GPU
    runnable.teardown()
    assert emptied == [True]  # emptied once, after the tensors were gone


# --- item 5: a failed rank exits non-zero; the first failure is named ---------------------------
FAILING_WORKLOADS = textwrap.dedent('''
    """Test-only workloads whose case fails."""
    import time
    from suites.records.check import Check
    from suites.strategies.registry import plugin_for
    from suites.measure.runnable import Runnable
    from suites.cases.vocabulary import Framework
    from suites.workloads.base import Param, Workload

    class FailingCheck(Workload):
        """Rank 1's check raises; rank 0 waits for it the way an NCCL collective waits for a
        peer that has gone: without noticing (gloo would notice the closed socket)."""
        name = "failing_check"
        kind = "collective"
        params = (Param("size", default=1),)
        implementations = {Framework.TORCH: "parbench_test_failing:FailingCheckRunnable"}

        def flops_per_step(self):
            return 0.0

    class FailingCheckRunnable(Runnable):
        def setup(self):
            self.group = self.job.strategy.hooks.join(self.job)

        def step(self):
            pass

        def synchronize(self):
            pass

        def check(self):
            if self.group.rank == 1:
                raise ValueError("rank 1's check failed on purpose")
            time.sleep(600)
            return Check(True, "none", 0.0, 0.0)

        def teardown(self):
            self.group.destroy()

    class FailingSetup(Workload):
        """A one-process kernel whose setup raises."""
        name = "failing_setup"
        kind = "kernel"
        params = (Param("size", default=1),)
        implementations = {Framework.TORCH: "parbench_test_failing:FailingSetupRunnable"}

        def flops_per_step(self):
            return 0.0

    class FailingSetupRunnable(Runnable):
        def setup(self):
            raise ValueError("setup failed on purpose")

        def step(self):
            pass

        def synchronize(self):
            pass

        def check(self):
            return Check(True, "none", 0.0, 0.0)
''')


@pytest.fixture
def failing_workloads(tmp_path, monkeypatch):
    """Registered here and, through a sitecustomize on PYTHONPATH, in the worker processes."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "parbench_test_failing.py").write_text(FAILING_WORKLOADS)
    (plugin / "sitecustomize.py").write_text(
        "from suites.workloads import register\n"
        "from parbench_test_failing import FailingCheck, FailingSetup\n"
        "register(FailingCheck)\nregister(FailingSetup)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(plugin), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.syspath_prepend(str(plugin))
    from parbench_test_failing import FailingCheck, FailingSetup

    for workload in (FailingCheck, FailingSetup):
        monkeypatch.setitem(WORKLOADS, workload.name, workload)


def test_a_worker_whose_case_fails_writes_its_outcome_and_exits_non_zero(tmp_path, failing_workloads):
    out = tmp_path / "outcome.json"
    case = Case.make("failing_setup", "torch", "cpu")
    result = subprocess.run([sys.executable, "-m", "suites", "worker", "--case", case.id,
                             "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stderr
    outcome = Outcome.from_dict(json.loads(out.read_text()))
    assert outcome.status is Status.FAILED
    assert outcome.reason == "setup: ValueError: setup failed on purpose"
    assert "setup failed on purpose" in result.stderr


def test_a_failed_rank_stops_its_blocked_peer_and_is_named_with_its_error(tmp_path, failing_workloads,
                                                                          monkeypatch):
    alive = mark_processes(monkeypatch)
    store = ResultsStore(tmp_path / "results")
    # Without the fix, rank 1 exits 0 and the launcher waits for rank 0 until this deadline.
    timing = dataclasses.replace(FAST, case_timeout_s=90.0)
    context = RunContext(suite="test", store=store, timing=timing)
    started = time.monotonic()
    [record] = Runner.storing(context).run_all([Case.make("failing_check", "torch", "cpu", "ddp", "fp32", 2)])
    assert time.monotonic() - started < 60, "the launcher waited for the failed rank's peer"
    assert record.status is Status.FAILED
    assert record.reason == "rank 1: check: ValueError: rank 1's check failed on purpose"
    assert record.details["rank"] == 1
    assert any("rank 1's check failed on purpose" in line for line in record.details["traceback_tail"])
    assert alive() == []


def _outcome_file(tmpdir: Path, rank: int, outcome: Outcome) -> None:
    (tmpdir / f"rank{rank}.json").write_text(json.dumps(outcome.to_dict()))


def _failed(reason: str, at: float) -> Outcome:
    return Outcome(Status.FAILED, reason, details={FAILED_AT: at})


def test_the_rank_that_failed_first_is_blamed_not_its_peers(tmp_path):
    """Ranks ending between two polls of the launcher: the earliest failure is the cause."""
    case = Case.make("allreduce", "torch", "cpu", "ddp", "fp32", 2, {"bytes": 1024})
    ranks = [SimpleNamespace(returncode=1), SimpleNamespace(returncode=1)]

    # Both wrote failed outcomes; rank 0's came from rank 1 going away, after rank 1's error.
    _outcome_file(tmp_path, 0, _failed("check: RuntimeError: Connection closed by peer", 20.0))
    _outcome_file(tmp_path, 1, _failed("check: ValueError: boom", 10.0))
    combined = launchers._outcome_of_processes(job_for(case), FAST, tmp_path, ranks, False, {0: 9.0, 1: 9.0})
    assert (combined.reason, combined.details["rank"]) == ("rank 1: check: ValueError: boom", 1)

    # Rank 1 crashed without an outcome before rank 0's consequent error: the crash is named.
    (tmp_path / "rank1.json").unlink()
    ranks[1].returncode = -11
    _outcome_file(tmp_path, 0, _failed("check: RuntimeError: Connection closed by peer", 9.5))
    combined = launchers._outcome_of_processes(job_for(case), FAST, tmp_path, ranks, False, {0: 9.0, 1: 9.0})
    assert combined.reason == "rank 1 exited with code -11 before reporting"

    # A rank stopped by the launcher is never blamed over the one that ended it.
    ranks[0].returncode = -15
    (tmp_path / "rank0.json").unlink()
    _outcome_file(tmp_path, 1, _failed("setup: MemoryError: out of memory", 10.0))
    combined = launchers._outcome_of_processes(job_for(case), FAST, tmp_path, ranks, False, {1: 9.0})
    assert combined.reason == "rank 1: setup: MemoryError: out of memory"

    # Rank 1 reported success, then crashed on its way out; the launcher stopped rank 0.
    _outcome_file(tmp_path, 1, Outcome(Status.OK))
    ranks[1].returncode = -6
    combined = launchers._outcome_of_processes(job_for(case), FAST, tmp_path, ranks, False, {1: 9.0})
    assert combined.reason == "rank 0 was stopped before reporting, after rank 1 exited with code -6"

    # Every rank succeeded: rank 0's outcome, which carries every rank's figures.
    _outcome_file(tmp_path, 0, Outcome(Status.OK, details={"who": 0}))
    _outcome_file(tmp_path, 1, Outcome(Status.OK, details={"who": 1}))
    combined = launchers._outcome_of_processes(job_for(case), FAST, tmp_path, [SimpleNamespace(returncode=0)] * 2,
                                               False, {})
    assert combined.status is Status.OK and combined.details == {"who": 0}
