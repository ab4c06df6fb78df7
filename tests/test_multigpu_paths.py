"""Multi-GPU, TF-GPU and TPU paths without the hardware (issue 23): readiness with a fake
nvidia-smi or a failed TPU probe, simulated 8-GPU and 1-GPU discovery, ranks and logical GPUs
sharing one GPU (emulated), and what counts as TPU evidence."""
from __future__ import annotations

import json
import sys

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Strategy
from suites.hardware import devices
from suites.hardware.devices import DeviceInfo
from suites.selfchecks import readiness as gpu_readiness
from suites.strategies.jobs import job_for
from suites.strategies.registry import find_plugin
from suites.workloads import workload_of

H100 = "NVIDIA H100 80GB HBM3"


pytestmark = pytest.mark.usefixtures("fresh_discovery")


def gpus(framework: Framework, count: int) -> DeviceInfo:
    if not count:
        return DeviceInfo(framework, DeviceKind.GPU, 0, reason="the CUDA driver failed to initialise")
    return DeviceInfo(framework, DeviceKind.GPU, count, (H100,) * count,
                      details={"compute_capability": ["9.0"] * count})


def pretend(monkeypatch, gpu_count: int, tpu_reason: str = "no TPU runtime") -> None:
    """Discovery, everywhere it is asked, sees `gpu_count` H100s for both frameworks, no TPU."""
    def fake(framework, kind):
        if kind is DeviceKind.GPU:
            return gpus(framework, gpu_count)
        if kind is DeviceKind.CPU:
            return DeviceInfo(framework, kind, 1, ("cpu",))
        return DeviceInfo(framework, kind, 0, reason=tpu_reason)
    for where in ("suites.selfchecks.readiness", "suites.runner.availability", "suites.hardware.devices"):
        monkeypatch.setattr(f"{where}.discover", fake)


def fake_nvidia_smi(monkeypatch, tmp_path) -> None:
    """An nvidia-smi on PATH that lists one GPU, as a driver that sees it does."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nprint('GPU 0: {H100} (UUID: GPU-0000)')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")


def no_tpu(monkeypatch) -> None:
    monkeypatch.setattr(gpu_readiness, "tpu_runtime_evidence", lambda: None)


# --- item 7: hardware that no framework can use is NOT READY ------------------------------------
def test_gpus_nvidia_smi_lists_but_no_framework_sees_are_not_ready(monkeypatch, tmp_path, capsys):
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    pretend(monkeypatch, gpu_count=0)
    no_tpu(monkeypatch)
    fake_nvidia_smi(monkeypatch, tmp_path)
    out = tmp_path / "readiness.json"
    assert gpu_readiness.main(["--out", str(out)], execute=pytest.fail) == 1
    printed = capsys.readouterr().out
    assert f"nvidia-smi lists 1 GPU(s) (GPU 0: {H100}" in printed
    assert "torch sees none: the CUDA driver failed to initialise" in printed
    assert "NOT READY: 2 of 2 paths" in printed
    summary = json.loads(out.read_text())
    assert not summary["ready"] and summary["not_ready"] == ["gpu discovery torch", "gpu discovery tf"]


def test_a_failed_tpu_probe_is_not_ready(monkeypatch, tmp_path, capsys):
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    probe_failed = "TPU_NAME is set, but the TPU did not initialise: RuntimeError: no TPU"
    pretend(monkeypatch, gpu_count=0, tpu_reason=probe_failed)
    monkeypatch.setattr(gpu_readiness, "tpu_runtime_evidence", lambda: "TPU_NAME is set")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert gpu_readiness.main(["--out", str(tmp_path / "r.json")], execute=pytest.fail) == 1
    printed = capsys.readouterr().out
    assert probe_failed in printed and "NOT READY" in printed and "tpu discovery tf" in printed


def test_no_hardware_and_no_evidence_is_still_nothing_to_check(monkeypatch, tmp_path, capsys):
    pretend(monkeypatch, gpu_count=0)
    no_tpu(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_readiness.main(["--out", str(tmp_path / "r.json")], execute=pytest.fail) == 0
    assert "no GPU or TPU visible" in capsys.readouterr().out


# --- item 6: eight GPUs size the model and the mesh --------------------------------------------
def test_on_eight_gpus_every_multi_device_strategy_is_expected(monkeypatch):
    pretend(monkeypatch, gpu_count=8)
    paths = gpu_readiness.plan({(framework, DeviceKind.GPU): gpus(framework, 8) for framework in Framework})
    fp32 = {(str(p.case.framework), str(p.case.strategy)): p for p in paths
            if p.case.workload == "train_step" and p.case.precision is Precision.FP32 and p.case.n_devices > 1}
    unexpected = {key: path.why for key, path in fp32.items() if not path.expected}
    assert set(unexpected) == {("torch", "horovod"), ("tf", "horovod")}, unexpected
    assert all(path.case.n_devices == 8 for path in fp32.values())
    assert job_for(fp32[("torch", "fsdp_tensor")].case).options.mesh == "4x2"
    for key in (("torch", "pipeline"), ("torch", "model_parallel"), ("tf", "pipeline"), ("tf", "model_parallel")):
        assert workload_of(fp32[key].case).model.depth == 7  # 8 layers: a stage per GPU


def test_multi_device_paths_run_in_bf16_too(monkeypatch):
    pretend(monkeypatch, gpu_count=2)
    paths = gpu_readiness.plan({(Framework.TORCH, DeviceKind.GPU): gpus(Framework.TORCH, 2)})
    expected = {(p.case.workload, str(p.case.strategy), str(p.case.precision)) for p in paths if p.expected}
    for strategy in ("ddp", "fsdp", "dataparallel", "pipeline", "tensor"):
        assert {("train_step", strategy, precision) for precision in ("fp32", "bf16")} <= expected
    assert ("train_step", "fsdp_tensor", "bf16") in expected and ("allreduce", "ddp", "bf16") in expected


# --- one GPU stands in for many -----------------------------------------------------------------
def ddp_case(n: int, backend: str = "auto") -> Case:
    params = {"model": "mlp", "batch": 32} if backend == "auto" else {"bytes": 1024, "backend": backend}
    return Case.make("train_step" if backend == "auto" else "allreduce", "torch", "gpu", "ddp", "fp32", n, params)


def test_one_gpu_runs_two_ranks_over_gloo_emulated(monkeypatch):
    pretend(monkeypatch, gpu_count=1)
    plugin, case = find_plugin(Framework.TORCH, Strategy.DDP), ddp_case(2)
    assert plugin.unavailable_reason(job_for(case), gpus(Framework.TORCH, 1)) is None
    assert plugin.backend(job_for(case)) == "gloo" and plugin.emulated(job_for(case))


def test_enough_gpus_keep_nccl_and_real_figures(monkeypatch):
    pretend(monkeypatch, gpu_count=2)
    plugin, case = find_plugin(Framework.TORCH, Strategy.DDP), ddp_case(2)
    assert plugin.backend(job_for(case)) == "nccl" and not plugin.emulated(job_for(case))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "tensor"])
def test_two_nodes_of_eight_gpus_under_torchrun_are_real_nccl_not_emulated(monkeypatch, strategy):
    """Issue 32, N3: torchrun on 2 nodes x 8 GPUs (WORLD_SIZE 16, LOCAL_WORLD_SIZE 8): each node
    holds 8 ranks on its 8 GPUs, so nothing is shared."""
    pretend(monkeypatch, gpu_count=8)
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    plugin = find_plugin(Framework.TORCH, Strategy(strategy))
    case = Case.make("train_step", "torch", "gpu", strategy, "bf16", 16, {"model": "mlp", "batch": 32})
    assert plugin.unavailable_reason(job_for(case), gpus(Framework.TORCH, 8)) is None
    assert plugin.backend(job_for(case)) == "nccl" and not plugin.emulated(job_for(case))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")  # all 16 ranks on one 8-GPU node: shared, emulated
    assert plugin.backend(job_for(case)) == "gloo" and plugin.emulated(job_for(case))


def test_nccl_asked_for_on_a_shared_gpu_stays_unavailable(monkeypatch):
    pretend(monkeypatch, gpu_count=1)
    plugin = find_plugin(Framework.TORCH, Strategy.DDP)
    reason = plugin.unavailable_reason(job_for(ddp_case(2, "nccl")), gpus(Framework.TORCH, 1))
    assert reason.startswith("NCCL needs one GPU per rank")


@pytest.mark.parametrize("framework, strategy", [("tf", "mirrored"), ("tf", "towers"), ("tf", "model_parallel"),
                                                 ("tf", "pipeline"), ("torch", "fsdp"), ("torch", "tensor")])
def test_strategies_that_share_a_gpu_run_emulated_on_one(monkeypatch, framework, strategy):
    pretend(monkeypatch, gpu_count=1)
    case = Case.make("train_step", framework, "gpu", strategy, "fp32", 2, {"model": "mlp", "batch": 32})
    plugin = find_plugin(Framework(framework), Strategy(strategy))
    assert (plugin.unavailable_reason(job_for(case), gpus(Framework(framework), 1)) is None
            and plugin.emulated(job_for(case)))


@pytest.mark.parametrize("framework, strategy", [("tf", "multiworker"), ("tf", "parameter_server"),
                                                 ("torch", "dataparallel"), ("torch", "model_parallel"),
                                                 ("torch", "pipeline")])
def test_strategies_that_need_a_gpu_each_stay_unavailable_on_one(monkeypatch, framework, strategy):
    pretend(monkeypatch, gpu_count=1)
    case = Case.make("train_step", framework, "gpu", strategy, "fp32", 2, {"model": "mlp", "batch": 32})
    plugin = find_plugin(Framework(framework), Strategy(strategy))
    assert "1 visible" in plugin.unavailable_reason(job_for(case), gpus(Framework(framework), 1))
    assert not plugin.emulated(job_for(case))


def test_readiness_on_one_gpu_names_the_shared_paths(monkeypatch):
    pretend(monkeypatch, gpu_count=1)
    paths = {p.name: p for p in gpu_readiness.plan({(Framework.TORCH, DeviceKind.GPU): gpus(Framework.TORCH, 1)})}
    assert paths["train_step torch gpu:2 (shared GPU) ddp fp32"].expected
    assert paths["train_step torch gpu:4 (shared GPU) fsdp_tensor bf16"].expected


# --- item 12: a VFIO group alone is no TPU ------------------------------------------------------
def fake_host(monkeypatch, tmp_path, files: list[str], vendor: str | None) -> None:
    sysfs = tmp_path / "pci"
    if vendor:
        (sysfs / "0000:00:04.0").mkdir(parents=True)
        (sysfs / "0000:00:04.0" / "vendor").write_text(vendor + "\n")
    monkeypatch.setattr(devices, "PCI_DEVICES_SYSFS", str(sysfs))
    real_glob = devices.glob.glob
    monkeypatch.setattr(devices.glob, "glob", lambda pattern: (
        real_glob(pattern) if pattern.startswith(str(tmp_path)) else [f for f in files if f.startswith(pattern[:9])]))
    monkeypatch.delenv("TPU_NAME", raising=False)


def test_a_vfio_group_without_a_google_device_is_no_tpu_evidence(monkeypatch, tmp_path):
    fake_host(monkeypatch, tmp_path, ["/dev/vfio/0"], vendor="0x10de")  # an NVIDIA GPU passed through
    assert devices.tpu_runtime_evidence() is None


def test_a_vfio_group_beside_a_google_device_is_a_tpu(monkeypatch, tmp_path):
    fake_host(monkeypatch, tmp_path, ["/dev/vfio/0"], vendor="0x1ae0")
    assert "TPU device file" in devices.tpu_runtime_evidence()


def test_the_tpu_is_named_by_its_accelerator_type_for_the_peaks_table(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    assert devices.tpu_accelerator_type() == "v5litepod-8"
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE")
    monkeypatch.delenv("ACCELERATOR_TYPE", raising=False)
    assert devices.tpu_accelerator_type() is None


# --- item 10: tf32 switched off by NVIDIA_TF32_OVERRIDE=0 --------------------------------------
def test_tf32_under_nvidia_tf32_override_0_is_unavailable_not_mislabelled(monkeypatch):
    from suites.runner.availability import precision_reason

    case = Case.make("matmul", "torch", "gpu", "single", "tf32", 1, {"m": 64, "n": 64, "k": 64})
    assert precision_reason(case, gpus(Framework.TORCH, 1)) is None
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert "NVIDIA_TF32_OVERRIDE=0 turns TF32 off" in precision_reason(case, gpus(Framework.TORCH, 1))
    fp32 = Case.make("matmul", "torch", "gpu", "single", "fp32", 1, {"m": 64, "n": 64, "k": 64})
    assert precision_reason(fp32, gpus(Framework.TORCH, 1)) is None


# --- item 9: a split matmul's cold-cache rotation is sized on each GPU's share ----------------
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_towers_matmul_rotates_each_gpus_share_of_the_inputs(monkeypatch, framework):
    from suites.workloads.kernels import rotation_count

    case = Case.make("matmul", framework, "gpu", "towers", "bf16", 2, {"m": 1024, "n": 1024, "k": 1024})
    plugin = find_plugin(Framework(framework), Strategy.TOWERS)
    splits = plugin.hooks  # the split is the hooks' (`SplitsKernels`), in both frameworks
    pretend(monkeypatch, gpu_count=2)
    assert splits.kernel_cache_shares(job_for(case)) == 2
    h100_l2, whole = 50 * 10**6, workload_of(case).input_elements() * 2
    # 4 MiB of A and B: 2 MiB per GPU, so twice the copies span twice each GPU's L2
    assert rotation_count(whole // 2, h100_l2) > rotation_count(whole, h100_l2)
    if framework == "tf":  # TF's towers on one GPU: both slices on it, its L2 holds them all
        pretend(monkeypatch, gpu_count=1)
        assert splits.kernel_cache_shares(job_for(case)) == 1


# --- item 1: a parameter-server chief sees no GPU ----------------------------------------------
def test_an_empty_cuda_visible_devices_reads_no_gpu_rather_than_gpu_0():
    from suites.measure.energy_meters import nvml_indices

    assert nvml_indices([0], "") == [None]


def test_readiness_accepts_a_record_that_says_why_it_has_no_memory_figure(monkeypatch, tmp_path):
    from suites.cases.vocabulary import Status
    from suites.records.record import Record

    case = Case.make("train_step", "tf", "gpu", "parameter_server", "fp32", 2, {"model": "mlp", "batch": 32})
    said = Record(case=case, status=Status.OK, run_id="r", timestamp="t", suite="s", environment={},
                  details={"memory_not_measured": "the chief sees no GPU"})
    silent = Record(case=case, status=Status.OK, run_id="r", timestamp="t", suite="s", environment={})
    assert gpu_readiness.memory_summary([said])["ready"]
    assert not gpu_readiness.memory_summary([silent])["ready"]


# --- items 4 and 5: a GPU case of an in-process strategy runs in a process of its own -----------
@pytest.mark.parametrize("framework, strategy, kernel", [("tf", "single", False), ("torch", "single", False),
                                                         ("torch", "towers", True)])
def test_in_process_gpu_cases_run_isolated_with_a_deadline(monkeypatch, framework, strategy, kernel):
    from suites.cases.timing_config import TimingConfig
    from suites.runner.runner import Runner
    from suites.strategies.jobs import job_for
    from suites.runner import launchers
    from suites.measure.launch import Launch

    params = {"m": 64, "n": 64, "k": 64} if kernel else {"model": "mlp", "batch": 32}
    gpu_case = Case.make("matmul" if kernel else "train_step", framework, "gpu", strategy, "fp32",
                         2 if strategy == "towers" else 1, params)
    cpu_case = Case.make("train_step", framework, "cpu", "single", "fp32", 1, {"model": "mlp", "batch": 32})
    used = []
    monkeypatch.setitem(launchers.LAUNCHERS, Launch.ISOLATED, lambda job, timing: used.append("isolated"))
    monkeypatch.setitem(launchers.LAUNCHERS, Launch.IN_PROCESS, lambda job, timing: used.append("in_process"))
    Runner(TimingConfig()).launch(job_for(gpu_case))
    Runner(TimingConfig()).launch(job_for(cpu_case))
    assert used == ["isolated", "in_process"]


def test_the_time_for_the_check_is_a_flag(monkeypatch, tmp_path):
    pretend(monkeypatch, gpu_count=1)
    no_tpu(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    given = []
    monkeypatch.setattr(gpu_readiness, "check_paths", lambda paths, context, execute, deadline_s, total_s, report:
                        given.append((deadline_s, total_s)) or [])
    assert gpu_readiness.main(["--out", str(tmp_path / "r.json"), "--minutes", "20"], execute=pytest.fail) == 0
    assert given == [(0.9 * 1200, 1200)]
    with pytest.raises(SystemExit):
        gpu_readiness.main(["--minutes", "0"])


def test_a_rank_that_fails_after_the_launcher_began_stopping_a_hung_case_is_not_its_cause():
    """A hung rank killed at the deadline closes its peers' connections: their failures are the
    consequence, and the hung rank (which wrote nothing) is named."""
    from suites.cases.vocabulary import Status
    from suites.runner.execute import FAILED_AT, Outcome
    from suites.runner.launchers import _first_failure

    outcomes = [None, Outcome(Status.FAILED, "connection closed by peer", details={FAILED_AT: 105.0})]
    assert _first_failure(outcomes, {}, stopped_at=100.0) == 0
    assert _first_failure(outcomes, {}) == 1  # failed on its own, before anything was stopped


def test_readiness_is_the_cli_subcommand_parbench_ready(monkeypatch, tmp_path, capsys):
    """`parbench ready` runs the same check as the module path, NOT READY exit code included."""
    pytest.importorskip("tensorflow")  # the check expects TF's GPU paths beside torch's
    from suites.frontends import cli

    pretend(monkeypatch, gpu_count=0)
    no_tpu(monkeypatch)
    fake_nvidia_smi(monkeypatch, tmp_path)
    out = tmp_path / "readiness.json"
    assert cli.main(["ready", "--out", str(out)]) == 1
    assert "NOT READY: 2 of 2 paths" in capsys.readouterr().out
    assert json.loads(out.read_text())["not_ready"] == ["gpu discovery torch", "gpu discovery tf"]
    assert cli.main(["ready", "--minutes", "0"]) == 2
    assert "argument --minutes: '0' is not valid" in capsys.readouterr().err


def test_a_torchrun_world_that_does_not_match_the_case_is_refused_with_the_way_out(monkeypatch):
    """Issue 32, N15: torchrun's WORLD_SIZE must be the case's rank count."""
    from suites.runner.case_process import launched_world_problem

    case = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 16, {"model": "mlp", "batch": 32})
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert launched_world_problem(job_for(case)) is None
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert launched_world_problem(job_for(case)) == (
        f"torchrun started 8 processes, but {case.id} runs 16: start torchrun with --nnodes x "
        "--nproc-per-node = 16, or pick the case for 8 devices")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # parbench's own launcher: its world is the case's
    assert launched_world_problem(job_for(case)) is None


def test_a_real_size_case_over_eight_ranks_on_one_gpu_is_unavailable_not_out_of_memory(monkeypatch):
    """Issue 32, N14: the shared-GPU emulation is for sizes whose ranks' training state fits."""
    pretend(monkeypatch, gpu_count=1)
    one_h100 = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, (H100,),
                          details={"compute_capability": ["9.0"], "memory_bytes": [80 * 2**30]})
    plugin = find_plugin(Framework.TORCH, Strategy.DDP)
    llama = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 8,
                      {"model": "llama_block", "layers": 4, "batch": 2, "optimizer": "adamw"})
    reason = plugin.unavailable_reason(job_for(llama), one_h100)
    assert reason.startswith("8 ranks sharing each GPU would hold") and "run it on 8 GPUs" in reason
    small = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 8, {"model": "mlp", "batch": 32})
    assert plugin.unavailable_reason(job_for(small), one_h100) is None
