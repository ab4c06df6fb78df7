"""PyTorch training step: one model, one strategy, one precision.

One step = zero_grad + forward + backward + optimizer step (the case's `optimizer`: SGD or
Adam), on synthetic random batches drawn on the device and rotated. Mixed precision is
`torch.autocast` (fp16 with a GradScaler, bf16 without); tf32 turns on TF32 tensor-core
matmuls/convolutions. The case's strategy plugin's mechanism, its hooks object
(`suites.strategies.torch.base.TorchHooks`), joins the process group of a rank process, wraps the
model (and may apply mixed precision itself, FSDP's way), says which part of the global batch this
process feeds, names the devices `synchronize` waits for and supplies the step without its
exchange; a strategy that steps the model its own way (a pipeline's schedule) supplies that step.
An inductor case runs what `wrap` returned under `torch.compile`
(`suites.frameworks.torch.compiling`): forward and backward compiled, the optimizer's update
eager; the check calls the compiled module too. Where every rank is one process, the timer's
`barrier` makes each timed block run barrier to barrier, so its time is the global step time.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
from dataclasses import replace
from typing import Callable, Iterable, TypeVar

import numpy as np
import torch

from suites.cases.vocabulary import Compile, Precision
from suites.frameworks.torch import backend, compiling
from suites.frameworks.torch import batchnorm as torch_batchnorm
from suites.frameworks.torch import memory_breakdown as torch_breakdown
from suites.frameworks.torch import memory_probe as torch_memory
from suites.frameworks.torch import catalog as torch_catalog
from suites.frameworks.torch import models as torch_models
from suites.frameworks.torch.distributed import (all_gather_objects, limit_threads_from_env, node_share_of_threads,
                                                node_share_thread_count)
from suites.frameworks.torch.profiling import ProfiledKernels
from suites.records.memory_breakdown import MemoryBreakdown
from suites.records.check import LOSS_TRAJECTORY_STEPS, Check, gradients_against_reference, loss_trajectory_check
from suites.measure import faults
from suites.measure.memory_probes import MemoryProbe
from suites.measure.process_env import rehearsing
from suites.measure.reference_budget import (FP32_BYTES, ReferenceCost, flop_budget, gradient_reference_cost,
                                         over_budget, over_gpu_memory, reference_bytes, trajectory_reference_cost)
from suites.measure.runnable import COORDINATED_BLOCK_S, Runnable
from suites.measure.capabilities import SeparatesExchange, StepsItself
from suites.workloads.kernels import batch_rotation_count
from suites.workloads.training import ADAM_BETAS, ADAM_EPSILON, OPTIMIZERS, ModelSpec, TrainStep

WEIGHTS_SEED = 0
DATA_SEED = 1
#: Check batches come from `spec.make_batch(check batch, CHECK_SEED + step)`.
CHECK_SEED = 100
T = TypeVar("T")


def grouped_loss(model: torch.nn.Module, spec: ModelSpec, inputs: torch.Tensor, target: torch.Tensor,
                 groups: int = 1) -> torch.Tensor:
    """The mean loss over the batch, the model applied to each of `groups` equal parts of it
    on its own: what a data-parallel step computes where each replica's batch statistics are
    its own (`TrainStep.statistics_groups`); with one group, the plain full-batch loss."""
    loss = torch_models.loss_function(spec)
    parts = zip(inputs.chunk(groups), target.chunk(groups))
    return sum(loss(model(x), y) for x, y in parts) / groups  # type: ignore[return-value]


def reference_gradients(spec: ModelSpec, weights: dict[str, np.ndarray], x: np.ndarray,
                        y: np.ndarray, groups: int = 1) -> dict[str, np.ndarray]:
    """Single-device full-batch gradients in float64 on the CPU (canonical layout), batch
    statistics over `groups` equal parts of the batch (`grouped_loss`)."""
    model = torch_catalog.build(spec, weights, torch.device("cpu"), torch.float64)
    inputs = model.input_tensor(x, torch.device("cpu"), torch.float64)
    target = torch.from_numpy(y)
    grouped_loss(model, spec, inputs, target.double() if target.is_floating_point() else target, groups).backward()
    return model.canonical_gradients()


def parameter_groups(parameters: Iterable[torch.nn.Parameter]) -> list[dict[str, list[torch.nn.Parameter]]]:
    """`parameters` as optimizer parameter groups, DTensors apart from plain tensors. torch runs
    its foreach and fused optimizer kernels (CUDA's defaults) once per group, and they refuse a
    list mixing the two, which tensor parallelism leaves: split layers beside replicated norms,
    embeddings and heads (issue 32, N1). One group where the parameters are all of one kind."""
    parameters = list(parameters)
    dtensor_type = _dtensor_type()
    split = [p for p in parameters if dtensor_type and isinstance(p, dtensor_type)]
    whole = [p for p in parameters if not (dtensor_type and isinstance(p, dtensor_type))]
    return [{"params": group} for group in (split, whole) if group]


def _dtensor_type() -> type | None:
    """DTensor's class, or None where no parameter can be one: where its module was never imported
    (every DTensor's class lives there), which spares single and DDP cases its 0.6 s import."""
    if not torch.distributed.is_available() or "torch.distributed.tensor" not in sys.modules:
        return None
    from torch.distributed.tensor import DTensor

    return DTensor


def make_optimizer(name: str, parameters: Iterable[torch.nn.Parameter],
                   cuda_kernels: bool = False) -> torch.optim.Optimizer:
    """The optimizer a train_step case names (`OPTIMIZERS`): SGD (plain or with momentum and
    weight decay), Adam or AdamW; AdamW fused (one kernel for all parameters) where every
    parameter is on a CUDA device, as practitioners run it. `cuda_kernels` picks on any device
    the implementation CUDA would (fused AdamW, foreach for the rest), so that a CPU rehearsal
    runs the kernels a GPU run will."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r} is not one of {', '.join(OPTIMIZERS)}")
    spec = OPTIMIZERS[name]
    parameters = list(parameters)
    groups = parameter_groups(parameters)
    # A pipeline rank's other stages stay on the meta device: they neither hold data nor decide
    # the kernels (issue 32, N17: pipeline ranks took foreach AdamW where ddp/fsdp took fused).
    placed = [p.device.type for p in parameters if p.device.type != "meta"]
    on_cuda = cuda_kernels or (bool(placed) and all(kind == "cuda" for kind in placed))
    foreach = True if cuda_kernels else None  # None: torch's own default for the device
    if name == "adam":
        return torch.optim.Adam(groups, lr=spec.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPSILON,
                                foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=spec.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPSILON,
                                 weight_decay=spec.weight_decay, fused=on_cuda or None)
    return torch.optim.SGD(groups, lr=spec.learning_rate, momentum=spec.momentum,
                           weight_decay=spec.weight_decay, foreach=foreach)


def reference_losses(spec: ModelSpec, weights: dict[str, np.ndarray],
                     batches: list[tuple[np.ndarray, np.ndarray]], applied: list[bool],
                     device: torch.device, optimizer_name: str = "sgd", groups: int = 1) -> list[float]:
    """The fp32 loss trajectory: single device, full batches (batch statistics over `groups`
    parts, `grouped_loss`), the case's optimizer, TF32 off. Steps that fp16 loss scaling
    skipped (`applied` false: gradients overflowed) are skipped here too."""
    backend.set_matmul_precision(Precision.FP32)
    model = torch_catalog.build(spec, weights, device)
    optimizer = make_optimizer(optimizer_name, model.parameters())
    losses = []
    for (x, y), update in zip(batches, applied):
        optimizer.zero_grad(set_to_none=True)
        loss = grouped_loss(model, spec, model.input_tensor(x, device, torch.float32),
                            torch.from_numpy(y).to(device), groups)
        loss.backward()
        if update:
            optimizer.step()
        losses.append(float(loss.item()))
    return losses


def free_device_bytes(device: torch.device) -> float | None:
    """Bytes a new allocation on `device` can get: the driver's free memory (torch.cuda.mem_get_info)
    plus what this process's caching allocator holds unused; None off CUDA (not bounded)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return float(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


class TorchTrainStep(ProfiledKernels, Runnable):
    workload: TrainStep
    #: What holds device memory (weights, optimizer state, batches, the wrapper and the step
    #: closure that refer to them): released at teardown.
    device_state = ("model", "wrapped", "trained", "optimizer", "scaler", "batches", "local_step", "strategy_step")
    #: torch's settings before `setup` changed them; teardown puts them back.
    _saved_flags: backend.Flags | None = None
    #: An inductor case's compiler settings, put back at teardown.
    _cold: compiling.ColdCompiles | None = None
    #: The initial weights (float32 NumPy, host memory), kept only while the check needs them.
    _weights: dict[str, np.ndarray] | None = None

    @property
    def weights(self) -> dict[str, np.ndarray]:
        """The model's initial weights (`WEIGHTS_SEED`): what setup builds the model from and what the
        check's references start from; drawn again where they were released."""
        if self._weights is None:
            self._weights = self.spec.init_weights(WEIGHTS_SEED)
        return self._weights

    def release_initial_weights(self) -> None:
        """Forget the initial weights: the check is done with them. Kept, they would stay in this
        process's memory through the timed steps (a 4096-wide, 4-deep mlp's: 196 MiB) and count as
        the training's: FSDP's sharded state read 0.76x DDP's where it is far less (issue 46, 9)."""
        self._weights = None

    def setup(self) -> None:
        self.memory_baseline = torch_memory.Baseline.now()  # before anything of the case exists
        limit_threads_from_env()
        self.hooks = self.job.strategy.hooks  # the strategy's mechanism
        self.group = self.hooks.join(self.job)
        if self.group:
            self.min_block_s = COORDINATED_BLOCK_S
        self.device = self.group.device if self.group else backend.device_for(self.case)
        self._saved_flags = backend.configure(self.case)
        self.details.update(backend.flag_details(self.case))
        self.spec = faults.step_model(self.workload.model)
        self.model = torch_catalog.build(self.spec, self.weights, self.device)
        if hasattr(self.spec, "memory_format"):  # a conv net: the layout it ran
            self.details["memory_format"] = self.spec.memory_format
        self._batch_statistics()
        self.wrapped = self.hooks.wrap(self.model, self.device, self.job)
        if self.case.compile is Compile.INDUCTOR:
            self._cold = compiling.ColdCompiles()
        self.trained = compiling.compiled(self.job, self.wrapped)
        self.devices_in_use = self.hooks.devices_in_use(self.job, self.device)
        # After `wrap`: a strategy that shards the model replaces its parameters.
        self.optimizer = make_optimizer(self.workload.optimizer, self.model.parameters(),
                                        cuda_kernels=rehearsing())
        self.loss = torch_models.loss_function(self.spec)
        self.autocast_dtype = backend.AUTOCAST_DTYPES.get(self.case.precision)
        if self.autocast_dtype is not None:  # one label, two numerics (issue 32, N24): say which
            self.details["mixed_precision"] = (
                "the strategy's own (FSDP MixedPrecisionPolicy: parameters gathered and computed in "
                f"{self.case.precision}, gradients reduced in fp32)" if self.hooks.handles_precision(self.job)
                else f"torch.autocast({self.case.precision}) over fp32 parameters")
        # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range.
        self.scaler = (torch.amp.GradScaler(self.device.type)
                       if self.case.precision is Precision.FP16 else None)
        # A strategy that runs its own step (pipeline: its schedule), or None.
        self.strategy_step = (self.hooks.train_step(self.wrapped, self.optimizer, self.scaler)
                              if isinstance(self.hooks, StepsItself) else None)
        self.batches = self._random_batches()
        self._order = itertools.cycle(range(len(self.batches)))
        self.local_step = (self.hooks.local_step(self.wrapped, self.step)
                           if isinstance(self.hooks, SeparatesExchange) else None)

    def _batch_statistics(self) -> None:
        """A model with batch norm: synchronised across the ranks where the case asks for it
        (before the strategy wraps the model), and the record says which kind it runs."""
        mode = self.spec.batch_statistics
        if mode is None:
            return
        if mode == "sync" and self.group:
            self.details["batchnorm"] = torch_batchnorm.synchronize_batch_norm(self.model, self.device)
        else:
            self.details["batchnorm"] = torch_batchnorm.LOCAL if self.group else f"{mode}: one process"

    @property
    def rank(self) -> int:
        return self.group.rank if self.group else 0

    @property
    def local_batch(self) -> int:
        """Samples this process feeds the wrapped model per step: its strategy's `data_shard`
        (a data-parallel rank its shard; one process, or a tensor-parallel rank, the global
        batch, which a wrapper such as DataParallel may split)."""
        shard = self.hooks.data_shard(self.job, self.rank)
        return shard.stop - shard.start

    def _random_batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Random inputs and labels drawn on the device, seeded per shard of the batch
        (processes that feed the same shard, as tensor-parallel ranks do, draw the same)."""
        shard = self.hooks.data_shard(self.job, self.rank)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(DATA_SEED + shard.start // (shard.stop - shard.start))
        shape = (self.local_batch, *self.model.input_shape)
        count = batch_rotation_count(int(np.prod(shape)) * 4)
        return [(self.model.random_inputs(shape, generator, self.device), self._random_targets(generator))
                for _ in range(count)]

    def _random_targets(self, generator: torch.Generator) -> torch.Tensor:
        if self.spec.loss == "mse":
            return torch.randn((self.local_batch, *self.spec.target_shape), generator=generator,
                               device=self.device)
        return torch.randint(0, self.spec.num_classes, (self.local_batch, *self.spec.target_shape),
                             generator=generator, device=self.device)

    def _precision_context(self) -> contextlib.AbstractContextManager:
        """Autocast for mixed precision, unless the strategy applies it itself; in fp32/tf32
        nothing at all, not even a disabled autocast, so the timed step is exactly what a
        hand-written loop would run."""
        if self.autocast_dtype is None or self.hooks.handles_precision(self.job):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.strategy_step is not None:
            return self.strategy_step.step(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        with self._precision_context():
            loss = self.loss(self.trained(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss

    def step(self) -> None:
        self._train_step(*self.batches[next(self._order)])

    def synchronize(self) -> None:
        for device in self.devices_in_use:
            backend.synchronize(device)

    def barrier(self) -> None:
        if self.group:
            self.group.barrier()

    def compilations(self) -> int | None:
        return compiling.compilations() if self._cold else None

    def compile_anew(self) -> None:
        if self._cold:
            compiling.forget()

    def gather(self, value: float) -> tuple[float, ...]:
        return self.group.gather(value) if self.group else (value,)

    def agree(self, value: float) -> float:
        return self.group.broadcast_from_root(value) if self.group else value

    def memory_probe(self) -> MemoryProbe:
        """Allocator peaks of the GPUs the step runs on; on the CPU, this rank's resident set."""
        return torch_memory.memory_probe(self.devices_in_use, self.memory_baseline)

    def memory_tracker(self) -> Callable[[], list[MemoryBreakdown]] | None:
        """One more step under torch's memory tracker (`suites.frameworks.torch.memory_breakdown`):
        this rank's tensors at their peak by category. The input batches count as inputs; on the
        CPU the float32 initial weights, where still kept (no check ran: asv, pytest), count as
        harness. Not
        for a compiled case: under the tracker's dispatch mode its step would not run the
        compiled graph it timed."""
        if self._cold is not None:
            self.details["memory_breakdown"] = ("not taken: torch.compile'd step (the tracker's dispatch mode "
                                                "would run another graph than the timed one)")
            return None
        return self._tracked_step

    def _tracked_step(self) -> list[MemoryBreakdown]:
        harness = sum(array.nbytes for array in (self._weights or {}).values())
        step_input = self.batches[0][0]
        return torch_breakdown.tracked_step(self.step, self.model, self.optimizer,
                                            [tensor for batch in self.batches for tensor in batch],
                                            self.devices_in_use, self.rank, harness,
                                            step_input.untyped_storage().nbytes())

    def gpu_ordinals(self) -> tuple[int, ...]:
        """The GPUs the step runs on (their energy is read over the timed steps)."""
        return tuple(torch.cuda.current_device() if device.index is None else device.index
                     for device in self.devices_in_use if device.type == "cuda")

    # --- correctness ------------------------------------------------------------------------
    def _check_batch(self, check: TrainStep, seed: int) -> tuple[tuple[np.ndarray, np.ndarray],
                                                                 tuple[torch.Tensor, torch.Tensor]]:
        """The deterministic global batch of the check workload `check`, and this process's
        part of it on the device."""
        x, y = self.spec.make_batch(check.global_batch, seed)
        part = self.hooks.data_shard(self.job.check_job(), self.rank)
        return (x, y), (self.model.input_tensor(x[part], self.device, torch.float32),
                        torch.from_numpy(y[part]).to(self.device))

    def check(self) -> Check:
        """The case's own step on the check's small batch (`TrainStep.check_params`)."""
        check = self.job.check_job().workload
        timed_step = self.strategy_step
        if isinstance(self.hooks, StepsItself):
            checked = self.hooks.check_wrap(self.wrapped, self.model, self.device, self.job.check_job())
            self.strategy_step = self.hooks.train_step(checked, self.optimizer, self.scaler)
        try:
            if self.autocast_dtype is None:
                return self._gradient_check(check)
            return self._loss_trajectory_check(check)
        finally:
            self.strategy_step = timed_step
            self.release_initial_weights()  # before the timed steps: the harness's, not the training's

    def _describe(self, check: TrainStep) -> str:
        return (f"{self.case.strategy} on {self.case.n_devices} {self.case.device} device(s), check batch "
                f"{check.global_batch} of global batch {self.workload.global_batch}"
                f"{check.statistics_detail(self.job.check_job().statistics_groups())}")

    def _gradient_check(self, check: TrainStep) -> Check:
        """Every rank's first-step gradients of the strategy (already averaged) against the
        float64 single-device gradient of the same check batch and weights, which rank 0
        computes and sends to the others."""
        (x, y), (x_local, y_local) = self._check_batch(check, CHECK_SEED)
        self.optimizer.zero_grad(set_to_none=True)
        self._backward(x_local, y_local)
        world = self.group.world_size if self.group else 1
        gradients = self.hooks.gradients(self.model)
        if faults.skips_all_reduce(self.rank, world):
            gradients = self._own_shard_gradients(x_local, y_local)
        gradients = faults.observed_gradients(gradients, world)
        self.optimizer.zero_grad(set_to_none=True)
        cost = gradient_reference_cost(check.flops_per_step(), check.global_batch)
        reference = self._on_root(cost, lambda: reference_gradients(self.workload.model, self.weights, x, y,
                                                                     self.job.check_job().statistics_groups()),
                                  self._describe(check))
        if isinstance(reference, Check):
            return reference
        result = gradients_against_reference(gradients, reference, self.case.precision,
                                             f"{self._describe(check)} vs float64 single-device"
                                             f"{faults.detail()}")
        return self._worst_rank(result)

    def _backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Forward and backward of the case's step, leaving the gradients in the parameters."""
        if self.strategy_step is not None:
            self.strategy_step.backward(x, y)
        else:
            self.loss(self.trained(x), y).backward()

    def _own_shard_gradients(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, np.ndarray]:
        """This rank's gradients of its own part of the batch alone, from the initial weights, on
        a model of its own (no collective): what it applies where its all-reduce did not run."""
        model = torch_catalog.build(self.spec, self.weights, self.device)
        self.loss(model(x), y).backward()
        return model.canonical_gradients()

    def _global_loss(self, loss: float) -> float:
        """The step's loss over the global batch, from this process's `loss` (the mean over the
        part it fed): in one process its own, across ranks the mean of the ranks' (equal
        shards), or the strategy's own where it steps itself (`StepsItself.global_loss`)."""
        if isinstance(self.hooks, StepsItself):
            return self.hooks.global_loss(self.group, loss)
        return self.group.mean(loss) if self.group else loss

    def _loss_trajectory_check(self, check: TrainStep) -> Check:
        """Losses of the first steps in this precision and strategy against the fp32
        single-device trajectory from the same weights, check batches and optimizer (rank 0's)."""
        batches = [self._check_batch(check, CHECK_SEED + i) for i in range(LOSS_TRAJECTORY_STEPS)]
        losses, applied = [], []
        for _, (x_local, y_local) in batches:
            scale = self.scaler.get_scale() if self.scaler else 0.0
            loss = float(self._train_step(x_local, y_local).item())
            losses.append(self._global_loss(loss))
            # GradScaler skips a step whose gradients overflowed, and lowers its scale.
            applied.append(self.scaler is None or self.scaler.get_scale() >= scale)
        self._free_training_state()
        cost = trajectory_reference_cost(check.flops_per_step(), check.global_batch, self.device.type == "cpu",
                                         self._reference_bytes(check))
        reference = self._on_root(cost, lambda: reference_losses(
            self.workload.model, self.weights, [b for b, _ in batches], applied, self.device,
            self.workload.optimizer, self.job.check_job().statistics_groups()), self._describe(check))
        backend.set_matmul_precision(self.case.precision)
        if isinstance(reference, Check):
            return reference
        skipped = (f"; {applied.count(False)} step(s) skipped by loss scaling (skipped in "
                   "the fp32 trajectory too)" if self.scaler else "")
        result = loss_trajectory_check(losses, reference, self.case.precision,
                                       f"{self.case.strategy}, {self.workload.optimizer}{skipped}; "
                                       f"{self._describe(check)}{faults.detail()}")
        if not any(applied):
            result = Check(False, result.metric, float("inf"), result.tolerance,
                           "loss scaling skipped every step: no update was checked")
        return self._worst_rank(result)

    def _free_training_state(self) -> None:
        """Drop the case's gradients and optimizer state before its fp32 reference is built beside
        it (torch's optimizers make their state again at the next step, a warm-up one), handing the
        blocks back to the driver on CUDA, where the reference's bound reads the free memory."""
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _reference_bytes(self, check: TrainStep) -> float:
        """The fp32 reference's estimated memory (`reference_bytes`) from the check workload's
        parameter count and its model's fp32 activations (its analytic count from its layer shapes,
        else the elements it saves); 0 where the parameter count is not known here."""
        state = check.training_state()
        if state is None:
            return 0.0
        count = getattr(check.model, "activation_bytes_per_sample", None)
        saved = check.model.saved_activations_per_sample()
        per_sample = (count(FP32_BYTES, False) if count is not None
                      else None if saved is None else FP32_BYTES * saved)
        return reference_bytes(state.parameters, state.optimizer_states, per_sample, check.global_batch)

    def _free_bytes_on_root(self, cost: ReferenceCost) -> float | None:
        """What is free on rank 0's device once every rank has freed its state (`free_device_bytes`),
        on every rank; None where the reference is not bounded by memory."""
        if cost.on_cpu or not cost.bytes:
            return None
        self.barrier()  # every rank sharing rank 0's GPU has handed its freed blocks back
        free = free_device_bytes(self.device)
        agreed = self._agreed(-1.0 if free is None else free)
        return None if agreed < 0 else agreed

    def _on_root(self, cost: ReferenceCost, compute: Callable[[], T], detail: str) -> T | Check:
        """The check's reference: `compute()` on rank 0 only, with its node's share of the cores
        (`node_share_of_threads`), its result sent to every rank, which wait for it as long as
        its `cost` may take (`ProcessGroup.broadcast_computed`); the reference is computed once
        per case, not once per rank. Where it would cost more than rank 0's budget, or hold more
        than rank 0's GPU has free (`suites.measure.reference_budget`), nothing is computed and
        every rank returns the same `not_checked` check at once."""
        skipped = over_budget(cost, self._agreed_budget(), self._agreed(node_share_thread_count()), detail)
        if skipped is None:
            skipped = over_gpu_memory(cost, self._free_bytes_on_root(cost), detail)
        if skipped is not None:
            return skipped

        def on_root() -> T:
            with node_share_of_threads():
                return compute()

        if not self.group:
            return on_root()
        return self.group.broadcast_computed(on_root, cost.wait_s())

    def _agreed_budget(self) -> float:
        """Rank 0's reference budget, on every rank (a knob set on one node only must not leave
        rank 0 computing a reference that the others do not wait for)."""
        return self._agreed(flop_budget())

    def _agreed(self, value: float) -> float:
        """Rank 0's `value` on every rank."""
        return self.group.broadcast_from_root(value) if self.group else value

    def _worst_rank(self, check: Check) -> Check:
        """The worst rank's check, on every rank; its detail names the rank where several."""
        if not self.group:
            return check
        checks = all_gather_objects(check)
        worst = max(range(len(checks)), key=lambda rank: (not checks[rank].passed, checks[rank].value))
        chosen = checks[worst]
        assert isinstance(chosen, Check)
        return replace(chosen, detail=f"rank {worst} of {len(checks)} (the worst); {chosen.detail}")

    def teardown(self) -> None:
        if self._saved_flags is not None:
            self._saved_flags.restore()
        if self._cold is not None:
            compiling.forget()  # the next case starts with no graph of this one's
            self._cold.restore()
        group = getattr(self, "group", None)
        if group:
            group.destroy()
        backend.release_device_memory(self, self.device_state, getattr(self, "device", None))
