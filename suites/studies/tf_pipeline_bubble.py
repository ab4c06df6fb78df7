"""TF pipeline step time against its theoretical bubble, the micro-batch counts interleaved.

    python -m suites.studies.tf_pipeline_bubble [--devices 2] [--microbatches 1,2,4,8]
        [--rounds 6] [--seconds 1.0] [--batch 64] [--device cpu]

Suite runs time one case after another, and this VM drifts by ~10% between them: too much to
see a pipeline's bubble shrink. Here one process builds the TF `pipeline` case of every
micro-batch count (mlp, the same global batch, `--devices` stages: logical CPU devices, or GPUs
with `--device gpu`), then times them in `--rounds` rounds, each case `--seconds` of steps per
round, in alternating order (ABCD, DCBA, ...). Per round each case's step is divided by the
microbatches=1 step; the figure is the geometric mean of those ratios, printed beside GPipe's
prediction (m + p - 1) / (m * p) — the step relative to one micro-batch with equal stage times
and free communication — and the bubble (p - 1) / (m + p - 1).
"""
from __future__ import annotations

import argparse
import statistics
import time

from suites.cases.case import Case
from suites.strategies.stages import bubble


def _step_seconds(runnable, seconds: float) -> float:  # noqa: ANN001 - a TfTrainStep
    """Mean step time over `seconds` of back-to-back steps, synchronised at both ends."""
    runnable.synchronize()
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        runnable.step()
        steps += 1
    runnable.synchronize()
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--microbatches", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=None, help="the mlp's width (default: its own)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--intra-op-threads", type=int, default=0,
                        help="TF's threads per op (0: TF's default, all cores). 1, with 2 inter-op "
                             "threads, makes each logical CPU device a one-core device whose stages "
                             "can overlap")
    parser.add_argument("--inter-op-threads", type=int, default=0,
                        help="TF's threads running independent ops at once (0: TF's default)")
    args = parser.parse_args(argv)
    counts = [int(m) for m in args.microbatches.split(",")]
    if counts[0] != 1:
        parser.error("--microbatches must start with 1, the reference")

    from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
    import tensorflow as tf

    from suites.frameworks.tf.training import TfTrainStep  # TF loads here, after parsing
    from suites.workloads.training import TrainStep

    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)

    runnables = []
    for m in counts:
        case = Case.make("train_step", "tf", args.device, "pipeline", "fp32", args.devices,
                         {"model": "mlp", "batch": args.batch, "scaling": "strong", "microbatches": m,
                          **({"hidden": args.hidden} if args.hidden else {})})
        runnable = TfTrainStep(TrainStep(case))
        runnable.setup()
        check = runnable.check()
        print(f"{case.id}: check {'pass' if check.passed else 'FAIL'} ({check.metric}={check.value:.2e})")
        _step_seconds(runnable, args.seconds / 2)  # warm-up
        runnables.append(runnable)
    ratios: list[list[float]] = [[] for _ in counts]
    medians: list[list[float]] = [[] for _ in counts]
    for round_index in range(args.rounds):
        order = list(range(len(counts)))
        if round_index % 2:
            order.reverse()
        steps = {i: _step_seconds(runnables[i], args.seconds) for i in order}
        for i in range(len(counts)):
            medians[i].append(steps[i])
            ratios[i].append(steps[i] / steps[0])
    p = args.devices
    print(f"{args.rounds} interleaved rounds, {args.seconds} s per case per round; mlp "
          f"(hidden {runnables[0].spec.hidden}), global batch "
          f"{args.batch}, {p} stages on {args.device}; TF threads intra-op "
          f"{tf.config.threading.get_intra_op_parallelism_threads()}, inter-op "
          f"{tf.config.threading.get_inter_op_parallelism_threads()} (0: TF's default)")
    print("microbatches  bubble  predicted step/step(m=1)  measured (geo. mean)  rounds' range  step (ms, mean)")
    for m, case_ratios, steps in zip(counts, ratios, medians):
        geo = statistics.geometric_mean(case_ratios)
        print(f"{m:12d}  {bubble(p, m):6.3f}  {(m + p - 1) / (m * p):24.3f}  {geo:20.3f}  "
              f"{min(case_ratios):.3f}-{max(case_ratios):.3f}  {1e3 * sum(steps) / len(steps):14.2f}")


if __name__ == "__main__":
    main()
