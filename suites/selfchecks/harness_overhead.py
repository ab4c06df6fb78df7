"""Does the harness add time? Compare parbench's median with an independent timer, same op, same process.

    python -m suites.selfchecks.harness_overhead [--size 512] [--rounds 5]

torch: parbench's median for an fp32 CPU matmul vs `torch.utils.benchmark.Timer(...).blocked_autorange()`
on the same op (torch.mm with out=). TF: parbench's median vs a bare `tf.function` loop timed by hand.
The two timers alternate for several rounds (so drift of a shared machine hits both) and the
median ratio is printed; 0.98-1.02 means the harness neither adds nor hides time, and the script
exits 1 when a framework's ratio falls outside it.

parbench rotates inputs through copies spanning twice the last-level cache (at least 64 MiB) so a
kernel is not timed with its operands hot in cache; the reference timers reuse one set. The harness
is therefore compared with rotation off (PARBENCH_ROTATION_BYTES=0: same inputs, same op), and the
rotated median is printed beside it as the cache effect that rotation removes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.runner.execute import execute_in_process
from suites.strategies.jobs import job_for
from suites.workloads.kernels import ROTATION_ENV

TIMING = TimingConfig(budget_s=2.0)
#: The ratio parbench/reference within which the harness neither adds nor hides time.
AGREEMENT = (0.98, 1.02)


def parbench_median(framework: str, size: int, rotate: bool) -> float:
    if rotate:
        os.environ.pop(ROTATION_ENV, None)
    else:
        os.environ[ROTATION_ENV] = "0"
    case = Case.make("matmul", framework, "cpu", params={"m": size, "n": size, "k": size})
    outcome = execute_in_process(job_for(case), TIMING)
    if outcome.status is not Status.OK or outcome.measurement is None:
        raise SystemExit(f"parbench case failed: {outcome.reason}")
    return outcome.measurement.median


def torch_timer_median(size: int) -> float:
    import torch
    import torch.utils.benchmark as benchmark

    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    # Timer defaults to one thread; parbench times with torch's configured thread count.
    timer = benchmark.Timer(stmt="torch.mm(a, b, out=out)", globals={"torch": torch, "a": a, "b": b, "out": out},
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=1.0).median


def tf_bare_loop_median(size: int, repeats: int = 15, block_s: float = 0.05) -> float:
    from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
    import tensorflow as tf

    a, b = tf.random.normal((size, size)), tf.random.normal((size, size))
    matmul = tf.function(tf.linalg.matmul)
    for _ in range(10):
        matmul(a, b)
    start = time.perf_counter()
    matmul(a, b).numpy()
    per_call = time.perf_counter() - start
    calls = max(1, int(block_s / per_call))
    blocks = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            result = matmul(a, b)
        result.numpy()  # read back: the work is done before the clock is read
        blocks.append((time.perf_counter() - start) / calls)
    return statistics.median(blocks)


def compare(framework: str, size: int, rounds: int) -> float:
    reference = torch_timer_median if framework == "torch" else tf_bare_loop_median
    name = "torch.utils.benchmark blocked_autorange" if framework == "torch" else "bare tf.function loop"
    ratios, rotation_effects = [], []
    for round_index in range(rounds):
        ours, theirs = parbench_median(framework, size, rotate=False), reference(size)
        rotated = parbench_median(framework, size, rotate=True)
        ratios.append(ours / theirs)
        rotation_effects.append(rotated / ours)
        print(f"  {framework} round {round_index + 1}: parbench {ours * 1e3:.4f} ms, "
              f"{name} {theirs * 1e3:.4f} ms, ratio {ours / theirs:.4f}; "
              f"parbench with rotated inputs {rotated * 1e3:.4f} ms")
    ratio = statistics.median(ratios)
    low, high = AGREEMENT
    verdict = "within" if low <= ratio <= high else "OUTSIDE"
    print(f"{framework}: median ratio parbench/{name} = {ratio:.4f} ({verdict} {low}-{high}); "
          f"rotated/hot inputs = {statistics.median(rotation_effects):.4f} (cache effect)")
    return ratio


def main(argv: list[str] | None = None) -> int:
    """0 when every framework's ratio is within AGREEMENT, else 1."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--framework", choices=["torch", "tf"], action="append")
    args = parser.parse_args(argv)
    low, high = AGREEMENT
    outside = [framework for framework in args.framework or ["torch", "tf"]
               if not low <= compare(framework, args.size, args.rounds) <= high]
    if outside:
        print(f"harness overhead: {', '.join(outside)} outside {low}-{high}: the harness adds or hides time there",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
