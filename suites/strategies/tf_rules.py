"""Rules of the tf strategies: availability, emulation, launch. No framework imports here.

- towers, mirrored: several devices in one process. On a CPU they are logical devices, which
  TensorFlow must be told about before it initialises, so these cases run in a fresh process.
- multiworker: one process per worker on 127.0.0.1, each with one device, joined through
  TF_CONFIG with ports picked at run time.
- tpu: TPUStrategy; available only where `suites.kept.devices` finds a TPU runtime, so nothing tries
  to connect to an absent TPU (which blocks forever).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from suites.cases.case import Case
from suites.kept.devices import DeviceInfo
from suites.cases.vocabulary import DeviceKind, Precision, Strategy
from suites.workloads import workload_of
from suites.workloads.training import TrainStep
from suites.strategies import Launch, StrategyRules

TF_BACKENDS = ("auto", "nccl", "ring")


def _param(case: Case, name: str, default: str) -> str:
    return str(workload_of(case).p.get(name, default))


def _common_reason(case: Case, device: DeviceInfo, what: str) -> str | None:
    """Device kind and count, and an even split of a training batch over the replicas."""
    if case.device is DeviceKind.TPU:
        return f"{what} runs on CPUs or GPUs; TPUs use strategy 'tpu' (TPUStrategy)"
    if case.device is DeviceKind.GPU and device.count < case.n_devices:
        return f"{what} over {case.n_devices} GPUs needs {case.n_devices} visible GPUs; {device.count} visible"
    return _split_reason(case)


def _split_reason(case: Case) -> str | None:
    workload = workload_of(case)
    if isinstance(workload, TrainStep) and workload.global_batch % case.n_devices:
        return (f"the global batch of {workload.global_batch} does not split evenly over "
                f"{case.n_devices} replicas")
    return None


def _placement_reason(case: Case, what: str) -> str | None:
    if case.workload == TrainStep.name and _param(case, "placement", "replicated") == "param_server":
        return f"placement 'param_server' is a towers layout; {what} mirrors the variables on every replica"
    return None


def _backend_reason(case: Case, what: str, allowed: tuple[str, ...]) -> str | None:
    """An allreduce case's `backend` against what this TF strategy can do."""
    backend = _param(case, "backend", "auto")
    if backend not in TF_BACKENDS:
        return f"backend {backend!r} is a torch.distributed backend; TF's collectives are {', '.join(TF_BACKENDS)}"
    if backend not in allowed:
        return f"{what} has no {backend!r} all-reduce (it has {', '.join(allowed)})"
    if backend == "nccl" and case.device is not DeviceKind.GPU:
        return f"NCCL all-reduce has no {case.device} kernel; it reduces GPU tensors only"
    return None


@dataclass(frozen=True)
class TowersRules(StrategyRules):
    """TF2 manual multi-tower data parallelism in one process."""

    strategy: Strategy = Strategy.TOWERS
    launch: Launch = Launch.ISOLATED

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        return _common_reason(case, device, "towers")


@dataclass(frozen=True)
class MirroredRules(StrategyRules):
    """tf.distribute.MirroredStrategy: one process, one replica per device."""

    strategy: Strategy = Strategy.MIRRORED
    launch: Launch = Launch.ISOLATED

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        return (_common_reason(case, device, "MirroredStrategy")
                or _placement_reason(case, "MirroredStrategy")
                or _backend_reason(case, "MirroredStrategy", ("auto", "nccl")))


@dataclass(frozen=True)
class MultiWorkerRules(StrategyRules):
    """tf.distribute.MultiWorkerMirroredStrategy: one worker process per device on 127.0.0.1."""

    strategy: Strategy = Strategy.MULTIWORKER
    launch: Launch = Launch.RANKS

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        return (_common_reason(case, device, "MultiWorkerMirroredStrategy")
                or _placement_reason(case, "MultiWorkerMirroredStrategy")
                or _backend_reason(case, "MultiWorkerMirroredStrategy", TF_BACKENDS))

    def ports_needed(self, case: Case) -> int:
        return self.processes(case)  # one gRPC server per worker

    def rank_env(self, case: Case, rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
        """TF_CONFIG naming every worker and this one's index; on GPUs, one GPU per worker."""
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports[:world_size]]},
                     "task": {"type": "worker", "index": rank}}
        env = {"TF_CONFIG": json.dumps(tf_config)}
        if case.device is DeviceKind.GPU:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            gpus = visible.split(",") if visible else [str(index) for index in range(world_size)]
            env["CUDA_VISIBLE_DEVICES"] = gpus[rank].strip()
        return env


@dataclass(frozen=True)
class TpuRules(StrategyRules):
    """tf.distribute.TPUStrategy over the cores of a TPU (in a fresh process: TPU start-up)."""

    strategy: Strategy = Strategy.TPU
    launch: Launch = Launch.ISOLATED

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        if case.device is not DeviceKind.TPU:
            return f"TPUStrategy runs on TPUs; this case asks for {case.device}"
        if device.count != case.n_devices:
            return (f"TPUStrategy replicates over every core of the TPU ({device.count} here); "
                    f"this case asks for {case.n_devices}")
        if case.precision is Precision.FP16:
            return "TPUs have no float16 arithmetic; their mixed precision is bf16"
        return _split_reason(case) or _placement_reason(case, "TPUStrategy")

    def emulated(self, case: Case) -> bool:
        return False


RULES: dict[Strategy, StrategyRules] = {
    Strategy.TOWERS: TowersRules(),
    Strategy.MIRRORED: MirroredRules(),
    Strategy.MULTIWORKER: MultiWorkerRules(),
    Strategy.TPU: TpuRules(),
}
