"""PyTorch strategies, training steps and mixed precision: models, checks, ranks, torchrun."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from tests.processes import mark_processes

torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import find_plugin  # noqa: E402
from tests.real_run_timing import REAL_RUN  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status, Strategy  # noqa: E402
from suites.frameworks.torch import catalog as torch_catalog
from suites.frameworks.torch import models as torch_models  # noqa: E402
from suites.frameworks.torch.qkv import fuse  # noqa: E402
from suites.frameworks.torch import training as torch_training  # noqa: E402
from suites.frameworks.torch.training import TorchTrainStep, reference_losses  # noqa: E402
from suites.records.check import LOSS_TRAJECTORY_TOLERANCE  # noqa: E402
from suites.hardware.devices import DeviceInfo  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.runner.launchers import rank_cpus  # noqa: E402
from suites.runner.launchers import free_ports  # noqa: E402
from suites.runner.launchers import run_ranks
from suites.runner.runner import RunContext, Runner  # noqa: E402
from suites.strategies.torch.dataparallel import DATAPARALLEL_ON_CPU  # noqa: E402
from suites.workloads import WORKLOADS  # noqa: E402
from suites.workloads.training import OPTIMIZERS, Mlp, ResidualCnn, TransformerBlock  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = REAL_RUN  # the fewest steps, no re-run when contended


def train_case(strategy: str, precision: str = "fp32", n: int = 1, model: str = "mlp",
               batch: int = 4, **params: int | str) -> Case:
    return Case.make("train_step", "torch", "cpu", strategy, precision, n,
                     {"model": model, "batch": batch, **params})


def context(tmp_path: Path) -> RunContext:
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    return RunContext(suite="test", store=store, timing=FAST)




@pytest.fixture
def our_processes(monkeypatch):
    """Marks every process this test starts (through the environment they inherit) and returns
    a function listing those still alive: other tests may run workers on this machine too."""
    alive = mark_processes(monkeypatch)
    probe = subprocess.Popen(["sleep", "60"])  # the detector must see a process we started
    try:
        # /proc/<pid>/environ can be unreadable for a moment while the child execs
        deadline = time.monotonic() + 5.0
        while probe.pid not in alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert probe.pid in alive()
    finally:
        probe.kill()
        probe.wait()
    return alive


# --- the models are the specs' functions ------------------------------------------------------
def _dense(x, kernel, bias=None):
    return x @ kernel + (0.0 if bias is None else bias)


def _conv3x3_same(x, kernel, bias):
    """NHWC, HWIO, stride 1, one pixel of zero padding: the spec's 'same' 3x3 convolution."""
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    return np.einsum("nhwcij,ijco->nhwo", windows, kernel) + bias


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def numpy_forward(spec, w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The logits each spec's docstring defines, in float64 NumPy, canonical layout."""
    w = {name: value.astype(np.float64) for name, value in w.items()}
    x = x.astype(np.float64)
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    if isinstance(spec, Mlp):
        for i in range(spec.depth):
            x = relu(_dense(x, w[f"dense{i}.kernel"], w[f"dense{i}.bias"]))
        return _dense(x, w[f"dense{spec.depth}.kernel"], w[f"dense{spec.depth}.bias"])
    if isinstance(spec, ResidualCnn):
        x = relu(_conv3x3_same(x, w["stem.kernel"], w["stem.bias"]))
        for b in range(spec.blocks):
            h = relu(_conv3x3_same(x, w[f"block{b}.conv1.kernel"], w[f"block{b}.conv1.bias"]))
            x = relu(x + _conv3x3_same(h, w[f"block{b}.conv2.kernel"], w[f"block{b}.conv2.bias"]))
        return _dense(x.mean(axis=(1, 2)), w["head.kernel"], w["head.bias"])
    assert isinstance(spec, TransformerBlock)
    batch, seq, d = x.shape
    heads, d_head = spec.heads, d // spec.heads
    split = lambda v: v.reshape(batch, seq, heads, d_head).transpose(0, 2, 1, 3)  # noqa: E731
    for i in range(spec.layers):
        b = {name.removeprefix(f"block{i}."): value for name, value in w.items()
             if name.startswith(f"block{i}.")}
        h = _layer_norm(x, b["ln1.gamma"], b["ln1.beta"])
        q, k, v = (split(_dense(h, b[f"attn.{n}.kernel"])) for n in "qkv")
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_head)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        x = x + _dense(attended.transpose(0, 2, 1, 3).reshape(batch, seq, d), b["attn.o.kernel"],
                       b["attn.o.bias"])
        h = _layer_norm(x, b["ln2.gamma"], b["ln2.beta"])
        x = x + _dense(_gelu_tanh(_dense(h, b["ffn.in.kernel"], b["ffn.in.bias"])),
                       b["ffn.out.kernel"], b["ffn.out.bias"])
    return _dense(x.mean(axis=1), w["head.kernel"], w["head.bias"])


@pytest.mark.parametrize("spec", [Mlp(features=12, hidden=16, depth=2),
                                  Mlp(features=12, hidden=48, depth=5),
                                  ResidualCnn(image=6, channels=4, blocks=2),
                                  TransformerBlock(seq=5, d_model=8, heads=2, ffn=16),
                                  TransformerBlock(seq=5, d_model=12, heads=3, ffn=20, layers=2)],
                         ids=["mlp", "mlp-wide-deep", "cnn", "transformer", "transformer-2-layers"])
def test_torch_model_computes_the_spec_function(spec):
    weights = spec.init_weights(seed=3)
    for name in weights:  # non-trivial biases and norm parameters, so their layout matters too
        if name.endswith(("bias", "beta", "gamma")):
            weights[name] = weights[name] + np.linspace(-0.5, 0.5, weights[name].size,
                                                        dtype=np.float32).reshape(weights[name].shape)
    x, _ = spec.make_batch(3, seed=4)
    model = torch_catalog.build(spec, weights, torch.device("cpu"), torch.float64)
    with torch.no_grad():
        logits = model(torch.from_numpy(np.ascontiguousarray(model.input_from_canonical(x))).double())
    np.testing.assert_allclose(logits.numpy(), numpy_forward(spec, weights, x), rtol=1e-9, atol=1e-9)


def test_canonical_gradients_come_back_in_the_canonical_layout():
    spec = ResidualCnn(image=4, channels=3, blocks=1)
    model = torch_catalog.build(spec, spec.init_weights(), torch.device("cpu"))
    x, y = spec.make_batch(2)
    torch.nn.functional.cross_entropy(
        model(torch.from_numpy(np.ascontiguousarray(model.input_from_canonical(x)))),
        torch.from_numpy(y)).backward()
    gradients = model.canonical_gradients()
    assert {n: g.shape for n, g in gradients.items()} == spec.parameter_shapes()


# --- checks: single device, DDP, mixed precision --------------------------------------------------
def test_gradient_check_fails_when_the_strategy_loses_part_of_the_batch():
    """The check compares against the full-batch gradient: a model that sees only half of the
    batch (what a strategy dropping a shard computes) must fail it."""
    runnable = TorchTrainStep(job_for(train_case("single", batch=8)))
    runnable.setup()
    assert runnable.check().passed
    full = runnable.trained
    runnable.trained = lambda x: full(x[: len(x) // 2]).repeat(2, 1)
    check = runnable.check()
    assert not check.passed and check.metric == "grad_rel_l2_err" and check.value > 0.05


def test_ddp_on_two_gloo_ranks_matches_the_full_batch_gradient_and_is_emulated(tmp_path,
                                                                                our_processes):
    record = Runner.storing(context(tmp_path)).run(train_case("ddp", n=2))
    assert record.status is Status.OK, record.reason
    assert record.emulated
    assert record.check.passed and record.check.metric == "grad_rel_l2_err"
    assert record.check.value <= record.check.tolerance == 5e-2
    assert "global batch 8" in record.check.detail
    assert len(record.measurement.rank_medians) == 2
    # each rank's step without the all-reduce (no_sync), and the share the exchange takes
    assert len(record.measurement.rank_compute) == 2
    assert 0.0 <= record.metrics["exchange_share"] == record.measurement.exchange_share < 1.0
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:  # each rank pinned to its own half of the cores (rank 0's is stored)
        assert record.details["cpus_pinned"] == cores[:len(cores) // 2]
    assert record.metrics["samples_per_s"] == pytest.approx(8 / record.measurement.median)
    assert [r.case for r in ResultsStore(tmp_path / "results").load()] == [record.case]
    assert our_processes() == []


@pytest.mark.parametrize("precision, tolerance", [("bf16", 3e-2), ("fp16", 1e-2)])
def test_mixed_precision_check_is_stored(tmp_path, precision, tolerance):
    record = Runner.storing(context(tmp_path)).run(train_case("single", precision))
    assert record.status is Status.OK, record.reason
    assert record.check.metric == "loss_traj_max_rel_err"
    assert record.check.passed and 0 < record.check.value <= record.check.tolerance == tolerance
    assert record.check.detail.startswith(f"5 steps, loss {precision}/fp32")
    assert ("skipped by loss scaling" in record.check.detail) == (precision == "fp16")
    [stored] = ResultsStore(tmp_path / "results").load()
    assert stored.check == record.check


def test_ddp_mixed_precision_follows_the_single_device_fp32_trajectory():

    outcome = run_ranks(job_for(train_case("ddp", "bf16", n=2, model="transformer", batch=2)), FAST)
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.metric == "loss_traj_max_rel_err" and outcome.check.passed


# --- model sizes and the optimizer ------------------------------------------------------------------
@pytest.mark.parametrize("params, spec", [
    ({"model": "mlp", "hidden": 96, "depth": 5}, Mlp(hidden=96, depth=5)),
    ({"model": "transformer", "layers": 2, "seq": 16, "d_model": 32, "heads": 4, "ffn": 64},
     TransformerBlock(seq=16, d_model=32, heads=4, ffn=64, layers=2)),
], ids=["mlp-wide-deep", "transformer-2-layers"])
def test_a_sized_model_passes_the_gradient_check(params, spec):
    runnable = TorchTrainStep(job_for(train_case("single", batch=8, **params)))
    runnable.setup()
    assert runnable.spec == spec
    layout = runnable.model.head_layout  # a transformer's q, k, v are one fused layer in torch
    weights = fuse(layout, spec.init_weights()) if layout else spec.init_weights()
    assert {name: tuple(p.shape) for name, p in runnable.model.named_parameters()} == {
        torch_models.torch_name(name): tuple(torch_models.to_torch_layout(array).shape)
        for name, array in weights.items()}
    check = runnable.check()
    assert check.passed and check.metric == "grad_rel_l2_err", check


def test_the_optimizer_is_the_one_the_case_names():
    adam = TorchTrainStep(job_for(train_case("single", optimizer="adam")))
    adam.setup()
    assert type(adam.optimizer) is torch.optim.Adam
    assert adam.optimizer.defaults["betas"] == (0.9, 0.999) and adam.optimizer.defaults["eps"] == 1e-8
    assert adam.optimizer.defaults["lr"] == OPTIMIZERS["adam"].learning_rate == 1e-4
    sgd = TorchTrainStep(job_for(train_case("single")))
    sgd.setup()
    assert type(sgd.optimizer) is torch.optim.SGD


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_adam_cases_pass_their_checks(tmp_path, precision):
    record = Runner.storing(context(tmp_path)).run(train_case("single", precision, optimizer="adam"))
    assert record.status is Status.OK, record.reason
    assert record.check.passed, record.check
    if precision != "fp32":
        assert record.check.metric == "loss_traj_max_rel_err" and "single, adam" in record.check.detail


def test_the_loss_trajectory_check_compares_with_the_same_optimizer(monkeypatch):
    """A bf16 Adam case passes against the fp32 Adam trajectory (above) and fails against an
    fp32 SGD one: the check tells the optimizers apart, so its reference must be the case's."""
    runnable = TorchTrainStep(job_for(train_case("single", "bf16", optimizer="adam")))
    runnable.setup()
    monkeypatch.setattr(torch_training, "reference_losses",
                        lambda *args: reference_losses(*args[:5], "sgd"))
    check = runnable.check()
    assert not check.passed and check.metric == "loss_traj_max_rel_err"
    assert check.value > 3 * LOSS_TRAJECTORY_TOLERANCE[Precision.BF16]


@pytest.mark.slow
def test_ddp_with_adam_follows_the_single_device_adam_trajectory(tmp_path, our_processes):
    record = Runner.storing(context(tmp_path)).run(train_case("ddp", "bf16", n=2, optimizer="adam"))
    assert record.status is Status.OK, record.reason
    assert record.check.metric == "loss_traj_max_rel_err" and record.check.passed, record.check
    assert "ddp, adam" in record.check.detail
    assert our_processes() == []


# --- availability -------------------------------------------------------------------------------
def test_dataparallel_on_cpu_is_unavailable_with_its_reason(tmp_path):
    record = Runner.storing(context(tmp_path)).run(train_case("dataparallel", n=2))
    assert record.status is Status.UNAVAILABLE
    assert record.reason == DATAPARALLEL_ON_CPU
    assert record.measurement is None and not record.emulated


def _gpus(count: int) -> DeviceInfo:
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, count, tuple(f"GPU {i}" for i in range(count)))


CPU = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("a CPU",))


def test_emulated_ranks_get_disjoint_cores_only_when_the_cores_go_round(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert rank_cpus(job_for(train_case("ddp", n=2)), 2) == [[0, 1], [2, 3]]
    assert rank_cpus(job_for(train_case("ddp", n=4)), 4) == [[0], [1], [2], [3]]
    assert rank_cpus(job_for(train_case("ddp", n=8)), 8) is None  # more ranks than cores: shared
    assert rank_cpus(job_for(train_case("ddp", n=1)), 1) is None
    allreduce = Case.make("allreduce", "torch", "cpu", "ddp", "fp32", 2, {"bytes": 1024, "backend": "gloo"})
    assert rank_cpus(job_for(allreduce), 2) is None  # gloo's transport threads need the other core
    gpu = Case.make("train_step", "torch", "gpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 4})
    assert rank_cpus(job_for(gpu), 2) is None


def test_dataparallel_needs_a_gpu_per_device_and_ddp_ranks_can_share_one():
    ddp, dataparallel = (find_plugin(Framework.TORCH, Strategy.DDP),
                         find_plugin(Framework.TORCH, Strategy.DATAPARALLEL))
    two_gpus = Case.make("train_step", "torch", "gpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 4})
    assert ddp.unavailable_reason(job_for(two_gpus), _gpus(1)) is None  # two gloo ranks share the one GPU
    assert ddp.unavailable_reason(job_for(two_gpus), _gpus(2)) is None
    strong = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 4,
                       {"model": "mlp", "batch": 10, "scaling": "strong"})
    assert "does not split evenly over 4 ranks" in ddp.unavailable_reason(job_for(strong), CPU)
    gloo = Case.make("allreduce", "torch", "gpu", "ddp", "fp32", 2, {"bytes": 1024, "backend": "gloo"})
    assert ddp.unavailable_reason(job_for(gloo), _gpus(1)) is None  # gloo ranks may share a GPU
    nccl_on_cpu = Case.make("allreduce", "torch", "cpu", "ddp", "fp32", 2, {"bytes": 1024, "backend": "nccl"})
    assert "CUDA tensors only" in ddp.unavailable_reason(job_for(nccl_on_cpu), CPU)
    ring = Case.make("allreduce", "torch", "cpu", "ddp", "fp32", 2, {"bytes": 1024, "backend": "ring"})
    assert "not a torch.distributed backend" in ddp.unavailable_reason(job_for(ring), CPU)
    dp = Case.make("train_step", "torch", "gpu", "dataparallel", "fp32", 2, {"model": "mlp", "batch": 4})
    assert "needs 2 visible GPUs; 1 visible" in dataparallel.unavailable_reason(job_for(dp), _gpus(1))
    assert dataparallel.unavailable_reason(job_for(dp), _gpus(2)) is None
    assert ddp.rules.launch.value == "ranks" and dataparallel.rules.launch.value == "isolated"


def test_torch_rules_module_imports_no_framework():
    code = ("import sys, suites.strategies.torch.ddp, suites.strategies.torch.dataparallel, "
            "suites.strategies.torch.single, suites.runner.availability; "
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# --- a crashing rank fails its case, not the suite ------------------------------------------
CRASHING_WORKLOAD = textwrap.dedent('''
    """Test-only workload: rank 1 dies abruptly right after joining the process group."""
    import os
    from suites.records.check import Check
    from suites.strategies.registry import plugin_for
    from suites.measure.runnable import Runnable
    from suites.cases.vocabulary import Framework
    from suites.workloads.base import Param, Workload

    class CrashingRank(Workload):
        name = "crashing_rank"
        kind = "collective"
        params = (Param("size", default=1),)
        implementations = {Framework.TORCH: "parbench_test_crash:CrashingRankRunnable"}

        def flops_per_step(self):
            return 0.0

    class CrashingRankRunnable(Runnable):
        def setup(self):
            self.group = self.job.strategy.hooks.join(self.job)
            if self.group.rank == 1:
                print("rank 1 crashing on purpose", flush=True)
                os._exit(3)

        def step(self):
            pass

        def synchronize(self):
            self.group.barrier()

        def check(self):
            self.group.barrier()  # rank 0 waits here for the rank that died
            return Check(True, "none", 0.0, 0.0)

        def teardown(self):
            self.group.destroy()
''')


@pytest.fixture
def crashing_workload(tmp_path, monkeypatch):
    """Registered here and, through a sitecustomize on PYTHONPATH, in the rank processes."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "parbench_test_crash.py").write_text(CRASHING_WORKLOAD)
    (plugin / "sitecustomize.py").write_text(
        "from suites.workloads import register\n"
        "from parbench_test_crash import CrashingRank\n"
        "register(CrashingRank)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(plugin), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.syspath_prepend(str(plugin))
    from parbench_test_crash import CrashingRank

    monkeypatch.setitem(WORKLOADS, CrashingRank.name, CrashingRank)
    return CrashingRank


def test_a_crashing_rank_fails_its_case_and_the_suite_goes_on(tmp_path, crashing_workload,
                                                               our_processes):
    crashing = Case.make("crashing_rank", "torch", "cpu", "ddp", "fp32", 2)
    healthy = Case.make("allreduce", "torch", "cpu", "ddp", "fp32", 2, {"bytes": 1024})
    started = time.monotonic()
    records = list(Runner.storing(context(tmp_path)).run_all([crashing, healthy]))
    assert [r.status for r in records] == [Status.FAILED, Status.OK], records[1].reason
    failed = records[0]
    assert failed.reason == "rank 1 exited with code 3 before reporting"
    assert failed.details["rank"] == 1
    assert "rank 1 crashing on purpose" in failed.details["output_tail"]
    assert time.monotonic() - started < 60, "the launcher waited for a dead rank's peers"
    assert our_processes() == []


# --- torchrun ---------------------------------------------------------------------------------
def _stop_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=5)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_two_torchrun_nodes_on_localhost_run_a_ddp_case(tmp_path, our_processes):
    """Two torchrun agents, one rank each, meeting through c10d rendezvous on 127.0.0.1: the
    multi-machine command line, with both "machines" on this host."""
    case = train_case("ddp", n=2)
    port = free_ports(1)[0]
    out = tmp_path / "outcome.json"
    command = ["torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"parbench-test-{port}",
               "--rdzv-conf", "join_timeout=60", "--max-restarts", "0",
               "-m", "suites", "worker", "--case", case.id, "--timing", json.dumps(asdict(FAST)),
               "--out", str(out), "--results", str(tmp_path / "results"), "--label", "two-nodes"]
    # Both "machines" share this host's cores: one thread per rank, as parbench's launcher does.
    env = {**os.environ, "PARBENCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True) for _ in range(2)]
    try:
        logs = [node.communicate(timeout=120)[0].decode(errors="replace") for node in nodes]
    finally:
        for node in nodes:
            _stop_group(node)
    assert [node.returncode for node in nodes] == [0, 0], logs
    outcomes = [json.loads(path.read_text()) for path in (out, out.with_name(out.name + ".rank1"))]
    for outcome in outcomes:
        assert outcome["status"] == "ok", outcome["reason"]
        assert outcome["check"]["passed"] and outcome["check"]["metric"] == "grad_rel_l2_err"
    # rank 0 stored one record, as `parbench run` would, with both ranks' busy times
    (record,) = ResultsStore(tmp_path / "results").load()
    assert record.case == case and record.status is Status.OK and record.suite == "torchrun"
    assert record.environment["machine"] == "two-nodes" and record.emulated
    assert len(record.measurement.rank_medians) == 2
    assert record.details["nodes"] == 2 and record.details["launcher"] == "torchrun"
    assert record.metrics["samples_per_s"] > 0
    assert our_processes() == []


def test_worker_refuses_bad_input_in_one_line(tmp_path):
    out = ["--out", str(tmp_path / "outcome.json")]
    for args, problem in ((["--case", "train_step/torch/cpu:2/ddp", *out], "not a case id"),
                          (["--case", train_case("ddp", n=2).id], "give --out")):
        result = subprocess.run([sys.executable, "-m", "suites", "worker", *args], cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and problem in result.stderr
        assert "Traceback" not in result.stderr
