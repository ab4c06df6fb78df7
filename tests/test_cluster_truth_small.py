"""Issue 48 item 9, the small truths of a GPU run: an emulated gloo run is not called launch-bound,
no bounds probe starts workers for a GPU or TPU case, ... Discovery faked to 8 H100 a node
(tests/cluster_truth.py); every test runs in well under a second."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Status
from suites.hardware.devices import DeviceInfo
from suites.records.gpu_telemetry import GpuTelemetry, Spread, Telemetry
from suites.records.measurement import Measurement
from suites.records.store import ResultsStore
from suites.runner.bounds import Bound, bound_for
from suites.runner.execute import Outcome
from suites.runner.recording import RunContext, store_outcome
from suites.runner.spanning import node_provenance, nodes_details, ranks_share_gpus
from suites.strategies.base import placing_on
from suites.strategies.jobs import job_for
from suites.strategies.torch.base import activation_bytes_estimate, shared_gpu_memory_reason
from tests.cluster_truth import H100, H100_MEMORY, eight_gpus_a_node, uuids  # noqa: F401 (fixture)


def busy(percent: float) -> Measurement:
    """A step whose GPU NVML saw busy `percent` of the time (no profiler kernel time)."""
    gpu = GpuTelemetry(0, 20, sm_clock_mhz=Spread(1830.0, 1830.0, 1830.0),
                       utilization_pct=Spread(percent, percent, percent), max_sm_clock_mhz=1980.0)
    return Measurement((0.05,) * 5, telemetry=Telemetry((gpu,)))


def stored(case: Case, measurement: Measurement, tmp_path):
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TimingConfig())
    context.store.ensure_writable(context.environment["machine"])
    return store_outcome(job_for(case), Outcome(Status.OK, measurement=measurement), context)


# --- 9b: emulated gloo runs are not `bound_by: launch` ---------------------------------------------
def test_ranks_sharing_a_gpu_over_gloo_are_not_called_launch_bound(eight_gpus_a_node, tmp_path):
    """16 ddp ranks on one node's 8 GPUs: gloo, emulated; the GPU idles while the ranks take turns
    and gloo copies through the host. Before: `launch` ("measures the host launching work")."""
    record = stored(Case.make("train_step", "torch", "gpu", "ddp", "bf16", 16, {"model": "mlp", "batch": 32}),
                    busy(5.0), tmp_path)
    assert record.emulated
    assert record.bound_by.verdict == "unknown", record.bound_by.reason
    assert "emulated" in record.bound_by.reason and "gloo" in record.bound_by.reason
    assert record.bound_by.evidence["busy_share"] == pytest.approx(0.05)
    assert record.bound_by.evidence["emulated"] is True


def test_one_gpu_idle_most_of_the_step_is_still_launch_bound(eight_gpus_a_node, tmp_path):
    record = stored(Case.make("train_step", "torch", "gpu", "single", "bf16", 1, {"model": "mlp", "batch": 32}),
                    busy(5.0), tmp_path)
    assert not record.emulated and record.bound_by.verdict == "launch"


# --- 9e: no bounds probe for a GPU or TPU case -----------------------------------------------------
@pytest.mark.parametrize("device", ["gpu", "tpu"])
def test_a_gpu_or_tpu_case_is_bounded_without_a_rate_probe(device):
    """The probe's two GEMM workers (a process each, per precision) are not started for an
    accelerator; the case is timed as its strategy says (before: probed, then predicted)."""
    probed = []
    job = job_for(Case.make("matmul", "torch", device, precision="bf16", params={"m": 8192, "n": 8192, "k": 8192}))
    bound = bound_for(job, TimingConfig(), lambda *combination: probed.append(combination) or 1e12)
    assert probed == [] and bound == Bound()


def test_a_cpu_case_is_still_predicted_from_the_probe():
    job = job_for(Case.make("matmul", "torch", "cpu", precision="fp32", params={"m": 4096, "n": 4096, "k": 4096}))
    bound = bound_for(job, TimingConfig(), lambda *combination: 1e9)
    assert bound.predicted_step_s == pytest.approx(2 * 4096**3 / 1e9)


# --- 9a: ranks sharing a GPU count their activations -----------------------------------------------
def one_h100() -> DeviceInfo:
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, (H100,), details={"memory_bytes": [H100_MEMORY]})


LLAMA_BLOCK = {"model": "llama_block", "optimizer": "adamw", "layers": 4, "batch": 2}  # the standard suite's


def test_the_llama_blocks_ddp_over_two_ranks_on_one_80_gb_gpu_is_refused_for_its_activations():
    """Admitted before on 2 x 28.7 GiB of state (activations aside); it held 134 GiB."""
    job = job_for(Case.make("train_step", "torch", "gpu", "ddp", "bf16", 2, LLAMA_BLOCK))
    reason = shared_gpu_memory_reason(job, one_h100())
    assert reason is not None and "activations of its batch" in reason
    activations = activation_bytes_estimate(job)
    # the block's own analytic count, in bf16 under autocast, for each rank's batch of 2
    assert activations == int(job.workload.model.activation_bytes_per_sample(2, True) * 2) > 0
    assert f"{2 * (job.state_estimate()['total'] + activations) / 2**30:.1f} GiB" in reason


def test_a_model_that_counts_its_own_activations_is_judged_with_them():
    mlp = {"model": "mlp", "batch": 131072, "hidden": 8192, "depth": 8}
    job = job_for(Case.make("train_step", "torch", "gpu", "ddp", "fp32", 2, mlp))
    state, activations = job.state_estimate()["total"], job.state_estimate()["activations"]
    assert 2 * state < 0.8 * H100_MEMORY < 2 * (state + activations)  # state alone fits: before, admitted
    assert activation_bytes_estimate(job) == activations
    assert shared_gpu_memory_reason(job, one_h100()) is not None


def test_a_small_case_still_shares_the_gpu():
    job = job_for(Case.make("train_step", "torch", "gpu", "ddp", "bf16", 2, {"model": "gpt2_small", "batch": 8,
                                                                              "optimizer": "adamw"}))
    assert shared_gpu_memory_reason(job, one_h100()) is None


# --- 3: GPU sharing from the UUIDs each node's ranks hold ----------------------------------------
def placed(uuids_by_rank: list[tuple[str, str]]) -> dict:
    """`details` of a step whose rank r ran on node `uuids_by_rank[r][0]` on the GPU of that UUID."""
    nodes = [{"node": node, "rank": rank, "hostname": node, "cpus": "0-13", "visible_gpus": "0", "gpu_uuid": uuid}
             for rank, (node, uuid) in enumerate(uuids_by_rank)]
    return nodes_details(nodes, "slurm")


def ddp16_record(details: dict, tmp_path):
    case = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 16, {"model": "mlp", "batch": 32})
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TimingConfig())
    context.store.ensure_writable(context.environment["machine"])
    return store_outcome(job_for(case), Outcome(Status.OK, measurement=busy(90.0), details=details), context)


def test_16_ranks_on_16_distinct_gpus_are_real_whatever_the_counts_say(eight_gpus_a_node, tmp_path):
    """Decided without the nodes (16 ranks against the 8 GPUs seen here: emulated by counts), the
    ranks' UUIDs say every rank had a GPU of its own."""
    details = placed([(node, uuid) for node in ("gpu-a", "gpu-b") for uuid in uuids(0)])
    assert details["ranks"][9]["gpu_uuid"] == uuids(0)[1]
    assert ranks_share_gpus(details) is False
    assert ddp16_record(details, tmp_path).emulated is False


def test_ranks_that_report_one_gpu_between_two_of_them_are_emulated(eight_gpus_a_node, tmp_path):
    """--gpus-per-task=1 under a visible set of 8: every rank's own counts look right, but ranks 0
    and 1 of node a computed on the same GPU."""
    held = [(node, uuid) for node in ("gpu-a", "gpu-b") for uuid in uuids(0)]
    held[1] = held[0]
    assert ranks_share_gpus(placed(held)) is True
    with placing_on(eight_gpus_a_node):  # placed as on the two nodes: by counts, not emulated
        assert ddp16_record(placed(held), tmp_path).emulated is True


def test_without_uuids_the_counts_decide():
    assert ranks_share_gpus({"ranks": [{"node": "a", "rank": 0}, {"node": "a", "rank": 1}]}) is None
    assert ranks_share_gpus({}) is None


def test_a_gpu_rank_reports_the_uuid_of_the_gpu_it_computes_on(monkeypatch):
    monkeypatch.setattr("suites.hardware.devices.cuda_device_uuids", lambda: ["u0", "u1"])
    monkeypatch.setenv("PARBENCH_NODE", "gpu-b")
    monkeypatch.setenv("LOCAL_RANK", "3")  # 4 ranks round robin on 2 GPUs: rank 3 on GPU 1
    assert node_provenance(on_gpu=True)["gpu_uuid"] == "u1"
    assert "gpu_uuid" not in node_provenance()
