"""A plain, hand-written DDP training loop: the baseline `ddp_overhead` compares parbench with.

It shares no code with parbench: its own MLP (the `mlp` model's shape: 256 -> 512 -> 512 ->
512 -> 10, ReLU), its own random data, its own timing (warm up; then repeatedly: barrier, time
N steps, barrier). Launch it with torchrun:

    torchrun --nproc-per-node 2 -m suites.selfchecks.plain_ddp --batch 32 --out plain.json

Rank 0 writes {"step_s": median seconds per step, "samples_s": [...]} to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(prog="torchrun ... -m suites.selfchecks.plain_ddp")
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats; the median is reported")
    parser.add_argument("--threads", type=int, help="torch threads per rank")
    parser.add_argument("--pin", action="store_true",
                        help="pin local rank r to the r-th equal slice of the usable cores")
    parser.add_argument("--out", required=True, help="JSON result file (written by rank 0)")
    args = parser.parse_args()
    if args.pin:
        cores = sorted(os.sched_getaffinity(0))
        per_rank = len(cores) // int(os.environ["LOCAL_WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        os.sched_setaffinity(0, cores[local_rank * per_rank:(local_rank + 1) * per_rank])
    if args.threads:
        torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(rank)

    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(args.batch, 256), torch.randint(0, 10, (args.batch,))) for _ in range(16)]

    def train(steps: int, offset: int) -> None:
        for i in range(steps):
            x, y = batches[(offset + i) % len(batches)]
            optimizer.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()

    train(args.warmup, 0)
    samples = []
    for repeat in range(args.repeats):
        dist.barrier()
        start = time.perf_counter()
        train(args.steps, repeat * args.steps)
        dist.barrier()
        samples.append((time.perf_counter() - start) / args.steps)
    if rank == 0:
        with open(args.out, "w") as out:
            json.dump({"step_s": statistics.median(samples), "samples_s": samples,
                       "world_size": dist.get_world_size(), "threads": torch.get_num_threads()},
                      out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
