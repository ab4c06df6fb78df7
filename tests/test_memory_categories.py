"""A measured peak split into categories (issue 36, item 3): runtime, parameters, gradients,
optimizer state, activations, temporaries, inputs, harness, each beside its estimate.

Real tiny cases (one process, two gloo ranks) check that the categories are taken, stored and
sum to the peak; the tensor categories are checked against the exact sizes of the model and its
Adam state, so that a tracker that counted the wrong thing fails even where the runtime (the
bulk of a tiny case's resident set) would hide it in the sum. The explanation's wording is
checked on fixed figures. No test asserts on wall-clock time.
"""
from __future__ import annotations

import gc
import json
import math
import weakref
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.hardware.peaks import PeakTable
from suites.records.measurement import Measurement
from suites.records.memory_breakdown import (CATEGORIES, EXPLAINED_WITHIN, MEMORY_EXPLAINED, MemoryBreakdown,
                                             as_row, explain, from_row)
from suites.records.metric_registry import MEMORY_BREAKDOWN_METRICS, METRICS
from suites.records.metrics import derive
from suites.records.peak_memory import MemoryPeak
from suites.measure.memory_probes import MemoryProbe
from suites.records.record import Record
from suites.records.store import ResultsStore, load_records
from suites.strategies.jobs import case_work, job_for
from tests.real_run_timing import REAL_RUN

MiB = 2**20
TINY = {"model": "mlp", "batch": 8, "hidden": 64, "depth": 2, "optimizer": "adam"}


def tiny_case(strategy: str = "single", ranks: int = 1) -> Case:
    return Case.make("train_step", "torch", "cpu", strategy, "fp32", ranks, TINY)


def parameter_bytes(case: Case) -> int:
    """The tiny MLP's fp32 parameters, bytes; and its tensors, for Adam's per-tensor step."""
    shapes = job_for(case).workload.model.parameter_shapes().values()
    return sum(4 * math.prod(shape) for shape in shapes)


def parameter_tensors(case: Case) -> int:
    return len(job_for(case).workload.model.parameter_shapes())


def run_and_load(case: Case, tmp_path: Path) -> Record:
    from suites.runner.runner import RunContext, Runner

    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    Runner.storing(RunContext(suite="test", store=store, timing=REAL_RUN)).run(case)
    (record,) = load_records(store.files())
    return record


#: The tiny cases' records, each run once per session (`tiny_record`).
_TINY_RUNS: dict[str, tuple[Record, Path]] = {}


def tiny_record(tmp_path_factory, strategy: str = "single", ranks: int = 1) -> tuple[Record, Path]:
    """The stored record of `tiny_case(strategy, ranks)` and its results folder, from one run per
    session: these tests and tests/test_memory.py (every ok training record has its memory figures)
    read the same record."""
    case = tiny_case(strategy, ranks)
    if case.id not in _TINY_RUNS:
        folder = tmp_path_factory.mktemp(f"tiny-{strategy}-{ranks}")
        _TINY_RUNS[case.id] = (run_and_load(case, folder), folder / "results")
    return _TINY_RUNS[case.id]


def assert_explained(record: Record) -> None:
    """Every category is stored, and they sum to the measured peak within 10%."""
    assert record.status is Status.OK, record.reason
    metrics = record.metrics
    for name in CATEGORIES:
        assert metrics[f"memory_{name}_bytes"] >= 0, name
    total = sum(metrics[f"memory_{name}_bytes"] for name in CATEGORIES)
    peak = metrics["peak_memory_bytes"]
    assert abs(total - peak) <= EXPLAINED_WITHIN * peak, (total, peak)
    assert metrics["memory_unexplained_bytes"] == peak - total
    assert metrics["memory_explained_fraction"] == pytest.approx(total / peak)
    assert "% explained" in record.details[MEMORY_EXPLAINED]


def assert_adam_state_of(breakdown: MemoryBreakdown, params: int, tensors: int) -> None:
    """Adam keeps exp_avg and exp_avg_sq (each the parameters' size) and a 4-byte step per tensor."""
    assert breakdown.optimizer == 2 * params + 4 * tensors


# --- real cases -----------------------------------------------------------------------------------
def test_one_process_categories_are_the_models_own_and_sum_to_the_peak(tmp_path_factory, capsys):
    pytest.importorskip("torch")
    case = tiny_case()
    record, results = tiny_record(tmp_path_factory)
    assert_explained(record)
    (breakdown,) = record.measurement.memory_breakdown
    params = parameter_bytes(case)
    assert (breakdown.kind, breakdown.rank, breakdown.method) == ("cpu", 0, "torch MemTracker")
    # Parameters and Adam's state are live all step; gradients all of them from the update on.
    assert breakdown.parameters == params
    assert breakdown.gradients == params if breakdown.phase == "optimizer step" else breakdown.gradients <= params
    assert_adam_state_of(breakdown, params, parameter_tensors(case))
    assert breakdown.harness == 0  # the check's float32 initial weights are freed before the timed steps
    assert breakdown.inputs > 0 and breakdown.runtime > 0
    assert breakdown.step_peak_bytes is not None and breakdown.step_peak_bytes > 0
    # Activations kept for backward, the step's input batch included, are the estimate's count.
    assert record.metrics["memory_activations_kept_bytes"] == record.metrics["activation_bytes_per_device_estimate"]
    for name in ("parameters", "gradients", "optimizer"):
        assert record.metrics[f"memory_{name}_estimate_bytes"] == pytest.approx(
            record.metrics[f"memory_{name}_bytes"], rel=0.2), name

    from suites.frontends.cli import main

    assert main(["memory", "--results", str(results), "--notes"]) == 0
    shown = capsys.readouterr().out
    assert "single" in shown and "runtime" in shown and "harness" in shown


def test_two_gloo_ranks_each_explain_their_own_peak(tmp_path_factory):
    pytest.importorskip("torch")
    case = tiny_case("ddp", 2)
    record, _ = tiny_record(tmp_path_factory, "ddp", 2)
    assert_explained(record)
    peaks = {peak.rank: peak for peak in record.measurement.memory}
    breakdowns = record.measurement.memory_breakdown
    assert [b.rank for b in breakdowns] == [0, 1]
    params = parameter_bytes(case)
    for breakdown in breakdowns:
        # DDP replicates the model; its gradients are views of its all-reduce buckets, which stay
        # allocated from step to step.
        assert breakdown.parameters == params and breakdown.gradients == params
        assert_adam_state_of(breakdown, params, parameter_tensors(case))
        total = (breakdown.runtime + breakdown.tensor_bytes + breakdown.harness)
        assert abs(total - peaks[breakdown.rank].peak_bytes) <= EXPLAINED_WITHIN * peaks[breakdown.rank].peak_bytes


def test_the_tracked_step_leaves_no_autograd_graph_alive():
    """ModTracker's multi-grad hooks would keep the step's graph, and through it the model's
    parameters, alive after the case (torch 2.13): the tracked step removes them."""
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch.memory_breakdown import tracked_step

    def track_a_model() -> list[weakref.ref]:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                                    torch.nn.ReLU(), torch.nn.Linear(16, 4))
        optimizer = torch.optim.Adam(model.parameters())
        x = torch.randn(4, 8)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            model(x).sum().backward()
            optimizer.step()

        step()
        (breakdown,) = tracked_step(step, model, optimizer, [x], [torch.device("cpu")])
        assert breakdown.parameters == sum(p.numel() * 4 for p in model.parameters())
        return [weakref.ref(p) for p in model.parameters()]

    alive = track_a_model()
    gc.collect()
    assert not [ref for ref in alive if ref() is not None]


def test_a_module_run_once_per_micro_batch_is_tracked_not_refused():
    """A pipeline stage runs its module once per micro-batch, which MemTracker takes for a second
    iteration and refuses; the activations kept are those of every micro-batch in flight."""
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch.memory_breakdown import tracked_step

    stage = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
    batches = [torch.randn(8, 32) for _ in range(4)]

    def gpipe_step() -> None:  # every forward, then every backward
        optimizer.zero_grad(set_to_none=True)
        outputs = [stage(batch) for batch in batches]
        for output in outputs:
            output.sum().backward()
        optimizer.step()

    (breakdown,) = tracked_step(gpipe_step, stage, optimizer, batches, [torch.device("cpu")])
    one_output = 8 * 32 * 4
    assert breakdown.activations_kept >= len(batches) * one_output
    assert breakdown.optimizer == 0  # plain SGD keeps no state


# --- records: additive, older ones load -------------------------------------------------------------
def test_older_records_without_a_breakdown_still_load_and_report(tmp_path):
    pytest.importorskip("torch")
    case = tiny_case()
    old = Measurement(samples=(1e-3,) * 5, memory=(MemoryPeak("cpu", 0, 400 * MiB, baseline_bytes=300 * MiB),))
    data = old.to_dict()
    del data["memory_breakdown"]  # written before the field existed
    loaded = Measurement.from_dict(data)
    assert loaded.memory_breakdown == ()
    metrics = derive(case, loaded, tmp_path, "box", PeakTable.load(), case_work(case), False)
    assert not [name for name in metrics if name.startswith("memory_") and "estimate" not in name]
    assert metrics["memory_parameters_estimate_bytes"] == parameter_bytes(case)  # estimates need no breakdown

    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    record = Record(case=case, status=Status.OK, run_id="old", timestamp="2026-01-01T00:00:00Z", suite="memory",
                    environment={"machine": "box"}, measurement=loaded,
                    metrics={"peak_memory_bytes": 400 * MiB, "training_state_bytes": 100 * MiB})
    line = record.to_dict()
    line["measurement"].pop("memory_breakdown")
    store.path_for("box").write_text(json.dumps(line) + "\n")
    (back,) = load_records(store.files())
    assert back.measurement.memory_breakdown == () and back.metrics["peak_memory_bytes"] == 400 * MiB

    from suites.report.load.files import load_results

    frame = load_results(store.root)
    for name in MEMORY_BREAKDOWN_METRICS:
        assert name in frame.columns, name
    assert frame["memory_runtime_bytes"].isna().all()


def test_breakdowns_survive_the_record_and_the_gathering_between_ranks():
    breakdown = MemoryBreakdown("cpu", 0, parameters=10, gradients=11, optimizer=22, activations=3, temporaries=5,
                                inputs=2, harness=10, gathered=4, update_temporaries=1, communication=2,
                                activations_kept=7,
                                runtime=300, phase="optimizer step", step_peak_bytes=400, rank=1,
                                method="torch MemTracker")
    assert MemoryBreakdown.from_dict(breakdown.to_dict()) == breakdown
    assert from_row(1, as_row(breakdown), "torch MemTracker") == breakdown
    unknown = MemoryBreakdown("gpu", 3, 1, 1, 1, 1, 1, runtime=None, step_peak_bytes=None)
    assert from_row(0, as_row(unknown), "") == unknown
    assert Measurement.from_dict(Measurement((1.0,), memory_breakdown=(breakdown,)).to_dict()).memory_breakdown \
        == (breakdown,)


# --- the explanation -----------------------------------------------------------------------------------
ESTIMATES = {"parameters": 100 * MiB, "gradients": 100 * MiB, "optimizer": 200 * MiB, "activations": 10 * MiB}


def explained(**figures: int):
    values = {"parameters": 100 * MiB, "gradients": 100 * MiB, "optimizer": 200 * MiB, "activations": 0,
              "temporaries": 0, "inputs": 0, "harness": 0, "activations_kept": 10 * MiB, "runtime": 300 * MiB,
              "phase": "optimizer step", "method": "torch MemTracker", **figures}
    breakdown = MemoryBreakdown("cpu", 0, **values)
    total = sum(values[name] for name in CATEGORIES)
    return explain([breakdown], [MemoryPeak("cpu", 0, total, baseline_bytes=250 * MiB)], ESTIMATES)


def test_a_category_within_20_percent_of_its_estimate_needs_no_reason():
    note = explained().note()
    assert "vs estimate" not in note
    assert "100% explained" in note and "runtime 300 MiB" in note


def test_a_category_off_its_estimate_by_more_than_20_percent_says_by_how_much_and_why():
    note = explained(optimizer=400 * MiB).note()
    assert "optimizer 400 MiB vs estimate 200 MiB (2.00x)" in note
    assert "vs estimate 100 MiB" not in note  # parameters and gradients match theirs
    fsdp = explained(parameters=60 * MiB, gathered=40 * MiB, phase="backward",
                     method="torch FSDPMemTracker").note()
    assert "parameters 60 MiB vs estimate 100 MiB (0.60x): 40 MiB of it gathered (unsharded)" in fsdp
    early = explained(gradients=30 * MiB, phase="backward", method="torch FSDPMemTracker").note()
    assert "gradients 30 MiB vs estimate 100 MiB (0.30x): the peak came in the backward pass" in early
    kept = explained(activations_kept=20 * MiB).note()
    assert "activations 20 MiB vs estimate 10 MiB (2.00x)" in kept


def test_categories_without_an_estimate_say_what_they_hold():
    note = explained(temporaries=128 * MiB, update_temporaries=128 * MiB, harness=100 * MiB).note()
    assert "temporaries 128 MiB (no estimate): 128 MiB the optimizer update's transient tensors" in note
    fsdp = explained(temporaries=192 * MiB, communication=128 * MiB, phase="forward").note()
    assert ("temporaries 192 MiB (no estimate): 128 MiB FSDP's all-gather and reduce-scatter buffers (a prefetched "
            "unit's included); 64 MiB made in the forward pass") in fsdp
    assert "harness 100 MiB: the benchmark's own float32 copy of the initial weights" in note


def test_a_peak_the_categories_leave_unexplained_by_over_10_percent_is_flagged():
    explanation = explained()
    peak = explanation.peak
    bigger = explain([explanation.breakdown], [MemoryPeak("cpu", 0, int(peak.peak_bytes * 1.25), baseline_bytes=1)],
                     ESTIMATES)
    assert bigger.explained_fraction == pytest.approx(0.8)
    assert "no tracked tensor holds" not in explanation.note()
    assert "unexplained 175 MiB, 20% of the peak, is memory no tracked tensor holds" in bigger.note()


def test_the_rank_with_the_largest_peak_is_the_one_explained():
    small = MemoryBreakdown("cpu", 0, 1, 1, 1, 1, 1, rank=0)
    large = MemoryBreakdown("cpu", 0, 2, 2, 2, 2, 2, rank=1)
    peaks = [MemoryPeak("cpu", 0, 10 * MiB, rank=0), MemoryPeak("cpu", 0, 20 * MiB, rank=1)]
    assert explain([small, large], peaks, ESTIMATES).breakdown is large
    assert explain([], peaks, ESTIMATES) is None


def test_every_breakdown_metric_is_documented_and_a_report_column():
    from suites.report.load.columns import COLUMNS, FLOAT_COLUMNS

    for name in MEMORY_BREAKDOWN_METRICS:
        assert COLUMNS[name] == METRICS[name].description
        assert name in FLOAT_COLUMNS
    assert {f"memory_{name}_bytes" for name in CATEGORIES} <= set(MEMORY_BREAKDOWN_METRICS)


# --- the timer's untimed, tracked step ---------------------------------------------------------------
class FixedProbe(MemoryProbe):
    """A CPU probe whose every stop reads one fixed peak."""

    def start(self) -> None: ...

    def stop(self) -> list[MemoryPeak]:
        return [MemoryPeak("cpu", 0, 50 * MiB, baseline_bytes=10 * MiB)]

    def release_cached(self) -> None: ...


def tracked_device(track):
    from tests.test_timing import FakeClock, PretendDevice, constant

    class Tracked(PretendDevice):
        def memory_probe(self):
            return FixedProbe()

        def memory_tracker(self):
            return (lambda: track(self)) if track else None

    clock = FakeClock()
    device = Tracked(clock, constant(0.002))
    device.details = {}
    return device, clock


def test_the_tracked_step_comes_once_after_the_timed_blocks_with_its_own_peak():
    from suites.measure.timing import measure
    from tests.test_timing import FAST

    def track(device) -> list[MemoryBreakdown]:
        device.step()
        device.synchronize()
        return [MemoryBreakdown("cpu", 0, parameters=1, gradients=1, optimizer=2, activations=0, temporaries=0,
                                method="fake")]

    device, clock = tracked_device(track)
    measurement = measure(device, FAST, clock)
    assert device.steps == measurement.warmup_steps + measurement.n * measurement.block_size + 1
    (breakdown,) = measurement.memory_breakdown
    assert breakdown.step_peak_bytes == 50 * MiB and breakdown.method == "fake"


def test_a_tracker_that_fails_costs_the_case_its_breakdown_not_its_timing():
    from suites.measure.timing import measure
    from tests.test_timing import FAST

    def track(device) -> list[MemoryBreakdown]:
        raise NotImplementedError("MemTracker does not support memory tracking for multiple iterative calls.")

    device, clock = tracked_device(track)
    measurement = measure(device, FAST, clock)
    assert measurement.n >= 1 and measurement.memory_breakdown == ()
    assert device.details["memory_breakdown"].startswith("failed: NotImplementedError: MemTracker does not")
    untracked, clock = tracked_device(None)
    assert measure(untracked, FAST, clock).memory_breakdown == () and untracked.details == {}
