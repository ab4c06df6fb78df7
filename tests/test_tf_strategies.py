"""TensorFlow strategies, training steps and mixed precision: models, checks, launch paths."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import find_plugin, plugin_for  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from tests.real_run_timing import REAL_RUN  # noqa: E402
from suites.cases.vocabulary import Framework, Precision, Status, Strategy  # noqa: E402
from suites.frameworks.tf import catalog as tf_catalog  # noqa: E402
from suites.frameworks.tf.mixed import GROWTH_INTERVAL, INITIAL_SCALE, LossScaling  # noqa: E402
from suites.frameworks.tf.optimizers import optimizer_for  # noqa: E402
from suites.frameworks.tf.trainers import SingleDeviceTrainer, StrategyTrainer, TrainingSetup  # noqa: E402
from suites.frameworks.tf.training import TfTrainStep  # noqa: E402
from suites.frameworks.torch import catalog as torch_catalog
from suites.records.record import Record  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.strategies.tf.towers.trainer import TowersTrainer  # noqa: E402
from suites.runner.plan import plan, unavailable_reason  # noqa: E402
from suites.runner.launchers import free_ports, run_processes  # noqa: E402
from suites.runner.runner import RunContext, Runner  # noqa: E402
from suites.measure.launch import Launch  # noqa: E402
from suites.workloads.training import OPTIMIZERS, Mlp, ResidualCnn, TransformerBlock  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = REAL_RUN  # the fewest steps, no re-run when contended


def train_case(strategy: str, precision: str = "fp32", n: int = 1, model: str = "mlp",
               batch: int = 4, **params: str) -> Case:
    return Case.make("train_step", "tf", "cpu", strategy, precision, n,
                     {"model": model, "batch": batch, **params})


def context(tmp_path: Path, timing: TimingConfig = FAST) -> RunContext:
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    return RunContext(suite="test", store=store, timing=timing)



# --- the TF models compute the specs' functions -------------------------------------------------
TINY_SPECS = [Mlp(features=12, hidden=16, depth=2), ResidualCnn(image=6, channels=4, blocks=2),
              TransformerBlock(seq=5, d_model=8, heads=2, ffn=16)]
#: Sized by the train_step size parameters: a wider, deeper MLP and a stack of two blocks.
SIZED_SPECS = [Mlp(features=12, hidden=48, depth=5), TransformerBlock(seq=5, d_model=12, heads=3, ffn=20, layers=2)]


def _nontrivial_weights(spec):
    weights = spec.init_weights(seed=3)
    for name in weights:  # biases and norm parameters away from 0/1, so their use matters too
        if name.endswith(("bias", "beta", "gamma")):
            weights[name] = weights[name] + np.linspace(-0.5, 0.5, weights[name].size,
                                                        dtype=np.float32).reshape(weights[name].shape)
    return weights


@pytest.mark.parametrize("spec", TINY_SPECS + SIZED_SPECS,
                         ids=["mlp", "cnn", "transformer", "mlp-wide-deep", "transformer-2-layers"])
def test_tf_forward_equals_torch_forward_from_the_same_weights(spec):
    weights = _nontrivial_weights(spec)
    x, _ = spec.make_batch(3, seed=4)
    tf_logits = tf_catalog.build_forward(spec)(
        {n: tf.constant(w, tf.float64) for n, w in weights.items()}, tf.constant(x), tf.float64).numpy()
    model = torch_catalog.build(spec, weights, torch.device("cpu"), torch.float64)
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(np.ascontiguousarray(model.input_from_canonical(x))).double())
    np.testing.assert_allclose(tf_logits, torch_logits.numpy(), rtol=1e-9, atol=1e-9)


# --- loss scaling ---------------------------------------------------------------------------------
def test_dynamic_loss_scale_halves_on_overflow_and_grows_after_the_interval():
    state = LossScaling.initial_state()
    assert LossScaling.next_state(state, tf.constant(False)).numpy().tolist() == [INITIAL_SCALE / 2, 0]
    almost = tf.constant([INITIAL_SCALE, GROWTH_INTERVAL - 1.0])
    assert LossScaling.next_state(almost, tf.constant(True)).numpy().tolist() == [INITIAL_SCALE * 2, 0]
    assert LossScaling.next_state(state, tf.constant(True)).numpy().tolist() == [INITIAL_SCALE, 1]


def _slot_values(trainer) -> list[np.ndarray]:
    return [slot.numpy().copy() for slots in trainer.slots.values() for slot in slots]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fp16_step_with_overflowing_gradients_is_skipped_and_the_scale_halved(optimizer):
    spec = TINY_SPECS[0]
    trainer = SingleDeviceTrainer(TrainingSetup(spec, spec.init_weights(), 8, tf.float16,
                                                LossScaling.for_precision(Precision.FP16),
                                                optimizer=optimizer), "/CPU:0")
    assert len(_slot_values(trainer)) == (3 * len(trainer.names) if optimizer == "adam" else 0)
    before, slots_before = trainer.weight_copies()[0], _slot_values(trainer)
    trainer.state.assign([2.0 ** 40, 0.0])  # the scaled loss overflows float16
    trainer.checked_step(trainer.numpy_batch(*spec.make_batch(8)))
    assert trainer.loss_scale() == 2.0 ** 39
    after = trainer.weight_copies()[0]
    assert all(np.array_equal(before[name], after[name]) for name in before)
    assert all(np.array_equal(a, b) for a, b in zip(slots_before, _slot_values(trainer)))  # Adam: m, v, t kept
    trainer.checked_step(trainer.numpy_batch(*spec.make_batch(8)))  # 2**39 still overflows
    trainer.state.assign([INITIAL_SCALE, 0.0])
    trainer.checked_step(trainer.numpy_batch(*spec.make_batch(8)))
    assert not np.array_equal(before["dense0.kernel"], trainer.weight_copies()[0]["dense0.kernel"])


# --- the optimizer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_tf_adam_steps_equal_torch_adam_steps_on_the_same_weights_and_gradients(dtype, rtol):
    rng = np.random.default_rng(0)
    weights = {"kernel": rng.standard_normal((3, 4)).astype(dtype), "bias": rng.standard_normal(4).astype(dtype)}
    gradients = [{name: (rng.standard_normal(w.shape) * scale).astype(dtype) for name, w in weights.items()}
                 for scale in (1.0, 1e-3, 10.0)]  # Adam is scale-free: the steps differ in their moments
    parameters = {name: torch.nn.Parameter(torch.from_numpy(w.copy())) for name, w in weights.items()}
    reference = torch.optim.Adam(parameters.values(), lr=OPTIMIZERS["adam"].learning_rate)  # torch's defaults
    adam = optimizer_for("adam")
    variables = {name: tf.Variable(w) for name, w in weights.items()}
    slots = {name: adam.slots(variable) for name, variable in variables.items()}
    for grads in gradients:
        for name, parameter in parameters.items():
            parameter.grad = torch.from_numpy(grads[name])
        reference.step()
        for name, variable in variables.items():
            adam.update(variable, tf.constant(grads[name]), slots[name])
        for name, parameter in parameters.items():
            state = reference.state[parameter]
            np.testing.assert_allclose(variables[name].numpy(), parameter.detach().numpy(), rtol=rtol, atol=0)
            m, v, t = (slot.numpy() for slot in slots[name])
            np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=rtol, atol=0)
            np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=rtol, atol=0)
            assert t == float(state["step"])
    assert not np.allclose(variables["kernel"].numpy(), weights["kernel"])  # it moved


def test_a_float32_adam_update_computes_nothing_in_float64():
    """TPUs have no float64: the update of float32 variables (the TPU step's) stays in float32."""
    adam = optimizer_for("adam")
    variable = tf.Variable(np.ones((3, 4), np.float32))
    slots = adam.slots(variable)

    @tf.function
    def update(grad):
        adam.update(variable, grad, slots, finite=tf.constant(True))

    graph = update.get_concrete_function(tf.TensorSpec((3, 4), tf.float32)).graph
    dtypes = {tensor.dtype for op in graph.get_operations() for tensor in op.outputs}
    assert tf.float32 in dtypes and tf.float64 not in dtypes


@pytest.mark.parametrize("name", ["momentum", "adamw"])
def test_tf_recipe_optimizers_step_as_torch_sgd_momentum_and_adamw_do(name):
    """ResNet's SGD with momentum and weight decay and the transformers' AdamW: three steps of
    the TF rule land where torch.optim's do (make_optimizer, unfused on the CPU)."""
    from suites.frameworks.torch.training import make_optimizer

    rng = np.random.default_rng(1)
    weights = {"kernel": rng.standard_normal((3, 4)), "bias": rng.standard_normal(4)}
    parameters = {n: torch.nn.Parameter(torch.from_numpy(w.copy())) for n, w in weights.items()}
    reference = make_optimizer(name, parameters.values())
    rule = optimizer_for(name)
    variables = {n: tf.Variable(w) for n, w in weights.items()}
    slots = {n: rule.slots(v) for n, v in variables.items()}
    for scale in (1.0, 1e-3, 10.0):
        grads = {n: rng.standard_normal(w.shape) * scale for n, w in weights.items()}
        for n, parameter in parameters.items():
            parameter.grad = torch.from_numpy(grads[n])
        reference.step()
        for n, variable in variables.items():
            rule.update(variable, tf.constant(grads[n]), slots[n])
    for n, parameter in parameters.items():
        np.testing.assert_allclose(variables[n].numpy(), parameter.detach().numpy(), rtol=1e-12, atol=0)
    without_decay = weights["kernel"] - variables["kernel"].numpy()
    assert OPTIMIZERS[name].weight_decay > 0 and np.abs(without_decay).max() > 0


@pytest.mark.parametrize("layout", ["towers-replicated", "towers-param_server", "mirrored"])
def test_every_layout_applies_the_single_device_adam_update(layout):
    """Two towers (on one CPU device, in this process) and a one-device MirroredStrategy keep
    Adam's slots beside their copies and end where one device does."""
    spec = TINY_SPECS[0]
    setup = TrainingSetup(spec, spec.init_weights(), 8, tf.float32, LossScaling(False), optimizer="adam")
    single = SingleDeviceTrainer(setup, "/CPU:0")
    if layout == "mirrored":
        other = StrategyTrainer(setup, tf.distribute.MirroredStrategy(devices=["/CPU:0"]))
    else:
        other = TowersTrainer(setup, ["/CPU:0", "/CPU:0"], layout.removeprefix("towers-"))
    for step in range(3):
        x, y = spec.make_batch(8, 10 + step)
        single.checked_step(single.numpy_batch(x, y))
        other.checked_step(other.numpy_batch(x, y))
    expected = single.weight_copies()[0]
    assert not np.allclose(expected["dense0.kernel"], spec.init_weights()["dense0.kernel"])
    for copy in other.weight_copies():
        for name in expected:
            np.testing.assert_allclose(copy[name], expected[name], rtol=1e-4, atol=1e-6, err_msg=name)


# --- the checks have teeth ------------------------------------------------------------------------
def test_gradient_check_fails_when_part_of_the_batch_is_lost():
    runnable = TfTrainStep(job_for(train_case("single", batch=8)))
    runnable.setup()
    assert runnable.check().passed
    build = runnable.check_trainer

    def losing_half(work):  # the check's trainer, fed its batch's first half twice
        trainer = build(work)
        full = trainer.numpy_batch
        trainer.numpy_batch = lambda x, y: full(np.concatenate([x[:1], x[:1]]), np.concatenate([y[:1], y[:1]]))
        return trainer

    runnable.check_trainer = losing_half
    check = runnable.check()
    assert not check.passed and check.metric == "grad_rel_l2_err" and check.value > 0.05


@pytest.mark.parametrize("params", [{"model": "mlp", "hidden": 96, "depth": 5},
                                    {"model": "transformer", "layers": 2, "seq": 16, "d_model": 32,
                                     "heads": 4, "ffn": 64}],
                         ids=["mlp-wide-deep", "transformer-2-layers"])
def test_a_sized_model_passes_the_gradient_check(params):
    runnable = TfTrainStep(job_for(train_case("single", batch=8, **params)))
    runnable.setup()
    assert {name: w.shape for name, w in runnable.weights.items()} == runnable.spec.parameter_shapes()
    assert len(runnable.weights) == (2 * 6 if params["model"] == "mlp" else 2 * 13 + 2)
    check = runnable.check()
    assert check.passed and check.metric == "grad_rel_l2_err", check


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_adam_single_device_cases_pass_their_checks(tmp_path, precision):
    record = Runner.storing(context(tmp_path)).run(train_case("single", precision, optimizer="adam"))
    assert record.status is Status.OK, record.reason
    assert record.check.passed, record.check
    if precision != "fp32":
        assert record.check.metric == "loss_traj_max_rel_err" and "global batch 4, adam;" in record.check.detail


def test_the_loss_trajectory_reference_uses_the_case_optimizer():
    runnable = TfTrainStep(job_for(train_case("single", "bf16", optimizer="adam")))
    runnable.setup()
    assert runnable._reference(tf.float32, runnable.job.check_job().workload).optimizer == optimizer_for("adam")
    assert runnable.trainer.optimizer == optimizer_for("adam")


def test_bf16_single_device_follows_the_fp32_loss_trajectory(tmp_path):
    record = Runner.storing(context(tmp_path)).run(train_case("single", "bf16", model="transformer"))
    assert record.status is Status.OK, record.reason
    assert record.check.metric == "loss_traj_max_rel_err"
    assert record.check.passed and 0 < record.check.value <= record.check.tolerance
    assert "0 step(s) skipped by loss scaling" in record.check.detail


# --- data-parallel strategies through the real launch path ----------------------------------------
#: Mirrored fp16 (loss-scaled) with Adam, run once for the parametrized test below and for
#: test_mirrored_adam_with_loss_scaling_...: each started the same isolated process (the parametrized
#: one with SGD); loss scaling under either optimizer is test_fp16_step_with_overflowing_gradients_...'s.
MIRRORED_FP16_ADAM = train_case("mirrored", "fp16", n=2, optimizer="adam")
_RUNS: dict[str, Record] = {}


def run_once(case: Case, tmp_path_factory) -> Record:
    """The record of `case`, run once per session for the tests that check it."""
    if case.id not in _RUNS:
        _RUNS[case.id] = Runner.storing(context(tmp_path_factory.mktemp("run"))).run(case)
    return _RUNS[case.id]


@pytest.mark.parametrize("case, copies", [
    (train_case("towers", n=2, model="cnn", placement="param_server"), 1),
    (train_case("towers", n=2, model="transformer", placement="replicated"), 2),
    (train_case("mirrored", n=2), 2),
    (MIRRORED_FP16_ADAM, 2),  # also test_mirrored_adam_with_loss_scaling_...'s run
    (train_case("multiworker", n=2), 1),  # per worker process
    (train_case("multiworker", "bf16", n=2, model="transformer"), 1),
], ids=lambda value: (f"{value.strategy}-{value.precision}-{value.param_dict['model']}"
                      f"{'-' + value.param_dict['placement'] if 'placement' in value.param_dict else ''}"
                      if isinstance(value, Case) else None))
def test_strategy_matches_the_single_device_full_batch_result(tmp_path_factory, case, copies, our_processes):
    launch = plugin_for(case).rules.launch
    assert launch is (Launch.RANKS if case.strategy is Strategy.MULTIWORKER else Launch.ISOLATED)
    record = run_once(case, tmp_path_factory)
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.emulated
    assert record.check.passed, record.check
    if case.precision is Precision.FP32:
        assert record.check.metric == "grad_rel_l2_err" and record.check.value <= 1e-5
        assert "global batch 8" in record.check.detail
    else:
        assert record.check.metric == "loss_traj_max_rel_err"
    assert f"{copies} copies of the variables here, identical" in record.check.detail
    if case.strategy is Strategy.MULTIWORKER:
        assert len(record.measurement.rank_medians) == 2
    assert record.metrics["samples_per_s"] == pytest.approx(8 / record.measurement.median)
    assert our_processes() == []


@pytest.mark.slow
def test_mirrored_adam_with_loss_scaling_follows_the_single_device_adam_trajectory(tmp_path_factory, our_processes):
    """The run of test_strategy_matches_the_single_device_full_batch_result[mirrored-fp16-mlp-2]
    (the same case: one run for both tests, whichever comes first)."""
    record = run_once(MIRRORED_FP16_ADAM, tmp_path_factory)
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.check.metric == "loss_traj_max_rel_err" and record.check.passed, record.check
    assert "adam" in record.check.detail and "2 copies of the variables here, identical" in record.check.detail
    assert our_processes() == []


def test_allreduce_over_two_logical_devices_and_two_workers_equals_the_analytic_sum(tmp_path, our_processes):
    for strategy, precision in (("mirrored", "fp32"), ("multiworker", "bf16")):
        case = Case.make("allreduce", "tf", "cpu", strategy, precision, 2, {"bytes": 65536})
        record = Runner.storing(context(tmp_path)).run(case)
        assert record.status is Status.OK, (record.reason, record.details)
        assert record.emulated and record.check.passed and record.check.value == 0.0
        assert record.metrics["busbw_gbs"] == pytest.approx(record.metrics["algbw_gbs"])  # n=2: 2(n-1)/n = 1
    assert our_processes() == []


# --- availability and failure -----------------------------------------------------------------------
def test_tpu_case_is_unavailable_with_a_reason_quickly_and_never_touches_tensorflow(monkeypatch):
    if any(Path("/dev").glob("accel*")):
        pytest.skip("a TPU device file exists here")
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    code = textwrap.dedent("""
        import sys, time
        from suites.cases.case import Case
        from suites.runner.plan import plan, unavailable_reason
        start = time.monotonic()
        reason = unavailable_reason(plan(Case.make("train_step", "tf", "tpu", "tpu", "bf16", 8,
                                              {"model": "mlp", "batch": 32})))
        print(f"{time.monotonic() - start:.3f}")
        print(reason)
        print("tensorflow" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60, check=True).stdout.splitlines()
    seconds, reason, imported_tf = float(out[0]), out[1], out[2]
    assert seconds < 5.0
    assert reason.startswith("no tpu: no TPU runtime")
    assert imported_tf == "False"


@pytest.mark.parametrize("case, expected", [
    (train_case("tpu", n=8), "TPUStrategy runs on TPUs"),
    (train_case("towers", n=3, batch=4, scaling="strong"), "does not split evenly over 3 replicas"),
    (Case.make("allreduce", "tf", "cpu", "mirrored", "fp32", 2, {"bytes": 1024, "backend": "nccl"}),
     "NCCL all-reduce has no cpu kernel"),
    (Case.make("allreduce", "tf", "cpu", "mirrored", "fp32", 2, {"bytes": 1024, "backend": "ring"}),
     "MirroredStrategy has no 'ring' all-reduce"),
    (Case.make("allreduce", "tf", "cpu", "multiworker", "fp32", 2, {"bytes": 1024, "backend": "gloo"}),
     "'gloo' is a torch.distributed backend"),
])
def test_unavailable_cases_say_why(case, expected):
    assert expected in (unavailable_reason(plan(case)) or "")


def test_multiworker_ranks_get_a_tf_config_naming_every_worker():
    rules = find_plugin(Framework.TF, Strategy.MULTIWORKER)
    case = train_case("multiworker", n=3)
    assert rules.processes(job_for(case)) == 3 and rules.ports_needed(job_for(case)) == 3
    env = rules.rank_env(job_for(case), 1, 3, [1111, 2222, 3333])
    assert env == {"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1111", "127.0.0.1:2222", '
                                '"127.0.0.1:3333"]}, "task": {"type": "worker", "index": 1}}'}


def test_strategy_rules_do_not_import_a_framework():
    code = ("import sys, suites.strategies.tf.towers, suites.strategies.tf.mirrored, "
            "suites.strategies.tf.multiworker, suites.strategies.tf.tpu, suites.strategies.tf.single; "
            "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, check=True)


def test_multiworker_case_whose_peer_never_starts_fails_after_the_timeout(tmp_path, our_processes):
    """Only rank 0 of 2 starts: it waits for its peer at the rendezvous (`meet`, whose own
    timeout is longer) until the launcher's deadline, then is killed; nothing stays running or
    bound."""
    case = train_case("multiworker", n=2)
    rules = plugin_for(case)
    ports = free_ports(2)
    only_rank_0 = [rules.rank_env(job_for(case), 0, 2, ports)]
    timing = replace(FAST, case_timeout_s=8.0)
    start = time.monotonic()
    record = Runner.storing(context(tmp_path, timing),
                            launcher=lambda job, timing: run_processes(job, timing, only_rank_0)).run(case)
    elapsed = time.monotonic() - start
    assert record.status is Status.FAILED
    # ...and says where it hung, from the stacks it wrote when the deadline came
    assert record.reason.startswith("rank 0 did not finish within 8 s (killed); hung: rank 0 in ")
    assert record.reason.endswith("via setup > distribute > meet > wait_for")  # at the rendezvous
    assert 8.0 <= elapsed < 8.0 + 30.0
    assert our_processes() == []
    with socket.socket() as sock:  # nothing listens on rank 0's gRPC port any more
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # connections may be in TIME_WAIT
        sock.bind(("127.0.0.1", ports[0]))
        sock.listen()


def test_towers_placement_is_an_option_of_towers_only(tmp_path):
    """`placement` is TF towers' option (`job.options.placement`): a grid gives it to towers cases,
    drops it from another strategy's, and refuses a value towers does not have, in one line."""
    from suites.errors import UserError
    from suites.grids.grid import load_suite
    from suites.strategies.jobs import job_for

    grid = tmp_path / "g.toml"
    grid.write_text('[[grid]]\nworkload = "train_step"\nframework = "tf"\ndevice = "cpu"\n'
                    'strategy = ["towers", "mirrored"]\nn_devices = 2\n'
                    'params = { model = "mlp", batch = 4, placement = "param_server" }\n')
    cases = {case.strategy.value: case for case in load_suite(str(grid)).cases}
    assert cases["towers"].param_dict["placement"] == "param_server"
    assert job_for(cases["towers"]).options.placement == "param_server"
    assert "placement" not in cases["mirrored"].param_dict
    assert "placement" not in job_for(cases["towers"]).workload.p
    grid.write_text(grid.read_text().replace('"param_server"', '"everywhere"'))
    with pytest.raises(UserError, match="placement"):
        load_suite(str(grid))
