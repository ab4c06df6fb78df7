"""Peak memory of training cases: the probes, the timer's hook, the gathering of ranks, the
records, the run table and the report.

The probes' decisions are asserted on controlled readings (fake allocator statistics, a
scripted resident set); the real cases check that every ok training record of both frameworks,
in one process and over two gloo ranks, carries memory figures.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.peak_memory import MemoryPeak
from suites.records.metrics import derive
from suites.hardware.peaks import PeakTable
from suites.records.record import Record
from suites.records.store import ResultsStore, load_records
from suites.strategies.jobs import case_work, job_for
from suites.report.render.tables import whole
from suites.report.load.columns import case_fields, environment_fields, tidy
from suites.report.load.derived import add_throughput, fill_metrics
from suites.report.render.terminal import memory as memory_cell
from suites.report.render.terminal import record_table, size
from suites.report.analyses.prices import PriceTable
from suites.report.sections import problems
from suites.report.sections.problems import MEMORY_TEXT
from suites.measure import memory_probes as run_memory
from suites.measure.memory_probes import MemoryProbe, ResidentMemoryProbe, ResidentSetSampler, gather_peaks
from suites.measure.runnable import Runnable
from suites.measure.timing import measure
from tests.test_report_analysis import frame_of, options
from tests.test_memory_categories import tiny_record
from tests.real_run_timing import REAL_RUN
from tests.test_timing import FAST, FakeClock, PretendDevice, constant

MiB = 2**20
TRAIN = Case.make("train_step", "torch", "cpu", params={"model": "mlp", "batch": 8})
#: What the run layer passes `derive` for TRAIN: its analytic work and whether it is emulated.
WORK = (case_work(TRAIN), job_for(TRAIN).emulated)


# --- the CPU probe ------------------------------------------------------------------------------
class ScriptedReads:
    """Resident-set reads from a script; `spiked` is set once the largest has been read."""

    def __init__(self, values: list[int]) -> None:
        self.values, self.index = values, 0
        self.spiked = threading.Event()

    def __call__(self) -> int:
        value = self.values[min(self.index, len(self.values) - 1)]
        self.index += 1
        if value == max(self.values):
            self.spiked.set()
        return value


def test_cpu_probe_reads_the_high_water_mark_since_its_start_without_sampling():
    resets: list[str] = []
    sampler = ResidentSetSampler(read=lambda: 250 * MiB, interval_s=3600)
    probe = ResidentMemoryProbe(100 * MiB, sampler, reset=lambda: resets.append("reset") or True,
                                high_water_mark=lambda: 300 * MiB)
    probe.start()
    probe.start()  # the timer starts it again before the timed blocks: a reset
    assert resets == ["reset", "reset"]
    (peak,) = probe.stop()
    assert peak == MemoryPeak("cpu", 0, 300 * MiB, baseline_bytes=100 * MiB)
    assert peak.training_state_bytes == 200 * MiB
    assert not any(thread.name == "parbench-rss" for thread in threading.enumerate())  # no sampling thread


def test_cpu_probe_samples_where_the_mark_cannot_be_reset_and_keeps_the_largest_read():
    reads = ScriptedReads([120 * MiB, 180 * MiB, 450 * MiB, 160 * MiB])
    probe = ResidentMemoryProbe(100 * MiB, ResidentSetSampler(read=reads, interval_s=0.001),
                                reset=lambda: False, high_water_mark=lambda: pytest.fail("no mark to read"))
    probe.start()
    assert reads.spiked.wait(timeout=60), "the sampling thread never read"
    (peak,) = probe.stop()
    assert peak.peak_bytes == 450 * MiB and peak.baseline_bytes == 100 * MiB
    assert not any(thread.name == "parbench-rss" for thread in threading.enumerate())


def test_sampler_started_anew_forgets_the_earlier_peak():
    values = iter([500 * MiB, 100 * MiB, 110 * MiB])
    sampler = ResidentSetSampler(read=lambda: next(values, 110 * MiB), interval_s=3600)  # reads at start/stop only
    sampler.start()
    sampler.start()
    assert sampler.stop() == 110 * MiB


@pytest.mark.skipif(run_memory.rss_bytes() is None, reason="no /proc/self/statm here")
@pytest.mark.parametrize("resettable", [True, False], ids=["high-water-mark", "sampled"])
def test_a_real_allocation_freed_before_stop_is_in_the_peak(resettable):
    if resettable and not run_memory.reset_high_water_mark():
        pytest.skip("this kernel does not let a process reset its high-water mark")
    sampler = ResidentSetSampler(interval_s=0.001)
    probe = ResidentMemoryProbe(run_memory.baseline_rss_bytes(), sampler,
                                reset=run_memory.reset_high_water_mark if resettable else lambda: False)
    probe.start()
    held = np.ones(64 * MiB // 8)  # touched: resident
    reads = sampler.reads
    while not resettable and sampler.reads < reads + 2:  # held until the sampler has seen it
        threading.Event().wait(0.001)
    del held
    (peak,) = probe.stop()
    # The kernel's counters of resident pages are approximate by well under a MiB.
    assert peak.peak_bytes >= peak.baseline_bytes + 63 * MiB


# --- the timer's hook and the gathering of ranks ------------------------------------------------
class RecordingProbe(MemoryProbe):
    """Notes the step count at each call; stops with a fixed peak."""

    def __init__(self, device: PretendDevice) -> None:
        self.device, self.calls = device, []

    def start(self) -> None:
        self.calls.append(("start", self.device.steps))

    def stop(self) -> list[MemoryPeak]:
        self.calls.append(("stop", self.device.steps))
        return [MemoryPeak("gpu", 0, 7 * MiB, 8 * MiB, 0)]


class ProbedDevice(PretendDevice):
    def memory_probe(self) -> MemoryProbe:
        self.probe = RecordingProbe(self)
        return self.probe


def test_timer_starts_the_probe_after_the_first_step_again_before_timing_and_stops_it_after():
    clock = FakeClock()
    device = ProbedDevice(clock, constant(0.002))
    measurement = measure(device, FAST, clock)
    (first, warm, stop) = device.probe.calls
    assert first == ("start", 1)  # after the first (compiling) step
    assert warm == ("start", measurement.warmup_steps)  # again: the timed blocks alone
    assert stop == ("stop", device.steps)
    assert device.steps - measurement.warmup_steps == measurement.n * measurement.block_size
    assert measurement.memory == (MemoryPeak("gpu", 0, 7 * MiB, 8 * MiB, 0),)


def test_a_case_cut_short_has_the_peak_of_its_warm_steps():
    clock = FakeClock()
    device = ProbedDevice(clock, constant(2.0))
    measurement = measure(device, TimingConfig(warmup_s=0.0, budget_s=1.0), clock)
    assert measurement.cut_short
    assert [name for name, _ in device.probe.calls] == ["start", "stop"]
    assert measurement.peak_memory_bytes == 7 * MiB


def test_a_step_that_raises_leaves_no_probe_running():
    clock = FakeClock()

    class Crashing(ProbedDevice):
        def step(self) -> None:
            if self.steps == 3:
                raise RuntimeError("device lost")
            super().step()

    device = Crashing(clock, constant(0.002))
    with pytest.raises(RuntimeError, match="device lost"):
        measure(device, FAST, clock)
    assert device.probe.calls[-1][0] == "stop"


class Rank(Runnable):
    """One of `world` ranks in threads, whose `gather` is a real collective over shared slots."""

    def __init__(self, rank: int, world: "World") -> None:
        self.rank, self.world = rank, world

    def setup(self) -> None: ...
    def step(self) -> None: ...
    def synchronize(self) -> None: ...
    def check(self) -> Check:
        return Check(True, "none", 0.0, 0.0)

    def gather(self, value: float) -> tuple[float, ...]:
        self.world.slots[self.rank] = value
        self.world.barrier.wait()
        values = tuple(self.world.slots)
        self.world.barrier.wait()
        return values


class World:
    def __init__(self, size: int) -> None:
        self.slots = [0.0] * size
        self.barrier = threading.Barrier(size, timeout=60)


def gathered_by_every_rank(own: dict[int, list[MemoryPeak]]) -> dict[int, tuple[MemoryPeak, ...]]:
    """`gather_peaks` in every rank of a threaded world, each with its own peaks: what each got."""
    world, results = World(len(own)), {}

    def run(rank: int) -> None:
        results[rank] = gather_peaks(Rank(rank, world), own[rank])

    threads = [threading.Thread(target=run, args=(rank,)) for rank in own]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_every_ranks_peaks_reach_every_rank_in_rank_order():
    own = {0: [MemoryPeak("cpu", 0, 300 * MiB, None, 200 * MiB)],
           1: [MemoryPeak("cpu", 0, 320 * MiB, None, None)],
           2: []}  # a rank that measured nothing still takes part in the collective
    results = gathered_by_every_rank(own)
    expected = (MemoryPeak("cpu", 0, 300 * MiB, None, 200 * MiB, rank=0),
                MemoryPeak("cpu", 0, 320 * MiB, None, None, rank=1))
    assert results[0] == results[1] == results[2] == expected


# --- measurement, record and metrics ------------------------------------------------------------
TWO_RANKS = (MemoryPeak("cpu", 0, 300 * MiB, None, 200 * MiB, 0), MemoryPeak("cpu", 0, 350 * MiB, None, 200 * MiB, 1))


def test_memory_is_kept_in_the_measurement_and_older_measurements_still_load():
    measurement = Measurement(samples=(1e-3, 1.1e-3, 0.9e-3), memory=TWO_RANKS)
    stored = measurement.to_dict()
    assert Measurement.from_dict(stored) == measurement
    del stored["memory"]
    old = Measurement.from_dict(stored)
    assert old.memory == () and old.peak_memory_bytes is None and old.training_state_bytes is None


def test_memory_metrics_are_derived_from_every_rank(tmp_path):
    metrics = derive(TRAIN, Measurement(samples=(1e-3,) * 5, memory=TWO_RANKS), tmp_path, "box",
                     PeakTable.load(), *WORK)
    assert metrics["peak_memory_bytes"] == 350 * MiB  # the largest of one rank
    assert metrics["training_state_bytes"] == 150 * MiB  # the largest peak - baseline
    assert metrics["peak_memory_total_bytes"] == 650 * MiB  # what the host holds for both
    assert "peak_reserved_bytes" not in metrics  # CPU: no reserved figure
    gpu = (MemoryPeak("gpu", 0, 2 * 2**30, 3 * 2**30, 0), MemoryPeak("gpu", 1, 2 * 2**30, 5 * 2**30, 0))
    gpu_metrics = derive(TRAIN, Measurement(samples=(1e-3,) * 5, memory=gpu), tmp_path, "box",
                     PeakTable.load(), *WORK)
    assert gpu_metrics["peak_reserved_bytes"] == 5 * 2**30 and gpu_metrics["training_state_bytes"] == 2 * 2**30
    bare = derive(TRAIN, Measurement(samples=(1e-3,) * 5), tmp_path, "box", PeakTable.load(), *WORK)
    assert not {"peak_memory_bytes", "training_state_bytes", "peak_memory_total_bytes"} & set(bare)


# --- GPU probes, on fakes of the frameworks' documented APIs ---------------------------------------
def test_torch_gpu_probe_resets_then_reads_allocated_and_reserved_per_device(monkeypatch):
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch import memory_probe as torch_memory

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(("reset", device.index)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: (device.index + 1) * 100 * MiB)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: (device.index + 1) * 128 * MiB)
    fake_driver_reads(monkeypatch, torch, used={0: 700 * MiB, 1: 900 * MiB}, reserved={0: 96 * MiB, 1: 200 * MiB})
    baseline = torch_memory.Baseline(rss_bytes=50 * MiB, allocated_bytes={1: 4 * MiB})
    probe = torch_memory.memory_probe([torch.device("cuda", 0), torch.device("cuda", 1)], baseline)
    probe.start()
    assert calls == [("reset", 0), ("reset", 1)]
    assert probe.stop() == [MemoryPeak("gpu", 0, 100 * MiB, 128 * MiB, 0, outside_allocator_bytes=604 * MiB),
                            MemoryPeak("gpu", 1, 200 * MiB, 256 * MiB, 4 * MiB, outside_allocator_bytes=700 * MiB)]
    assert isinstance(torch_memory.memory_probe([torch.device("cpu")], baseline), ResidentMemoryProbe)


def fake_driver_reads(monkeypatch, torch, used: dict[int, int], reserved: dict[int, int]) -> None:
    """torch.cuda's driver figure (`mem_get_info`: free, total of an 80 GiB GPU) and the allocator's
    current reservation, per device index."""
    total = 80 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (total - used[device.index], total))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: reserved[device.index])


def test_gpu_memory_outside_the_allocator_is_recorded_per_rank_and_survives_the_record(monkeypatch):
    """Issue 48, 9c: NCCL's buffers and library workspaces are outside torch's allocator, so
    `max_memory_reserved` misses them; each GPU's used-minus-reserved after the steps is kept, is
    gathered to rank 0 with the rank's other figures, and loads back (None from older records)."""
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch import memory_probe as torch_memory

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 10 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 12 * 2**30)
    fake_driver_reads(monkeypatch, torch, used={0: 13 * 2**30 + 600 * MiB}, reserved={0: 12 * 2**30})
    (peak,) = torch_memory.memory_probe([torch.device("cuda", 0)], torch_memory.Baseline(None)).stop()
    assert peak.outside_allocator_bytes == 2**30 + 600 * MiB
    other = MemoryPeak("gpu", 0, 10 * 2**30, 12 * 2**30, 0, outside_allocator_bytes=3 * 2**30)
    results = gathered_by_every_rank({0: [peak], 1: [other]})
    assert [gathered.outside_allocator_bytes for gathered in results[0]] == [2**30 + 600 * MiB, 3 * 2**30]
    assert MemoryPeak.from_dict(results[1][1].to_dict()) == results[1][1]
    older = {key: value for key, value in peak.to_dict().items() if key != "outside_allocator_bytes"}
    assert MemoryPeak.from_dict(older).outside_allocator_bytes is None


def test_tf_gpu_probe_resets_then_reads_the_peak_and_has_no_reserved_figure(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    from suites.frameworks.tf import memory_probe as tf_memory

    resets: list[str] = []
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", resets.append)
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda device: {"current": 3 * MiB, "peak": (int(device[-1]) + 1) * 64 * MiB})
    baseline = tf_memory.Baseline(rss_bytes=50 * MiB).with_gpus(["/GPU:0", "/GPU:1", "/CPU:0"])
    assert baseline.gpu_bytes == {"/GPU:0": 3 * MiB, "/GPU:1": 3 * MiB}
    probe = tf_memory.memory_probe(["/GPU:0", "/GPU:1"], baseline)
    probe.start()
    assert resets == ["GPU:0", "GPU:1"]
    assert probe.stop() == [MemoryPeak("gpu", 0, 64 * MiB, None, 3 * MiB),
                            MemoryPeak("gpu", 1, 128 * MiB, None, 3 * MiB)]
    assert isinstance(tf_memory.memory_probe(["/CPU:0"], baseline), ResidentMemoryProbe)


# --- real training cases: every ok record has its memory ------------------------------------------
def _run(case: Case, tmp_path: Path) -> Record:
    from suites.runner.runner import RunContext, Runner

    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    Runner.storing(RunContext(suite="test", store=store, timing=REAL_RUN)).run(case)
    (record,) = load_records([store.path_for(store_machine(store))])
    return record


def store_machine(store: ResultsStore) -> str:
    (path,) = (store.root / "parbench").glob("records-*.jsonl")
    return path.stem.removeprefix("records-")


@pytest.mark.parametrize("framework, strategy, ranks", [
    pytest.param("torch", "single", 1, id="torch-single"),
    pytest.param("tf", "single", 1, id="tf-single"),
    pytest.param("torch", "ddp", 2, id="torch-ddp-2-gloo-ranks"),
])
def test_every_ok_training_record_has_positive_memory_figures(framework, strategy, ranks, tmp_path,
                                                              tmp_path_factory):
    """The torch records are tests/test_memory_categories.py's tiny mlp cases (one process, two
    gloo ranks), run once for both modules; TF's single-device case runs here."""
    pytest.importorskip({"torch": "torch", "tf": "tensorflow"}[framework])
    if framework == "torch":
        record, _ = tiny_record(tmp_path_factory, strategy, ranks)  # read back from the store
    else:
        case = Case.make("train_step", framework, "cpu", strategy, "fp32", ranks, {"model": "mlp", "batch": 8})
        record = _run(case, tmp_path)  # read back from the store
    case = record.case
    assert (str(case.framework), str(case.strategy), case.n_devices) == (framework, strategy, ranks)
    assert record.status is Status.OK, record.reason
    peaks = record.measurement.memory
    assert [peak.rank for peak in peaks] == list(range(ranks))
    for peak in peaks:
        assert peak.kind == "cpu" and peak.baseline_bytes > 0 and peak.peak_bytes > peak.baseline_bytes
    for name in ("peak_memory_bytes", "training_state_bytes", "peak_memory_total_bytes"):
        assert record.metrics[name] > 0, name
    assert record.metrics["peak_memory_total_bytes"] == sum(peak.peak_bytes for peak in peaks)


# --- run table and report --------------------------------------------------------------------------
def test_run_table_shows_the_peak_and_the_training_state():
    assert memory_cell({"peak_memory_bytes": 341 * MiB, "training_state_bytes": 121 * MiB}) == "341 MiB (+121 MiB)"
    assert memory_cell({"tflops": 1.0}) == "-"
    assert size(1.5 * 2**30) == "1.5 GiB"
    record = Record(case=TRAIN, status=Status.OK, run_id="r", timestamp="t", suite="s", environment={},
                    measurement=Measurement(samples=(1e-3,) * 3, memory=TWO_RANKS),
                    metrics={"peak_memory_bytes": 350 * MiB, "training_state_bytes": 150 * MiB})
    table = record_table([record])
    column = [c for c in table.columns if c.header.startswith("peak mem")][0]
    assert list(column.cells) == ["350 MiB (+150 MiB)"]


def report_row(case: Case, machine: str, environment: dict, **metrics) -> dict:
    samples = tuple(1e-3 * (1 + 0.01 * np.linspace(-1, 1, 9)))
    return {"source": "parbench", **environment_fields(environment, str(case.device)), "machine": machine,
            **case_fields(case), "status": "ok", "run_id": "r", "timestamp": "2025-01-01T00:00:00+00:00",
            "median_s": 1e-3, "samples_s": samples, "q1_s": min(samples), "q3_s": max(samples), "iqr_s": 0.0,
            "n": 9, "emulated": False, "check_passed": True, **metrics}


H100 = {"gpus": [{"name": "NVIDIA H100", "memory": "81559 MiB", "driver": "570"}], "memory_gib": 1000.0}
SMALL_BOX = {"gpus": [], "memory_gib": 1.0}


def test_fits_compares_a_gpus_reserved_peak_with_one_gpu_and_cpu_ranks_together_with_the_ram():
    gpu = Case.make("train_step", "torch", "gpu", params={"model": "mlp", "batch": 8})
    ddp = Case.make("train_step", "torch", "cpu", "ddp", n_devices=2, params={"model": "mlp", "batch": 8})
    frame = add_throughput(fill_metrics(tidy([
        report_row(gpu, "fits", H100, peak_memory_bytes=70 * 2**30, peak_reserved_bytes=79 * 2**30),
        report_row(gpu, "too-big", H100, peak_memory_bytes=70 * 2**30, peak_reserved_bytes=80 * 2**30),
        report_row(ddp, "cpu-each-fits-both-do-not", SMALL_BOX, peak_memory_bytes=0.6 * 2**30,
                   peak_memory_total_bytes=1.2 * 2**30),
        report_row(TRAIN, "old-record", SMALL_BOX),
    ]), case_work)).set_index("machine")
    assert frame.loc["fits", "device_memory_gib"] == pytest.approx(81559 / 1024)
    assert frame.loc["fits", "memory_fits"] == True  # noqa: E712 (pandas boolean)
    assert frame.loc["too-big", "memory_fits"] == False  # noqa: E712  reserved, not allocated, decides
    assert frame.loc["cpu-each-fits-both-do-not", "memory_fits"] == False  # noqa: E712
    assert pd.isna(frame.loc["old-record", "memory_fits"])


def test_a_problem_shows_memory_columns_and_chart_only_where_rows_measured_memory():
    gpu = Case.make("train_step", "torch", "gpu", params={"model": "mlp", "batch": 8})
    measured = add_throughput(fill_metrics(tidy([
        report_row(gpu, "<b>box</b>", H100, peak_memory_bytes=3 * 2**30, training_state_bytes=3 * 2**30,
                   peak_reserved_bytes=4 * 2**30, peak_memory_total_bytes=3 * 2**30),
        # an older record: no memory
        report_row(Case.make("train_step", "torch", "gpu", precision="bf16", params={"model": "mlp", "batch": 8}),
                   "<b>box</b>", H100),
    ]), case_work))
    (section,) = problems.build(frame_of(measured, PriceTable.load()), options(PriceTable.load()))
    result = whole(section.tables[0])
    headers = result.headers
    assert {"peak memory", "peak reserved", "training state", "device memory", "fits"} <= set(headers)
    assert len(section.tables[0].headers) <= 12  # memory is an on-demand column group
    cells = {row[0].text.split(" · ")[0] + row[0].text.split(" ")[-1]: [cell.text for cell in row]
             for row in result.rows}
    assert cells["<b>box</b>fp32"][headers.index("peak memory")] == "3 GiB"
    assert cells["<b>box</b>fp32"][headers.index("fits")] == "yes"
    assert cells["<b>box</b>bf16"][headers.index("peak memory")] == "–"
    assert MEMORY_TEXT in section.text and not section.figures  # no chart repeats the table

    older = add_throughput(fill_metrics(tidy([report_row(TRAIN, "box", SMALL_BOX)]), case_work))
    (plain,) = problems.build(frame_of(older, PriceTable.load()), options(PriceTable.load()))
    assert "peak memory" not in whole(plain.tables[0]).headers and MEMORY_TEXT not in plain.text


def test_the_checks_cached_memory_is_released_before_the_timed_steps():
    """Issue 32, N8: on CUDA the check's fp32 reference leaves cached blocks that counted in the
    bf16 timed steps' peak reserved memory; the probe releases them once the check is done."""
    from suites.records.check import Check
    from suites.runner.execute import measured_check
    from suites.measure.memory_probes import MemoryProbe

    calls = []

    class Probe(MemoryProbe):
        def start(self):
            calls.append("start")

        def stop(self):
            calls.append("stop")
            return []

        def release_cached(self):
            calls.append("release")

    class Runnable:
        def memory_probe(self):
            return Probe()

        def check(self):
            calls.append("check")
            return Check(True, "none", 0.0, 1.0)

    measured_check(Runnable())
    assert calls[calls.index("check"):] == ["check", "stop", "release"]
