"""One rank of a torch multi-process case: its process group, device and lockstep helpers.

The rank's identity comes from torchrun's environment variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which parbench's own rank launcher sets the same way,
so a case runs unchanged under `parbench run` and under `torchrun` on one or many machines.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterator, TypeVar

import torch
import torch.distributed as dist

from suites import knobs
from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind
from suites.hardware.devices import cuda_visible_devices_reason
from suites.measure.gpu_cpu_affinity import pin_near_gpu
from suites.measure.reference_budget import reference_threads
from suites.measure.unsupported import Unsupported

#: Bounds the rendezvous and every collective: a rank whose peer died fails instead of hanging.
RENDEZVOUS_TIMEOUT_S = 120.0
THREADS_ENV = "PARBENCH_THREADS"
T = TypeVar("T")


def limit_threads_from_env() -> None:
    """Use the launcher's share of the cores (set where several ranks share one CPU)."""
    threads = knobs.read(THREADS_ENV)
    if threads:
        torch.set_num_threads(threads)


def local_world_size() -> int:
    """The rank processes on this node: torchrun's LOCAL_WORLD_SIZE (parbench's launcher sets it
    too), 1 where it is not set."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and int(local) > 0 else 1


def node_share_thread_count() -> int:
    """The threads `node_share_of_threads` gives this process (`reference_threads`)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return reference_threads(torch.get_num_threads(), os.cpu_count() or 1, usable, local_world_size())


@contextlib.contextmanager
def node_share_of_threads() -> Iterator[int]:
    """Within: this process's share of its node's cores as torch's intra-op threads
    (`reference_threads`: torchrun leaves a rank one thread, OMP_NUM_THREADS=1); after: the
    threads it had, so the timed steps keep theirs. Yields the threads used."""
    saved = torch.get_num_threads()
    threads = node_share_thread_count()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(saved)


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_env(cls) -> "RankEnv":
        missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if name not in os.environ]
        if missing:
            raise RuntimeError(f"not launched as a rank: {', '.join(missing)} unset (run it "
                               "through `parbench run` or `torchrun ... -m suites worker`)")
        rank = int(os.environ["RANK"])
        return cls(rank, int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", rank)))


def rank_device(case: Case, local_rank: int) -> torch.device:
    """CPU, or this node's GPU number `local_rank` (round-robin when gloo ranks share GPUs).

    A GPU case in a process that sees no GPU (a rank started by hand, e.g. under torchrun, on a
    CPU machine) is unavailable here, with the reason."""
    if case.device is DeviceKind.GPU:
        visible = torch.cuda.device_count()
        if not visible:
            hidden = cuda_visible_devices_reason()
            raise Unsupported(f"no GPU visible to this rank ({hidden or 'torch.cuda.device_count() is 0'})")
        return torch.device("cuda", local_rank % visible)
    if case.device is DeviceKind.CPU:
        return torch.device("cpu")
    raise ValueError(f"torch.distributed in parbench runs on cpu or gpu, not {case.device}")


class ProcessGroup:
    """The default process group of this rank: joined on creation, destroyed by `destroy`."""

    def __init__(self, case: Case, backend: str) -> None:
        self.env = RankEnv.from_env()
        self.backend = backend
        self.device = rank_device(case, self.env.local_rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            pin_near_gpu(self.device.index)  # before NCCL starts its threads, which inherit the affinity
        dist.init_process_group(
            self.backend, timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S),
            rank=self.env.rank, world_size=self.env.world_size,
            # NCCL binds the communicator to this rank's GPU at once (and barrier uses it).
            device_id=self.device if self.backend == "nccl" else None)

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def broadcast_from_root(self, value: float) -> float:
        """Rank 0's `value`, on every rank."""
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, src=0)
        return float(tensor.item())

    def broadcast_computed(self, compute: Callable[[], T], timeout_s: float) -> T:
        """Rank 0's `compute()`, on every rank; the others wait for it up to `timeout_s`. They wait
        in a CPU (gloo) group made for it, whose collectives time out after `timeout_s`: in the
        default group they would time out after `RENDEZVOUS_TIMEOUT_S` (NCCL's watchdog then
        aborts the job) while rank 0 still computes. Where rank 0's `compute` raises, it raises
        there and the others raise at once, naming it. Every rank must call it, in the same order
        as every other process group it creates; `destroy` ends the group with the default one."""
        waiting = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        failure: Exception | None = None
        holder: list[object] = [None]
        if self.rank == 0:
            try:
                holder = [(compute(), None)]
            except Exception as error:  # the others must not wait for what will not come
                failure = error
                holder = [(None, f"{type(error).__name__}: {error}")]
        dist.broadcast_object_list(holder, src=0, group=waiting, device=torch.device("cpu"))
        if failure is not None:
            raise failure
        value, error_text = holder[0]  # type: ignore[misc]
        if error_text is not None:
            raise RuntimeError(f"rank 0 failed to compute what this rank waited for: {error_text}")
        return value  # type: ignore[no-any-return]

    def mean(self, value: float) -> float:
        """The mean of `value` over all ranks, on every rank."""
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return float(tensor.item()) / self.world_size

    def gather(self, value: float) -> tuple[float, ...]:
        """Every rank's `value`, in rank order, on every rank (one small all-reduce)."""
        tensor = torch.zeros(self.world_size, dtype=torch.float64, device=self.device)
        tensor[self.rank] = float(value)
        dist.all_reduce(tensor)
        return tuple(tensor.tolist())

    def maximum(self, value: float) -> float:
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor.item())

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def all_gather_objects(value: object) -> list[object]:
    """Every rank's picklable `value`, in rank order, on every rank of the default process
    group (e.g. each pipeline stage's gradients, for a check that needs them all)."""
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast_from(value: float, source: int, device: torch.device) -> float:
    """Rank `source`'s `value`, on every rank of the default process group."""
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=source)
    return float(tensor.item())
