"""`parbench parity`: parbench's torch training step beside the canonical implementation
(torchvision, HF transformers) on this machine, interleaved, with the ratio."""
from __future__ import annotations

import argparse

from suites import knobs
from suites.errors import UserError
from suites.strategies.jobs import job_for

SUMMARY = ("time parbench's resnet50 / gpt2_small / bert_base training step beside torchvision's and HF "
           "transformers' (where importable) on this machine, interleaved, and print both and the ratio")

#: It builds and steps parbench's models in this process, as `run` does.
KNOBS = knobs.CASE_KNOBS

MODELS = ("resnet50", "gpt2_small", "bert_base")
#: Sizes per device kind: on a GPU the published models at the anchors' batches (as the standard
#: suite's GPU cases); on a CPU the same architectures shrunk so a block takes seconds.
SIZES = {
    "gpu": {"resnet50": {"batch": 256}, "gpt2_small": {"batch": 8}, "bert_base": {"batch": 32}},
    "cpu": {"resnet50": {"batch": 4, "image": 64, "resnet_depth": 14},
            **{model: {"batch": 4, "layers": 2, "seq": 64, "d_model": 128, "heads": 4, "ffn": 512, "vocab": 2048}
               for model in ("gpt2_small", "bert_base")}},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", choices=MODELS,
                        help="a model to compare (repeatable; default: all three)")
    parser.add_argument("--device", choices=("gpu", "cpu"),
                        help="default: gpu where torch sees one, else cpu (at small sizes)")
    parser.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16"),
                        help="default: bf16 on a GPU, fp32 on a CPU")
    parser.add_argument("--size", action="append", default=[], metavar="KEY=VALUE",
                        help="a train_step parameter overriding the device's default sizes (e.g. batch=128)")
    parser.add_argument("--rounds", type=int, default=5, help="A B B A rounds (default 5)")
    parser.add_argument("--steps", type=int, help="training steps per timed block (default: 10 on a GPU, 2 on a CPU)")


def _sizes(pairs: list[str]) -> dict[str, int | str]:
    sizes: dict[str, int | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--size {pair!r} is not KEY=VALUE (e.g. --size batch=128)")
        sizes[key] = int(value) if value.lstrip("-").isdigit() else value
    return sizes


def run(args: argparse.Namespace) -> int:
    from suites.frameworks.torch import parity  # torch only when the command runs

    if args.rounds < 1 or (args.steps is not None and args.steps < 1):
        raise UserError("--rounds and --steps must be at least 1")
    import torch

    device = args.device or ("gpu" if torch.cuda.is_available() else "cpu")
    if device == "gpu" and not torch.cuda.is_available():
        raise UserError("--device gpu: torch sees no CUDA device here; run with --device cpu")
    precision = args.precision or ("bf16" if device == "gpu" else "fp32")
    steps = args.steps or (10 if device == "gpu" else 2)
    overrides = _sizes(args.size)
    if device == "cpu":
        print("parity on the CPU: small sizes (the same architectures); the figures check the path, "
              "they say little of a GPU")
    failures = 0
    for model in args.model or MODELS:
        reason = parity.unavailable_reason(model)
        if reason:
            print(f"{model}: skipped: {reason}")
            continue
        try:
            case = parity.parity_case(model, device, precision, {**SIZES[device][model], **overrides})
            result = parity.run_parity(job_for(case), args.rounds, steps)
        except ValueError as error:  # sizes the canonical model (or parbench) cannot take
            print(f"{model}: not compared: {error}")
            failures += 1
            continue
        except torch.OutOfMemoryError as error:  # the next model may still fit
            print(f"{model}: not compared: out of device memory ({str(error).splitlines()[0][:200]}); "
                  f"try a smaller --size batch=N")
            failures += 1
            torch.cuda.empty_cache()
            continue
        ratios = result.interleaved.round_ratios
        print(
            f"{model}: parbench {result.parbench_per_s:,.0f} {result.unit} | {result.canonical} "
            f"({result.canonical_version}) {result.canonical_per_s:,.0f} {result.unit} | "
            f"parbench / canonical = {result.interleaved.ratio:.3f} (geometric mean of {len(ratios)} A B B A "
            f"rounds, {min(ratios):.3f}-{max(ratios):.3f}; {result.steps_per_block} steps a block)\n"
            f"  case {result.case_id}")
    return 1 if failures else 0
