"""Strategies: how a case's work is spread over devices, and how its processes are launched.

Each strategy has a `StrategyRules` entry: when it applies on this machine, whether it is
emulated here, and which launcher runs it. Framework code for a strategy lives in the
framework's own modules and is imported only when a case of it runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from enum import Enum

from suites.cases.case import Case
from suites.kept.devices import DeviceInfo
from suites.cases.vocabulary import DeviceKind, Strategy


class Launch(str, Enum):
    IN_PROCESS = "in_process"   # timed in the parbench process
    ISOLATED = "isolated"       # one fresh subprocess (e.g. TF logical devices, set before TF starts)
    RANKS = "ranks"             # a pool of rank processes on 127.0.0.1


@dataclass(frozen=True)
class StrategyRules:
    strategy: Strategy
    launch: Launch = Launch.IN_PROCESS

    def unavailable_reason(self, case: Case, device: DeviceInfo) -> str | None:
        if self.strategy is Strategy.SINGLE and case.n_devices != 1:
            return f"strategy 'single' uses one device; this case asks for {case.n_devices}"
        return None

    def processes(self, case: Case) -> int:
        """How many rank processes a RANKS launch starts."""
        return case.n_devices

    def ports_needed(self, case: Case) -> int:
        return 1

    def rank_env(self, case: Case, rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
        """Environment of one rank: torchrun's variables by default."""
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[0]), "RANK": str(rank),
                "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size)}

    def emulated(self, case: Case) -> bool:
        """Several devices on a CPU are logical devices / ranks sharing one CPU."""
        return case.device is DeviceKind.CPU and case.n_devices > 1


@lru_cache(maxsize=None)
def _all_rules() -> dict[Strategy, StrategyRules]:
    # Framework-neutral rule modules (they must not import torch or TensorFlow).
    from suites.strategies.tf_rules import RULES as TF_RULES
    from suites.strategies.torch_rules import RULES as TORCH_RULES

    return {Strategy.SINGLE: StrategyRules(Strategy.SINGLE), **TORCH_RULES, **TF_RULES}


def rules_for(strategy: Strategy) -> StrategyRules:
    rules = _all_rules()
    if strategy not in rules:
        raise KeyError(f"no rules for strategy {strategy}")
    return rules[strategy]
