"""PyTorch beyond data parallelism: `fsdp`, `tensor` and the 2-D `fsdp_tensor` — gradients on
emulated gloo ranks through the real launcher, which part of the batch each rank feeds, FSDP's
own mixed precision, every unavailable reason and the analytic state per device."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import find_plugin  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Framework, Status  # noqa: E402
from suites.frameworks.torch.training import TorchTrainStep  # noqa: E402
from suites.hardware.devices import DeviceInfo  # noqa: E402
from suites.runner.launchers import free_ports  # noqa: E402
from suites.runner.runner import Runner  # noqa: E402
from suites.strategies.torch.tensor import COLWISE, ROWWISE, tensor_plan  # noqa: E402
from suites.workloads.training import MODELS, Mlp, TransformerBlock  # noqa: E402
from suites.workloads.user_model import UserModel  # noqa: E402
from tests.test_torch_strategies import REPO, context, our_processes  # noqa: E402,F401

CPU = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("a CPU",))
ONE_GPU = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, ("GPU 0",))


def case(strategy: str, n: int, model: str = "mlp", precision: str = "fp32", device: str = "cpu",
         **params) -> Case:
    """A train_step case; `batch` 4 per device (weak scaling) unless given."""
    return Case.make("train_step", "torch", device, strategy, precision, n,
                     {"model": model, "batch": 4, **params})


def reason(c: Case, device: DeviceInfo = CPU) -> str | None:
    return job_for(c).strategy.unavailable_reason(job_for(c), device)


# --- gradients on emulated ranks, through the launcher ------------------------------------------
def _gradients_match(record) -> None:
    assert record.status is Status.OK, record.reason
    assert record.emulated
    assert record.check.passed and record.check.metric == "grad_rel_l2_err"
    assert record.check.value <= record.check.tolerance == 5e-2
    assert len(record.measurement.rank_medians) == record.case.n_devices


@pytest.mark.slow
@pytest.mark.parametrize("reshard", [True, False], ids=["reshard", "no-reshard"])
def test_fsdp_on_two_ranks_matches_the_full_batch_gradient(tmp_path, our_processes, reshard):
    record = Runner.storing(context(tmp_path)).run(case("fsdp", 2, reshard=reshard))
    _gradients_match(record)
    assert "global batch 8" in record.check.detail
    assert our_processes() == []


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_tensor_parallelism_on_two_ranks_matches_the_full_batch_gradient(tmp_path, our_processes, model):
    """Every rank feeds the whole batch; the transformer's ranks attend with half the heads each."""
    record = Runner.storing(context(tmp_path)).run(case("tensor", 2, model))
    _gradients_match(record)
    assert "global batch 8" in record.check.detail
    assert our_processes() == []


@pytest.mark.slow
def test_fsdp_tensor_on_a_2x2_mesh_matches_the_full_batch_gradient(tmp_path, our_processes):
    record = Runner.storing(context(tmp_path)).run(case("fsdp_tensor", 4, "transformer", batch=2, mesh="2x2"))
    _gradients_match(record)
    assert "global batch 8" in record.check.detail
    assert our_processes() == []


# --- FSDP's mixed precision, in this process as a one-rank group ---------------------------------
@pytest.fixture
def one_rank(monkeypatch):
    """This process as rank 0 of a one-rank process group, which the plugin's `join` creates
    and the runnable's teardown destroys."""
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_ports(1)[0]),
                        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)


def test_fsdp_computes_in_bf16_through_its_policy_not_autocast(one_rank):
    runnable = TorchTrainStep(job_for(case("fsdp", 1, precision="bf16")))
    runnable.setup()
    try:
        seen = []
        runnable.model.dense1.register_forward_hook(lambda module, inputs, output: seen.append(
            (inputs[0].dtype, output.dtype, torch.is_autocast_enabled("cpu"))))
        runnable.step()
        # a bf16 output of a bf16 input without autocast: the gathered weights were bf16
        assert seen == [(torch.bfloat16, torch.bfloat16, False)]
        assert runnable.trained(runnable.batches[0][0]).dtype == torch.float32  # the loss's input
        # between steps: the fp32 shards that the optimizer updates
        assert runnable.model.dense1.weight.dtype == torch.float32
        assert type(runnable.model.dense1.weight).__name__ == "DTensor"
    finally:
        runnable.teardown()


@pytest.mark.parametrize("reshard", [True, False])
def test_reshard_decides_whether_the_gathered_parameters_outlive_the_forward(one_rank, reshard):
    runnable = TorchTrainStep(job_for(case("fsdp", 1, reshard=reshard)))
    runnable.setup()
    try:
        loss = runnable.loss(runnable.trained(runnable.batches[0][0]), runnable.batches[0][1])
        # resharded: the registered parameter is the DTensor shard again; kept: the gathered tensor
        assert (type(runnable.model.dense1.weight).__name__ == "DTensor") is reshard
        loss.backward()
        assert type(runnable.model.dense1.weight).__name__ == "DTensor"
    finally:
        runnable.teardown()


# --- which part of the global batch a rank feeds -------------------------------------------------
def test_each_strategy_says_which_part_of_the_global_batch_a_rank_feeds():
    ddp, fsdp, tensor = (case(s, 2) for s in ("ddp", "fsdp", "tensor"))
    assert [job_for(ddp).strategy.hooks.data_shard(job_for(ddp), r) for r in (0, 1)] == [slice(0, 4), slice(4, 8)]
    assert [job_for(fsdp).strategy.hooks.data_shard(job_for(fsdp), r) for r in (0, 1)] == [slice(0, 4), slice(4, 8)]
    assert [job_for(tensor).strategy.hooks.data_shard(job_for(tensor), r) for r in (0, 1)] == [slice(0, 8)] * 2
    two_d = case("fsdp_tensor", 4, batch=2, mesh="2x2")  # rows of 2 tensor-parallel ranks
    assert ([job_for(two_d).strategy.hooks.data_shard(job_for(two_d), r) for r in range(4)]
            == [slice(0, 4)] * 2 + [slice(4, 8)] * 2)
    single = case("single", 1)
    assert job_for(single).strategy.hooks.data_shard(job_for(single), 0) == slice(0, 4)


# --- the tensor-parallel plan -----------------------------------------------------------------
def test_the_mlp_splits_its_dense_layers_in_column_row_pairs():
    assert tensor_plan(Mlp()) == {"dense0": COLWISE, "dense1": ROWWISE, "dense2": COLWISE, "dense3": ROWWISE}
    assert tensor_plan(Mlp(depth=2)) == {"dense0": COLWISE, "dense1": ROWWISE}  # dense2 stays whole


def test_the_transformer_splits_heads_and_feed_forward_in_every_block():
    per_block = {"attn.qkv": COLWISE, "attn.o": ROWWISE,
                 "ffn.in": COLWISE, "ffn.out": ROWWISE}
    # the head and the norms stay whole; a one-layer transformer's block is block0
    assert tensor_plan(TransformerBlock()) == {f"block0.{path}": style for path, style in per_block.items()}
    assert tensor_plan(TransformerBlock(layers=2)) == {f"block{i}.{path}": style for i in range(2)
                                         for path, style in per_block.items()}


# --- unavailable, with the reason ------------------------------------------------------------------
def test_fsdp_unavailable_reasons():
    strong = case("fsdp", 4, batch=10, scaling="strong")
    assert "does not split evenly over 4 ranks" in reason(strong)
    assert reason(case("fsdp", 2, device="gpu"), ONE_GPU) is None  # the ranks share it over gloo
    assert reason(case("fsdp", 2, "cnn")) is None  # any model shards
    assert reason(case("fsdp", 2, precision="fp16")) is None


def test_tensor_unavailable_reasons(monkeypatch):
    assert "no plan for model 'cnn'" in reason(case("tensor", 2, "cnn"))
    monkeypatch.setitem(MODELS, "tiny_user", lambda: UserModel(model_name="tiny_user", sample_shape=(4,)))
    assert "no plan for model 'tiny_user'" in reason(case("tensor", 2, "tiny_user"))
    assert "4 attention heads do not split evenly over 3" in reason(case("tensor", 3, "transformer"))
    assert "dense0's 512 output features do not split evenly over 3" in reason(case("tensor", 3))
    assert "fp16 needs loss scaling" in reason(case("tensor", 2, precision="fp16"))
    assert reason(case("tensor", 2, device="gpu"), ONE_GPU) is None  # the ranks share it over gloo
    # the batch is not split: any batch runs
    assert reason(case("tensor", 2, batch=3, scaling="strong")) is None
    assert reason(case("tensor", 2, "transformer", precision="bf16")) is None


def test_fsdp_tensor_unavailable_reasons():
    assert "is not DPxTP" in reason(case("fsdp_tensor", 4, mesh="2by2"))
    assert "mesh 2x2 is 4 devices; this case has 2" in reason(case("fsdp_tensor", 2))  # default mesh
    assert "over 2 data-parallel groups" in reason(case("fsdp_tensor", 4, batch=5, scaling="strong"))
    assert reason(case("fsdp_tensor", 4, batch=6, scaling="strong", mesh="1x4")) is None  # one group
    assert "4 attention heads do not split evenly over 3" in reason(
        case("fsdp_tensor", 6, "transformer", mesh="2x3"))
    assert "no plan for model 'cnn'" in reason(case("fsdp_tensor", 4, "cnn"))
    assert "fp16 needs loss scaling" in reason(case("fsdp_tensor", 4, precision="fp16"))
    assert reason(case("fsdp_tensor", 4, "transformer", precision="bf16", mesh="2x2")) is None


def test_new_strategy_modules_import_no_framework():
    code = ("import sys, suites.strategies.torch.fsdp, suites.strategies.torch.tensor, "
            "suites.strategies.torch.fsdp_tensor; "
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# --- the analytic training state per device ------------------------------------------------------
#: The default mlp (256 -> 512 -> 512 -> 512 -> 10): its parameters, its largest layer, and what
#: a rank of two tensor-parallel ranks does not hold (half of every split kernel, and of the
#: column-split layers' biases).
MLP_PARAMETERS = (256 * 512 + 512) + 2 * (512 * 512 + 512) + (512 * 10 + 10)
MLP_LARGEST = 512 * 512 + 512
MLP_TP2_SAVED = (256 * 512 + 512) // 2 + 512 * 512 // 2 + (512 * 512 + 512) // 2 + 512 * 10 // 2
ADAM = 2


def state(c: Case) -> dict[str, int]:
    return find_plugin(c.framework, c.strategy).state_bytes_per_device(job_for(c), MLP_PARAMETERS, ADAM)


def test_fsdp_shards_the_state_and_counts_the_gathered_parameters_at_peak():
    shard = MLP_PARAMETERS // 2 * 4
    resharded = state(case("fsdp", 2))
    assert resharded == {"parameters": shard + MLP_LARGEST * 4, "gradients": shard,
                         "optimizer": 2 * shard, "total": 4 * shard + MLP_LARGEST * 4}
    # reshard = false: every unit's gathered parameters resident from forward to backward
    kept = state(case("fsdp", 2, reshard=False))
    assert kept["parameters"] == shard + MLP_PARAMETERS * 4
    assert kept["gradients"] == shard and kept["optimizer"] == 2 * shard
    # under bf16 the gathered copies are bf16; the shards stay fp32
    assert state(case("fsdp", 2, precision="bf16"))["parameters"] == shard + MLP_LARGEST * 2
    replicated = 4 * MLP_PARAMETERS * 4  # DDP: parameters, gradients, two Adam states
    assert resharded["total"] < 0.65 * replicated < kept["total"]


def test_tensor_parallelism_divides_the_split_layers_only():
    held = (MLP_PARAMETERS - MLP_TP2_SAVED) * 4
    assert MLP_PARAMETERS - MLP_TP2_SAVED == MLP_PARAMETERS // 2 + (512 + 10) // 2  # row biases whole
    assert state(case("tensor", 2)) == {"parameters": held, "gradients": held,
                                        "optimizer": 2 * held, "total": 4 * held}


def test_fsdp_tensor_shards_a_tensor_parallel_ranks_share():
    share = MLP_PARAMETERS - MLP_TP2_SAVED
    shard = -(-share // 2) * 4
    # dense1: its kernel split by rows, its bias whole (dense2, split whole by columns, holds less)
    largest = 512 * 512 // 2 + 512
    two_d = state(case("fsdp_tensor", 4, mesh="2x2"))
    assert two_d == {"parameters": shard + largest * 4, "gradients": shard, "optimizer": 2 * shard,
                     "total": 4 * shard + largest * 4}
