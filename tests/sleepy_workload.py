"""A plugin workload whose step sleeps: a case too slow for its limit, made cheap to test.

Loaded through PARBENCH_PLUGINS (`load_plugins`), in the test process and in a worker alike,
so the runnable's module name is the same on both sides."""
from __future__ import annotations

import time

from suites.cases.vocabulary import Framework
from suites.records.check import Check
from suites.measure.runnable import Runnable
from suites.workloads import WORKLOADS, register
from suites.workloads.base import Param, Workload


class SleepyRunnable(Runnable):
    def setup(self) -> None:
        pass

    def step(self) -> None:
        time.sleep(self.p["step_ms"] / 1000)

    def synchronize(self) -> None:
        pass

    def check(self) -> Check:
        return Check(True, "none", 0.0, 1.0)


class Sleepy(Workload):
    name = "sleepy"
    kind = "kernel"
    params = (Param("step_ms"), Param("gflop"))
    implementations = {Framework.TORCH: f"{__name__}:SleepyRunnable"}

    def flops_per_step(self) -> float:
        return self.p["gflop"] * 1e9


if Sleepy.name not in WORKLOADS:
    register(Sleepy)
