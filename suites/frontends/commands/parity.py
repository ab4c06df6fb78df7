"""`parbench parity`: parbench's torch training step beside the canonical implementation
(torchvision, HF transformers) on this machine, interleaved, with the ratio, and what competed
for each side's cores while it was timed (as `parbench run` reports it: a ratio where either side
was contended is flagged as not to be trusted). What the two sides compute, point by point, is in
`suites.frameworks.torch.parity` and docs/models.md."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from suites import knobs
from suites.errors import UserError
from suites.ranges import Range
from suites.strategies.jobs import job_for
from suites.workloads import workload_class
from suites.workloads.training import MODELS as REGISTERED_MODELS

if TYPE_CHECKING:  # torch only when the command runs
    from suites.frameworks.torch.parity import OpProfile, ParityResult
    from suites.records.contention import Contention

SUMMARY = ("time parbench's resnet50 / gpt2_small / bert_base training step beside torchvision's and HF "
           "transformers' (where importable) on this machine, interleaved, and print both and the ratio")

#: It builds and steps parbench's models in this process, as `run` does.
KNOBS = knobs.CASE_KNOBS

MODELS = ("resnet50", "gpt2_small", "bert_base")
#: What --size may set: the batch and the size parameters of the models compared.
SIZE_NAMES = frozenset({"batch"}.union(*(REGISTERED_MODELS[model]().size_fields() for model in MODELS)))
#: What --rounds and --steps take (the tops stop a typo: a round is four timed blocks of each model,
#: and ten thousand steps of a 0.4 s step are an hour a block), and --profile.
ROUNDS = Range(int, low=1, high=100, high_reason="400 timed blocks a model")
STEPS = Range(int, low=1, high=10_000, high_reason="an hour a block at a 0.4 s step")
AT_LEAST_ZERO = Range(int, low=0)
#: The largest --size value: past it a size is a typo (and past 2**63 it overflows torch's sizes).
LARGEST_SIZE = 2**31 - 1
#: A timed block lasts at least this long where --steps is not given (the parity module's MIN_BLOCK_S).
MIN_BLOCK_S = 0.5
#: The fewest steps a timed block holds where --steps is not given.
LEAST_STEPS = {"gpu": 10, "cpu": 2}
#: Sizes per device kind: on a GPU the published models at the anchors' batches (as the standard
#: suite's GPU cases); on a CPU the same architectures shrunk, the transformers to 2 layers of the
#: published head width (d_head 64) and feed-forward (4 d), 8 x 128 tokens: about 0.1 s a step on
#: 2 cores, so the step is its matmuls, as on a GPU. At d_model 128, 8 x 64 tokens (the former
#: sizes) a step took 10 ms, much of it per-op dispatch and Python, whose count is an implementation's
#: (HF's BERT runs a quarter more ops: separate q, k, v): the ratio then compared op counts, not work.
SIZES = {
    "gpu": {"resnet50": {"batch": 256}, "gpt2_small": {"batch": 8}, "bert_base": {"batch": 32}},
    "cpu": {"resnet50": {"batch": 4, "image": 64, "resnet_depth": 14},
            **{model: {"batch": 8, "layers": 2, "seq": 128, "d_model": 256, "heads": 4, "ffn": 1024, "vocab": 4096}
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
    parser.add_argument("--rounds", type=ROUNDS.argument, default=5, help="A B B A rounds (default 5)")
    parser.add_argument("--steps", type=STEPS.argument,
                        help="training steps per timed block (default: as many as make a block last "
                             f"{MIN_BLOCK_S} s, at least {LEAST_STEPS['gpu']} on a GPU, {LEAST_STEPS['cpu']} on a CPU)")
    parser.add_argument("--profile", type=AT_LEAST_ZERO.argument, default=0, metavar="N",
                        help="after timing, profile a few steps of each side (torch.profiler) and print the N ops "
                             "either side spends most self time on, the most different first")


def _sizes(pairs: list[str]) -> dict[str, int | str]:
    """The sizes `--size KEY=VALUE` pairs set, each checked as a grid's train_step parameter is."""
    accepted = {param.name: param for param in workload_class("train_step").params if param.name in SIZE_NAMES}
    sizes: dict[str, int | str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--size {pair!r} is not KEY=VALUE (e.g. --size batch=128)")
        if key not in accepted:
            raise UserError(f"--size {pair!r}: no size named {key!r}; parity's models take "
                            f"{', '.join(sorted(accepted))}")
        param = accepted[key]
        value: int | str = int(text) if param.type is int and text.strip().lstrip("+-").isdigit() else text
        problem = param.problem(value)
        if not problem and isinstance(value, int) and value > LARGEST_SIZE:
            raise UserError(f"--size {pair!r}: {key} is past {LARGEST_SIZE:,}, more than a device holds of any model")
        if problem:
            whole = f" (a whole number >= {param.minimum})" if param.type is int and param.choices is None else ""
            raise UserError(f"--size {pair!r}: {key} {problem}{whole}")
        sizes[key] = value
    return sizes


def torchvision_hint(torch_version: str) -> str:
    """The torchvision release built for `torch_version` and how to install it ('' where unknown):
    torch 2.N pairs with torchvision 0.(N+15) (2.0 with 0.15, 2.5 with 0.20), from the same index
    (a `+cpu` torch's is PyTorch's CPU index, else the default one)."""
    release, _, local = torch_version.partition("+")
    parts = release.split(".")
    if len(parts) < 2 or parts[0] != "2" or not parts[1].isdigit():
        return ""
    torchvision = f"0.{int(parts[1]) + 15}"
    index = f" --index-url https://download.pytorch.org/whl/{local}" if local.startswith(("cpu", "cu", "rocm")) else ""
    return f"for torch {release}: pip install 'torchvision=={torchvision}.*'{index}"


def run(args: argparse.Namespace) -> int:
    overrides = _sizes(args.size)  # before torch is imported
    from suites.frameworks.torch import parity  # torch only when the command runs
    import torch

    device = args.device or ("gpu" if torch.cuda.is_available() else "cpu")
    if device == "gpu" and not torch.cuda.is_available():
        raise UserError("--device gpu: torch sees no CUDA device here; run with --device cpu")
    precision = args.precision or ("bf16" if device == "gpu" else "fp32")
    if device == "cpu":
        print("parity on the CPU: small sizes (the same architectures); the figures check the path, "
              "they say little of a GPU")
    failures = 0
    for model in args.model or MODELS:
        reason = parity.unavailable_reason(model)  # each canonical package loaded on its own, guarded
        if reason:
            hint = torchvision_hint(torch.__version__) if "torchvision" in reason else ""
            print(f"{model}: not compared: {reason}" + (f" ({hint})" if hint else ""))
            continue
        try:
            case = parity.parity_case(model, device, precision, {**SIZES[device][model], **overrides})
            result = parity.run_parity(job_for(case), args.rounds, args.steps, least_steps=LEAST_STEPS[device],
                                       min_block_s=MIN_BLOCK_S, profile=args.profile > 0)
        except (ValueError, parity.Unavailable) as error:  # sizes either model cannot take; a package gone
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
            f"rounds, {min(ratios):.3f}-{max(ratios):.3f}; {result.steps_per_block} steps a block)")
        for line in contention_lines(result):
            print(f"  {line}")
        if result.note:
            print(f"  {result.canonical_version.split()[0]}: {result.note}")
        if result.profile is not None:
            for line in profile_lines(result.profile, args.profile):
                print(f"  {line}")
        print(f"  case {result.case_id}")
    return 1 if failures else 0


def _side(verdict: "Contention | None") -> str:
    """One side's share of its cores over its timed blocks, as `parbench run` judges a case."""
    if verdict is None:
        return "not measured"
    if verdict.others_core_share is None:  # no /proc readings: the load-average fallback
        loads = [load for load in (verdict.load_before, verdict.load_after) if load is not None]
        return (f"not measured over its blocks (load average {max(loads):.1f} on {verdict.cores} cores)"
                if loads else "not measured")
    text = f"others took {verdict.others_core_share:.0%} of its {verdict.cores} cores"
    if verdict.own_core_share is not None:
        text += f", it ran {verdict.own_core_share:.0%}"
    return text


def contention_lines(result: "ParityResult") -> list[str]:
    """What competed for each side's cores over its own timed blocks, and, where either side was
    contended, that the ratio is not to be trusted."""
    span = result.interleaved.a_cpu.span if result.interleaved.a_cpu else "its timed blocks"
    threshold = (result.parbench_contention.threshold if result.parbench_contention else None)
    lines = [f"cores over each side's {span}: parbench: {_side(result.parbench_contention)}; "
             f"canonical: {_side(result.canonical_contention)}"
             + (f" (contended above {threshold:.0%})" if threshold is not None else "")]
    contended = result.contended
    if contended:
        whys = "; ".join(f"{side}: {verdict.why}" for side, verdict in
                         (("parbench", result.parbench_contention), ("canonical", result.canonical_contention))
                         if verdict is not None and verdict.contended)
        lines.append(f"NOT TO BE TRUSTED: {' and '.join(contended)} contended ({whys}); other work took the "
                     "cores while it was timed, and how much it slows a step depends on how the step meets it, "
                     "which interleaving does not cancel: rerun on a quiet machine")
    return lines


def profile_lines(profile: "OpProfile", top: int) -> list[str]:
    """The ops either side spends most on, the most different first: ms a step (calls a step)."""
    totals = profile.totals
    lines = [f"profile, {profile.steps} steps each side, {profile.clock} time a step (calls a step); "
             f"total parbench {totals.get('parbench', 0.0):.2f} ms, canonical {totals.get('canonical', 0.0):.2f} ms "
             "(under the profiler: where time goes, not how fast):"]
    width = max([len(name) for name, _, _ in profile.rows(top)] + [10])
    for name, ours, theirs in profile.rows(top):
        cells = [f"{op.ms:8.3f} ({op.calls:g})" if op else f"{'-':>8}" for op in (ours, theirs)]
        lines.append(f"  {name:<{width}}  parbench {cells[0]:<16} canonical {cells[1]}")
    return lines
