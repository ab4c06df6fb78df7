"""GPU/TPU readiness without the hardware: the TPU probe's resolver, COLAB_TPU_ADDR, TPU core
counts and start-up time, GPU provenance from a fake nvidia-smi, input rotation sized to the
device's last-level cache, and `python -m suites.selfchecks.readiness` with a pretend machine."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status, Strategy
from suites.grids.grid import load_suite
from suites.hardware import devices
from suites.records import provenance
from suites.records.check import Check
from suites.hardware.devices import DeviceInfo
from suites.records.measurement import Measurement
from suites.records.peak_memory import MemoryPeak
from suites.records.store import ResultsStore
from suites.selfchecks import readiness as gpu_readiness
from suites.runner.execute import Outcome
from suites.measure.timing import STARTUP_ALLOWANCE_S
from suites.runner.deadline import case_timeout
from suites.strategies.jobs import job_for
from suites.runner.runner import RunContext, Runner
from suites.strategies.registry import find_plugin
from suites.workloads.kernels import (BATCH_ROTATION, MIN_ROTATED_SET_BYTES, ROTATION_BYTES, ROTATION_ENV,
                                      batch_rotation_count, rotation_count)

import suites.frameworks.tf as tf_package

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
H100_L2 = 50 * 10**6


pytestmark = pytest.mark.usefixtures("fresh_discovery")


def writable_store(root: Path) -> ResultsStore:
    store = ResultsStore(root)
    store.ensure_writable()
    return store


def no_tpu_env(monkeypatch):
    for var in ("TPU_NAME", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(var, raising=False)


def fake_device_files(monkeypatch, *files: str) -> None:
    """Pretend these TPU device files exist (a TPU VM)."""
    monkeypatch.setattr(devices.glob, "glob", lambda pattern: [f for f in files if f.startswith(pattern[:9])])


# --- item 2: the TPU probe connects the way the tpu strategy does -----------------------------
def capture_probe(monkeypatch, cores: str = "4\n") -> list[list[str]]:
    calls: list[list[str]] = []

    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, stdout=cores, stderr="")

    monkeypatch.setattr(tf_package.subprocess, "run", run)
    return calls


def test_tpu_probe_asks_for_the_local_tpu_on_a_tpu_vm(monkeypatch):
    """On a TPU VM (device files, no TPU_NAME) the no-argument resolver would ask the Cloud TPU
    API and fail; the probe passes "local", as the tpu strategy's worker does."""
    no_tpu_env(monkeypatch)
    fake_device_files(monkeypatch, "/dev/accel0", "/dev/accel1")
    calls = capture_probe(monkeypatch)
    info = tf_package.DESCRIPTOR.tpus()
    assert info.count == 4 and info.names == ("TPU:0", "TPU:1", "TPU:2", "TPU:3")
    assert calls[0][-1] == "local"
    from suites.strategies.tf import tpu
    assert tpu.tpu_address is tf_package.tpu_address  # one address rule for probe and strategy
    assert tpu.tpu_address() == "local"


def test_tpu_probe_uses_tpu_name_when_set(monkeypatch):
    no_tpu_env(monkeypatch)
    fake_device_files(monkeypatch)
    monkeypatch.setenv("TPU_NAME", "my-tpu-node")
    calls = capture_probe(monkeypatch, cores="some log line\n8\n")
    info = tf_package.DESCRIPTOR.tpus()
    assert calls[0][-1] == "my-tpu-node"
    assert info.count == 8


def test_the_probe_script_builds_its_resolver_from_the_address_it_is_given(tmp_path):
    """The probe's own code, run against a stand-in `tensorflow` that records the resolver's
    `tpu` argument (the real one would need a TPU)."""
    (tmp_path / "tensorflow.py").write_text(textwrap.dedent("""
        import sys
        from types import SimpleNamespace
        class TPUClusterResolver:
            def __init__(self, tpu=None):
                print(f"tpu={tpu!r}", file=sys.stderr)
        distribute = SimpleNamespace(cluster_resolver=SimpleNamespace(TPUClusterResolver=TPUClusterResolver))
        config = SimpleNamespace(experimental_connect_to_cluster=lambda resolver: None,
                                 list_logical_devices=lambda kind: ["core"] * 4)
        tpu = SimpleNamespace(experimental=SimpleNamespace(initialize_tpu_system=lambda resolver: None))
    """))
    for address, expected in (("local", "'local'"), ("", "None")):
        probe = subprocess.run([sys.executable, "-c", tf_package._TPU_PROBE, address], capture_output=True,
                               text=True, timeout=30, env={"PYTHONPATH": str(tmp_path)}, check=True)
        assert probe.stdout.strip() == "4"
        assert probe.stderr.strip() == f"tpu={expected}"


# --- item 16 (part): COLAB_TPU_ADDR is no TPU evidence ----------------------------------------
def test_colab_tpu_addr_alone_is_no_tpu_runtime(monkeypatch):
    no_tpu_env(monkeypatch)
    fake_device_files(monkeypatch)
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    monkeypatch.setattr(tf_package.subprocess, "run", lambda *a, **k: pytest.fail("probed a TPU"))
    assert devices.tpu_runtime_evidence() is None
    info = tf_package.DESCRIPTOR.tpus()
    assert info.count == 0 and info.reason == devices.NO_TPU_RUNTIME
    assert "COLAB" not in info.reason


# --- item 14: the TPU cases use the cores present; TPU start-up has time -----------------------
def tpu_device(cores: int) -> DeviceInfo:
    return DeviceInfo(Framework.TF, DeviceKind.TPU, cores, tuple(f"TPU:{i}" for i in range(cores)))


@pytest.mark.parametrize("cores", [1, 4, 8])
def test_the_training_suite_has_a_runnable_tpu_case_for_each_single_host_tpu(cores):
    """v4-8, v5p-8, v5e-4 and v6e-4 expose 4 cores; v5e-1/v6e-1 one; v2-8, v3-8, v5e-8 eight."""
    plugin = find_plugin(Framework.TF, Strategy.TPU)
    tpu_cases = [case for case in load_suite("training").cases if case.strategy is Strategy.TPU]
    runnable = [case for case in tpu_cases if plugin.unavailable_reason(job_for(case), tpu_device(cores)) is None]
    assert {(case.precision, case.param_dict["model"]) for case in runnable} == {
        (precision, model) for precision in (Precision.FP32, Precision.BF16)
        for model in ("mlp", "cnn", "transformer")}
    assert all(case.n_devices == cores for case in runnable)
    other = next(case for case in tpu_cases if case.n_devices != cores)
    assert (f"the case with n_devices = {cores} runs here"
            in plugin.unavailable_reason(job_for(other), tpu_device(cores)))


def test_the_eight_core_tpu_case_ids_are_unchanged():
    ids = {case.id for case in load_suite("training").cases}
    assert "train_step/tf/tpu:8/tpu/fp32/batch=32,model=mlp" in ids
    assert "train_step/tf/tpu:8/tpu/bf16/batch=32,model=transformer" in ids


def test_an_unusual_core_count_says_no_built_in_case_matches():
    plugin = find_plugin(Framework.TF, Strategy.TPU)
    case = Case.make("train_step", "tf", "tpu", "tpu", "fp32", 8, {"model": "mlp", "batch": 32})
    assert "no built-in case has n_devices = 16" in plugin.unavailable_reason(job_for(case), tpu_device(16))


def test_a_tpu_case_gets_the_tpu_start_up_allowance():
    timing = TimingConfig(budget_s=3.0)
    tpu_case = Case.make("train_step", "tf", "tpu", "tpu", "fp32", 4, {"model": "mlp", "batch": 32})
    mirrored = Case.make("train_step", "tf", "gpu", "mirrored", "fp32", 2, {"model": "mlp", "batch": 32})
    allowance = find_plugin(Framework.TF, Strategy.TPU).rules.startup_allowance_s
    assert allowance > STARTUP_ALLOWANCE_S
    assert case_timeout(timing, job_for(mirrored)) == case_timeout(timing)
    assert case_timeout(timing, job_for(tpu_case)) == case_timeout(timing) - STARTUP_ALLOWANCE_S + allowance
    assert case_timeout(replace(timing, case_timeout_s=7.0), job_for(tpu_case)) == 7.0  # an explicit limit wins


def test_the_tpu_probe_outlasts_tensorflow_import_and_tpu_initialisation():
    """TF import + libtpu + initialize_tpu_system takes 20 s to over a minute on a TPU VM."""
    assert tf_package.TPU_PROBE_TIMEOUT_S >= 120


# --- item 13: input rotation spans more than the device's last-level cache ---------------------
def test_rotation_spans_twice_the_gpu_l2(monkeypatch):
    monkeypatch.delenv(ROTATION_ENV, raising=False)
    fp16_512_matmul = 2 * 512 * 512 * 2  # A and B: 1 MiB
    copies = rotation_count(fp16_512_matmul, cache_bytes=H100_L2)
    assert copies * fp16_512_matmul >= 2 * H100_L2  # out of an H100's 50 MB L2 (16 copies were not)
    assert rotation_count(fp16_512_matmul, cache_bytes=None) * fp16_512_matmul == ROTATION_BYTES
    assert rotation_count(fp16_512_matmul, cache_bytes=1 * MiB) * fp16_512_matmul == ROTATION_BYTES  # floor
    assert rotation_count(512 * MiB, cache_bytes=H100_L2) == 1  # an 8192^2 fp32 GEMM is its own span


def test_rotation_copies_are_capped_for_tiny_inputs(monkeypatch):
    monkeypatch.delenv(ROTATION_ENV, raising=False)
    assert rotation_count(1024, cache_bytes=H100_L2) == 2 * H100_L2 // MIN_ROTATED_SET_BYTES


def test_rotation_bytes_override_still_wins(monkeypatch):
    monkeypatch.setenv(ROTATION_ENV, "0")
    assert rotation_count(MiB, cache_bytes=H100_L2) == 1  # hot-cache timing
    monkeypatch.setenv(ROTATION_ENV, str(8 * MiB))
    assert rotation_count(MiB, cache_bytes=H100_L2) == 8
    assert batch_rotation_count(2 * MiB) == 4


def test_training_batches_rotate_as_before(monkeypatch):
    monkeypatch.delenv(ROTATION_ENV, raising=False)
    assert batch_rotation_count(32 * 1024) == BATCH_ROTATION == 16
    assert batch_rotation_count(48 * MiB) == 2


def test_cpu_last_level_cache_from_sysfs(tmp_path):
    for index, (kind, level, size) in enumerate([("Data", 1, "48K"), ("Instruction", 1, "32K"),
                                                 ("Unified", 2, "2048K"), ("Unified", 3, "105M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in (("type", kind), ("level", level), ("size", size)):
            (folder / name).write_text(f"{value}\n")
    assert devices.cpu_last_level_cache_bytes(str(tmp_path)) == 105 * MiB
    assert devices.cpu_last_level_cache_bytes(str(tmp_path / "missing")) is None


def test_gpu_last_level_cache_comes_from_discovery(monkeypatch):
    gpus = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 2, ("NVIDIA H100 80GB HBM3",) * 2,
                      details={"l2_cache_bytes": [H100_L2, H100_L2]})
    monkeypatch.setattr(devices, "discover", lambda framework, kind: gpus)
    monkeypatch.setattr(devices, "cpu_last_level_cache_bytes", lambda: 32 * MiB)
    assert devices.last_level_cache_bytes(Framework.TORCH, DeviceKind.GPU) == H100_L2
    assert devices.last_level_cache_bytes(Framework.TORCH, DeviceKind.CPU) == 32 * MiB
    assert devices.last_level_cache_bytes(Framework.TF, DeviceKind.TPU) is None


def test_cuda_l2_query_without_a_driver_is_unknown():
    assert devices.cuda_l2_cache_bytes("libcuda-that-is-not-here.so.1") is None


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_kernels_rotate_over_their_devices_cache(monkeypatch, framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    monkeypatch.delenv(ROTATION_ENV, raising=False)
    case = Case.make("matmul", framework, "cpu", params={"m": 256, "n": 256, "k": 256})
    job = job_for(case)
    module = sys.modules[job.runnable_class.__module__]
    asked = []
    monkeypatch.setattr(module, "last_level_cache_bytes",
                        lambda fw, kind: asked.append((fw, kind)) or 36 * MiB)
    runnable = job.runnable()
    runnable.setup()
    set_bytes = 2 * 256 * 256 * 4
    assert asked == [(case.framework, DeviceKind.CPU)]
    assert runnable.copies == 72 * MiB // set_bytes  # 2 x 36 MiB, not the 64 MiB floor
    assert len(runnable.a) == runnable.copies
    runnable.teardown()


# --- item 11: GPU provenance from nvidia-smi, without importing a framework --------------------
FAKE_NVIDIA_SMI = '''#!{python}
import sys
args = sys.argv[1:]
if args[:2] == ["topo", "-m"]:
    print("\\t\\x1b[4mGPU0\\tGPU1\\tNIC0\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\x1b[0m")
    print("GPU0\\t X \\tNV18\\tPXB\\t0-47\\t0\\t\\tN/A")
    print("GPU1\\tNV18\\t X \\tPXB\\t0-47\\t0\\t\\tN/A")
    print("NIC0\\tPXB\\tPXB\\t X \\t\\t\\t\\t")
    print("")
    print("Legend:")
    print("  X    = Self")
    print("  NV#  = Connection traversing a bonded set of # NVLinks")
    sys.exit(0)
query = next(a for a in args if a.startswith("--query-gpu=")).split("=", 1)[1]
if {old} and "compute_cap" in query:
    print('Field "compute_cap" is not a valid field to query.', file=sys.stderr)
    sys.exit(2)
rows = {{"index": ["0", "1"], "name": ["NVIDIA H100 80GB HBM3"] * 2, "memory.total": ["81559"] * 2,
        "driver_version": ["550.54.15"] * 2, "compute_cap": ["9.0"] * 2, "clocks.max.sm": ["1980"] * 2,
        "clocks.max.memory": ["2619"] * 2, "power.limit": ["700.00", "[N/A]"],
        "mig.mode.current": ["Disabled", "Enabled"],
        "uuid": ["GPU-5b3c4f1e-0a2d-4c6e-9f7a-1b2c3d4e5f60", "GPU-5b3c4f1e-0a2d-4c6e-9f7a-1b2c3d4e5f61"]}}
for gpu in range(2):
    print(", ".join(rows[field][gpu] for field in query.split(",")))
'''


def fake_nvidia_smi(monkeypatch, tmp_path, old: bool = False) -> None:
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, old=old))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")


def test_records_store_each_gpus_clocks_power_mig_and_capability(monkeypatch, tmp_path):
    fake_nvidia_smi(monkeypatch, tmp_path)
    gpus = provenance.environment()["gpus"]
    assert gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB",
                       "driver": "550.54.15", "compute_capability": "9.0", "sm_clock_max_mhz": 1980,
                       "mem_clock_max_mhz": 2619, "power_limit_w": 700.0, "mig_mode": "Disabled",
                       "uuid": "GPU-5b3c4f1e-0a2d-4c6e-9f7a-1b2c3d4e5f60"}
    assert gpus[1]["power_limit_w"] is None and gpus[1]["mig_mode"] == "Enabled"


def test_records_store_the_gpu_link_topology(monkeypatch, tmp_path):
    fake_nvidia_smi(monkeypatch, tmp_path)
    topology = provenance.environment()["gpu_topology"]
    assert topology["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert "\x1b" not in topology["text"] and "Legend:" in topology["text"]


def test_an_older_nvidia_smi_still_gives_model_memory_and_driver(monkeypatch, tmp_path):
    fake_nvidia_smi(monkeypatch, tmp_path, old=True)
    gpus = provenance.nvidia_smi()
    assert gpus == [{"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB", "driver": "550.54.15"}] * 2


def test_no_nvidia_smi_means_no_gpus_and_no_topology(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    env = provenance.environment()
    assert env["gpus"] == [] and env["gpu_topology"] is None


def test_records_store_nvidia_tf32_override_and_cuda_wheels(monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    real_version = provenance.importlib.metadata.version

    def version(name):
        return {"nvidia-cudnn-cu12": "9.8.0.87", "nvidia-nccl-cu12": "2.26.2"}.get(name) or real_version(name)

    monkeypatch.setattr(provenance.importlib.metadata, "version", version)
    env = provenance.environment()
    assert env["nvidia_tf32_override"] == "0"
    assert env["cuda_libraries"] == {"nvidia-cudnn-cu12": "9.8.0.87", "nvidia-nccl-cu12": "2.26.2"}


class FakeTorchDescriptor(devices.FrameworkDescriptor):
    framework = Framework.TORCH
    import_name = "torch"
    distributions = ("torch",)

    def installed(self):
        return True

    def cpu_threads(self):
        return 1

    def threads_in_use(self, module):
        return 1

    def gpus(self):
        return DeviceInfo(Framework.TORCH, DeviceKind.GPU, 2, ("NVIDIA H100 80GB HBM3",) * 2, details={
            "cuda": "12.8", "cudnn": 90800, "nccl": "2.26.2", "compute_capability": ["9.0", "9.0"],
            "l2_cache_bytes": [H100_L2] * 2})

    def tpus(self):
        return DeviceInfo(Framework.TORCH, DeviceKind.TPU, 0, reason="no")


def test_a_gpu_record_stores_the_cuda_cudnn_nccl_and_capability_discovery_found(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "descriptor", lambda framework: FakeTorchDescriptor())
    context = RunContext(suite="t", store=writable_store(tmp_path), timing=TimingConfig())
    assert context.environment["accelerators"] == {}  # nothing discovered yet: nothing imported for it
    case = Case.make("matmul", "torch", "gpu", params={"m": 64, "n": 64, "k": 64})
    record = Runner.storing(context, launcher=lambda job, timing: Outcome(Status.FAILED, "fake")).run(case)
    gpu = record.environment["accelerators"]["torch/gpu"]
    assert (gpu["cuda"], gpu["cudnn"], gpu["nccl"], gpu["compute_capability"]) == (
        "12.8", 90800, "2.26.2", ["9.0", "9.0"])
    stored = ResultsStore(tmp_path).path_for(record.machine).read_text()
    assert json.loads(stored)["environment"]["accelerators"]["torch/gpu"]["count"] == 2


def test_provenance_imports_no_framework():
    """A CPU run starts as fast as before: provenance never imports torch or TensorFlow."""
    code = ("import sys; from suites.records.provenance import environment; environment(); "
            "print([m for m in ('torch', 'tensorflow') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


# --- the readiness command ------------------------------------------------------------------------
def test_readiness_without_a_gpu_or_tpu_says_so_in_one_line_and_exits_0(monkeypatch, tmp_path, capsys):
    no_tpu_env(monkeypatch)
    if any(device.available for device in gpu_readiness.discover_accelerators().values()):
        pytest.skip("this machine has a GPU or TPU")
    out = tmp_path / "readiness.json"
    assert gpu_readiness.main(["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "no GPU or TPU visible" in lines[0]
    assert not out.exists()


def pretend_gpus(monkeypatch, torch_gpus: int = 2, tf_gpus: int = 2, capability: str = "9.0") -> None:
    """Discovery, everywhere it is asked, sees H100s (and no TPU)."""
    def fake(framework, kind):
        count = {Framework.TORCH: torch_gpus, Framework.TF: tf_gpus}[framework] if kind is DeviceKind.GPU else 0
        if kind is DeviceKind.CPU:
            return DeviceInfo(framework, kind, 1, ("cpu",))
        if not count:
            return DeviceInfo(framework, kind, 0, reason=f"no {kind} in this pretend machine")
        return DeviceInfo(framework, kind, count, ("NVIDIA H100 80GB HBM3",) * count,
                          details={"compute_capability": [capability] * count})
    for where in ("suites.selfchecks.readiness", "suites.runner.availability", "suites.records.metrics",
                  "suites.hardware.devices"):
        monkeypatch.setattr(f"{where}.discover", fake)


class FakeExecutor:
    """Stands in for the launcher: records what it was asked to run, answers with an outcome."""

    def __init__(self, answer=None):
        self.cases: list[Case] = []
        self.timings: list[TimingConfig] = []
        self.answer = answer or (lambda case: None)

    def __call__(self, job, timing):
        case = job.case
        self.cases.append(case)
        self.timings.append(timing)
        answer = self.answer(case)
        if answer is not None:
            return answer
        # Training records carry peak memory, as the real runnables' probes make them do.
        memory = ((MemoryPeak("gpu", 0, 2 * 2**30, 3 * 2**30, 2**20),)
                  if case.workload == "train_step" else ())
        return Outcome(Status.OK, "", Measurement(samples=(0.01, 0.011, 0.01, 0.012, 0.01), memory=memory),
                       Check(True, "max_rel_err", 0.0, 1e-3))


def readiness(tmp_path, executor) -> tuple[int, dict]:
    out = tmp_path / "summary.json"
    code = gpu_readiness.main(["--out", str(out), "--results", str(tmp_path / "results")], execute=executor)
    return code, json.loads(out.read_text())


def test_readiness_runs_every_gpu_path_on_all_visible_gpus(monkeypatch, tmp_path):
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    pretend_gpus(monkeypatch)
    executor = FakeExecutor()
    code, summary = readiness(tmp_path, executor)
    assert code == 0 and summary["ready"] and summary["not_ready"] == []
    ran = {(c.workload, str(c.framework), str(c.strategy), str(c.precision), c.n_devices) for c in executor.cases}
    for framework in ("torch", "tf"):
        for workload in ("matmul", "conv2d", "train_step"):
            for precision in Precision.names():
                assert (workload, framework, "single", precision, 1) in ran
    for framework, strategy in (("torch", "dataparallel"), ("torch", "ddp"), ("tf", "towers"),
                                ("tf", "mirrored"), ("tf", "multiworker")):
        assert (("train_step", framework, strategy, "fp32", 2)) in ran
    for framework, strategy in (("torch", "ddp"), ("tf", "mirrored"), ("tf", "multiworker")):
        assert (("allreduce", framework, strategy, "fp32", 2)) in ran
    assert all(c.device is DeviceKind.GPU for c in executor.cases)
    paths = {entry["path"]: entry for entry in summary["paths"]}
    matmul = paths["matmul torch gpu:1 single bf16"]
    assert matmul["status"] == "ok" and matmul["check"]["passed"] and matmul["figure"]["metric"] == "tflops"
    assert paths["allreduce tf gpu:2 mirrored fp32"]["figure"]["metric"] == "busbw_gbs"
    assert paths["memory fields"]["expected"] and paths["memory fields"]["status"] == "ok"


def test_readiness_fails_when_a_path_fails_or_computes_the_wrong_thing(monkeypatch, tmp_path):
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    pretend_gpus(monkeypatch)

    def answer(case):
        if case.strategy is Strategy.DDP and case.workload == "train_step":
            return Outcome(Status.FAILED, "rank 1: NCCL error")
        if case.workload == "conv2d" and case.precision is Precision.FP16 and case.framework is Framework.TF:
            return Outcome(Status.OK, "", Measurement(samples=(0.01,) * 5), Check(False, "max_rel_err", 0.5, 1e-2))
        return None

    code, summary = readiness(tmp_path, FakeExecutor(answer))
    assert code == 1 and not summary["ready"]
    assert summary["not_ready"] == ["train_step torch gpu:2 ddp fp32", "train_step torch gpu:2 ddp bf16",
                                    "train_step torch gpu:2 ddp fp16", "conv2d tf gpu:1 single fp16"]
    ddp = next(entry for entry in summary["paths"] if entry["path"] == "train_step torch gpu:2 ddp fp32")
    assert ddp["status"] == "failed" and ddp["reason"] == "rank 1: NCCL error"


def test_readiness_does_not_expect_what_the_hardware_cannot_do(monkeypatch, tmp_path):
    """One V100: no tf32/bf16 (compute capability 7.0); of the multi-device strategies only those
    that can share one GPU (torch ranks over gloo, TF logical GPUs)."""
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    pretend_gpus(monkeypatch, torch_gpus=1, tf_gpus=1, capability="7.0")
    executor = FakeExecutor(lambda case: Outcome(Status.UNAVAILABLE, "no bf16 here")
                            if case.precision in (Precision.BF16, Precision.TF32) else None)
    code, summary = readiness(tmp_path, executor)
    assert code == 0, summary["not_ready"]
    assert {str(case.strategy) for case in executor.cases if case.n_devices > 1} == {
        "ddp", "fsdp", "tensor", "fsdp_tensor", "towers", "mirrored", "model_parallel", "pipeline"}
    unexpected = {entry["path"]: entry for entry in summary["paths"] if not entry["expected"]}
    assert unexpected["train_step torch gpu:2 dataparallel fp32"]["why"] == (
        "dataparallel needs 2 or more gpus, one per device; 1 visible")
    assert "train_step torch gpu:2 model_parallel fp32" in unexpected
    assert "train_step tf gpu:2 multiworker fp32" in unexpected
    assert "train_step torch gpu:2 pipeline fp32" in unexpected  # gloo sends no CUDA tensors
    assert unexpected["matmul tf gpu:1 single bf16"]["why"].startswith("bf16 needs compute capability >= 8.0")


def test_readiness_flags_a_framework_that_cannot_see_the_gpus(monkeypatch, tmp_path):
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    pretend_gpus(monkeypatch, torch_gpus=2, tf_gpus=0)
    code, summary = readiness(tmp_path, FakeExecutor())
    assert code == 1 and summary["not_ready"] == ["gpu discovery tf"]


def test_paths_left_when_the_time_is_spent_count_as_not_run(monkeypatch, tmp_path):
    pretend_gpus(monkeypatch, tf_gpus=0)
    paths = gpu_readiness.plan({(Framework.TORCH, DeviceKind.GPU): gpu_readiness.discover(Framework.TORCH,
                                                                                          DeviceKind.GPU)})
    ticks = iter(range(1000))  # each look at the clock: one second later
    context = RunContext(suite="t", store=writable_store(tmp_path), timing=TimingConfig())
    executor = FakeExecutor()
    entries = gpu_readiness.check_paths(paths, context, executor, deadline_s=5.5, total_s=100.0,
                                        clock=lambda: float(next(ticks)))
    statuses = [entry["status"] for entry in entries[:-1]]
    assert statuses[:3] == ["ok"] * 3 and set(statuses[3:]) == {"not run"}
    # the paths not run, and the memory fields, which no training record that ran could show
    assert gpu_readiness.not_ready(entries) == [path.name for path in paths[3:] if path.expected] + ["memory fields"]
    # a launched case may take no longer than what is left of the total
    assert [timing.case_timeout_s for timing in executor.timings] == [98.0, 96.0, 94.0]


@pytest.mark.parametrize("cores", [1, 4, 8])
def test_readiness_runs_tpu_strategy_on_every_core(cores):
    paths = gpu_readiness.plan({(Framework.TF, DeviceKind.TPU): tpu_device(cores)})
    assert [(path.case.strategy, path.case.precision, path.case.n_devices, path.expected) for path in paths] == [
        (Strategy.TPU, Precision.FP32, cores, True), (Strategy.TPU, Precision.BF16, cores, True)]
    plugin = find_plugin(Framework.TF, Strategy.TPU)
    assert all(plugin.unavailable_reason(job_for(path.case), tpu_device(cores)) is None for path in paths)


def test_readiness_trains_every_multi_device_strategy_in_fp16_too(monkeypatch, tmp_path):
    """fp16 brings loss scaling across devices (GradScaler under DDP, FSDP's sharded scaler, TF's
    LossScaleOptimizer under a strategy): readiness runs it where a strategy has it and lists it,
    with the strategy's reason, where it has none."""
    pretend_gpus(monkeypatch)
    paths = {path.name: path for path in gpu_readiness.plan(
        {(Framework.TORCH, DeviceKind.GPU): gpu_readiness.discover(Framework.TORCH, DeviceKind.GPU),
         (Framework.TF, DeviceKind.GPU): gpu_readiness.discover(Framework.TF, DeviceKind.GPU)})}
    for name in ("train_step torch gpu:2 ddp fp16", "train_step torch gpu:2 fsdp fp16",
                 "train_step tf gpu:2 mirrored fp16"):
        assert paths[name].expected, (name, paths[name].why)
    for strategy in ("tensor", "fsdp_tensor"):
        fp16 = next(path for name, path in paths.items()
                    if name.startswith("train_step torch") and f" {strategy} fp16" in name)
        assert not fp16.expected and fp16.why
    assert not any(name.startswith("allreduce") and name.endswith("fp16") for name in paths)


def test_readiness_checks_a_workload_only_in_the_frameworks_that_run_it(monkeypatch):
    """A workload with a runnable in one framework is no path, expected or not, in the other:
    otherwise every GPU machine would read NOT READY for a path that exists nowhere."""
    from suites.frameworks import implementations

    pretend_gpus(monkeypatch)
    monkeypatch.setitem(implementations.BUILT_IN, "conv2d",
                        {Framework.TORCH: "suites.frameworks.torch.kernels:TorchConv2d"})
    names = [path.name for path in gpu_readiness.plan(
        {(Framework.TORCH, DeviceKind.GPU): gpu_readiness.discover(Framework.TORCH, DeviceKind.GPU),
         (Framework.TF, DeviceKind.GPU): gpu_readiness.discover(Framework.TF, DeviceKind.GPU)})]
    assert any(name.startswith("conv2d torch gpu") for name in names)
    assert not any(name.startswith("conv2d tf") for name in names)
    assert any(name.startswith("matmul tf gpu") for name in names)
