"""GPU and TPU readiness (issue 13): what the first run on an 8-GPU machine or a TPU VM would hit
in the TensorFlow paths and in torch's process-wide settings, exercised here without the
hardware: fake devices, monkeypatched discovery, and the environment TF reads when it loads.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Framework, Status  # noqa: E402
from suites.frameworks.tf import DESCRIPTOR as TF_DESCRIPTOR  # noqa: E402
from suites.frameworks.tf import backend as tf_backend  # noqa: E402
from suites.frameworks.tf import distribute  # noqa: E402
from suites.frameworks.tf.environment import DEFAULTS, TPU_PROCESS  # noqa: E402
from suites.frameworks.torch import backend as torch_backend  # noqa: E402
from suites.hardware.devices import DeviceInfo  # noqa: E402
from suites.runner import launchers  # noqa: E402
from suites.runner.execute import execute_in_process  # noqa: E402
from suites.runner.plan import plan, unavailable_reason  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402
from suites.runner.execute import Outcome  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = TimingConfig(budget_s=0.2, warmup_s=0.02, min_warmup_steps=2, block_min_s=0.002, min_samples=3,
                    min_time_s=0.01)
MATMUL = {"m": 16, "n": 16, "k": 16}


def gpus(count: int, capability: str = "8.0", framework: Framework = Framework.TF,
         capabilities: list[str] | None = None) -> DeviceInfo:
    return DeviceInfo(framework, DeviceKind.GPU, count, tuple(f"GPU model {i}" for i in range(count)),
                      details={"compute_capability": capabilities or [capability] * count})


@pytest.fixture
def machine(monkeypatch):
    """Pretend this machine has the given devices: `machine(DeviceInfo, ...)`."""
    def have(*devices: DeviceInfo) -> None:
        found = {(d.framework, d.kind): d for d in devices}
        monkeypatch.setattr("suites.runner.availability.discover", lambda framework, kind: found.get(
            (framework, kind), DeviceInfo(framework, kind, 0, reason="not in this test's machine")))
    return have


@pytest.fixture
def tf_placement():
    """configure_runtime switches soft placement off for the process: put it back afterwards."""
    before = tf.config.get_soft_device_placement()
    yield
    tf.config.set_soft_device_placement(before)


@pytest.fixture
def torch_flags():
    before = torch_backend.Flags.current()
    yield
    before.restore()


# --- 1, 3: TF's environment is set before TF loads, in every process that imports it -------------
_SPY = textwrap.dedent("""
    import importlib, json, os, sys

    NAMES = json.loads(sys.argv[1])
    ENTRIES = json.loads(sys.argv[2])

    class Loaded(BaseException):  # not an ImportError: nothing on the way may swallow it
        pass

    class Spy:
        \"\"\"Records the environment when TensorFlow is about to load, then stops the import.\"\"\"
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow":
                seen.append({key: os.environ.get(key) for key in NAMES})
                raise Loaded
            return None

    sys.meta_path.insert(0, Spy())
    results = {}
    for entry, preset, args in ENTRIES:
        for key in NAMES:
            os.environ.pop(key, None)
        os.environ.update(preset)
        for module in [m for m in sys.modules if m.startswith(("suites.frameworks.tf.", "keras"))]:
            del sys.modules[module]
        seen = []
        module, _, attribute = entry.partition(":")
        try:
            target = importlib.import_module(module)
            if attribute:
                for part in attribute.split("."):
                    target = getattr(target, part)
                target(*args)
        except Loaded:
            pass
        results[f"{entry} {preset}"] = seen[0] if seen else None
    print(json.dumps(results))
""")
TF_MODULES = sorted([*(f"suites.frameworks.tf.{path.stem}" for path in (REPO / "suites/frameworks/tf").glob("*.py")
                      if path.stem not in ("__init__", "environment")),
                     *(f"suites.models.{path.parent.name}.tf_model"
                       for path in (REPO / "suites/models").glob("*/tf_model.py"))])
#: The ways into TensorFlow: every module of the TF subpackage and every model's TF module, the
#: descriptor's discovery and the overhead check's bare TF loop.
TF_ENTRY_POINTS = [*TF_MODULES, "suites.frameworks.tf:DESCRIPTOR.gpus",
                   "suites.selfchecks.harness_overhead:tf_bare_loop_median"]


def _environment_when_tf_loads(entries: list[tuple[str, dict[str, str], list]]) -> dict[str, dict | None]:
    env = {key: value for key, value in os.environ.items() if key not in DEFAULTS}
    out = subprocess.run([sys.executable, "-c", _SPY, json.dumps(sorted(DEFAULTS)), json.dumps(entries)],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_tf_entry_point_sets_memory_growth_and_keeps_libtpu_out_before_tf_loads():
    """Items 1 and 3: whichever way a process reaches TensorFlow, when TF loads it finds
    TF_FORCE_GPU_ALLOW_GROWTH=true (no grabbing of every GPU's memory) and TPU_LOAD_LIBRARY=0
    (no libtpu, so no TPU lock held by the parbench process)."""
    args = {"suites.selfchecks.harness_overhead:tf_bare_loop_median": [8]}
    entries = [(entry, {}, args.get(entry, [])) for entry in TF_ENTRY_POINTS]
    seen = _environment_when_tf_loads(entries)
    for entry in ("suites.frameworks.tf.kernels", "suites.frameworks.tf.training",
                  "suites.frameworks.tf.collectives", "suites.frameworks.tf:DESCRIPTOR.gpus"):
        assert seen[f"{entry} {{}}"] is not None, f"{entry} did not load TensorFlow: the spy saw nothing"
    wrong = {entry: env for entry, env in seen.items() if env is not None and env != DEFAULTS}
    assert not wrong, f"TensorFlow loaded without its environment: {wrong}"


def test_an_explicit_environment_wins_so_a_tpu_worker_can_load_libtpu():
    preset = {**TPU_PROCESS, "TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    seen = _environment_when_tf_loads([("suites.frameworks.tf.training", preset, [])])
    assert seen == {f"suites.frameworks.tf.training {preset}": {**DEFAULTS, **preset}}


def test_the_tpu_probe_runs_with_libtpu_allowed(monkeypatch):
    monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")  # what the parbench process has once TF is imported
    monkeypatch.setattr("suites.frameworks.tf.tpu_runtime_evidence", lambda: "a TPU device file exists")
    calls = []

    def probe(command, **kwargs):
        calls.append(kwargs.get("env"))
        return subprocess.CompletedProcess(command, 0, stdout="4\n", stderr="")

    monkeypatch.setattr("suites.frameworks.tf.subprocess.run", probe)
    info = TF_DESCRIPTOR.tpus()
    assert info.count == 4
    assert calls and calls[0]["TPU_LOAD_LIBRARY"] == "1"


def test_the_tpu_worker_is_allowed_libtpu_and_other_isolated_workers_are_not(monkeypatch):
    launched = []
    monkeypatch.setattr(launchers, "run_processes",
                        lambda job, timing, envs: launched.append(envs) or Outcome(Status.OK))
    launchers.run_isolated(job_for(Case.make("train_step", "tf", "tpu", "tpu", "bf16", 4,
                                             {"model": "mlp", "batch": 32})), FAST)
    launchers.run_isolated(job_for(Case.make("train_step", "tf", "cpu", "towers", "fp32", 2,
                                             {"model": "mlp", "batch": 4})), FAST)
    assert launched == [[{"TPU_LOAD_LIBRARY": "1"}], [{}]]


# --- 7: no silent CPU fallback ---------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    Case.make("matmul", "tf", "tpu", params=MATMUL),
    Case.make("train_step", "tf", "tpu", precision="bf16", params={"model": "mlp", "batch": 8}),
])
def test_tf_single_on_a_tpu_is_unavailable_and_points_to_the_tpu_strategy(case, machine):
    machine(DeviceInfo(Framework.TF, DeviceKind.TPU, 4, ("TPU:0", "TPU:1", "TPU:2", "TPU:3")))
    reason = unavailable_reason(plan(case))
    assert reason and "strategy 'tpu'" in reason


def test_tf_kernels_configure_the_runtime_and_turn_soft_placement_off(tf_placement):
    tf.config.set_soft_device_placement(True)
    outcome = execute_in_process(job_for(Case.make("matmul", "tf", "cpu", params=MATMUL)), FAST)
    assert outcome.status is Status.OK, outcome.reason
    assert tf.config.get_soft_device_placement() is False


# --- 9, 16: which GPUs TF sees -----------------------------------------------------------------------
FAKE_GPUS = [tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(4)]


@pytest.fixture
def four_gpus(monkeypatch, tf_placement):
    """TF on a machine with 4 GPUs, as configure_runtime sees it: what it makes visible and grows."""
    calls = {"visible": [], "growth": []}
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: list(FAKE_GPUS) if kind == "GPU" else real_list(kind))
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda devices, kind=None: calls["visible"].append((list(devices), kind)))
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls["growth"].append(device))
    monkeypatch.setattr(distribute, "_split_cpu", lambda count: None)  # logical CPUs: not this test's
    pretend_tf_gpus(monkeypatch, len(FAKE_GPUS))
    return calls


def pretend_tf_gpus(monkeypatch, count: int) -> None:
    """Discovery (which decides whether a case shares GPUs) sees `count` GPUs."""
    monkeypatch.setattr("suites.hardware.devices.discover", lambda framework, kind: DeviceInfo(
        framework, kind, count if kind is DeviceKind.GPU else 1, ("NVIDIA H100 80GB HBM3",) * count))


@pytest.mark.parametrize("strategy", ["mirrored", "towers", "model_parallel", "pipeline"])
def test_one_gpu_is_split_into_logical_gpus_for_a_multi_device_case(four_gpus, monkeypatch, strategy):
    """Fewer GPUs than the case spans: GPU 0 becomes one logical GPU per device, each with an
    equal share of its memory (and no memory growth, which logical GPUs do not have)."""
    pretend_tf_gpus(monkeypatch, 1)
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: FAKE_GPUS[:1] if kind == "GPU" else [])
    split = []
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda device, configs: split.append((device, [c.memory_limit for c in configs])))
    monkeypatch.setattr(distribute, "gpu_memory_mb", lambda gpu: 81559.0)
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: FAKE_GPUS[:1] if kind == "GPU" else [])
    case = train("gpu", strategy, 2)
    distribute.configure_runtime(job_for(case))
    assert split == [(FAKE_GPUS[0], [int(81559 * distribute.LOGICAL_GPUS_MEMORY_SHARE / 2)] * 2)]
    assert four_gpus["growth"] == []
    assert (distribute.replica_devices(job_for(case)) == ["/GPU:0", "/GPU:1"]
            and distribute.gpu_ordinals(job_for(case)) == (0,))


def train(device: str, strategy: str, n: int) -> Case:
    return Case.make("train_step", "tf", device, strategy, "fp32", n, {"model": "mlp", "batch": 12})


@pytest.mark.parametrize("case, shown", [
    # a process of its own: exactly the case's GPUs (none for a CPU or TPU case)
    (train("cpu", "towers", 2), 0),
    (train("cpu", "mirrored", 2), 0),
    (train("cpu", "multiworker", 2), 0),
    (Case.make("allreduce", "tf", "cpu", "mirrored", "fp32", 2, {"bytes": 1024}), 0),
    (Case.make("train_step", "tf", "tpu", "tpu", "bf16", 4, {"model": "mlp", "batch": 32}), 0),
    (train("gpu", "towers", 2), 2),
    (train("gpu", "mirrored", 3), 3),
    (train("gpu", "multiworker", 2), 1),  # one GPU per worker (its CUDA_VISIBLE_DEVICES)
    # `single` shares the calling process with every other in-process TF case: GPU 0
    (train("gpu", "single", 1), 1),
    (train("cpu", "single", 1), 1),
    (Case.make("matmul", "tf", "cpu", params=MATMUL), 1),
])
def test_tf_sees_only_the_gpus_of_its_case(case, shown, four_gpus):
    distribute.configure_runtime(job_for(case))
    assert four_gpus["visible"] == [(FAKE_GPUS[:shown], "GPU")]
    assert four_gpus["growth"] == FAKE_GPUS[:shown]
    assert tf.config.get_soft_device_placement() is False


def test_in_process_cpu_and_gpu_cases_share_one_runtime_that_keeps_gpu_0(four_gpus, monkeypatch):
    """TF's visible devices are fixed once it initialises: the in-process (`single`) cases of a
    mixed run must ask for the same ones whatever the device of the first, or the GPU cases
    after a CPU case would find no GPU. A case that needs more GPUs than an initialised runtime
    shows says so instead of running on fewer."""
    initialised = []

    def set_visible(devices, kind=None):
        if initialised and list(devices) != initialised[0]:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        initialised.append(list(devices))

    monkeypatch.setattr(tf.config, "set_visible_devices", set_visible)
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: initialised[0])
    for case in (train("cpu", "single", 1), train("gpu", "single", 1),
                 Case.make("matmul", "tf", "gpu", params=MATMUL), train("cpu", "single", 1)):
        distribute.configure_runtime(job_for(case))
    assert initialised == [FAKE_GPUS[:1]] * 4
    with pytest.raises(RuntimeError, match="needs 2 GPUs but TensorFlow is already initialised with 1"):
        distribute.configure_runtime(job_for(train("gpu", "mirrored", 2)))


# --- 8: bf16 all-reduce through NCCL ------------------------------------------------------------------
def allreduce(strategy: str, precision: str, backend: str = "auto") -> Case:
    return Case.make("allreduce", "tf", "gpu", strategy, precision, 2, {"bytes": 65536, "backend": backend})


@pytest.mark.parametrize("case", [allreduce("mirrored", "bf16"), allreduce("mirrored", "bf16", "nccl"),
                                  allreduce("multiworker", "bf16"), allreduce("multiworker", "bf16", "nccl")])
def test_bf16_all_reduce_through_nccl_is_unavailable_with_the_reason(case, machine):
    machine(gpus(4))
    reason = unavailable_reason(plan(case))
    assert reason and "NCCL" in reason and "bfloat16" in reason


@pytest.mark.parametrize("case", [allreduce("mirrored", "fp16"), allreduce("multiworker", "bf16", "ring"),
                                  Case.make("train_step", "tf", "gpu", "mirrored", "bf16", 2,
                                            {"model": "mlp", "batch": 8})])
def test_other_gpu_all_reduces_stay_available(case, machine):
    """fp16 has an NCCL kernel; ring is not NCCL; training all-reduces float32 gradients."""
    machine(gpus(4))
    assert unavailable_reason(plan(case)) is None


# --- 10: tf32 and bf16 need compute capability 8.0 -------------------------------------------------
@pytest.mark.parametrize("framework", ["torch", "tf"])
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_tf32_and_bf16_are_unavailable_below_compute_capability_8(framework, precision, machine):
    machine(gpus(1, "7.5", Framework(framework)))
    case = Case.make("matmul", framework, "gpu", precision=precision, params=MATMUL)
    reason = unavailable_reason(plan(case))
    assert reason and "compute capability >= 8.0" in reason and "GPU model 0 has 7.5" in reason
    machine(gpus(1, "8.0", Framework(framework)))
    assert unavailable_reason(plan(case)) is None


@pytest.mark.parametrize("capabilities, precision, n, available", [
    (["7.5"], "fp16", 1, True),          # fp16 tensor cores since Volta
    (["9.0"], "bf16", 1, True),
    (["10.0"], "tf32", 1, True),         # compared as numbers, not as text
    (["8.0", "7.0"], "bf16", 1, True),   # a one-GPU case uses GPU 0 only
    (["8.0", "7.0"], "bf16", 2, False),  # ... two GPUs: the second has none
])
def test_the_capability_rule_reads_every_gpu_the_case_uses(capabilities, precision, n, available, machine):
    machine(gpus(len(capabilities), capabilities=capabilities))
    strategy = "single" if n == 1 else "mirrored"
    reason = unavailable_reason(plan(Case.make("train_step", "tf", "gpu", strategy, precision, n,
                                          {"model": "mlp", "batch": 8})))
    assert (reason is None) is available, reason


def test_the_tf_descriptor_reports_each_gpus_compute_capability(monkeypatch):
    details = {FAKE_GPUS[0].name: {"device_name": "Tesla T4", "compute_capability": (7, 5)},
               FAKE_GPUS[1].name: {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: FAKE_GPUS[:2])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda device: details[device.name])
    info = TF_DESCRIPTOR.gpus()
    assert info.names == ("Tesla T4", "NVIDIA H100 80GB HBM3")
    assert info.details["compute_capability"] == ["7.5", "9.0"]


# --- 12: cuDNN autotuning, on and recorded ------------------------------------------------------------
CONV = {"batch": 2, "h": 6, "w": 6, "cin": 3, "cout": 4, "kernel": 3, "layout": "nhwc"}


def test_torch_gpu_cases_autotune_cudnn_record_it_and_put_it_back(monkeypatch, torch_flags):
    monkeypatch.setattr(torch_backend, "device_for", lambda case, index=0: torch.device("cpu"))  # no GPU here
    torch.backends.cudnn.benchmark = False
    during = []
    real_configure = torch_backend.configure

    def configure(case):  # the real one, and what it left cuDNN doing for the case
        saved = real_configure(case)
        during.append(torch.backends.cudnn.benchmark)
        return saved

    monkeypatch.setattr(torch_backend, "configure", configure)
    outcome = execute_in_process(job_for(Case.make("conv2d", "torch", "gpu", params=CONV)), FAST)
    assert outcome.status is Status.OK, outcome.reason
    assert during == [True] and outcome.details["cudnn_autotune"] is True
    assert torch.backends.cudnn.benchmark is False  # restored after the case


def test_torch_cpu_cases_record_nothing_about_cudnn(torch_flags):
    outcome = execute_in_process(job_for(Case.make("conv2d", "torch", "cpu", params=CONV)), FAST)
    assert outcome.status is Status.OK and "cudnn_autotune" not in outcome.details


def test_tf_gpu_cases_record_tensorflows_cudnn_autotuning(monkeypatch):
    case = Case.make("conv2d", "tf", "gpu", params=CONV)
    monkeypatch.delenv("TF_CUDNN_USE_AUTOTUNE", raising=False)
    assert tf_backend.cudnn_details(case) == {"cudnn_autotune": True}
    monkeypatch.setenv("TF_CUDNN_USE_AUTOTUNE", "0")
    assert tf_backend.cudnn_details(case) == {"cudnn_autotune": False}
    assert tf_backend.cudnn_details(Case.make("conv2d", "tf", "cpu", params=CONV)) == {}


# --- 16: torch's TF32 flags, set with the current API and put back -----------------------------------
@pytest.mark.parametrize("case", [
    Case.make("matmul", "torch", "cpu", precision="tf32", params=MATMUL),
    Case.make("train_step", "torch", "cpu", precision="tf32", params={"model": "mlp", "batch": 4}),
])
def test_a_tf32_case_leaves_torchs_flags_as_it_found_them(case, torch_flags):
    """An in-process tf32 case must not leak TF32 into the fp32 cases (or user code) after it."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    runnable = job_for(case).runnable()
    runnable.setup()
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32  # what cuBLAS reads
    runnable.teardown()
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    assert not torch.backends.cuda.matmul.allow_tf32


def test_an_fp32_case_restores_a_callers_tf32_setting(torch_flags):
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    runnable = job_for(Case.make("matmul", "torch", "cpu", params=MATMUL)).runnable()
    runnable.setup()
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    runnable.teardown()
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32


def test_the_numerics_reference_runs_on_this_workers_own_cpu():
    """Under strict placement "/CPU:0" is refused in a multi-worker cluster, where it matches
    every worker's CPU; the reference trainer is placed on this worker's host CPU instead."""
    class Worker1OnGpu:
        class extended:
            worker_devices = ("/job:worker/replica:0/task:1/device:GPU:0",)

    assert distribute.host_cpu(Worker1OnGpu()) == "/job:worker/replica:0/task:1/device:CPU:0"
    assert distribute.host_cpu(None) == "/CPU:0"


def test_a_parameter_server_chief_without_a_gpu_reads_none(monkeypatch):
    """The chief of a GPU parameter-server case gets CUDA_VISIBLE_DEVICES="": its memory baseline,
    memory probe and energy meter ask for no GPU (asking for /GPU:0 there crashed its setup)."""
    chief_sees: list = []
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: chief_sees if kind == "GPU" else [])
    case = train("gpu", "parameter_server", 2)
    assert distribute.local_gpus(job_for(case)) == [] and distribute.gpu_ordinals(job_for(case)) == ()
    worker_sees = FAKE_GPUS[:1]
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: worker_sees if kind == "GPU" else [])
    assert distribute.local_gpus(job_for(case)) == ["/GPU:0"]
