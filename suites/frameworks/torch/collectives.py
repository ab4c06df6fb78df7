"""PyTorch all-reduce, nccl-tests style: one rank process per participant.

Like nccl-tests' in-place test, the timed buffer is reduced in place step after step: its
values grow by the world size each step (to inf after enough steps), which changes nothing
for gloo's or NCCL's sum, whose speed does not depend on the values. The check reduces a
fresh buffer holding a rank-dependent integer pattern, whose sum every rank knows exactly.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from suites.frameworks.torch import backend
from suites.frameworks.torch.distributed import limit_threads_from_env
from suites.records.check import Check
from suites.measure.runnable import COORDINATED_BLOCK_S, Runnable
from suites.workloads.collectives import DATA_SEED, PATTERN_PERIOD, Allreduce, check_pattern, expected_sum



class TorchAllreduce(Runnable):
    workload: Allreduce

    def setup(self) -> None:
        limit_threads_from_env()
        self.group = self.job.strategy.hooks.join(self.job)
        self.min_block_s = COORDINATED_BLOCK_S  # ranks meet once per timed block
        self.device = self.group.device
        self.dtype = backend.DTYPES[self.case.precision]
        generator = torch.Generator(device=self.device)
        generator.manual_seed(DATA_SEED + self.group.rank)
        self.buffer = torch.randn(self.workload.elements, generator=generator,
                                  device=self.device).to(self.dtype)

    def step(self) -> None:
        dist.all_reduce(self.buffer)

    def synchronize(self) -> None:
        backend.synchronize(self.device)

    def barrier(self) -> None:
        self.group.barrier()

    def gather(self, value: float) -> tuple[float, ...]:
        return self.group.gather(value)

    def agree(self, value: float) -> float:
        return self.group.broadcast_from_root(value)

    def check(self) -> Check:
        """Every rank's reduced buffer equals the analytic sum exactly (worst rank reported)."""
        elements, world = self.workload.elements, self.group.world_size
        buffer = backend.to_device(check_pattern(self.group.rank, elements), self.device, self.dtype)
        dist.all_reduce(buffer)
        expected = expected_sum(world, elements)
        error = self.group.maximum(float(np.max(np.abs(backend.to_numpy(buffer) - expected))))
        return Check(error == 0.0, "max_abs_err", error, 0.0,
                     f"sum of {world} ranks' (rank + i) mod {PATTERN_PERIOD} over {elements} "
                     f"{self.case.precision} elements, {self.group.backend}")

    def teardown(self) -> None:
        group = getattr(self, "group", None)
        if group:
            group.destroy()
